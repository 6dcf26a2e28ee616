//! Device buffers and kernel launches. Everything runs on the device's one stream, so kernels take raw
//! device pointers (which lets a launch read and write the same buffer, as an in-place read does).

use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};

use crate::device::Gpu;
use crate::error::{Check, CudaError};
use crate::profile::ProfileMode;

pub struct Buf<T> {
    pub slice: CudaSlice<T>,
}

impl<T: DeviceRepr + ValidAsZeroBits> Buf<T> {
    pub fn zeros(gpu: &Gpu, len: usize) -> Result<Buf<T>, CudaError> {
        Ok(Buf { slice: gpu.stream.alloc_zeros::<T>(len.max(1)).check("allocating device memory")? })
    }

    /// A buffer left as the memory pool hands it out, for a kernel that writes all of it before anything
    /// reads it (no memset on the stream).
    pub fn uninit(gpu: &Gpu, len: usize) -> Result<Buf<T>, CudaError> {
        // SAFETY: device memory of plain-data elements; the caller's kernel writes before any read, and a
        // stale value is still a valid bit pattern of T.
        Ok(Buf { slice: unsafe { gpu.stream.alloc::<T>(len.max(1)) }.check("allocating device memory")? })
    }

    pub fn from_host(gpu: &Gpu, data: &[T]) -> Result<Buf<T>, CudaError> {
        Ok(Buf { slice: gpu.stream.memcpy_stod(data).check("copying to the device")? })
    }

    pub fn write(&mut self, gpu: &Gpu, data: &[T]) -> Result<(), CudaError> {
        let mut view = self.slice.slice_mut(0..data.len());
        gpu.stream.memcpy_htod(data, &mut view).check("copying to the device")
    }

    pub fn read(&self, gpu: &Gpu, len: usize) -> Result<Vec<T>, CudaError> {
        gpu.stream.memcpy_dtov(&self.slice.slice(0..len)).check("copying from the device")
    }

    /// `data` written at element `offset` (nothing for empty data).
    pub fn write_at(&mut self, gpu: &Gpu, offset: usize, data: &[T]) -> Result<(), CudaError> {
        if data.is_empty() {
            return Ok(());
        }
        let mut view = self.slice.slice_mut(offset..offset + data.len());
        gpu.stream.memcpy_htod(data, &mut view).check("copying to the device")
    }

    /// `len` elements from element `offset` (empty for none).
    pub fn read_at(&self, gpu: &Gpu, offset: usize, len: usize) -> Result<Vec<T>, CudaError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        gpu.stream.memcpy_dtov(&self.slice.slice(offset..offset + len)).check("copying from the device")
    }

    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        let (p, _sync) = self.slice.device_ptr(&gpu.stream);
        p
    }
}

/// A kernel argument: a device pointer, a 32-bit integer or a float.
#[derive(Clone, Copy)]
pub enum Arg {
    Ptr(u64),
    I32(i32),
    F32(f32),
}

/// Launches `f` with `args`; the launch is checked.
pub fn launch(gpu: &Gpu, f: &CudaFunction, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<(), CudaError> {
    let mut b = gpu.stream.launch_builder(f);
    for a in args {
        match a {
            Arg::Ptr(p) => b.arg(p),
            Arg::I32(v) => b.arg(v),
            Arg::F32(v) => b.arg(v),
        };
    }
    gpu.timed(ProfileMode::Kernels, name, || {
        // SAFETY: every kernel's arguments are listed by its host wrapper in the kernel's order and types,
        // and the buffers are sized by the same wrapper.
        // The message is made only on failure: this runs ~1,400 times a step.
        unsafe { b.launch(cfg) }.map_err(|err| CudaError::Driver { what: format!("launching {name}"), err })?;
        Ok(())
    })
}
