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
//! guess costs bus time the step left idle. With `STRATA_GUESS_EARLY` (the default) the guess is made a
//! stage earlier, from the block before's MoE input (ops/moe.rs `moe_then`), and with
//! `STRATA_GUESS_MIXER_SLOTS` a second guess at the mixer takes what that one left ([`guess_second`], on
//! a lane of its own). The second reads the first's table entries to skip them while the first's lane
//! may still run; what it reads decides only which slots the copies go to, never a bit.

use cudarc::driver::LaunchConfig;

use super::{beside_width, route, stream_in, MoeGpu};
use crate::ops::matvec::MAX_T;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The experts block `w` would pick for the `t` tokens `x` (a mixer's input, or with `STRATA_GUESS_EARLY`
/// the block before's MoE input) brought into its guess slots, on the step's lane ahead (joined by the
/// block's own routing, `moe_hidden`). Nothing where the block has no guess slots or the window is longer
/// than a tile. With a second guess (`STRATA_GUESS_MIXER_SLOTS`), the first's slots are those before it.
pub fn guess(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    match entries(w, t, false) {
        Some(range) => gpu.ahead(|| guess_into(gpu, w, x, t, range)),
        None => Ok(()),
    }
}

/// The second guess of block `w`, from its mixer's input `x`, after the early one ([`guess`]): the first
/// experts its router picks there that the card does not hold and the early guess did not name, into the
/// last `second` guess slots, on a lane of its own beside the early guess's copies (`Gpu::ahead_second`).
/// Which slot a guessed expert lands in changes no bit: the table names what each slot holds.
pub fn guess_second(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    match entries(w, t, true) {
        Some(range) => gpu.ahead_second(|| guess_into(gpu, w, x, t, range)),
        None => Ok(()),
    }
}

/// The guess table's entries (first, count) of block `w`'s first or second guess; None where it has
/// none (no lane is opened for nothing) or the window is longer than a tile.
fn entries(w: &MoeGpu, t: usize, second: bool) -> Option<(usize, usize)> {
    let pl = w.placed.as_ref()?;
    let (st, _) = pl.stream.as_ref()?;
    pl.guessed.as_ref()?;
    let first = st.guesses - st.second;
    let range = if second { (first, st.second) } else { (0, first) };
    ((1..=MAX_T).contains(&t) && range.1 > 0).then_some(range)
}

/// Guess-table entries `first..first + count` (and their slots) from the router's top k of `x`; the
/// entries before `first` are another guess's, kept and not named again.
fn guess_into(gpu: &Gpu, w: &MoeGpu, x: &Buf<f32>, t: usize, (first, count): (usize, usize)) -> Result<(), CudaError> {
    let Some(pl) = &w.placed else { return Ok(()) };
    let (Some((st, _)), Some(guessed)) = (&pl.stream, &pl.guessed) else { return Ok(()) };
    let (_, k, ..) = w.dims;
    let (ids, weights, sg) = (Buf::<i32>::uninit(gpu, t * k)?, Buf::<f32>::uninit(gpu, t * k)?, Buf::uninit(gpu, t)?);
    route(gpu, w, x, t, (&ids, &weights, &sg))?;
    let i = |v: usize| Arg::I32(v as i32);
    // The first guess's kernel takes no `first` (it is 0); the second's skips the entries before its own.
    let (name, from) = if first == 0 { ("miss_guess", None) } else { ("miss_guess_after", Some(i(first))) };
    let f = gpu.function(&crate::ops::sources::MISSES_FILE, name)?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let (ptrs, table) = ([ids.ptr(gpu)].map(Arg::Ptr), [pl.slot_of.ptr(gpu)].map(Arg::Ptr));
    let range = [&[i(st.lo), i(st.hi)][..], from.as_slice(), &[i(count), Arg::Ptr(guessed.ptr(gpu))]].concat();
    launch(gpu, &f, name, cfg, &[&ptrs[..], &[i(t * k)], &table, &range].concat())?;
    let dst = [&w.gate, &w.up, &w.down].map(|p| p.m.ptr(gpu));
    let of = guessed.view(gpu, first, count)?;
    stream_in(gpu, w, (st, &of), (dst, pl.held + st.slots + first), beside_width(gpu, count))
}
