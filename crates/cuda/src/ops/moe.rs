//! Host side of kernels/moe.cu: the MoE of spec §7 for a window of T = 1..8 tokens on the device, the twin
//! of strata_model::layers::moe (the same bits).

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use strata_gguf::{GgmlType, TensorBytes};
use strata_model::ops::matvec::Matrix;
use strata_model::weights::{MoeWeights, Stacked};

use crate::ops::layout::Layouts;
use crate::ops::matvec::{
    matvec, matvec_gather, matvec_gather_combine, matvec_gather_glu, matvec_gather_two, matvec_two, Gather, MatrixGpu,
    MAX_T,
};
use crate::ops::misses::{MissBox, StreamAsk};
use crate::ops::variants::Variants;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

mod grouped;
mod guess;
mod window;
pub use grouped::{can as grouped_can, fits as grouped_fits, moe_grouped};
pub use guess::{guess, guess_second};
pub use window::{
    assign, chunk_bound, fits as window_fits, moe_window, Place, Plan, Sizes, Staging, CHUNK_SLOTS, STAGED,
};

/// A stacked projection of the experts on the device.
struct StackedGpu {
    /// Shared by the gate and the up halves of a fused `ffn_gate_up_exps` (uploaded once).
    m: std::sync::Arc<MatrixGpu>,
    stride: usize,
    offset: usize,
}

impl StackedGpu {
    fn upload(gpu: &Gpu, s: &Stacked, lay: &Layouts) -> Result<StackedGpu, CudaError> {
        Ok(StackedGpu {
            m: std::sync::Arc::new(MatrixGpu::upload_experts(gpu, &s.m, lay)?),
            stride: s.stride,
            offset: s.offset,
        })
    }

    /// The gathers' view of one expert's `rows` rows.
    fn gather(&self, rows: usize) -> Gather {
        Gather { stride: self.stride, offset: self.offset, rows }
    }

    /// `s` viewing the same tensor as `other` (a fused file's up half beside its gate half) shares its
    /// device copy; else its own upload.
    fn upload_beside(
        gpu: &Gpu,
        s: &Stacked,
        other: (&Stacked, &StackedGpu),
        lay: &Layouts,
    ) -> Result<StackedGpu, CudaError> {
        let (a, b) = (&s.m.bytes[..], &other.0.m.bytes[..]);
        if std::ptr::eq(a, b) && s.m.ty == other.0.m.ty {
            return Ok(StackedGpu { m: other.1.m.clone(), stride: s.stride, offset: s.offset });
        }
        StackedGpu::upload(gpu, s, lay)
    }
}

/// The experts `held` of a stacked projection, in that order, then `streams` empty slots: the card's cache
/// of them, laid out as the file's stacked tensor of `held.len() + streams` experts (each expert's `stride`
/// rows, so a fused gate/up tensor's halves keep their offsets), for the gathers to run over unchanged
/// with each slot's cache index.
fn held_rows(s: &Stacked, held: &[usize], streams: usize) -> Result<Stacked, CudaError> {
    use rayon::prelude::*;
    let rows = held
        .iter()
        .map(|&e| s.expert_bytes(e).ok_or_else(|| CudaError::Shape(format!("MoE cache: expert {e} past its tensor"))));
    let rows = rows.collect::<Result<Vec<TensorBytes>, _>>()?;
    let (len, slots) = (s.stride * s.m.row_view().row_bytes(), held.len() + streams);
    // Copied on every thread: a cache of a full model's experts is tens of GB read from the file.
    let mut bytes = vec![0u8; slots * len];
    bytes.par_chunks_mut(len.max(1)).zip(&rows).for_each(|(dst, r)| dst.copy_from_slice(r));
    let m = Matrix { ty: s.m.ty, rows: slots * s.stride, cols: s.m.cols, bytes: TensorBytes::from_vec(bytes) };
    Ok(Stacked { m, stride: s.stride, offset: s.offset })
}

/// A block whose routed experts are not all on the card (docs/PLACEMENT.md): the card holds `held` (its
/// cache, a slot each) and the host computes the rest, answering through the mailbox as block `index`.
pub struct Placement {
    pub held: Vec<usize>,
    pub index: usize,
    pub mailbox: Arc<MissBox>,
    /// Stream slots, where the card can read the experts from the host's locked pages.
    pub stream: Option<StreamFrom>,
}

/// A block's stream slots (docs/PLACEMENT.md): `slots` cache slots past the held ones that each request
/// fills with experts it does not hold, brought over the bus from the host's locked pages (miss_stream)
/// and computed by the card's kernels like the held ones. `src`: each projection's card address of
/// expert 0's bytes (gate, up, down; it may lie before the locked pages, which hold experts lo..hi only;
/// 0 for a fused gate/up tensor's up half, copied with the gate half). `guesses`: slots past the stream
/// slots that the block's guessed experts fill before its router runs (ops/moe/guess.rs), the last
/// `second` of them by a second guess at its mixer ([`guess_second`]).
#[derive(Clone, Copy, Debug)]
pub struct StreamFrom {
    pub slots: usize,
    pub guesses: usize,
    pub second: usize,
    pub src: [u64; 3],
    pub lo: usize,
    pub hi: usize,
}

/// One projection of an expert on its way into a cache slot: where on the card, its rows as the file
/// holds them, and whether the card's layout pairs their Q2_0 blocks ([`crate::ops::matrix::pair_q2_0_blocks`]).
pub struct SlotCopy {
    pub dst: u64,
    pub rows: TensorBytes,
    pub pairs: bool,
}

/// A placed block on the card: its residency table (each expert's cache slot, −1 where the host
/// computes it) and its mailbox.
struct Placed {
    index: usize,
    /// Slots of the cache (the stream slots come after them).
    held: usize,
    slot_of: Buf<i32>,
    mailbox: Arc<MissBox>,
    /// The stream slots, and the table of their experts miss_ask writes for miss_stream.
    stream: Option<(StreamFrom, Buf<i32>)>,
    /// The guess slots' table of experts (miss_guess writes it; −1 for none), where the block has any.
    guessed: Option<Buf<i32>>,
    /// With `STRATA_ASK_MISSES_ONLY`: the block's routings counted on the card (an entry an expert,
    /// taken by the cache's ranking after each pass) and whether the last request skipped the host.
    counted: Option<(Buf<u32>, Buf<i32>)>,
}

/// A MoE block's weights on the device.
pub struct MoeGpu {
    /// Experts E, used k, expert width f, shared width fs, n.
    pub dims: (usize, usize, usize, usize, usize),
    router: MatrixGpu,
    gate: StackedGpu,
    up: StackedGpu,
    down: StackedGpu,
    gate_sh: MatrixGpu,
    up_sh: MatrixGpu,
    down_sh: MatrixGpu,
    sgate: MatrixGpu,
    /// How the shared expert's gate logit is made: by the routing warp from an F32 (1) or BF16 (2) row of
    /// the input's width, or (0) by a product of its own.
    sg_kind: i32,
    /// Where the experts are when not all on the card (then gate, up and down hold the cache).
    placed: Option<Placed>,
}

/// The most experts the router kernels hold: two chunks of 8 a lane (ROUTE_CHUNKS in moe.cu); moe_route_block
/// holds as many.
const ROUTE_MAX_EXPERTS: usize = 2 * 8 * 32;
/// The routing warps of moe_route_block (ROUTE_WARPS in moe.cu).
const ROUTE_BLOCK_WARPS: usize = 7;

impl MoeGpu {
    /// The block's weights for k experts a token of width f, run in `v`'s layouts.
    pub fn upload(
        gpu: &Gpu,
        w: &MoeWeights,
        (k, f): (usize, usize),
        v: &Variants,
        place: Option<Placement>,
    ) -> Result<MoeGpu, CudaError> {
        let lay = &v.layouts;
        let (e, n, fs) = (w.router.rows, w.router.cols, w.gate_shexp.rows);
        if k == 0 || k > 64 || k > e {
            return Err(CudaError::Shape(format!("MoE: {k} experts used of {e} (at most 64)")));
        }
        if e > ROUTE_MAX_EXPERTS {
            return Err(CudaError::Shape(format!(
                "MoE: {e} experts; the GPU router holds at most {ROUTE_MAX_EXPERTS} (kernels/moe.cu)"
            )));
        }
        // Placed: the cache's experts only (at least one: a slot the host computes reads slot 0's rows,
        // and miss_take overwrites what they give).
        let held = |s: &Stacked, p: &Placement| held_rows(s, &p.held, p.stream.map_or(0, |st| st.slots + st.guesses));
        let (gate_s, up_s, down_s) = match &place {
            None => (w.gate_exps.clone(), w.up_exps.clone(), w.down_exps.clone()),
            Some(p) if p.held.is_empty() || p.held.iter().any(|&x| x >= e) => {
                return Err(CudaError::Shape(format!("MoE: a cache of experts {:?} of {e}", p.held)));
            }
            Some(p) => {
                let gate = held(&w.gate_exps, p)?;
                // A fused gate/up tensor stays one matrix: the up half shares the gate half's copy.
                let same = std::ptr::eq(&w.gate_exps.m.bytes[..], &w.up_exps.m.bytes[..]);
                let up = if same { Stacked { offset: w.up_exps.offset, ..gate.clone() } } else { held(&w.up_exps, p)? };
                (gate, up, held(&w.down_exps, p)?)
            }
        };
        let placed = match place {
            None => None,
            Some(p) => {
                let mut slot_of = vec![-1i32; e];
                for (slot, &x) in p.held.iter().enumerate() {
                    slot_of[x] = slot as i32;
                }
                let stream = match p.stream {
                    Some(st) if st.slots > 0 && st.lo < st.hi => {
                        Some((st, Buf::from_host(gpu, &vec![-1i32; st.slots])?))
                    }
                    _ => None,
                };
                let guessed = match &stream {
                    Some((st, _)) if st.guesses > 0 => Some(Buf::from_host(gpu, &vec![-1i32; st.guesses])?),
                    _ => None,
                };
                Some(Placed {
                    index: p.index,
                    held: p.held.len(),
                    slot_of: Buf::from_host(gpu, &slot_of)?,
                    mailbox: p.mailbox,
                    stream,
                    guessed,
                    counted: match gpu.settings.ask_misses_only {
                        true => Some((Buf::zeros(gpu, e)?, Buf::zeros(gpu, 1)?)),
                        false => None,
                    },
                })
            }
        };
        let gate = StackedGpu::upload(gpu, &gate_s, lay)?;
        Ok(MoeGpu {
            dims: (e, k, f, fs, n),
            router: MatrixGpu::upload(gpu, &w.router, lay)?,
            up: StackedGpu::upload_beside(gpu, &up_s, (&gate_s, &gate), lay)?,
            gate,
            down: StackedGpu::upload(gpu, &down_s, lay)?,
            gate_sh: MatrixGpu::upload(gpu, &w.gate_shexp, lay)?,
            up_sh: MatrixGpu::upload(gpu, &w.up_shexp, lay)?,
            down_sh: MatrixGpu::upload(gpu, &w.down_shexp, lay)?,
            sgate: MatrixGpu::upload(gpu, &w.shexp_gate, lay)?,
            sg_kind: match (w.shexp_gate.ty, w.shexp_gate.rows, w.shexp_gate.cols) {
                (GgmlType::F32, 1, c) if c == n => 1,
                (GgmlType::BF16, 1, c) if c == n => 2,
                _ => 0,
            },
            placed,
        })
    }
}

impl MoeGpu {
    /// The copies that put expert `e` of `w` (this block's weights on the host) into slot `slot` of a
    /// placed block's cache: each projection's device address and its rows as the file holds them (a
    /// fused gate/up tensor once). An error for a block that is not placed or a slot past its cache.
    pub fn slot_copies(&self, gpu: &Gpu, w: &MoeWeights, slot: usize, e: usize) -> Result<Vec<SlotCopy>, CudaError> {
        let held = self.placed.as_ref().map_or(0, |p| p.held);
        if slot >= held || e >= self.dims.0 {
            return Err(CudaError::Shape(format!("MoE cache: expert {e} into slot {slot} of {held}")));
        }
        let mut out = Vec::with_capacity(3);
        let shared_up = Arc::ptr_eq(&self.gate.m, &self.up.m);
        for (dev, host) in [(&self.gate, &w.gate_exps), (&self.up, &w.up_exps), (&self.down, &w.down_exps)] {
            if shared_up && std::ptr::eq(dev, &self.up) {
                continue;
            }
            let rows = host.expert_bytes(e);
            let rows = rows.ok_or_else(|| CudaError::Shape(format!("MoE cache: expert {e} past its tensor")))?;
            out.push(SlotCopy { dst: dev.m.ptr(gpu) + (slot * rows.len()) as u64, rows, pairs: dev.m.pairs });
        }
        Ok(out)
    }

    /// Expert `e`'s entry of a placed block's residency table set to `slot` (None: the host computes
    /// it), in stream order: passes launched after it see it. Not while a step is being recorded.
    pub fn set_resident(&self, gpu: &Gpu, e: usize, slot: Option<usize>) -> Result<(), CudaError> {
        let Some(p) = &self.placed else {
            return Err(CudaError::Shape("MoE cache: the block is not placed".into()));
        };
        if gpu.recording() || e >= self.dims.0 || slot.is_some_and(|s| s >= p.held) {
            return Err(CudaError::Shape(format!("MoE cache: expert {e} to slot {slot:?} of {}", p.held)));
        }
        let value = slot.map_or(-1, |s| s as i32) as u32;
        let at = p.slot_of.ptr(gpu) + 4 * e as u64;
        // SAFETY: one word inside the table, on the device's own stream.
        unsafe { cudarc::driver::sys::cuMemsetD32Async(at, value, 1, gpu.stream.cu_stream()) }
            .result()
            .map_err(|err| CudaError::Driver { what: "setting a cache slot".into(), err })
    }
}

impl MoeGpu {
    /// A placed block's guess table (ops/moe/guess.rs): the experts in its guess slots, −1 for none;
    /// None where it has no guess slots. Between passes.
    pub fn guessed(&self, gpu: &Gpu) -> Result<Option<Vec<i32>>, CudaError> {
        match self.placed.as_ref().and_then(|p| p.guessed.as_ref()) {
            Some(g) => Ok(Some(g.read(gpu, g.len())?)),
            None => Ok(None),
        }
    }

    /// The routings a placed block counted on the card since the last call (`STRATA_ASK_MISSES_ONLY`),
    /// an entry an expert, and the counts cleared; None where the host counts them. Between passes.
    pub fn take_counts(&self, gpu: &Gpu) -> Result<Option<Vec<u32>>, CudaError> {
        let Some((counts, _)) = self.placed.as_ref().and_then(|p| p.counted.as_ref()) else { return Ok(None) };
        if gpu.recording() {
            return Err(CudaError::Shape("MoE cache: routing counts taken inside a step".into()));
        }
        let v = counts.read(gpu, self.dims.0)?;
        counts.zero(gpu)?;
        Ok(Some(v))
    }
}

fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// The block's output for the window's inputs `x` (T rows of n); also the chosen experts (T·k ids).
pub fn moe(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<(Buf<f32>, Buf<i32>), CudaError> {
    moe_then(gpu, w, x, t, None)
}

/// [`moe`], and with `next` (`STRATA_GUESS_EARLY`) the next block's experts guessed from this block's
/// input once its own misses are on their way (ops/moe/guess.rs), a stage before that block's mixer.
pub fn moe_then(
    gpu: &Gpu,
    w: &MoeGpu,
    x: &Buf<f32>,
    t: usize,
    next: Option<&MoeGpu>,
) -> Result<(Buf<f32>, Buf<i32>), CudaError> {
    let (_, k, f, _, n) = w.dims;
    let p = moe_hidden(gpu, w, x, t, next)?;
    let y = Buf::<f32>::uninit(gpu, t * n)?;
    let down = w.down.gather(n);
    let finish_shared = || match &p.shared_h {
        Some(hs) => matvec(gpu, &w.down_sh, hs, &p.shared, t),
        None => Ok(()),
    };
    // The routed experts' down products and the combination in one launch (matvec.cu's
    // `_gather_combine`: the same sums, +1.9% at depth 1,024 in speed-9) unless `STRATA_DOWN_COMBINE=0`.
    if let (Some(pl), Some(cache_ids)) = (&w.placed, &p.cache_ids) {
        // The card's slots into eo over its cache, the host's written over theirs, then the combination.
        let eo = Buf::uninit(gpu, t * k * n)?;
        matvec_gather(gpu, &w.down.m, down, &p.h, (k * f, f), &eo, cache_ids, (t, k))?;
        pl.mailbox.take(gpu, t, &eo, pl.counted.as_ref().map(|(_, skip)| skip))?;
        finish_shared()?;
        gpu.join()?;
        combine(gpu, (&eo, &p.weights, &p.shared, &p.sg), (n, k, t), &y)?;
    } else if gpu.settings.down_combine && k <= 32 {
        finish_shared()?;
        gpu.join()?;
        let mix = (&p.weights, &p.shared, &p.sg);
        matvec_gather_combine(gpu, &w.down.m, down, &p.h, (k * f, f), &p.ids, (t, k), mix, &y)?;
    } else {
        let eo = Buf::uninit(gpu, t * k * n)?;
        matvec_gather(gpu, &w.down.m, down, &p.h, (k * f, f), &eo, &p.ids, (t, k))?;
        finish_shared()?;
        gpu.join()?;
        combine(gpu, (&eo, &p.weights, &p.shared, &p.sg), (n, k, t), &y)?;
    }
    Ok((y, p.ids))
}

/// The blocks a projection's copy takes when `experts` experts are copied beside other work: the
/// `STRATA_SIDE_COPY_BLOCKS` shared over their projections (the copies wait on the bus, not the SMs, and
/// the work beside them needs the SMs; a copy as wide as its chunks would hold them all).
fn beside_width(gpu: &Gpu, experts: usize) -> usize {
    (gpu.settings.side_copy_blocks / (3 * experts.max(1))).max(1)
}

/// The stream slots' experts (named by miss_ask in `of`, as many as it holds) copied from the host's
/// locked pages into slots `first..` of the matrices at `dst` (gate, up, down: the cache's, past its held
/// ones, or a window's staging area), in the card's layout (misses.cu's `miss_stream`). `width`: the
/// most blocks a slot's projection takes (each loops over its share of the bytes): as many as its chunks
/// where nothing runs beside the copies, fewer where they share the card with other work.
fn stream_in(
    gpu: &Gpu,
    w: &MoeGpu,
    (st, of): (&StreamFrom, &Buf<i32>),
    (dst, first): ([u64; 3], usize),
    width: usize,
) -> Result<(), CudaError> {
    let shared_up = Arc::ptr_eq(&w.gate.m, &w.up.m);
    let projs = [&w.gate, &w.up, &w.down];
    let len = |i: usize| if i == 1 && shared_up { 0 } else { projs[i].stride * projs[i].m.row_bytes() };
    let pairs = (0..3).filter(|&i| projs[i].m.pairs).fold(0, |bits, i| bits | 1 << i);
    let longest = (0..3).map(len).max().unwrap_or(0);
    const CHUNK: usize = 36 * 128; // STREAM_CHUNK in misses.cu
    let cfg = LaunchConfig {
        grid_dim: (longest.div_ceil(CHUNK).clamp(1, width.clamp(1, 256)) as u32, of.len() as u32, 3),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_stream")?;
    let src = st.src.map(Arg::Ptr);
    let lens = [0, 1, 2].map(|i| Arg::Ptr(len(i) as u64)); // 64-bit lengths in the pointers' slots
    let args =
        [&[Arg::Ptr(of.ptr(gpu)), Arg::I32(first as i32)][..], &src, &dst.map(Arg::Ptr), &lens, &[Arg::I32(pairs)]]
            .concat();
    launch(gpu, &f, "miss_stream", cfg, &args)
}

/// A long window's routing and shared expert ([`route_tiles`]): each slot's expert and weight, each token's
/// shared gate logit and shared expert output.
struct Routed {
    ids: Buf<i32>,
    weights: Buf<f32>,
    sg: Buf<f32>,
    shared: Buf<f32>,
}

/// The routing and the shared expert of a window of `t` tokens, tile by tile (the dense kernels take 8
/// tokens): the first part of the long windows' MoE (ops/moe/window.rs, ops/moe/grouped.rs).
fn route_tiles(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<Routed, CudaError> {
    let (_, k, _, fs, n) = w.dims;
    let (ids, weights) = (Buf::<i32>::uninit(gpu, t * k)?, Buf::<f32>::uninit(gpu, t * k)?);
    let (sg, shared) = (Buf::<f32>::uninit(gpu, t)?, Buf::<f32>::uninit(gpu, t * n)?);
    for (first, tt) in crate::ops::matvec::tiles(t) {
        let xt = x.view(gpu, first * n, tt * n)?;
        let sgt = sg.view(gpu, first, tt)?;
        route(gpu, w, &xt, tt, (&ids.view(gpu, first * k, tt * k)?, &weights.view(gpu, first * k, tt * k)?, &sgt))?;
        let (gs, us, hs) = (Buf::uninit(gpu, tt * fs)?, Buf::uninit(gpu, tt * fs)?, Buf::uninit(gpu, tt * fs)?);
        shared_expert(gpu, w, (&xt, tt), (&gs, &us, &hs), Some(&shared.view(gpu, first * n, tt * n)?), &sgt)?;
    }
    Ok(Routed { ids, weights, sg, shared })
}

/// The shared expert of the `t` tokens `x`: its gate and up products into `gs` and `us`; with `out`, its
/// activation into `hs` and its output into `out` (without, the routed experts' activation launch makes
/// `hs`, and the down product follows it); its gate logit into `sg` where that is a product of its own
/// (else the routing makes it).
fn shared_expert(
    gpu: &Gpu,
    w: &MoeGpu,
    (x, t): (&Buf<f32>, usize),
    (gs, us, hs): (&Buf<f32>, &Buf<f32>, &Buf<f32>),
    out: Option<&Buf<f32>>,
    sg: &Buf<f32>,
) -> Result<(), CudaError> {
    matvec_two(gpu, (&w.gate_sh, gs), (&w.up_sh, us), x, t)?;
    if let Some(out) = out {
        act(gpu, (gs, us, hs), t * w.dims.3)?;
        matvec(gpu, &w.down_sh, hs, out, t)?;
    }
    if w.sg_kind == 0 {
        matvec(gpu, &w.sgate, x, sg, t)?;
    }
    Ok(())
}

/// `h = silu(g)·u` over `len` values (moe.cu's `moe_act`, with no second part).
fn act(gpu: &Gpu, (g, u, h): (&Buf<f32>, &Buf<f32>, &Buf<f32>), len: usize) -> Result<(), CudaError> {
    let f = gpu.function(&crate::ops::sources::MOE_FILE, "moe_act")?;
    let ptrs = [g.ptr(gpu), u.ptr(gpu), h.ptr(gpu)].map(Arg::Ptr);
    let args = [&ptrs[..], &[Arg::I32(len as i32)], &ptrs, &[Arg::I32(0)]].concat();
    launch(gpu, &f, "moe_act", elementwise(len), &args)
}

/// `y` from the slots' outputs `eo`, their weights (rank order), the shared expert's output and its gate
/// logit, for t tokens of n values and k slots (moe.cu's `moe_combine`).
fn combine(
    gpu: &Gpu,
    (eo, weights, shared, sg): (&Buf<f32>, &Buf<f32>, &Buf<f32>, &Buf<f32>),
    (n, k, t): (usize, usize, usize),
    y: &Buf<f32>,
) -> Result<(), CudaError> {
    let i = |v: usize| Arg::I32(v as i32);
    let f = gpu.function(&crate::ops::sources::MOE_FILE, "moe_combine")?;
    let args = [eo.ptr(gpu), weights.ptr(gpu), shared.ptr(gpu), sg.ptr(gpu), y.ptr(gpu)].map(Arg::Ptr);
    launch(gpu, &f, "moe_combine", elementwise(t * n), &[&args[..], &[i(n), i(k), i(t)]].concat())
}

/// The block up to the routed experts' down products: the slots' activations `h` (T·k rows of f), their
/// experts and weights, the shared expert's gate logit and its output, which is made on the side lane, or
/// (`shared_h`) is still to be made from its activation when there is no side lane.
struct Hidden {
    h: Buf<f32>,
    ids: Buf<i32>,
    /// Placed: the ids the gathers take, each slot's cache slot (else they take `ids`).
    cache_ids: Option<Buf<i32>>,
    weights: Buf<f32>,
    shared: Buf<f32>,
    shared_h: Option<Buf<f32>>,
    sg: Buf<f32>,
}

/// Everything of the block before the routed experts' down products (see [`Hidden`]).
fn moe_hidden(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize, next: Option<&MoeGpu>) -> Result<Hidden, CudaError> {
    if !(1..=MAX_T).contains(&t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens (1..=8)")));
    }
    let (_, k, f, fs, n) = w.dims;
    let i = |v: usize| Arg::I32(v as i32);
    // Buffers that a product or an elementwise kernel fills whole are left unset (no memset on the stream).
    let act = gpu.function(&crate::ops::sources::MOE_FILE, "moe_act")?;
    let ptrs = |a: &Buf<f32>, b: &Buf<f32>, c: &Buf<f32>| [a.ptr(gpu), b.ptr(gpu), c.ptr(gpu)].map(Arg::Ptr);
    // The shared expert (and its gate logit when that is a product of its own) on the step graph's side
    // lane: it reads only x and writes only its own buffers, so it runs beside the routing and the routed
    // experts (`Gpu::side`). Without a side lane it is made in order, its activation in the routed
    // experts' launch.
    let whole = gpu.side_lanes();
    let sg = Buf::<f32>::uninit(gpu, t)?;
    let (gs, us, hs, shared) =
        (Buf::uninit(gpu, t * fs)?, Buf::uninit(gpu, t * fs)?, Buf::uninit(gpu, t * fs)?, Buf::uninit(gpu, t * n)?);
    gpu.side(|| shared_expert(gpu, w, (x, t), (&gs, &us, &hs), whole.then_some(&shared), &sg))?;
    // Routing.
    let (ids, weights) = (Buf::<i32>::uninit(gpu, t * k)?, Buf::<f32>::uninit(gpu, t * k)?);
    let xq = route(gpu, w, x, t, (&ids, &weights, &sg))?;
    // Placed: the host asked for the slots the cache does not hold (it computes them while the card runs
    // its own), and the gathers run over the cache.
    let cache_ids = match &w.placed {
        Some(pl) => {
            let cache_ids = Buf::<i32>::uninit(gpu, t * k)?;
            // The experts guessed while the mixer ran are in their slots once the lane ahead is joined.
            gpu.join_ahead()?;
            let streams = pl.stream.as_ref().map(|(st, of)| StreamAsk {
                slots: st.slots,
                lo: st.lo,
                hi: st.hi,
                of,
                guessed: pl.guessed.as_ref(),
            });
            let counted = pl.counted.as_ref().map(|(c, skip)| (c, skip));
            pl.mailbox.ask(gpu, (pl.index, t, pl.held), (&ids, &pl.slot_of, x), (&cache_ids, counted), streams)?;
            if let Some((st, of)) = &pl.stream {
                let dst = [&w.gate, &w.up, &w.down].map(|p| p.m.ptr(gpu));
                stream_in(gpu, w, (st, of), (dst, pl.held), 256)?;
            }
            if let Some(next) = next {
                guess(gpu, next, x, t)?;
            }
            Some(cache_ids)
        }
        None => None,
    };
    let gather_ids = cache_ids.as_ref().unwrap_or(&ids);
    // The routed experts' gate and up of the token's input; both activations in one launch (the down
    // products follow in `moe`).
    let h = Buf::uninit(gpu, t * k * f)?;
    let (gate, up) = ((&*w.gate.m, w.gate.gather(f)), (&*w.up.m, w.up.gather(f)));
    // With the GLU kernel (the default) the routed slots' activation comes out of their gate and up
    // products' launch (no g and u in memory); with STRATA_GLU=0, g and u, then the activation with the
    // shared expert's when it is not on the side lane.
    let glu = gpu.settings.glu && matvec_gather_glu(gpu, gate, up, (x, xq.as_ref()), (n, 0), &h, gather_ids, (t, k))?;
    let shared_act = if whole { 0 } else { t * fs };
    if !glu {
        let (g, u) = (Buf::uninit(gpu, t * k * f)?, Buf::uninit(gpu, t * k * f)?);
        matvec_gather_two(gpu, (gate.0, gate.1, &g), (up.0, up.1, &u), x, (n, 0), gather_ids, (t, k))?;
        let args = [&ptrs(&g, &u, &h)[..], &[i(t * k * f)], &ptrs(&gs, &us, &hs), &[i(shared_act)]].concat();
        launch(gpu, &act, "moe_act", elementwise(t * k * f + shared_act), &args)?;
    } else if shared_act > 0 {
        let args = [&ptrs(&gs, &us, &hs)[..], &[i(shared_act)], &ptrs(&gs, &us, &hs), &[i(0)]].concat();
        launch(gpu, &act, "moe_act", elementwise(shared_act), &args)?;
    }
    Ok(Hidden { h, ids, cache_ids, weights, shared, shared_h: (!whole).then_some(hs), sg })
}

/// The router's logits, then each token's k experts and their weights (moe.cu): the product and
/// `moe_route_block`. The shared expert's gate logit comes with them when its row is F32 or
/// BF16.
fn route(
    gpu: &Gpu,
    w: &MoeGpu,
    x: &Buf<f32>,
    t: usize,
    (ids, weights, sg): (&Buf<i32>, &Buf<f32>, &Buf<f32>),
) -> Result<Option<Buf<i32>>, CudaError> {
    let (e, k, _, _, n) = w.dims;
    let i = |v: usize| Arg::I32(v as i32);
    let logits = Buf::<f32>::uninit(gpu, t * e)?;
    let outs = [logits.ptr(gpu), ids.ptr(gpu), weights.ptr(gpu)].map(Arg::Ptr);
    // The experts' input quantized in the router's launch where that is on (qdot.rs), for the GLU launch;
    // the gate and up products then quantize nothing themselves.
    let experts = w.gate.m.ty;
    let xq = if gpu.settings.glu && crate::ops::qdot::can_router_quantize(gpu, w.router.ty, experts) {
        Some(crate::ops::qdot::router_quantize(gpu, &w.router, x, &logits, t, experts)?)
    } else {
        matvec(gpu, &w.router, x, &logits, t)?;
        None
    };
    // The routing by ROUTE_BLOCK_WARPS (moe_route_block); the shared expert's gate logit by one more warp
    // when its one row is F32 or BF16.
    let name = "moe_route_block";
    let f = gpu.function(&crate::ops::sources::MOE_FILE, name)?;
    let warps = ROUTE_BLOCK_WARPS + usize::from(w.sg_kind != 0);
    let cfg = LaunchConfig { grid_dim: (t as u32, 1, 1), block_dim: (32 * warps as u32, 1, 1), shared_mem_bytes: 0 };
    let sg_args = [Arg::Ptr(w.sgate.ptr(gpu)), Arg::I32(w.sg_kind), Arg::Ptr(x.ptr(gpu)), i(n), Arg::Ptr(sg.ptr(gpu))];
    launch(gpu, &f, name, cfg, &[&outs[..], &[i(e), i(k)], &sg_args].concat())?;
    Ok(xq)
}

/// The slots a random routing of `m` slots puts on each of `e` experts (the plans' tests): even, or
/// skewed (a few experts take most).
#[cfg(test)]
fn random_counts(rng: &mut strata_gguf::SplitMix64, e: usize, m: usize, skewed: bool) -> Vec<usize> {
    let mut counts = vec![0usize; e];
    for _ in 0..m {
        let r = rng.next_u64() as usize;
        counts[if skewed { (r % e) * (r % e) / e } else { r % e }] += 1;
    }
    counts
}
