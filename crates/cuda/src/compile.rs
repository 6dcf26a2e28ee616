//! Kernel compilation: every `kernels/*.cu` file with the contract's `common.cuh` prepended, compiled by
//! NVRTC with the flags the arithmetic contract needs (contraction off, IEEE division and square root, no
//! flush to zero, no fast math). Needs only the NVRTC library, not a driver or a device, so CI compiles
//! every kernel of every variant for every supported architecture (crates/cuda/tests/kernels_compile.rs).

use cudarc::nvrtc::CompileOptions;

use crate::error::CudaError;

/// The contract's device functions, prepended to every kernel file.
pub const COMMON: &str = include_str!("../kernels/common.cuh");
/// The weight decoders, prepended to matvec.cu and qdot.cu (after the IQ grids).
pub const DEQUANT: &str = include_str!("../kernels/dequant.cuh");
/// The integer dot products' functions (§ qdot), prepended to qdot.cu after the decoders.
pub const QDOT: &str = include_str!("../kernels/qdot.cuh");
/// The § qdot products (int8 inputs) of Q8_0, Q4_0, Q2_0, IQ4_NL, Q4_K and Q6_K weights.
pub const QDOT_CU: &str = include_str!("../kernels/qdot.cu");

/// The hyper-connection read and write (twin of crates/model/src/layers/hc.rs).
pub const HC: &str = include_str!("../kernels/hc.cu");
/// QSA block scores and top-k (twins of layers/qsa.rs and ops/topk.rs).
pub const QSA: &str = include_str!("../kernels/qsa.cu");

/// Matrix-vector products over quantized weights (twin of ops/matvec.rs).
pub const MATVEC: &str = include_str!("../kernels/matvec.cu");

/// Gated DeltaNet: conv, q/k norms, gates, the delta rule, the output norm (twin of layers/gdn.rs).
pub const GDN: &str = include_str!("../kernels/gdn.cu");

/// The mixture of experts: routing, activation, combination (twin of layers/moe.rs).
pub const MOE: &str = include_str!("../kernels/moe.cu");

/// The attention layer: norms and rope, the KV append, block keys, gated attention (twin of layers/qsa.rs).
pub const ATTN: &str = include_str!("../kernels/attn.cu");

/// The PLE block for one token (twin of layers/ple.rs).
pub const PLE: &str = include_str!("../kernels/ple.cu");

/// The MTP layer's input rows (twin of the CPU back-end's mtp_input).
pub const MTP: &str = include_str!("../kernels/mtp.cu");

/// The greedy token of a row of logits (twin of ops/topk.rs argmax).
pub const ARGMAX: &str = include_str!("../kernels/argmax.cu");

/// A token drawn from a row of logits (twin of ops/sample.rs sample).
pub const SAMPLE: &str = include_str!("../kernels/sample.cu");

/// Every kernel file: (name, source). All variants of an op family live in its one file.
pub const KERNEL_FILES: [(&str, &str); 11] = [
    ("hc.cu", HC),
    ("qsa.cu", QSA),
    ("matvec.cu", MATVEC),
    ("qdot.cu", QDOT_CU),
    ("gdn.cu", GDN),
    ("moe.cu", MOE),
    ("attn.cu", ATTN),
    ("ple.cu", PLE),
    ("mtp.cu", MTP),
    ("argmax.cu", ARGMAX),
    ("sample.cu", SAMPLE),
];

/// The architectures the kernels are built and checked for (compute capability major, minor): Turing,
/// Ampere, Ada, Hopper. Cards of other capabilities compile at run time the same way.
pub const SUPPORTED_ARCHS: [(i32, i32); 5] = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0)];

/// The source NVRTC sees for a kernel file: `defines` (the `#define` lines of `STRATA_DEFINES`,
/// [`Settings::defines`](crate::settings::Settings)), the contract's functions, the
/// lattice grids and the weight decoders for the matrix-vector kernels (written from strata_gguf's tables,
/// the one copy of those constants; qdot.cu also gets qdot.cuh), the file. The kernel and plan caches are keyed by it.
pub fn full_source(file: &str, source: &str, defines: &str) -> String {
    let decoders = match file {
        "matvec.cu" => grid_tables() + DEQUANT,
        "qdot.cu" => grid_tables() + DEQUANT + QDOT,
        _ => String::new(),
    };
    format!("{defines}{COMMON}\n{decoders}\n{source}")
}

/// The IQ grids as CUDA arrays in global memory, and IQ4_NL's table as four words (`IQ4_NL_W0..3`).
pub fn grid_tables() -> String {
    use strata_gguf::quant::{IQ2XS_GRID, IQ3S_GRID, IQ3XXS_GRID, IQ4_NL_VALUES};
    let iq4: String = (0..4)
        .map(|w| {
            let b = |i: usize| (IQ4_NL_VALUES[4 * w + i] as u8 as u32) << (8 * i);
            format!("#define IQ4_NL_W{w} {:#010x}u\n", b(0) | b(1) | b(2) | b(3))
        })
        .collect();
    let table = |name: &str, ty: &str, values: Vec<String>| {
        // Global memory, not constant: each lane looks up its own entry (see dequant.cuh).
        format!("__device__ const {ty} {name}[{}] = {{{}}};\n", values.len(), values.join(","))
    };
    iq4 + &table("IQ2XS_GRID", "unsigned long long", IQ2XS_GRID.iter().map(|v| format!("{v:#x}ull")).collect())
        + &table("IQ3XXS_GRID", "unsigned int", IQ3XXS_GRID.iter().map(|v| format!("{v:#x}u")).collect())
        + &table("IQ3S_GRID", "unsigned int", IQ3S_GRID.iter().map(|v| format!("{v:#x}u")).collect())
}

/// PTX of `source` (a kernel file, `common.cuh` not yet prepended, `defines` before it) for compute
/// capability `arch`.
pub fn compile_ptx(file: &str, source: &str, defines: &str, arch: (i32, i32)) -> Result<String, CudaError> {
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
    let full = full_source(file, source, defines);
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
