//! Routed experts computed on the host from their bytes, wherever those are (the mapped file, pinned
//! memory beside a GPU): the kernels for an expert that is not on the device (spec/kernels.md, expert
//! placement). Each expert is one task on one thread, its rows whole, so a batch of misses spreads over
//! the host's threads by expert; the CPU back-end's own products split each matrix's rows over threads
//! instead. Both follow the same contracts (§ qdot's int8-input products for the types that use them,
//! § matvec's f32 fma chains for the rest), so where an expert is computed changes no bit: the MoE
//! combination (`layers/moe.rs`) takes each slot's result from wherever it was computed.

use rayon::prelude::*;

use crate::ops::act::glu;
use crate::ops::matvec::RowBytes;
use crate::ops::qdot::{quantize_input, uses_qdot};
use crate::weights::{MoeWeights, Stacked};

/// One routed expert's three projections: `gate` and `up` (f rows of n), `down` (n rows of f).
#[derive(Clone, Copy)]
pub struct ExpertRows<'a> {
    pub gate: RowBytes<'a>,
    pub up: RowBytes<'a>,
    pub down: RowBytes<'a>,
}

impl ExpertRows<'_> {
    /// Expert `e` of a layer's stacked tensors, as the file holds them.
    pub fn of(w: &MoeWeights, e: usize, f: usize, n: usize) -> ExpertRows<'_> {
        fn rows(s: &Stacked, first: usize, count: usize) -> RowBytes<'_> {
            let v = s.m.row_view();
            let rb = v.row_bytes();
            RowBytes { bytes: &v.bytes[first * rb..(first + count) * rb], ..v }
        }
        ExpertRows {
            gate: rows(&w.gate_exps, w.gate_exps.first_row(e), f),
            up: rows(&w.up_exps, w.up_exps.first_row(e), f),
            down: rows(&w.down_exps, w.down_exps.first_row(e), n),
        }
    }
}

/// `W·x` for each input, all of `w`'s rows, on this thread, by the contract of `w`'s type.
fn products(w: RowBytes, xs: &[&[f32]]) -> Vec<Vec<f32>> {
    let rows = w.rows();
    let flat = if uses_qdot(w.ty) {
        let q: Vec<_> = xs.iter().map(|x| quantize_input(x)).collect();
        w.qdot_block(&q.iter().collect::<Vec<_>>(), 0, rows)
    } else {
        w.dequantized_block(xs, 0, rows)
    };
    // Row-major (one value an input) to one vector an input.
    (0..xs.len()).map(|t| flat.iter().skip(t).step_by(xs.len()).copied().collect()).collect()
}

/// `down·(silu(gate·x) ⊙ (up·x))` for each input: one expert on this thread. The gate and up products
/// quantize the inputs each (the same codes: quantization is a function of the input).
pub fn expert_outputs(e: ExpertRows, xs: &[&[f32]]) -> Vec<Vec<f32>> {
    let h = glu(&products(e.gate, xs), &products(e.up, xs));
    products(e.down, &h.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// A batch of misses: each expert with its inputs, an expert a task over the host's threads.
pub fn batch_outputs(batch: &[(ExpertRows, Vec<&[f32]>)]) -> Vec<Vec<Vec<f32>>> {
    batch.par_iter().map(|(e, xs)| expert_outputs(*e, xs)).collect()
}
