//! The kernel files (`kernels/*.cu`, one op family each) and the text NVRTC compiles for each: the
//! contract's functions (`common.cuh`), for the matrix-vector kernels the lattice grids and the weight
//! decoders (written from strata_gguf's tables, the one copy of those constants; qdot.cu also gets
//! qdot.cuh), then the file. The kernel and plan caches are keyed by that text.

use crate::runtime::compile::KernelFile;

/// The contract's device functions, prepended to every kernel file.
pub const COMMON: &str = include_str!("../../kernels/common.cuh");
/// The weight decoders, prepended to matvec.cu and qdot.cu (after the IQ grids).
pub const DEQUANT: &str = include_str!("../../kernels/dequant.cuh");
/// The integer dot products' functions (§ qdot), prepended to qdot.cu after the decoders.
pub const QDOT: &str = include_str!("../../kernels/qdot.cuh");
/// The § qdot products (int8 inputs) of Q8_0, Q4_0, Q2_0 (also in the pair layout), IQ4_NL, Q4_K and Q6_K
/// weights.
pub const QDOT_CU: &str = include_str!("../../kernels/qdot.cu");

/// The hyper-connection read and write (twin of crates/model/src/layers/hc.rs).
pub const HC: &str = include_str!("../../kernels/hc.cu");
/// QSA block scores and top-k (twins of layers/qsa.rs and ops/topk.rs).
pub const QSA: &str = include_str!("../../kernels/qsa.cu");

/// Matrix-vector products over quantized weights (twin of ops/matvec.rs).
pub const MATVEC: &str = include_str!("../../kernels/matvec.cu");

/// Gated DeltaNet: conv, q/k norms, gates, the delta rule, the output norm (twin of layers/gdn.rs).
pub const GDN: &str = include_str!("../../kernels/gdn.cu");

/// The mixture of experts: routing, activation, combination (twin of layers/moe.rs).
pub const MOE: &str = include_str!("../../kernels/moe.cu");

/// The attention layer: norms and rope, the KV append, block keys, gated attention (twin of layers/qsa.rs).
pub const ATTN: &str = include_str!("../../kernels/attn.cu");

/// The PLE block for one token (twin of layers/ple.rs).
pub const PLE: &str = include_str!("../../kernels/ple.cu");

/// The MTP layer's input rows (twin of the CPU back-end's mtp_input).
pub const MTP: &str = include_str!("../../kernels/mtp.cu");

/// The greedy token of a row of logits (twin of ops/topk.rs argmax).
pub const ARGMAX: &str = include_str!("../../kernels/argmax.cu");

/// The draft head over a draft vocabulary: its rows gathered, a draft's token through its list (twin of
/// the CPU decoder's draft head).
pub const DRAFT: &str = include_str!("../../kernels/draft.cu");

/// A token drawn from a row of logits (twin of ops/sample.rs sample).
pub const SAMPLE: &str = include_str!("../../kernels/sample.cu");

/// A verify window's rewind: slots copied over the states (twin of crates/model/src/rewind.rs).
pub const REWIND: &str = include_str!("../../kernels/rewind.cu");

/// The card's half of a pass with experts in host memory (ops/misses.rs holds the host side and the mailbox).
pub const MISSES: &str = include_str!("../../kernels/misses.cu");

/// Every kernel file's (name, body). All variants of an op family live in its one file.
pub const BODIES: [(&str, &str); 14] = [
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
    ("draft.cu", DRAFT),
    ("sample.cu", SAMPLE),
    ("rewind.cu", REWIND),
    ("misses.cu", MISSES),
];

/// The text NVRTC compiles for the file `file` of body `body` (see the top of this file).
pub fn text_of(file: &str, body: &str) -> String {
    let decoders = match file {
        "matvec.cu" => grid_tables() + DEQUANT,
        "qdot.cu" => grid_tables() + DEQUANT + QDOT,
        _ => String::new(),
    };
    format!("{COMMON}\n{decoders}\n{body}")
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

/// The base names of matvec.cu's types and qdot.cu's, one instantiation line each (`MATVEC(matvec_q4_k, …)`):
/// those files are compiled a type at a time, in parallel.
const MATVEC_PARTS: [&str; 16] = [
    "matvec_f32",
    "matvec_f16",
    "matvec_bf16",
    "matvec_q8_0",
    "matvec_q4_0",
    "matvec_q2_0",
    "matvec_q5_0",
    "matvec_iq2_xs",
    "matvec_iq3_xxs",
    "matvec_iq3_s",
    "matvec_q4_k",
    "matvec_q5_k",
    "matvec_q6_k",
    "matvec_q3_k",
    "matvec_iq4_nl",
    "matvec_iq4_xs",
];
const QDOT_PARTS: [&str; 7] =
    ["qdot_q8_0", "qdot_q4_0", "qdot_q2_0", "qdot_iq4_nl", "qdot_q4_k", "qdot_q6_k", "qdot_q2_0p"];

macro_rules! kernel_files {
    ($($id:ident = $name:literal, $body:ident $(, $parts:expr, $split:literal)?;)*) => {
        $(pub static $id: KernelFile = KernelFile {
            name: $name,
            text: || text_of($name, $body),
            parts: kernel_files!(@parts $($parts)?),
            split: kernel_files!(@split $($split)?),
        };)*
        /// Every kernel file, for compiling them all at once and for the plan's cache key.
        pub static ALL: [&KernelFile; BODIES.len()] = [$(&$id),*];
    };
    (@parts $parts:expr) => { &$parts };
    (@parts) => { &[] };
    (@split $split:literal) => { $split };
    (@split) => { "" };
}

kernel_files! {
    HC_FILE = "hc.cu", HC;
    QSA_FILE = "qsa.cu", QSA;
    MATVEC_FILE = "matvec.cu", MATVEC, MATVEC_PARTS, "MATVEC(";
    QDOT_FILE = "qdot.cu", QDOT_CU, QDOT_PARTS, "QDOT(";
    GDN_FILE = "gdn.cu", GDN;
    MOE_FILE = "moe.cu", MOE;
    ATTN_FILE = "attn.cu", ATTN;
    PLE_FILE = "ple.cu", PLE;
    MTP_FILE = "mtp.cu", MTP;
    ARGMAX_FILE = "argmax.cu", ARGMAX;
    DRAFT_FILE = "draft.cu", DRAFT;
    SAMPLE_FILE = "sample.cu", SAMPLE;
    REWIND_FILE = "rewind.cu", REWIND;
    MISSES_FILE = "misses.cu", MISSES;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part holds exactly its own type's instantiation line, and every line is some part's.
    #[test]
    fn the_parts_split_the_instantiations() {
        for (kf, body) in [(&MATVEC_FILE, MATVEC), (&QDOT_FILE, QDOT_CU)] {
            let lines: Vec<&str> = body.lines().filter(|l| l.starts_with(kf.split)).collect();
            assert_eq!(lines.len(), kf.parts.len(), "{}", kf.name);
            for (i, part) in kf.parts.iter().enumerate() {
                let text = kf.part_text(i);
                let own: Vec<&str> = text.lines().filter(|l| l.starts_with(kf.split)).collect();
                assert_eq!(own.len(), 1, "{}", kf.part_name(i));
                assert!(own[0].starts_with(&format!("{}{part},", kf.split)), "{own:?}");
                assert_eq!(kf.part_of(&format!("{part}_staged")), i);
                assert_eq!(kf.part_of(part), i);
            }
        }
        assert_eq!(MATVEC_FILE.part_of("matvec_iq3_xxs_gather"), 8);
        assert_eq!(HC_FILE.part_count(), 1);
        assert_eq!(HC_FILE.part_text(0), (HC_FILE.text)());
    }
}
