//! Host side of kernels/prefetch.cu: weights asked into the L2 ahead of the kernels that read them, while
//! the step's chain of kernels leaves the memory mostly idle. Opt-in, `STRATA_AHEAD` (a comma list):
//! - `hc`: after each HC read, the next read's three matrices, marked to be kept (evict_last);
//! - `products`: before each HC read, the dense products of the sublayer after it (those on the step's
//!   main lane first, up to `STRATA_AHEAD_MB`, by default half the card's L2), unmarked;
//! - `experts`: once the routing has chosen them, the routed experts' down rows (read two launches
//!   later, after their gate and up products).
//!
//! A prefetch changes no value: the bits are the same with any setting.

use std::sync::OnceLock;

use cudarc::driver::LaunchConfig;

use crate::buf::{launch, Arg, Buf};
use crate::device::Gpu;
use crate::error::CudaError;
use crate::matvec::{Gather, MatrixGpu};

const SRC: &str = crate::compile::PREFETCH;
/// Spans one launch takes (prefetch_spans's arguments).
const SPANS: usize = 6;

/// What `STRATA_AHEAD` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ahead {
    pub hc: bool,
    pub products: bool,
    pub experts: bool,
    /// Bytes of a sublayer's products asked for at most (None: half the card's L2).
    pub budget: Option<usize>,
}

impl Ahead {
    fn parse(list: &str, mb: Option<&str>) -> Ahead {
        let has = |w: &str| list.split(',').any(|v| v.trim() == w);
        let budget = mb.and_then(|v| v.parse::<usize>().ok()).map(|mb| mb << 20);
        Ahead { hc: has("hc"), products: has("products"), experts: has("experts"), budget }
    }

    /// The products' budget on this card.
    pub fn budget(&self, gpu: &Gpu) -> usize {
        self.budget.unwrap_or(gpu.l2_bytes / 2)
    }
}

/// The process's `STRATA_AHEAD` and `STRATA_AHEAD_MB`, read once.
pub fn ahead() -> Ahead {
    static A: OnceLock<Ahead> = OnceLock::new();
    *A.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok();
        Ahead::parse(&var("STRATA_AHEAD").unwrap_or_default(), var("STRATA_AHEAD_MB").as_deref())
    })
}

/// `spans` (device address, bytes) cut to `budget` bytes in their order: the last one kept partly.
fn within(spans: &[(u64, usize)], budget: usize) -> Vec<(u64, usize)> {
    let mut left = budget;
    let mut out = Vec::new();
    for &(p, n) in spans {
        if left == 0 {
            break;
        }
        out.push((p, n.min(left)));
        left -= n.min(left);
    }
    out
}

/// prefetch_spans over `spans` (six a launch), up to `budget` bytes; `keep` marks the lines evict_last.
pub fn prefetch(gpu: &Gpu, spans: &[(u64, usize)], budget: usize, keep: bool) -> Result<(), CudaError> {
    let spans = within(spans, budget);
    if spans.is_empty() {
        return Ok(());
    }
    let f = gpu.function("prefetch.cu", SRC, "prefetch_spans")?;
    for group in spans.chunks(SPANS) {
        let lines: usize = group.iter().map(|s| s.1.div_ceil(128)).sum();
        let mut args = Vec::with_capacity(2 * SPANS + 1);
        for k in 0..SPANS {
            let (p, n) = group.get(k).copied().unwrap_or((0, 0));
            let n = i32::try_from(n).map_err(|_| CudaError::Shape(format!("a prefetch span of {n} bytes")))?;
            args.extend([Arg::Ptr(p), Arg::I32(n)]);
        }
        args.push(Arg::I32(keep as i32));
        // Two blocks a multiprocessor at most, each thread taking several lines: a light launch on the chain.
        let blocks = (lines as u32).div_ceil(256).clamp(1, 2 * gpu.sm_count);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        launch(gpu, &f, "prefetch_spans", cfg, &args)?;
    }
    Ok(())
}

/// prefetch_experts: the rows `g` of each slot's expert in the stacked matrix `m` (slot i's expert
/// `ids[i]`), once the routing has written the ids.
pub fn experts(gpu: &Gpu, m: &MatrixGpu, g: Gather, ids: &Buf<i32>, slots: usize) -> Result<(), CudaError> {
    let row_bytes = m.cols / m.ty.block_size() * m.ty.type_size();
    let bytes = g.rows * row_bytes;
    let f = gpu.function("prefetch.cu", SRC, "prefetch_experts")?;
    let i = |v: usize| i32::try_from(v).map_err(|_| CudaError::Shape(format!("an expert of {bytes} bytes")));
    let args = [
        Arg::Ptr(m.ptr(gpu)),
        Arg::Ptr(ids.ptr(gpu)),
        Arg::I32(i(g.stride)?),
        Arg::I32(i(g.offset)?),
        Arg::I32(i(g.rows)?),
        Arg::I32(i(row_bytes)?),
    ];
    i(bytes)?;
    let blocks = (bytes.div_ceil(128) as u32).div_ceil(256).clamp(1, 8);
    let cfg = LaunchConfig { grid_dim: (blocks, slots as u32, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    launch(gpu, &f, "prefetch_experts", cfg, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reads_its_words() {
        let none = Ahead { hc: false, products: false, experts: false, budget: None };
        assert_eq!(Ahead::parse("", None), none);
        assert_eq!(Ahead::parse("hc", Some("8")), Ahead { hc: true, budget: Some(8 << 20), ..none });
        let all = Ahead::parse("products, hc,experts", Some("x"));
        assert!(all.hc && all.products && all.experts && all.budget.is_none());
    }

    #[test]
    fn spans_are_cut_to_the_budget_in_order() {
        assert_eq!(within(&[(0, 10), (100, 10), (200, 10)], 15), vec![(0, 10), (100, 5)]);
        assert_eq!(within(&[(0, 10)], 0), vec![]);
        assert_eq!(within(&[(0, 10), (100, 10)], 50), vec![(0, 10), (100, 10)]);
    }
}
