//! Device buffers and kernel launches. Everything runs on the device's one stream, so kernels take raw
//! device pointers (which lets a launch read and write the same buffer, as an in-place read does).
//!
//! While a step is being recorded (graph.rs), a launch, a zeroing or a copy on the device becomes an op of
//! the step's graph instead of running, and a buffer made for the step comes from the step's arena (its
//! temporaries) or its staging area (what the host gives it): memory at the same addresses each step, that
//! stays valid until the next step is recorded.

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};
pub use crate::runtime::op::Arg;
use crate::runtime::op::{issue_copy, Op};
use crate::runtime::profile::ProfileMode;

pub struct Buf<T> {
    mem: Mem<T>,
}

enum Mem<T> {
    /// Memory of its own, from the stream-ordered pool.
    Pool(CudaSlice<T>),
    /// `len` elements at `ptr` in a step's arena or staging area (owned by the recorder).
    Step { ptr: u64, len: usize },
}

/// The bytes of plain-data elements.
fn bytes_of<T: DeviceRepr>(data: &[T]) -> &[u8] {
    // SAFETY: DeviceRepr types are plain data (what a kernel reads), so every byte is initialised.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
}

impl<T: DeviceRepr + ValidAsZeroBits> Buf<T> {
    pub fn zeros(gpu: &Gpu, len: usize) -> Result<Buf<T>, CudaError> {
        if let Some(b) = Self::in_step(gpu, len)? {
            b.zero(gpu)?;
            return Ok(b);
        }
        Ok(Buf { mem: Mem::Pool(gpu.stream.alloc_zeros::<T>(len.max(1)).check("allocating device memory")?) })
    }

    /// A buffer left as the memory pool hands it out, for a kernel that writes all of it before anything
    /// reads it (no memset on the stream).
    pub fn uninit(gpu: &Gpu, len: usize) -> Result<Buf<T>, CudaError> {
        if let Some(b) = Self::in_step(gpu, len)? {
            return Ok(b);
        }
        // SAFETY: device memory of plain-data elements; the caller's kernel writes before any read, and a
        // stale value is still a valid bit pattern of T.
        Ok(Buf { mem: Mem::Pool(unsafe { gpu.stream.alloc::<T>(len.max(1)) }.check("allocating device memory")?) })
    }

    /// `len` elements of the step's arena while a step is recorded.
    fn in_step(gpu: &Gpu, len: usize) -> Result<Option<Buf<T>>, CudaError> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        Ok(gpu.step_arena(bytes)?.map(|ptr| Buf { mem: Mem::Step { ptr, len: len.max(1) } }))
    }

    pub fn from_host(gpu: &Gpu, data: &[T]) -> Result<Buf<T>, CudaError> {
        if let Some(ptr) = gpu.step_stage(bytes_of(data))? {
            return Ok(Buf { mem: Mem::Step { ptr, len: data.len().max(1) } });
        }
        Ok(Buf { mem: Mem::Pool(gpu.stream.memcpy_stod(data).check("copying to the device")?) })
    }

    pub fn write(&mut self, gpu: &Gpu, data: &[T]) -> Result<(), CudaError> {
        self.write_at(gpu, 0, data)
    }

    pub fn read(&self, gpu: &Gpu, len: usize) -> Result<Vec<T>, CudaError> {
        self.read_at(gpu, 0, len)
    }

    /// `data` written at element `offset` (nothing for empty data).
    pub fn write_at(&mut self, gpu: &Gpu, offset: usize, data: &[T]) -> Result<(), CudaError> {
        if data.is_empty() {
            return Ok(());
        }
        self.check_range(offset, data.len())?;
        if gpu.recording() {
            return Err(CudaError::Shape("a write from the host inside a recorded step".into()));
        }
        let dst = self.ptr(gpu) + (offset * std::mem::size_of::<T>()) as u64;
        // SAFETY: the range is inside the buffer (checked); the copy is ordered on the stream.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, data, gpu.stream.cu_stream()) }
            .check("copying to the device")?;
        // The source is the caller's memory: wait until it has been read.
        gpu.sync()
    }

    /// `len` elements from element `offset` (empty for none). Not while a step is recorded: the step has
    /// not run yet.
    pub fn read_at(&self, gpu: &Gpu, offset: usize, len: usize) -> Result<Vec<T>, CudaError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.check_range(offset, len)?;
        if gpu.recording() {
            return Err(CudaError::Shape("a read from the device inside a recorded step".into()));
        }
        let src = self.ptr(gpu) + (offset * std::mem::size_of::<T>()) as u64;
        let mut out = Vec::with_capacity(len);
        let bytes = len * std::mem::size_of::<T>();
        if bytes <= crate::runtime::device::READBACK_BYTES {
            // SAFETY: the vector has room for len elements (bytes bytes), all written by read_small before
            // set_len, and any bits are a valid T (plain data).
            unsafe {
                let dst = std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, bytes);
                gpu.read_small(src, dst)?;
                out.set_len(len);
            }
            return Ok(out);
        }
        // SAFETY: the range is inside the buffer (checked); the vector has room for len elements, the copy
        // fills them all before the synchronisation returns, and any bits are a valid T (plain data).
        unsafe {
            let dst = std::slice::from_raw_parts_mut(out.as_mut_ptr(), len);
            cudarc::driver::result::memcpy_dtoh_async(dst, src, gpu.stream.cu_stream())
                .check("copying from the device")?;
            gpu.sync()?;
            out.set_len(len);
        }
        Ok(out)
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), CudaError> {
        if offset + len > self.len() {
            return Err(CudaError::Shape(format!("{len} elements at {offset} of a buffer of {}", self.len())));
        }
        Ok(())
    }

    /// Every element zero (ordered on the stream, or an op of the step being recorded).
    pub fn zero(&self, gpu: &Gpu) -> Result<(), CudaError> {
        run_op(gpu, Op::Zero { ptr: self.ptr(gpu), bytes: self.len() * std::mem::size_of::<T>() })
    }

    /// `len` elements of `src` copied into this buffer from element `at` (on the stream).
    pub fn copy_from(&self, gpu: &Gpu, at: usize, src: &Buf<T>, len: usize) -> Result<(), CudaError> {
        self.check_range(at, len)?;
        src.check_range(0, len)?;
        let size = std::mem::size_of::<T>();
        run_op(gpu, Op::Copy { dst: self.ptr(gpu) + (at * size) as u64, src: src.ptr(gpu), bytes: len * size })
    }

    /// `len` elements from element `at` of this buffer, as a buffer that owns nothing: valid while this
    /// one is (a rewind slot, a row of logits, the first rows of a matrix).
    pub fn view(&self, gpu: &Gpu, at: usize, len: usize) -> Result<Buf<T>, CudaError> {
        self.check_range(at, len)?;
        let ptr = self.ptr(gpu) + (at * std::mem::size_of::<T>()) as u64;
        Ok(Buf { mem: Mem::Step { ptr, len } })
    }

    /// No memory: a placeholder for a buffer that is made anew before each use.
    pub fn empty() -> Buf<T> {
        Buf { mem: Mem::Step { ptr: 0, len: 0 } }
    }

    pub fn len(&self) -> usize {
        match &self.mem {
            Mem::Pool(s) => s.len(),
            Mem::Step { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        match &self.mem {
            Mem::Pool(s) => {
                let (p, _sync) = s.device_ptr(&gpu.stream);
                p
            }
            Mem::Step { ptr, .. } => *ptr,
        }
    }
}

/// Launches `f` with `args` (or records the launch into the step being recorded); the launch is checked.
pub fn launch(
    gpu: &Gpu,
    f: &CudaFunction,
    name: &'static str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), CudaError> {
    if gpu.recording() {
        if crate::runtime::skip::skipped(&gpu.skip, name) {
            return Ok(()); // STRATA_SKIP: left out of the step's graph, for timing only
        }
        let op = Op::Kernel { name, f: f.clone(), cfg, args: args.into() };
        return gpu.record(op);
    }
    gpu.timed(ProfileMode::Kernels, name, || launch_now(gpu, &gpu.stream, f, name, cfg, args))
}

/// The launch itself, on the stream.
pub(crate) fn launch_now(
    _gpu: &Gpu,
    stream: &CudaStream,
    f: &CudaFunction,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), CudaError> {
    let mut b = stream.launch_builder(f);
    for a in args {
        match a {
            Arg::Ptr(p) => b.arg(p),
            Arg::I32(v) => b.arg(v),
            Arg::F32(v) => b.arg(v),
        };
    }
    // SAFETY: every kernel's arguments are listed by its host wrapper in the kernel's order and types,
    // and the buffers are sized by the same wrapper.
    // The message is made only on failure: this runs ~1,400 times a step.
    unsafe { b.launch(cfg) }.map_err(|err| CudaError::Driver { what: format!("launching {name}"), err })?;
    Ok(())
}

/// A zeroing or a copy: recorded while a step is, else issued on the stream.
fn run_op(gpu: &Gpu, op: Op) -> Result<(), CudaError> {
    if gpu.recording() {
        return gpu.record(op);
    }
    issue_copy(&gpu.stream, &op)
}
