//! The device: a CUDA context and stream, and kernels compiled by NVRTC at first use for the card's
//! architecture (contraction off, IEEE division and square root, no flush to zero), cached on disk by
//! source hash, architecture and driver version.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;

use crate::runtime::compile::{compile_cubin, compile_ptx, first_sentence, no_panic, KernelFile};
use crate::runtime::error::{Check, CudaError};
use crate::runtime::profile::Profile;
use crate::runtime::settings::{ProfileMode, Settings};

pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// A stream for each side lane of a step's graph while it is captured (graph.rs, op.rs `Lane`).
    pub side_streams: [Arc<CudaStream>; crate::runtime::op::LANES],
    pub name: String,
    /// Compute capability (major, minor).
    pub arch: (i32, i32),
    pub driver_version: i32,
    /// Streaming multiprocessors (read from the card: grid sizes follow it).
    pub sm_count: u32,
    /// The most shared memory a block may opt into, in bytes (read from the card).
    pub smem_optin: u32,
    /// The time breakdown asked for by `STRATA_PROFILE`, if any.
    pub profile: Option<Profile>,
    /// The switches, read once at start-up.
    pub settings: Settings,
    /// `STRATA_SKIP`'s kernels, left out of each step's graph (skip.rs).
    pub(crate) skip: Vec<String>,
    /// Loaded modules, per kernel file and part: a part is compiled and loaded once, and a thread that
    /// wants one another thread is compiling waits for it (see [`Gpu::load_all`]).
    modules: Mutex<HashMap<(&'static str, usize), Arc<ModuleSlot>>>,
    /// Kernels already looked up, per file by name (a decode step launches ~1,400: no allocation per lookup).
    /// Kernels by (file, name) address: a step looks up ~1,400 of them while it is recorded.
    functions: Mutex<HashMap<(usize, usize, usize), CudaFunction, AddrHash>>,
    /// The step being recorded and the graphs kept (graph.rs).
    pub(crate) recorder: Mutex<crate::runtime::recorder::Recorder>,
    pub(crate) rec_on: AtomicBool,
    /// Set when a graph could not be made: later steps are issued op by op.
    pub(crate) graphs_failed: AtomicBool,
    /// Pinned memory that small reads from the device pass through (made at the first such read).
    readback: Mutex<Option<Readback>>,
}

/// A part's module once compiled and loaded, or why it could not be (said at each use).
type ModuleSlot = OnceLock<Result<Arc<CudaModule>, CudaError>>;

/// A compiled part of a kernel file: machine code in a file, or PTX for the driver to compile.
enum Image {
    Cubin(PathBuf),
    /// Machine code in a file of this process's own (no cache folder): removed once loaded.
    OwnCubin(PathBuf),
    Ptx(String),
}

/// [`READBACK_BYTES`] of pinned host memory, cached (not write-combined, as cudarc's pinned slices are:
/// the host reads it).
struct Readback {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
}

// SAFETY: the memory is owned, and only touched under the Gpu's lock.
unsafe impl Send for Readback {}

impl Readback {
    fn new(ctx: &Arc<CudaContext>) -> Result<Readback, CudaError> {
        ctx.bind_to_thread().check("binding the context")?;
        // SAFETY: a plain allocation of pinned host memory (flags 0: portable to this context, cached).
        let ptr =
            unsafe { cudarc::driver::result::malloc_host(READBACK_BYTES, 0) }.check("allocating pinned memory")?;
        Ok(Readback { ctx: ctx.clone(), ptr: ptr as *mut u8 })
    }
}

impl Drop for Readback {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by malloc_host above and freed once; nothing reads it after.
            let _ = unsafe { cudarc::driver::result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// The most bytes a read passes through the pinned readback area. A decode step's token is such a read,
/// made while the card waits for the next step: into pinned memory the copy is one DMA that the stream's
/// synchronisation waits for, where into pageable memory the driver stages it itself.
pub(crate) const READBACK_BYTES: usize = 4096;

/// The stream-ordered allocator keeps freed memory for reuse instead of handing it back to the driver at
/// each synchronisation, so a step's temporaries cost no mapping.
fn keep_pool_memory(ctx: &CudaContext) -> Result<(), CudaError> {
    use cudarc::driver::sys;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut keep = u64::MAX;
    // SAFETY: plain driver calls on this context's device, writing a handle and setting one attribute.
    let rc = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Ok(()); // no pool: allocations are plain, nothing to keep
    }
    let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    let rc = unsafe { sys::cuMemPoolSetAttribute(pool, attr, (&mut keep as *mut u64).cast()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(CudaError::NoDevice(format!("setting the memory pool's release threshold: {rc:?}")));
    }
    Ok(())
}

impl Gpu {
    /// Device `ordinal` run with `settings`; a clear error when there is no driver or no device.
    pub fn new(ordinal: usize, settings: Settings) -> Result<Arc<Gpu>, CudaError> {
        let ctx = no_panic(|| CudaContext::new(ordinal))
            .map_err(|m| {
                CudaError::NoDevice(format!("the CUDA driver library could not be loaded: {}", first_sentence(&m)))
            })?
            .map_err(|e| CudaError::NoDevice(e.to_string()))?;
        let name = ctx.name().check("reading the device name")?;
        let arch = ctx.compute_capability().check("reading the compute capability")?;
        let sms = cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        let sm_count = ctx.attribute(sms).check("reading the multiprocessor count")?.max(1) as u32;
        let optin = cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
        let smem_optin = ctx.attribute(optin).check("reading the shared memory limit")?.max(0) as u32;
        let mut v = 0i32;
        // SAFETY: a plain query writing one int; the library is loaded (the context exists).
        let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        if rc != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(CudaError::NoDevice(format!("cuDriverGetVersion: {rc:?}")));
        }
        // One stream of our own (graphs cannot capture the legacy default stream). Everything runs on it,
        // in order, so cudarc's cross-stream event tracking is not needed.
        // SAFETY: no other stream ever touches this context's buffers.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().check("creating a stream")?;
        let side_streams = [
            ctx.new_stream().check("creating a stream")?,
            ctx.new_stream().check("creating a stream")?,
            ctx.new_stream().check("creating a stream")?,
        ];
        keep_pool_memory(&ctx)?;
        Ok(Arc::new(Gpu {
            ctx,
            stream,
            side_streams,
            name,
            arch,
            driver_version: v,
            sm_count,
            smem_optin,
            profile: settings.profile.map(Profile::new),
            skip: crate::runtime::skip::entries(&settings.skip),
            recorder: Mutex::new(crate::runtime::recorder::Recorder {
                host: settings.host_profile.then(Default::default),
                ..Default::default()
            }),
            settings,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::default()),
            rec_on: AtomicBool::new(false),
            graphs_failed: AtomicBool::new(false),
            readback: Mutex::new(None),
        }))
    }

    /// `dst.len()` bytes (at most [`READBACK_BYTES`]) from device address `src`, ordered on the stream,
    /// through the pinned readback area.
    pub(crate) fn read_small(&self, src: u64, dst: &mut [u8]) -> Result<(), CudaError> {
        if dst.len() > READBACK_BYTES {
            return Err(CudaError::Shape(format!("a read of {} bytes through the readback area", dst.len())));
        }
        let mut area = self.readback.lock().unwrap_or_else(|p| p.into_inner());
        if area.is_none() {
            *area = Some(Readback::new(&self.ctx)?);
        }
        let ptr = area.as_ref().expect("made above").ptr;
        // SAFETY: READBACK_BYTES of pinned memory, held under the lock until the copy has been read.
        let host = unsafe { std::slice::from_raw_parts_mut(ptr, dst.len()) };
        // SAFETY: pinned memory held under the lock until the synchronisation below has waited for the copy.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(host, src, self.stream.cu_stream()) }
            .check("copying from the device")?;
        self.sync()?;
        dst.copy_from_slice(host);
        Ok(())
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        self.ctx.bind_to_thread().check("binding the context")?;
        cudarc::driver::result::mem_get_info().check("reading the free memory")
    }

    /// `sm_90` and the like.
    pub fn arch_name(&self) -> String {
        format!("sm_{}{}", self.arch.0, self.arch.1)
    }

    /// A kernel of a `.cu` file (compiled once per process, and once per machine thanks to the cache).
    pub fn function(&self, kf: &'static KernelFile, name: &'static str) -> Result<CudaFunction, CudaError> {
        // By address: every name is a literal or made once (kernel_name); the same text at two addresses
        // is only looked up twice.
        let key = (kf as *const KernelFile as usize, name.as_ptr() as usize, name.len());
        if let Some(f) = self.functions.lock().expect("function cache lock").get(&key) {
            return Ok(f.clone());
        }
        let module = self.module(kf, kf.part_of(name))?;
        let f = module.load_function(name).check(&format!("kernel {name} of kernels/{}", kf.name))?;
        self.functions.lock().expect("function cache lock").insert(key, f.clone());
        Ok(f)
    }

    /// Part `part` of `kf`, compiled (or read from the cache) and loaded by the first thread that asks;
    /// the others wait for it rather than compile it again.
    fn module(&self, kf: &'static KernelFile, part: usize) -> Result<Arc<CudaModule>, CudaError> {
        let slot = self.modules.lock().expect("module cache lock").entry((kf.name, part)).or_default().clone();
        slot.get_or_init(|| self.image(kf, part).and_then(|image| self.load(kf, part, image))).clone()
    }

    /// Loads every part of `files`, in that order, on `threads` threads, so that a first start pays for
    /// compilation up front rather than inside the first token's time. A caller may meanwhile ask for any
    /// kernel ([`Gpu::function`]): it waits for its part only. Says where the time went.
    pub fn load_all(&self, files: &[&'static KernelFile], threads: usize) -> Result<String, CudaError> {
        let t0 = std::time::Instant::now();
        let pieces: Vec<(&'static KernelFile, usize)> =
            files.iter().flat_map(|&kf| (0..kf.part_count()).map(move |p| (kf, p))).collect();
        let next = AtomicUsize::new(0);
        let threads = threads.clamp(1, pieces.len().max(1));
        let times: Vec<Result<Vec<(f64, usize)>, CudaError>> = std::thread::scope(|s| {
            let worker = || {
                let mut times = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(kf, part)) = pieces.get(i) else { return Ok(times) };
                    let t = std::time::Instant::now();
                    self.module(kf, part)?;
                    times.push((t.elapsed().as_secs_f64(), i));
                }
            };
            let jobs: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
            jobs.into_iter()
                .map(|j| j.join().unwrap_or_else(|_| Err(CudaError::Shape("NVRTC panicked".into()))))
                .collect()
        });
        let mut slowest = (0.0, 0);
        for t in times {
            for (secs, i) in t? {
                if secs > slowest.0 {
                    slowest = (secs, i);
                }
            }
        }
        let (kf, part) = pieces.get(slowest.1).copied().unwrap_or((files[0], 0));
        Ok(format!(
            "{} parts compiled or read and loaded in {:.1} s on {threads} threads (slowest {} {:.1} s)",
            pieces.len(),
            t0.elapsed().as_secs_f64(),
            kf.part_name(part),
            slowest.0
        ))
    }

    fn load(&self, kf: &KernelFile, part: usize, image: Image) -> Result<Arc<CudaModule>, CudaError> {
        let what = format!("loading kernels/{}", kf.part_name(part));
        match image {
            Image::Cubin(path) => self.ctx.load_module(Ptx::from_file(path)).check(&what),
            Image::OwnCubin(path) => {
                let module = self.ctx.load_module(Ptx::from_file(&path)).check(&what);
                let _ = std::fs::remove_file(&path);
                if let Some(dir) = path.parent() {
                    let _ = std::fs::remove_dir(dir); // only once empty: other parts may still be loading
                }
                module
            }
            Image::Ptx(text) => self.ctx.load_module(Ptx::from_src(text)).check(&what),
        }
    }

    /// A part of a kernel file compiled for this card: machine code (a cubin file, from the cache or
    /// NVRTC), or PTX where NVRTC cannot make machine code for the card (the driver then compiles it).
    fn image(&self, kf: &KernelFile, part: usize) -> Result<Image, CudaError> {
        let text = kf.part_text(part);
        let stem = kf.part_name(part).replace([':', '.'], "-");
        let hash = strata_gguf::fnv1a(format!("{}{text}", self.settings.defines).bytes());
        let key = format!("{stem}-{hash:016x}-{}-drv{}.cubin", self.arch_name(), self.driver_version);
        // Without a cache folder the machine code still goes through a file (the loader reads cubins from
        // files), one of this process's own, removed once loaded.
        let (dir, own) = match &self.settings.cache {
            Some(d) => (d.join("kernels"), false),
            None => (std::env::temp_dir().join(format!("strata-kernels-{}", std::process::id())), true),
        };
        let path = dir.join(&key);
        if !own && path.is_file() {
            return Ok(Image::Cubin(path));
        }
        match compile_cubin(kf.name, &text, &self.settings.defines, self.arch) {
            Ok(bin) => {
                let _ = std::fs::create_dir_all(&dir);
                let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                std::fs::write(&tmp, &bin)
                    .and_then(|()| std::fs::rename(&tmp, &path))
                    .map_err(|e| CudaError::Shape(format!("writing {}: {e}", path.display())))?;
                Ok(if own { Image::OwnCubin(path) } else { Image::Cubin(path) })
            }
            // A card newer than this NVRTC: PTX for the newest architecture it knows, which the driver
            // compiles for the card.
            Err(CudaError::Compile { log, .. }) if log.contains("gpu-architecture") => {
                Ok(Image::Ptx(compile_ptx(kf.name, &text, &self.settings.defines, self.arch)?))
            }
            Err(e) => Err(e),
        }
    }

    pub fn sync(&self) -> Result<(), CudaError> {
        self.stream.synchronize().check("synchronizing")
    }

    /// The profile when it is timing `mode` in a decode step.
    pub fn timing(&self, mode: ProfileMode) -> Option<&Profile> {
        self.profile.as_ref().filter(|p| p.mode == mode && p.active())
    }

    /// `f`, timed under `name` when the profile is timing `mode`: an op family synchronised before and
    /// after, a kernel by events either side on the stream.
    pub fn timed<R>(
        &self,
        mode: ProfileMode,
        name: &str,
        f: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        let Some(p) = self.timing(mode) else { return f() };
        if mode == ProfileMode::Kernels {
            let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            let event = || self.ctx.new_event(flags).check("creating an event");
            let (start, end) = (event()?, event()?);
            start.record(&self.stream).check("recording an event")?;
            let r = f()?;
            end.record(&self.stream).check("recording an event")?;
            p.launched(name, start, end);
            return Ok(r);
        }
        self.sync()?;
        let t0 = std::time::Instant::now();
        let r = f()?;
        self.sync()?;
        p.add(name, t0.elapsed().as_secs_f64());
        Ok(r)
    }
}

/// A kernel's name from its parts (base, kind, layout suffix), made once and kept for the process: a step
/// launches hundreds of kernels, and the launches and the graphs' records keep names as `&'static str`.
pub(crate) fn kernel_name(parts: [&'static str; 3]) -> &'static str {
    // Keyed by the parts' addresses and lengths (each a literal): the same parts at other addresses make
    // the same name once more, a few bytes kept for good.
    type Names = HashMap<[(usize, usize); 3], &'static str, AddrHash>;
    static NAMES: std::sync::Mutex<Option<Names>> = std::sync::Mutex::new(None);
    let key = parts.map(|p| (p.as_ptr() as usize, p.len()));
    let mut names = NAMES.lock().expect("kernel names lock");
    names.get_or_insert_with(Names::default).entry(key).or_insert_with(|| Box::leak(parts.concat().into_boxed_str()))
}

/// A hasher for keys made of addresses and lengths (the kernel caches): a multiply and a rotate a word,
/// where the standard one would run its keyed rounds over each.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type AddrHash = std::hash::BuildHasherDefault<AddrHasher>;
