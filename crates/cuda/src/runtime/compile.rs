//! Kernel compilation: a kernel file's text (ops/sources.rs: `kernels/*.cu` with the contract's
//! `common.cuh` prepended) compiled by NVRTC with the flags the arithmetic contract needs (contraction off, IEEE division and square root, no
//! flush to zero, no fast math). Needs only the NVRTC library, not a driver or a device, so CI compiles
//! every kernel of every variant for every supported architecture (crates/cuda/tests/kernels_compile.rs).

use cudarc::nvrtc::CompileOptions;

use crate::runtime::error::CudaError;

/// A kernel file: its name, and the text NVRTC compiles (all but the settings' `#define` lines, which
/// the device puts before it), made only when the file is compiled or its cache key is needed. The ops
/// floor holds the files (ops/sources.rs); the runtime compiles whatever it is given.
pub struct KernelFile {
    pub name: &'static str,
    pub text: fn() -> String,
    /// A file of many instantiations (one line each, starting with `split`) is compiled as parts, one
    /// per line in `parts` (the kernels' base names), in parallel: each part's text holds only its own
    /// line of them. Empty: the file is one part.
    pub parts: &'static [&'static str],
    pub split: &'static str,
}

impl KernelFile {
    /// How many pieces the file is compiled in.
    pub fn part_count(&self) -> usize {
        self.parts.len().max(1)
    }

    /// The part holding kernel `name` (its base name, then `_…` or nothing).
    pub fn part_of(&self, name: &str) -> usize {
        let holds = |p: &&str| name.strip_prefix(*p).is_some_and(|r| r.is_empty() || r.starts_with('_'));
        self.parts.iter().position(holds).unwrap_or(0)
    }

    /// Part `i`'s text: the file's, less the other parts' instantiation lines.
    pub fn part_text(&self, i: usize) -> String {
        let text = (self.text)();
        let Some(part) = self.parts.get(i) else { return text };
        let own = format!("{}{part},", self.split);
        text.lines().filter(|l| !l.starts_with(self.split) || l.starts_with(&own)).collect::<Vec<_>>().join("\n")
    }

    /// The part's name for messages and cache keys (`matvec.cu:matvec_q4_k`).
    pub fn part_name(&self, i: usize) -> String {
        match self.parts.get(i) {
            Some(p) => format!("{}:{p}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// The architectures the kernels are built and checked for (compute capability major, minor): Turing,
/// Ampere, Ada, Hopper. Cards of other capabilities compile at run time the same way.
pub const SUPPORTED_ARCHS: [(i32, i32); 5] = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0)];

/// PTX of `text` (a kernel file's [`KernelFile::text`], `defines` put before it) for compute capability
/// `arch`.
pub fn compile_ptx(file: &str, text: &str, defines: &str, arch: (i32, i32)) -> Result<String, CudaError> {
    let target: &'static str = Box::leak(format!("compute_{}{}", arch.0, arch.1).into_boxed_str());
    let opts = CompileOptions {
        ftz: Some(false),
        prec_sqrt: Some(true),
        prec_div: Some(true),
        fmad: Some(false),
        use_fast_math: Some(false),
        arch: Some(target),
        name: Some(file.to_string()),
        ..Default::default()
    };
    let full = format!("{defines}{text}");
    let ptx = no_panic(|| cudarc::nvrtc::compile_ptx_with_opts(&full, opts))
        .map_err(|m| CudaError::NoDevice(format!("NVRTC could not be loaded: {}", first_sentence(&m))))?
        .map_err(|e| CudaError::Compile { file: file.to_string(), log: format!("{e:?}") })?;
    Ok(ptx.to_src())
}

/// The card's machine code (a cubin) of `text` (`defines` put before it) for compute capability `arch`:
/// loaded as it is, where PTX would be compiled again by the driver at every load that its own cache
/// misses (22 s of a first start on the H200, every kernel file one after the other).
pub fn compile_cubin(file: &str, text: &str, defines: &str, arch: (i32, i32)) -> Result<Vec<u8>, CudaError> {
    use cudarc::nvrtc::{result, sys};
    let opts = [
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--ftz=false".into(),
        "--prec-sqrt=true".into(),
        "--prec-div=true".into(),
        "--fmad=false".into(),
    ];
    let load = |m: String| CudaError::NoDevice(format!("NVRTC could not be loaded: {}", first_sentence(&m)));
    let src =
        std::ffi::CString::new(format!("{defines}{text}")).map_err(|_| CudaError::Shape("a NUL in a kernel".into()))?;
    let name = std::ffi::CString::new(file).map_err(|_| CudaError::Shape("a NUL in a file name".into()))?;
    let prog = no_panic(|| result::create_program(&src, Some(&name)))
        .map_err(load)?
        .map_err(|e| CudaError::Compile { file: file.to_string(), log: format!("{e:?}") })?;
    // SAFETY: `prog` was just created and is destroyed once, below, on every path.
    let out = unsafe {
        match result::compile_program(prog, &opts) {
            Err(e) => {
                let log = result::get_program_log(prog).unwrap_or_default();
                let log = std::ffi::CStr::from_ptr(log.as_ptr()).to_string_lossy().to_string();
                Err(CudaError::Compile { file: file.to_string(), log: format!("{e:?}: {log}") })
            }
            Ok(()) => {
                let mut size = 0usize;
                let r = sys::nvrtcGetCUBINSize(prog, &mut size).result();
                let mut bin = vec![0u8; size];
                r.and_then(|()| sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()).result())
                    .map(|()| bin)
                    .map_err(|e| CudaError::Compile { file: file.to_string(), log: format!("no cubin: {e:?}") })
            }
        }
    };
    // SAFETY: created above, not used after.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// Runs `f`, turning a panic (cudarc panics when it cannot load the CUDA libraries) into an error.
pub(crate) fn no_panic<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    r.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// cudarc's load failures list every library name tried; the first part says what matters.
pub(crate) fn first_sentence(m: &str) -> &str {
    m.split(" - searched").next().unwrap_or(m)
}
