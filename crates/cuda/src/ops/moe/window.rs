//! A placed block's prompt window (docs/PLACEMENT.md, "Prompt windows"): a window longer than the
//! kernels' tile of 8 tokens brings each expert the card does not hold over the bus once, for every token
//! of the window that chose it, where tiles of 8 would each ask the host for theirs (a tile of 8 wants
//! about 74 distinct experts of 512, a window of 256 about 509: 1.5 misses a token instead of 6).
//!
//! 1. The routing and the shared expert, tile by tile (the dense kernels take 8 tokens).
//! 2. `miss_window_plan` (kernels/misses.cu) sorts the window's slots: those the cache holds, then chunks
//!    of at most S experts and L slots, each expert's slots in one chunk.
//! 3. The held slots' gathers over the whole window (grouped by cache slot with `STRATA_MOE_GROUPED`,
//!    ops/moe/grouped.rs), then for each chunk: its experts streamed into a
//!    staging area of S experts that every block shares ([`Staging`]: the layers run in turn), and the
//!    gathers over its list of slots reading them there.
//! 4. The few experts the bus cannot bring (outside the locked pages, or chosen by more than L slots):
//!    the host computes them, asked tile by tile through the mailbox.
//! 5. The combination, as ever: each slot's output is its expert's, by the same kernels, so the window
//!    gives the bits of its tiles, and of the whole model on the card.
//!
//! A pass is recorded before it runs, so the number of chunks is fixed by a bound, not by the routing:
//! [`chunk_bound`]; the chunks past the routing's last are empty and cost a launch each.

use std::sync::Arc;

use super::{combine, route_tiles, stream_in, MoeGpu, Routed};
use crate::ops::matrix::MatrixGpu;
use crate::ops::matvec::{matvec_gather, matvec_gather_glu, matvec_gather_glu_list, matvec_gather_list};
use crate::ops::matvec::{tiles, MAX_T};
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use cudarc::driver::LaunchConfig;

/// Slots a chunk's list holds: the blocks of each of its gathers (an expert chosen by more is the host's).
pub const CHUNK_SLOTS: usize = 128;
/// Experts a chunk brings over the bus at a time ([`Staging`]'s size): a launch of `miss_stream` with
/// more bytes in flight, and fewer chunks, than a block's 8 stream slots would give.
pub const STAGED: usize = 32;

/// The staging area of the placed prompt windows: room for [`STAGED`] experts of a block's gate, up and
/// down matrices in their card layout (a fused gate/up tensor one matrix), shared by every block of the
/// same shapes, since the layers run one after another. Two such areas with `STRATA_WINDOW_OVERLAP`: a
/// chunk's experts are then copied into one while the chunk before is computed from the other.
pub struct Staging {
    areas: Vec<Area>,
}

/// One staging area's matrices.
struct Area {
    gate: MatrixGpu,
    up: Option<MatrixGpu>,
    down: MatrixGpu,
}

impl Staging {
    /// Room for [`STAGED`] experts of `w`'s shapes, in `areas` (1 or 2) areas.
    pub fn new(gpu: &Gpu, w: &MoeGpu, areas: usize) -> Result<Staging, CudaError> {
        let fused = Arc::ptr_eq(&w.gate.m, &w.up.m);
        let area = || {
            Ok::<_, CudaError>(Area {
                gate: w.gate.m.shaped_like(gpu, STAGED * w.gate.stride)?,
                up: (!fused).then(|| w.up.m.shaped_like(gpu, STAGED * w.up.stride)).transpose()?,
                down: w.down.m.shaped_like(gpu, STAGED * w.down.stride)?,
            })
        };
        Ok(Staging { areas: (0..areas.clamp(1, 2)).map(|_| area()).collect::<Result<_, _>>()? })
    }

    /// Whether `w`'s experts fit it: the same types, widths, layouts and expert strides.
    fn fits(&self, w: &MoeGpu) -> bool {
        let same = |a: &MatrixGpu, b: &MatrixGpu, stride: usize| {
            (a.ty, a.cols, a.pairs) == (b.ty, b.cols, b.pairs) && a.layouts == b.layouts && a.rows == STAGED * stride
        };
        let fused = Arc::ptr_eq(&w.gate.m, &w.up.m);
        let area = &self.areas[0];
        same(&area.gate, &w.gate.m, w.gate.stride)
            && same(&area.down, &w.down.m, w.down.stride)
            && match &area.up {
                None => fused,
                Some(up) => !fused && same(up, &w.up.m, w.up.stride),
            }
    }
}

impl Area {
    /// The card addresses `miss_stream` writes (gate, up, down; the up half of a fused tensor travels
    /// with the gate half).
    fn dst(&self, gpu: &Gpu) -> [u64; 3] {
        [self.gate.ptr(gpu), self.up.as_ref().map_or(0, |u| u.ptr(gpu)), self.down.ptr(gpu)]
    }
}

/// The plan kernel's bounds (MW_MAX_M and MW_MAX_E in misses.cu).
const MAX_SLOTS: usize = 4096;
const MAX_EXPERTS: usize = 1024;

/// The most chunks `d` experts over `m` slots can take, at most `s` experts and `l` slots a chunk, each
/// expert's slots in one chunk, the chunks filled in turn: a chunk closes when it holds s experts (at
/// most d / s times) or when the next expert's slots do not fit; then it and the next hold more than l
/// slots together, so that happens fewer than 2m / l times.
pub fn chunk_bound(m: usize, d: usize, s: usize, l: usize) -> usize {
    d / s.max(1) + 2 * m.div_ceil(l.max(1)) + 1
}

/// Where the window's plan puts each expert the card does not hold: its chunk, its first entry in the
/// chunk's list and its stream slot; or the host's. The twin of `miss_window_plan`'s assignment (one
/// thread there), `counts` each expert's slots in the window (0 for one held or not chosen).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Place {
    Chunk { chunk: usize, first: usize, stream: usize },
    Host,
}

/// The assignment of [`Place`]s, in expert order: the experts `lo..hi` the bus can bring and chosen by at
/// most `l` slots fill chunks of at most `s` experts and `l` slots in turn, the others go to the host.
pub fn assign(counts: &[usize], (lo, hi): (usize, usize), s: usize, l: usize) -> Vec<Option<Place>> {
    let (mut chunk, mut slots, mut used) = (0, 0, 0);
    let mut out = vec![None; counts.len()];
    for (e, &n) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if e < lo || e >= hi || n > l {
            out[e] = Some(Place::Host);
            continue;
        }
        if used == s || slots + n > l {
            (chunk, slots, used) = (chunk + 1, 0, 0);
        }
        out[e] = Some(Place::Chunk { chunk, first: slots, stream: used });
        slots += n;
        used += 1;
    }
    out
}

/// Whether `w`'s MoE over a window of `t` tokens runs as one placed window here: a placed block with
/// stream slots that counts its routings on the card (`STRATA_ASK_MISSES_ONLY`), its gate and up products
/// in one GLU launch, within the plan kernel's bounds, a window past one tile, `STRATA_WINDOW_STREAM` on,
/// its experts the staging area's shapes.
pub fn fits(gpu: &Gpu, w: &MoeGpu, staging: &Staging, t: usize) -> bool {
    let (e, k, _, _, _) = w.dims;
    let Some(pl) = &w.placed else { return false };
    let glu = gpu.settings.glu && w.gate.m.same_shape(&w.up.m) && w.gate.stride == w.up.stride;
    gpu.settings.window_stream
        && t > MAX_T
        && pl.stream.is_some()
        && pl.counted.is_some()
        && glu
        && e <= MAX_EXPERTS
        && t * k <= MAX_SLOTS
        && staging.fits(w)
}

/// The block's output for the window's inputs `x` (t rows of n) and the chosen experts (t·k ids), as
/// [`super::moe`] gives them tile by tile. Only where [`fits`].
pub fn moe_window(
    gpu: &Gpu,
    w: &MoeGpu,
    staging: &Staging,
    x: &Buf<f32>,
    t: usize,
) -> Result<(Buf<f32>, Buf<i32>), CudaError> {
    let (e, k, f, _, n) = w.dims;
    let pl = w.placed.as_ref().filter(|_| fits(gpu, w, staging, t));
    let pl = pl.ok_or_else(|| CudaError::Shape(format!("a placed window of {t} tokens this block cannot take")))?;
    let ((st, _), (counts, skip)) = match (&pl.stream, &pl.counted) {
        (Some(s), Some(c)) => (s, c),
        _ => unreachable!("fits checked both"),
    };
    let m = t * k;
    // 1. The routing and the shared expert, tile by tile.
    let Routed { ids, weights, sg, shared } = route_tiles(gpu, w, x, t)?;
    // 2. The plan.
    let (s, l) = (STAGED, CHUNK_SLOTS);
    let chunks = chunk_bound(m, (st.hi - st.lo).min(e - pl.held).min(m), s, l);
    let sizes = Sizes { e, held: 0, lo: st.lo, hi: st.hi, s, chunks };
    let plan = Plan::new(gpu, m, sizes)?;
    plan.launch(gpu, (&ids, &pl.slot_of, Some(counts)), sizes)?;
    let Plan { held_ids, host_slot, chunk_of, chunk_list, chunk_ids } = plan;
    // 3. The held slots over the whole window, then each chunk's, into h and eo at each slot's place.
    let (h, eo) = (Buf::<f32>::uninit(gpu, m * f)?, Buf::<f32>::uninit(gpu, m * n)?);
    let (gate, up, down) = ((&*w.gate.m, w.gate.gather(f)), (&*w.up.m, w.up.gather(f)), w.down.gather(n));
    // The held slots grouped by their cache slot with `STRATA_MOE_GROUPED` (ops/moe/grouped.rs).
    let cache_slots = w.gate.m.rows / w.gate.stride.max(1);
    if gpu.settings.moe_grouped && super::grouped::can_products(gpu, w, cache_slots) {
        super::grouped::products(gpu, w, (x, t), (&held_ids, cache_slots), (&h, &eo))?;
    } else {
        matvec_gather_glu(gpu, gate, up, (x, None), (n, 0), &h, &held_ids, (t, k))?;
        matvec_gather(gpu, &w.down.m, down, &h, (k * f, f), &eo, &held_ids, (t, k))?;
    }
    // With two areas, chunk c + 1's copies run on the side lane while chunk c is computed on the main
    // one (the side lane forks after chunk c − 1's gathers, the last readers of its area).
    // Beside the gathers, the copies take few blocks (`STRATA_SIDE_COPY_BLOCKS`); alone, as many as they can.
    let areas = staging.areas.len();
    let stream = |c: usize, width: usize| {
        stream_in(gpu, w, (st, &chunk_of.view(gpu, c * s, s)?), (staging.areas[c % areas].dst(gpu), 0), width)
    };
    if chunks > 0 {
        stream(0, 256)?;
    }
    for c in 0..chunks {
        match areas {
            2 if c + 1 < chunks => gpu.side(|| stream(c + 1, super::beside_width(gpu, s)))?,
            2 => {}
            _ if c > 0 => stream(c, 256)?,
            _ => {}
        }
        let a = &staging.areas[c % areas];
        let (gate_s, up_s) = ((&a.gate, w.gate.gather(f)), (a.up.as_ref().unwrap_or(&a.gate), w.up.gather(f)));
        let listed = (&chunk_ids.view(gpu, c * l, l)?, &chunk_list.view(gpu, c * l, l)?);
        matvec_gather_glu_list(gpu, gate_s, up_s, x, (n, 0), &h, listed, k)?;
        matvec_gather_list(gpu, &a.down, down, &h, (k * f, f), &eo, listed, k)?;
        gpu.join()?;
    }
    // 4. The host's slots, tile by tile (a tile with none asks nothing).
    for (first, tt) in tiles(t) {
        let tile = (&ids.view(gpu, first * k, tt * k)?, &host_slot.view(gpu, first * k, tt * k)?);
        pl.mailbox.ask_window(gpu, (pl.index, tt), (tile.0, tile.1, &x.view(gpu, first * n, tt * n)?), skip)?;
        pl.mailbox.take(gpu, tt, &eo.view(gpu, first * k * n, tt * k * n)?, Some(skip))?;
    }
    // 5. The combination.
    let y = Buf::<f32>::uninit(gpu, t * n)?;
    combine(gpu, (&eo, &weights, &shared, &sg), (n, k, t), &y)?;
    Ok((y, ids))
}

/// A plan's sizes: the block's experts, the slot a chunk's first expert goes to (`held`: 0 for the
/// staging area's first), those the bus can bring (lo..hi), experts a chunk and the chunks recorded.
#[derive(Clone, Copy)]
pub struct Sizes {
    pub e: usize,
    pub held: usize,
    pub lo: usize,
    pub hi: usize,
    pub s: usize,
    pub chunks: usize,
}

/// `miss_window_plan`'s outputs for a window of m slots (kernels/misses.cu says what each holds).
pub struct Plan {
    pub held_ids: Buf<i32>,
    pub host_slot: Buf<i32>,
    pub chunk_of: Buf<i32>,
    pub chunk_list: Buf<i32>,
    pub chunk_ids: Buf<i32>,
}

impl Plan {
    pub fn new(gpu: &Gpu, m: usize, z: Sizes) -> Result<Plan, CudaError> {
        if m > MAX_SLOTS || z.e > MAX_EXPERTS || z.s > 64 {
            return Err(CudaError::Shape(format!("a window plan of {m} slots, {} experts, {} stream slots", z.e, z.s)));
        }
        let l = CHUNK_SLOTS;
        Ok(Plan {
            held_ids: Buf::uninit(gpu, m)?,
            host_slot: Buf::uninit(gpu, m)?,
            chunk_of: Buf::uninit(gpu, z.chunks * z.s)?,
            chunk_list: Buf::uninit(gpu, z.chunks * l)?,
            chunk_ids: Buf::uninit(gpu, z.chunks * l)?,
        })
    }

    /// The plan of the slots' experts `ids` (as many as `held_ids` holds) against the residency table
    /// `slot_of`, each routing counted into `counts` where given.
    pub fn launch(
        &self,
        gpu: &Gpu,
        (ids, slot_of, counts): (&Buf<i32>, &Buf<i32>, Option<&Buf<u32>>),
        z: Sizes,
    ) -> Result<(), CudaError> {
        let i = |v: usize| Arg::I32(v as i32);
        let p = |b: &Buf<i32>| Arg::Ptr(b.ptr(gpu));
        let m = self.held_ids.len();
        if ids.len() < m || slot_of.len() < z.e {
            return Err(CudaError::Shape(format!("a window plan of {m} slots over {} ids", ids.len())));
        }
        let args = [
            &[p(ids), i(m), p(slot_of), i(z.e), i(z.lo), i(z.hi), Arg::Ptr(counts.map_or(0, |c| c.ptr(gpu)))][..],
            &[i(z.s), i(CHUNK_SLOTS), i(z.chunks)],
            &[&self.held_ids, &self.host_slot, &self.chunk_of, &self.chunk_list, &self.chunk_ids].map(p),
            &[i(z.held)],
        ]
        .concat();
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_window_plan")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
        launch(gpu, &f, "miss_window_plan", cfg, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::super::random_counts;
    use super::{assign, chunk_bound, Place};
    use strata_gguf::SplitMix64;

    /// Every routing's chunks stay within the bound the pass is recorded with; each expert the bus can
    /// bring lands in one chunk whose experts and slots fit, in order; the others are the host's.
    #[test]
    fn chunks_of_any_routing_fit_the_bound() {
        let mut rng = SplitMix64::new(0x5eed);
        for round in 0..400 {
            let e = 16 + rng.next_u64() as usize % 600;
            let (s, l) = (1 + rng.next_u64() as usize % 16, 8 + rng.next_u64() as usize % 64);
            let (lo, hi) = (rng.next_u64() as usize % 3, e - rng.next_u64() as usize % 3);
            // A skewed routing some rounds (a few experts take most slots), even in others.
            let m = 1 + rng.next_u64() as usize % 3000;
            let counts = random_counts(&mut rng, e, m, round % 2 == 1);
            let placed = assign(&counts, (lo, hi), s, l);
            let d = (lo..hi).filter(|&x| counts[x] > 0 && counts[x] <= l).count();
            let bound = chunk_bound(m, d, s, l);
            let (mut slots, mut experts) = (vec![0usize; bound], vec![0usize; bound]);
            let mut last = (0, 0);
            for (x, p) in placed.iter().enumerate() {
                match *p {
                    None => assert_eq!(counts[x], 0),
                    Some(Place::Host) => assert!(x < lo || x >= hi || counts[x] > l, "expert {x}"),
                    Some(Place::Chunk { chunk, first, stream }) => {
                        assert!(chunk < bound, "round {round}: chunk {chunk} past the bound {bound}");
                        assert!((chunk, first) >= last, "in order");
                        assert_eq!((first, stream), (slots[chunk], experts[chunk]));
                        last = (chunk, first);
                        slots[chunk] += counts[x];
                        experts[chunk] += 1;
                        assert!(slots[chunk] <= l && experts[chunk] <= s);
                    }
                }
            }
        }
    }

    #[test]
    fn an_expert_chosen_by_more_slots_than_a_chunk_is_the_hosts() {
        let placed = assign(&[3, 0, 9, 2], (0, 4), 2, 8);
        assert_eq!(placed[0], Some(Place::Chunk { chunk: 0, first: 0, stream: 0 }));
        assert_eq!(placed[1], None);
        assert_eq!(placed[2], Some(Place::Host));
        assert_eq!(placed[3], Some(Place::Chunk { chunk: 0, first: 3, stream: 1 }));
        // Two experts a chunk: the third opens the next.
        let placed = assign(&[1, 1, 1], (0, 3), 2, 8);
        assert_eq!(placed[2], Some(Place::Chunk { chunk: 1, first: 0, stream: 0 }));
        // Outside the locked pages: the host's.
        assert_eq!(assign(&[1, 1], (1, 2), 2, 8)[0], Some(Place::Host));
    }
}
