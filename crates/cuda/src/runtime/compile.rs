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
