//! A prompt window's routed experts grouped by expert, where the whole model is on the card: a window
//! longer than the kernels' tile of 8 tokens gives each expert its slots of the whole window at once, so
//! each piece of an expert's rows is unpacked once for up to 8 of its slots, whose integer sums one int8
//! tensor-core tile makes (a window of 256 tokens puts about 5 slots on each of 512 experts; tiles of 8
//! tokens about 1.1).
//!
//! 1. The routing and the shared expert, tile by tile (the dense kernels take 8 tokens).
//! 2. `moe_group_plan` (kernels/moe.cu) cuts each expert's slots into groups of at most [`GROUP`].
//! 3. The window's inputs quantized once; the gate and up products with the activation over the groups
//!    (qdot.cu's `_g_grouped_glu`), the activations quantized once, the down products over the groups
//!    (`_g_grouped`), each slot's output at its place.
//! 4. The combination, as ever. Each (row, slot) value is § qdot's sum in its order, made alone, so the
//!    window gives the bits of its tiles (docs/ARITHMETIC.md § qdot).
//!
//! A placed block's prompt window (ops/moe/window.rs) takes the same products for the slots its cache
//! holds, grouped by cache slot.
//!
//! A pass is recorded before it runs, so the number of groups launched is a bound ([`group_bound`]);
//! the groups past the plan's last find no expert and end at once.

use super::{combine, route_tiles, MoeGpu, Routed};
use crate::ops::matvec::MAX_T;
use crate::ops::qdot;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use cudarc::driver::LaunchConfig;

/// Slots a group holds (MG_GROUP in moe.cu, QG_GROUP in qdot.cu: the tile's 8 columns).
pub const GROUP: usize = 8;
/// The plan kernel's bound on experts (MG_MAX_E in moe.cu).
const MAX_EXPERTS: usize = 1024;
/// Slots a window may have here: far past any window's (256 tokens × 64 experts), a check on the ints.
const MAX_SLOTS: usize = 1 << 16;

/// The most groups `m` slots over `e` experts make: each chosen expert's ⌈c/8⌉, whose sum is at most
/// (m + 7·d) / 8 for d ≤ min(e, m) experts chosen.
pub fn group_bound(m: usize, e: usize) -> usize {
    (m + (GROUP - 1) * e.min(m)) / GROUP
}

/// Whether `w`'s MoE over a window of `t` tokens runs grouped here: `STRATA_MOE_GROUPED=1` and [`can`].
pub fn fits(gpu: &Gpu, w: &MoeGpu, t: usize) -> bool {
    gpu.settings.moe_grouped && can(gpu, w, t)
}

/// Whether `w`'s MoE over a window of `t` tokens can run grouped: a window past one tile, every expert on
/// the card, [`can_products`] (the parity tool runs it whatever the setting).
pub fn can(gpu: &Gpu, w: &MoeGpu, t: usize) -> bool {
    let (e, k, _, _, _) = w.dims;
    t > MAX_T && w.placed.is_none() && can_products(gpu, w, e) && t * k <= MAX_SLOTS
}

/// The block's output for the window's inputs `x` (t rows of n) and the chosen experts (t·k ids), as
/// [`super::moe`] gives them tile by tile. Only where [`can`].
pub fn moe_grouped(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<(Buf<f32>, Buf<i32>), CudaError> {
    if !can(gpu, w, t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens this block cannot take grouped")));
    }
    let (e, k, f, _, n) = w.dims;
    let m = t * k;
    // 1. The routing and the shared expert.
    let Routed { ids, weights, sg, shared } = route_tiles(gpu, w, x, t)?;
    // 2 and 3. The groups and the experts' products, each slot's at its place.
    let (h, eo) = (Buf::<f32>::uninit(gpu, m * f)?, Buf::<f32>::uninit(gpu, m * n)?);
    products(gpu, w, (x, t), (&ids, e), (&h, &eo))?;
    // 4. The combination.
    let y = Buf::<f32>::uninit(gpu, t * n)?;
    combine(gpu, (&eo, &weights, &shared, &sg), (n, k, t), &y)?;
    Ok((y, ids))
}

/// Whether [`products`] can take `w`'s experts over ids below `experts`: the GLU launch's shapes, § qdot
/// experts whose gathers can take tensor-core tiles, within the plan kernel's bounds.
pub fn can_products(gpu: &Gpu, w: &MoeGpu, experts: usize) -> bool {
    gpu.settings.glu
        && w.gate.m.same_shape(&w.up.m)
        && w.gate.stride == w.up.stride
        && qdot::can_group(gpu, &w.gate.m)
        && qdot::can_group(gpu, &w.down.m)
        && experts <= MAX_EXPERTS
}

/// The experts' products of a window's slots grouped by expert: slot ts's expert is `ids[ts]` (of
/// `w`'s stacked gate, up and down matrices, below `experts`; −1: none, its rows left alone), its input
/// token ts / k's of `x` (t tokens); its activation into `h[ts]` (f values) and its output into `eo[ts]`
/// (n values), as the gathers of a tile make them. Only where [`can_products`].
pub fn products(
    gpu: &Gpu,
    w: &MoeGpu,
    (x, t): (&Buf<f32>, usize),
    (ids, experts): (&Buf<i32>, usize),
    (h, eo): (&Buf<f32>, &Buf<f32>),
) -> Result<(), CudaError> {
    let (_, k, f, _, n) = w.dims;
    let m = t * k;
    if !can_products(gpu, w, experts) || m > MAX_SLOTS || h.len() < m * f || eo.len() < m * n {
        return Err(CudaError::Shape(format!("grouped experts' products of {m} slots over {experts} experts")));
    }
    let bound = group_bound(m, experts);
    let (gexp, gslots) = (Buf::<i32>::uninit(gpu, bound)?, Buf::<i32>::uninit(gpu, GROUP * bound)?);
    plan(gpu, (ids, m, experts), (&gexp, &gslots, bound))?;
    let groups = (&gexp, &gslots, bound);
    let xq = qdot::quantize_vectors(gpu, &w.gate.m, x, t)?;
    let (gate, up) = ((&*w.gate.m, w.gate.gather(f)), (&*w.up.m, w.up.gather(f)));
    qdot::grouped(gpu, gate, Some(up), (&xq, t, k), groups, h)?;
    // Every slot's activation quantized (a slot with no expert here quantizes what its row holds, which
    // no group reads).
    let hq = qdot::quantize_vectors(gpu, &w.down.m, h, m)?;
    qdot::grouped(gpu, (&w.down.m, w.down.gather(n)), None, (&hq, m, 1), groups, eo)
}

/// `moe_group_plan` over the `m` slots' experts `ids` (of `e`): `bound` groups' experts and slots.
fn plan(
    gpu: &Gpu,
    (ids, m, e): (&Buf<i32>, usize, usize),
    (gexp, gslots, bound): (&Buf<i32>, &Buf<i32>, usize),
) -> Result<(), CudaError> {
    if ids.len() < m || e > MAX_EXPERTS || gexp.len() < bound || gslots.len() < GROUP * bound {
        return Err(CudaError::Shape(format!("a group plan of {m} slots over {e} experts")));
    }
    let i = |v: usize| Arg::I32(v as i32);
    let p = |b: &Buf<i32>| Arg::Ptr(b.ptr(gpu));
    let f = gpu.function(&crate::ops::sources::MOE_FILE, "moe_group_plan")?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
    launch(gpu, &f, "moe_group_plan", cfg, &[p(ids), i(m), i(e), i(bound), p(gexp), p(gslots)])
}

#[cfg(test)]
mod tests {
    use super::{group_bound, GROUP};
    use strata_gguf::SplitMix64;

    /// However the slots fall on the experts, their groups (each chosen expert's ⌈c/8⌉) stay within the
    /// bound the pass is recorded with, and the bound is reached where every expert takes one slot.
    #[test]
    fn groups_of_any_routing_fit_the_bound() {
        let mut rng = SplitMix64::new(0x6a0);
        for round in 0..500 {
            let e = 1 + rng.next_u64() as usize % 1024;
            let m = 1 + rng.next_u64() as usize % 3000;
            // Skewed in odd rounds (a few experts take most slots), even otherwise.
            let counts = super::super::random_counts(&mut rng, e, m, round % 2 == 1);
            let groups: usize = counts.iter().map(|c| c.div_ceil(GROUP)).sum();
            assert!(groups <= group_bound(m, e), "round {round}: {groups} groups past {}", group_bound(m, e));
        }
        assert_eq!(group_bound(512, 512), 512, "one slot an expert: a group each");
        assert_eq!(group_bound(2560, 512), (2560 + 7 * 512) / 8);
    }
}
