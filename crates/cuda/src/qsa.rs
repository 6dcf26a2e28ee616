//! Host side of kernels/qsa.cu: block scores and exact top-k selection for a window of Q = 1..8 queries.

use cudarc::driver::LaunchConfig;

use crate::buf::{launch, Arg, Buf};
use crate::device::Gpu;
use crate::error::CudaError;

const SRC: &str = include_str!("../kernels/qsa.cu");
pub const MAX_Q: usize = 8;

/// Which scores kernel (`STRATA_SCORES_HALVE`): the butterfly per dot, or all dots reduced together by
/// recursive halving. The same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoresVariant {
    Butterfly,
    Halve,
}

impl ScoresVariant {
    pub const ALL: [ScoresVariant; 2] = [ScoresVariant::Butterfly, ScoresVariant::Halve];

    pub fn from_env() -> Option<ScoresVariant> {
        match std::env::var("STRATA_SCORES_HALVE").ok()?.as_str() {
            "0" => Some(ScoresVariant::Butterfly),
            "1" => Some(ScoresVariant::Halve),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScoresVariant::Butterfly => "butterfly",
            ScoresVariant::Halve => "halve",
        }
    }
}

/// Scores of the window's queries against the block keys: `scores[q·stride + b]` for b < n_scored[q].
/// `keys` is `[n_blocks][di]`, `queries` `[Q][hi][di]`.
#[allow(clippy::too_many_arguments)]
pub fn scores(gpu: &Gpu, v: ScoresVariant, keys: &Buf<f32>, queries: &Buf<f32>, out: &Buf<f32>, n_scored: &Buf<i32>, n_blocks: usize, di: usize, hi: usize, q: usize, stride: usize) -> Result<(), CudaError> {
    check_q(q)?;
    if n_blocks == 0 {
        return Ok(());
    }
    if v == ScoresVariant::Halve && (hi > 4 || di > 32 * 8) {
        return Err(CudaError::Shape(format!("the halving scorer takes up to 4 heads of up to 256 ({hi} of {di})")));
    }
    let warps = 8u32;
    let (name, cfg) = match v {
        ScoresVariant::Butterfly => ("qsa_scores", LaunchConfig { grid_dim: ((n_blocks as u32).div_ceil(warps), 1, 1), block_dim: (32 * warps, 1, 1), shared_mem_bytes: 0 }),
        ScoresVariant::Halve => {
            // Enough warps to fill the card; each loops over key blocks.
            let blocks = (n_blocks as u32).div_ceil(warps).min(132 * 8);
            ("qsa_scores_halve", LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * warps, 1, 1), shared_mem_bytes: (q * hi * di * 4) as u32 })
        }
    };
    let args = [
        Arg::Ptr(keys.ptr(gpu)),
        Arg::Ptr(queries.ptr(gpu)),
        Arg::Ptr(out.ptr(gpu)),
        Arg::Ptr(n_scored.ptr(gpu)),
        Arg::I32(n_blocks as i32),
        Arg::I32(di as i32),
        Arg::I32(hi as i32),
        Arg::I32(q as i32),
        Arg::I32(stride as i32),
    ];
    launch(gpu, &gpu.function("qsa.cu", SRC, name)?, name, cfg, &args)
}

/// The selected cells of each query: ascending ids at `out[q·out_stride ..]`, their number in `count[q]`.
#[allow(clippy::too_many_arguments)]
pub fn topk(gpu: &Gpu, scores: &Buf<f32>, stride: usize, n_cells: &Buf<i32>, top_k: usize, kpool: usize, out: &Buf<u32>, out_stride: usize, count: &Buf<i32>, q: usize) -> Result<(), CudaError> {
    check_q(q)?;
    let cfg = LaunchConfig { grid_dim: (q as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
    let args = [
        Arg::Ptr(scores.ptr(gpu)),
        Arg::I32(stride as i32),
        Arg::Ptr(n_cells.ptr(gpu)),
        Arg::I32(top_k as i32),
        Arg::I32(kpool as i32),
        Arg::Ptr(out.ptr(gpu)),
        Arg::I32(out_stride as i32),
        Arg::Ptr(count.ptr(gpu)),
    ];
    launch(gpu, &gpu.function("qsa.cu", SRC, "qsa_topk_wide")?, "qsa_topk_wide", cfg, &args)
}

fn check_q(q: usize) -> Result<(), CudaError> {
    if q == 0 || q > MAX_Q {
        return Err(CudaError::Shape(format!("a QSA selection takes 1..={MAX_Q} queries, not {q}")));
    }
    Ok(())
}
