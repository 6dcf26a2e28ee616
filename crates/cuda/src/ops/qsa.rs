//! Host side of kernels/qsa.cu: block scores and exact top-k selection for a window of Q = 1..8 queries.

use cudarc::driver::LaunchConfig;

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

pub const MAX_Q: usize = 8;

/// Which scores kernel (`STRATA_SCORES_HALVE`): the butterfly per dot, or all dots reduced together by
/// recursive halving. The same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoresVariant {
    Butterfly,
    Halve,
    /// One thread per (key block, query), keys from global memory, the tree in post-order
    /// (`STRATA_SCORES_STREAM=1`).
    Stream,
}

impl ScoresVariant {
    pub const ALL: [ScoresVariant; 3] = [ScoresVariant::Butterfly, ScoresVariant::Halve, ScoresVariant::Stream];

    /// The scorer the switches force, if any: `STRATA_SCORES_STREAM=1`,
    /// `STRATA_SCORES_HALVE=0|1`; `STRATA_SM75_PERF=1` alone means the halving scorer.
    pub fn forced(s: &crate::runtime::settings::Settings) -> Option<ScoresVariant> {
        forced(s.scores_stream, s.scores_halve, s.sm75_perf, ScoresVariant::ALL)
    }

    /// Whether this scorer takes `hi` indexer heads of `di` (the halving and streaming scorers keep a
    /// query set of at most 4 heads of up to 256 in registers).
    pub fn fits(self, hi: usize, di: usize) -> bool {
        !matches!(self, ScoresVariant::Halve | ScoresVariant::Stream) || (hi <= 4 && di <= 32 * 8)
    }

    pub fn name(self) -> &'static str {
        match self {
            ScoresVariant::Butterfly => "butterfly",
            ScoresVariant::Halve => "halve",
            ScoresVariant::Stream => "stream",
        }
    }
}

/// The variant of [base, switched, third] that the switches force, if any: the third's own switch
/// first, then the seed switch (`0` the base, `1` the switched one); `STRATA_SM75_PERF=1` alone means
/// the switched one (the seeds' Turing defaults).
fn forced<V: Copy>(third: bool, switch: Option<bool>, sm75: bool, [base, switched, other]: [V; 3]) -> Option<V> {
    if third {
        return Some(other);
    }
    match (switch, sm75) {
        (Some(false), _) => Some(base),
        (Some(true), _) | (None, true) => Some(switched),
        (None, false) => None,
    }
}

/// Which top-k (`STRATA_TOPK_SPLIT`): one 1024-thread block per query, or chunks of 2048 blocks over many
/// CTAs in six launches. The same ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopkVariant {
    Wide,
    Split,
    /// One launch, a cluster of 8 CTAs per query sharing histograms in distributed shared memory
    /// (`STRATA_QSA_CLUSTER=1`; sm_90 and later).
    Cluster,
}

impl TopkVariant {
    pub const ALL: [TopkVariant; 3] = [TopkVariant::Wide, TopkVariant::Split, TopkVariant::Cluster];

    /// The top-k the switches force, if any: `STRATA_QSA_CLUSTER=1`, `STRATA_TOPK_SPLIT=0|1`;
    /// `STRATA_SM75_PERF=1` alone means the split kernel.
    pub fn forced(s: &crate::runtime::settings::Settings) -> Option<TopkVariant> {
        forced(s.qsa_cluster, s.topk_split, s.sm75_perf, TopkVariant::ALL)
    }

    pub fn name(self) -> &'static str {
        match self {
            TopkVariant::Wide => "wide",
            TopkVariant::Split => "split",
            TopkVariant::Cluster => "cluster",
        }
    }

    /// The variants this card can run (clusters need sm_90).
    pub fn available(gpu: &Gpu) -> Vec<TopkVariant> {
        Self::ALL.into_iter().filter(|&v| v != TopkVariant::Cluster || gpu.arch.0 >= 9).collect()
    }
}

/// Blocks per chunk of the split top-k (TOPK_CHUNK in qsa.cu).
const TOPK_CHUNK: usize = 2048;

/// Scores of the window's queries against the block keys: `scores[q·stride + b]` for b < n_scored[q].
/// `keys` is `[n_blocks][di]`, `queries` `[Q][hi][di]`.
#[allow(clippy::too_many_arguments)]
pub fn scores(
    gpu: &Gpu,
    v: ScoresVariant,
    keys: &Buf<f32>,
    queries: &Buf<f32>,
    out: &Buf<f32>,
    n_scored: &Buf<i32>,
    n_blocks: usize,
    di: usize,
    hi: usize,
    q: usize,
    stride: usize,
) -> Result<(), CudaError> {
    check_q(q)?;
    if n_blocks == 0 {
        return Ok(());
    }
    if !v.fits(hi, di) {
        return Err(CudaError::Shape(format!(
            "the {} scorer takes up to 4 heads of up to 256 ({hi} of {di})",
            v.name()
        )));
    }
    let warps = 8u32;
    let (name, cfg) = match v {
        ScoresVariant::Butterfly => (
            "qsa_scores",
            LaunchConfig {
                grid_dim: ((n_blocks as u32).div_ceil(warps), 1, 1),
                block_dim: (32 * warps, 1, 1),
                shared_mem_bytes: 0,
            },
        ),
        ScoresVariant::Stream => {
            // At most 8 blocks per SM, each thread looping over keys: measured faster than a thread per
            // key and query (bench/results/2026-11-30-h200-qsa/stream_nocap_run.log). At most 256 threads
            // a block (the kernel's launch bound: a thread holds its whole key): 32 keys a block for Q > 4.
            let keys_per_block = if q <= 4 { 64u32 } else { 32 };
            let blocks = (n_blocks as u32).div_ceil(keys_per_block).min(gpu.sm_count * 8);
            (
                "qsa_scores_stream",
                LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (keys_per_block, q as u32, 1),
                    shared_mem_bytes: (q * hi * di * 4) as u32,
                },
            )
        }
        ScoresVariant::Halve => {
            // Enough warps to fill the card; each loops over key blocks.
            let blocks = (n_blocks as u32).div_ceil(warps).min(gpu.sm_count * 8);
            (
                "qsa_scores_halve",
                LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (32 * warps, 1, 1),
                    shared_mem_bytes: (q * hi * di * 4) as u32,
                },
            )
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
    launch(gpu, &gpu.function(&crate::ops::sources::QSA_FILE, name)?, name, cfg, &args)
}

/// Work buffers of the split top-k for `q` queries of up to `stride` scored blocks.
pub struct TopkScratch {
    hist: Buf<u32>,
    count: Buf<i32>,
    chunks: usize,
}

impl TopkScratch {
    /// Left unset: the split top-k zeroes the histograms itself before use, writes each live chunk's counts
    /// before they are read, and the other variants use neither.
    pub fn new(gpu: &Gpu, q: usize, stride: usize) -> Result<TopkScratch, CudaError> {
        let chunks = stride.div_ceil(TOPK_CHUNK).max(1);
        Ok(TopkScratch { hist: Buf::uninit(gpu, q * 4 * 256)?, count: Buf::uninit(gpu, q * chunks * 2)?, chunks })
    }
}

/// The selected cells of each query: ascending ids at `out[q·out_stride ..]`, their number in `count[q]`.
#[allow(clippy::too_many_arguments)]
pub fn topk(
    gpu: &Gpu,
    v: TopkVariant,
    scores: &Buf<f32>,
    stride: usize,
    n_cells: &Buf<i32>,
    top_k: usize,
    kpool: usize,
    out: &Buf<u32>,
    out_stride: usize,
    count: &Buf<i32>,
    q: usize,
    scratch: &mut TopkScratch,
) -> Result<(), CudaError> {
    check_q(q)?;
    if v == TopkVariant::Split {
        return topk_split(gpu, scores, stride, n_cells, top_k, kpool, out, out_stride, count, q, scratch);
    }
    if v == TopkVariant::Cluster {
        if gpu.arch.0 < 9 {
            return Err(CudaError::Shape("the cluster top-k needs sm_90 or later".into()));
        }
        // Each CTA keeps its eighth of the keys in shared memory after the first pass, when it fits.
        let per = stride.div_ceil(8);
        let smem = per * 4;
        let in_smem = smem <= 160 * 1024;
        let f = gpu.function(&crate::ops::sources::QSA_FILE, "qsa_topk_cluster")?;
        // Static shared memory (33 KB) plus this must fit: always allow the dynamic size.
        if in_smem {
            use crate::runtime::error::Check;
            use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
            f.set_attribute(MAX_SMEM, smem as i32).check("allowing the cluster top-k its shared memory")?;
        }
        let cfg = LaunchConfig {
            grid_dim: (8, q as u32, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: if in_smem { smem as u32 } else { 0 },
        };
        let args = [
            Arg::Ptr(scores.ptr(gpu)),
            Arg::I32(stride as i32),
            Arg::Ptr(n_cells.ptr(gpu)),
            Arg::I32(top_k as i32),
            Arg::I32(kpool as i32),
            Arg::Ptr(out.ptr(gpu)),
            Arg::I32(out_stride as i32),
            Arg::Ptr(count.ptr(gpu)),
            Arg::I32(in_smem as i32),
        ];
        return launch(gpu, &f, "qsa_topk_cluster", cfg, &args);
    }
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
    launch(gpu, &gpu.function(&crate::ops::sources::QSA_FILE, "qsa_topk_wide")?, "qsa_topk_wide", cfg, &args)
}

fn check_q(q: usize) -> Result<(), CudaError> {
    if q == 0 || q > MAX_Q {
        return Err(CudaError::Shape(format!("a QSA selection takes 1..={MAX_Q} queries, not {q}")));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn topk_split(
    gpu: &Gpu,
    scores: &Buf<f32>,
    stride: usize,
    n_cells: &Buf<i32>,
    top_k: usize,
    kpool: usize,
    out: &Buf<u32>,
    out_stride: usize,
    count: &Buf<i32>,
    q: usize,
    s: &mut TopkScratch,
) -> Result<(), CudaError> {
    if s.chunks < stride.div_ceil(TOPK_CHUNK) || s.hist.len() < q * 1024 {
        return Err(CudaError::Shape("top-k scratch too small for this call".into()));
    }
    s.hist.zero(gpu)?;
    let grid = (s.chunks as u32, q as u32, 1);
    let cfg = LaunchConfig { grid_dim: grid, block_dim: (512, 1, 1), shared_mem_bytes: 0 };
    let common = [
        Arg::Ptr(scores.ptr(gpu)),
        Arg::I32(stride as i32),
        Arg::Ptr(n_cells.ptr(gpu)),
        Arg::I32(top_k as i32),
        Arg::I32(kpool as i32),
    ];
    let f = gpu.function(&crate::ops::sources::QSA_FILE, "qsa_topk_split_hist")?;
    for pass in 0..4 {
        launch(
            gpu,
            &f,
            "qsa_topk_split_hist",
            cfg,
            &[&common[..], &[Arg::Ptr(s.hist.ptr(gpu)), Arg::I32(pass)]].concat(),
        )?;
    }
    let f = gpu.function(&crate::ops::sources::QSA_FILE, "qsa_topk_split_count")?;
    let extra = [Arg::Ptr(s.hist.ptr(gpu)), Arg::Ptr(s.count.ptr(gpu)), Arg::I32(s.chunks as i32)];
    launch(gpu, &f, "qsa_topk_split_count", cfg, &[&common[..], &extra[..]].concat())?;
    let f = gpu.function(&crate::ops::sources::QSA_FILE, "qsa_topk_split_emit")?;
    let extra = [
        Arg::Ptr(s.hist.ptr(gpu)),
        Arg::Ptr(s.count.ptr(gpu)),
        Arg::I32(s.chunks as i32),
        Arg::Ptr(out.ptr(gpu)),
        Arg::I32(out_stride as i32),
        Arg::Ptr(count.ptr(gpu)),
    ];
    launch(gpu, &f, "qsa_topk_split_emit", cfg, &[&common[..], &extra[..]].concat())
}

#[cfg(test)]
mod tests {
    use super::{ScoresVariant, TopkVariant};
    use crate::runtime::settings::Settings;

    /// The seeds' switches keep their meaning: `STRATA_SCORES_HALVE` and `STRATA_TOPK_SPLIT` pick the
    /// switched kernel at 1 and the baseline at 0, `STRATA_SM75_PERF=1` alone picks both switched ones,
    /// `STRATA_QSA_CLUSTER=1` the cluster top-k; nothing set leaves the choice to the plan.
    #[test]
    fn the_seed_switches_force_their_variants() {
        let s = |f: &dyn Fn(&mut Settings)| {
            let mut s = Settings::default();
            f(&mut s);
            (ScoresVariant::forced(&s), TopkVariant::forced(&s))
        };
        assert_eq!(s(&|_| {}), (None, None));
        assert_eq!(s(&|s| s.sm75_perf = true), (Some(ScoresVariant::Halve), Some(TopkVariant::Split)));
        let base = s(&|s| {
            s.sm75_perf = true;
            s.scores_halve = Some(false);
            s.topk_split = Some(false);
        });
        assert_eq!(base, (Some(ScoresVariant::Butterfly), Some(TopkVariant::Wide)));
        assert_eq!(s(&|s| s.topk_split = Some(true)), (None, Some(TopkVariant::Split)));
        let third = s(&|s| {
            s.qsa_cluster = true;
            s.scores_stream = true;
            s.topk_split = Some(false);
        });
        assert_eq!(third, (Some(ScoresVariant::Stream), Some(TopkVariant::Cluster)));
    }
}
