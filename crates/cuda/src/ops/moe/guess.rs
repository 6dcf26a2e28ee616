//! A placed block's guessed experts (docs/PLACEMENT.md, "Guessed experts"): in a placed decode step the
//! bus carries a layer's misses only once its router has run, and stands idle while the layer's mixer
//! runs. The block's router applied to the mixer's input (known before the mixer) picks, for most tokens,
//! most of the experts the MoE's own input will pick (86–88 % of them, `strata bench routing`). So on the
//! step's lane ahead, beside the mixer, the router's top k of that input are taken (moe.cu's routing, as
//! the block routes), the first `guesses` of them the card does not hold are named (`miss_guess`), and
//! `miss_stream` brings them into the guess slots, in few blocks (`STRATA_SIDE_COPY_BLOCKS`). The block's
//! `miss_ask` then finds a slot's expert there and computes it from there like a held one. The real
//! routing still decides which experts each slot takes and the slots' weights, and a guessed expert's
//! rows are the file's bytes, so a guess changes where a slot's rows are read from, never a bit; a wrong
//! guess costs bus time the step left idle. With `STRATA_GUESS_EARLY` the guess is made a stage earlier,
//! from the block before's MoE input (ops/moe.rs `moe_then`).

use cudarc::driver::LaunchConfig;

use super::{beside_width, route, stream_in, MoeGpu};
use crate::ops::matvec::MAX_T;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The experts block `w` would pick for the `t` tokens `x` (a mixer's input) brought into its guess
/// slots, on the step's lane ahead (joined by the block's own routing, `moe_hidden`). Nothing where the
/// block has no guess slots or the window is longer than a tile.
pub fn guess(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    let Some(pl) = &w.placed else { return Ok(()) };
    let (Some((st, _)), Some(guessed)) = (&pl.stream, &pl.guessed) else { return Ok(()) };
    if !(1..=MAX_T).contains(&t) {
        return Ok(());
    }
    gpu.ahead(|| {
        let (_, k, ..) = w.dims;
        let (ids, weights, sg) =
            (Buf::<i32>::uninit(gpu, t * k)?, Buf::<f32>::uninit(gpu, t * k)?, Buf::uninit(gpu, t)?);
        route(gpu, w, x, t, (&ids, &weights, &sg))?;
        let i = |v: usize| Arg::I32(v as i32);
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_guess")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let (ptrs, table) = ([ids.ptr(gpu)].map(Arg::Ptr), [pl.slot_of.ptr(gpu)].map(Arg::Ptr));
        let args =
            [&ptrs[..], &[i(t * k)], &table, &[i(st.lo), i(st.hi), i(guessed.len()), Arg::Ptr(guessed.ptr(gpu))]];
        launch(gpu, &f, "miss_guess", cfg, &args.concat())?;
        let dst = [&w.gate, &w.up, &w.down].map(|p| p.m.ptr(gpu));
        stream_in(gpu, w, (st, guessed), (dst, pl.held + st.slots), beside_width(gpu, guessed.len()))
    })
}
