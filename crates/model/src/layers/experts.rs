//! Routed experts computed on the host from their bytes, wherever those are (the mapped file, pinned
//! memory beside a GPU): the kernels for an expert that is not on the device (docs/PLACEMENT.md). A
//! batch of misses is cut into tasks of a few rows of one expert's product, over the host's threads; the
//! CPU back-end's own products split one matrix's rows at a time instead. Both follow the same contracts
//! (§ qdot's int8-input products for the types that use them, § matvec's f32 fma chains for the rest), so
//! where an expert is computed changes no bit: the MoE combination (`layers/moe.rs`) takes each slot's
//! result from wherever it was computed.

use std::sync::OnceLock;

use crate::ops::act::glu;
use crate::ops::matvec::{Inputs, RowBytes};
use crate::team::Fork;
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

/// The fewest bytes of weights a task takes: below it a task's own cost (its output, the kernel's set-up,
/// taking it from the shared counter) is a fifth of its work or more (one Q2_0 expert cut for 14 threads
/// into tasks of 8 rows, 5.8 KB, took one thread 21 % longer than in tasks of 56).
const TASK_BYTES: usize = 16 << 10;

/// A product's rows cut into `parts` tasks of whole groups of eight rows (the dequantized path's), each
/// of at least [`TASK_BYTES`] where the product has them.
fn chunks(w: RowBytes, parts: usize) -> Vec<(usize, usize)> {
    let rows = w.rows();
    let per = rows.div_ceil(parts.max(1)).max(TASK_BYTES.div_ceil(w.row_bytes())).next_multiple_of(8);
    (0..rows).step_by(per).map(|r0| (r0, per.min(rows - r0))).collect()
}

/// One task's values (rows from `r0`, row-major) into each input's output.
fn place(outs: &mut [Vec<f32>], r0: usize, vals: &[f32]) {
    let t = outs.len();
    for (j, row) in vals.chunks_exact(t).enumerate() {
        for (o, &v) in outs.iter_mut().zip(row) {
            o[r0 + j] = v;
        }
    }
}

/// Each task's result, the tasks run over `fork`'s threads.
fn run_all<T: Send + Sync>(fork: &dyn Fork, tasks: usize, task: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let out: Vec<OnceLock<T>> = (0..tasks).map(|_| OnceLock::new()).collect();
    fork.each(tasks, &|i| {
        let _ = out[i].set(task(i));
    });
    out.into_iter().map(|v| v.into_inner().expect("every task ran")).collect()
}

/// A batch of misses, each expert with its inputs, `down·(silu(gate·x) ⊙ (up·x))` for each: the gate
/// and up products of every expert, then the down products, each cut into tasks over `fork`'s threads
/// (a few rows of an expert a task, so a batch of fewer experts than threads still keeps them all busy).
/// Rows are independent: how they are cut changes no bit.
pub fn batch_outputs(batch: &[(ExpertRows, Vec<&[f32]>)], fork: &dyn Fork) -> Vec<Vec<Vec<f32>>> {
    // About six tasks a thread in each of the two phases: a thread's last task then ends near the
    // others' (two a thread left a phase waiting on a third of its threads: 10 experts on 14 threads).
    let parts = (6 * fork.threads()).div_ceil(batch.len().max(1));
    let inputs: Vec<Inputs> = batch.iter().map(|(_, xs)| Inputs::new(xs)).collect();
    // Gate and up: tasks (expert, projection, rows).
    let tasks: Vec<(usize, usize, usize, usize)> = batch
        .iter()
        .enumerate()
        .flat_map(|(i, (e, _))| {
            [e.gate, e.up]
                .into_iter()
                .enumerate()
                .flat_map(move |(p, w)| chunks(w, parts).into_iter().map(move |(r0, n)| (i, p, r0, n)))
        })
        .collect();
    let vals = run_all(fork, tasks.len(), |j| {
        let (i, p, r0, n) = tasks[j];
        inputs[i].block(if p == 0 { batch[i].0.gate } else { batch[i].0.up }, r0, n)
    });
    let mut gu: Vec<[Vec<Vec<f32>>; 2]> = batch
        .iter()
        .map(|(e, xs)| [vec![vec![0f32; e.gate.rows()]; xs.len()], vec![vec![0f32; e.up.rows()]; xs.len()]])
        .collect();
    for (&(i, p, r0, _), v) in tasks.iter().zip(&vals) {
        place(&mut gu[i][p], r0, v);
    }
    let h: Vec<Vec<Vec<f32>>> = gu.iter().map(|[g, u]| glu(g, u)).collect();
    let h_rows: Vec<Vec<&[f32]>> = h.iter().map(|h| h.iter().map(Vec::as_slice).collect()).collect();
    let inputs: Vec<Inputs> = h_rows.iter().map(|h| Inputs::new(h)).collect();
    // Down: tasks (expert, rows).
    let tasks: Vec<(usize, usize, usize)> = batch
        .iter()
        .enumerate()
        .flat_map(|(i, (e, _))| chunks(e.down, parts).into_iter().map(move |(r0, n)| (i, r0, n)))
        .collect();
    let vals = run_all(fork, tasks.len(), |j| {
        let (i, r0, n) = tasks[j];
        inputs[i].block(batch[i].0.down, r0, n)
    });
    let mut outs: Vec<Vec<Vec<f32>>> = batch.iter().map(|(e, xs)| vec![vec![0f32; e.down.rows()]; xs.len()]).collect();
    for (&(i, r0, _), v) in tasks.iter().zip(&vals) {
        place(&mut outs[i], r0, v);
    }
    outs
}

/// The outputs of a window's slots that `ids` names (slot i is token i / k's expert of rank i % k;
/// `None`: a slot computed elsewhere), each expert computed once for the tokens that chose it, in one
/// batch over `fork`'s threads ([`batch_outputs`]). `xs` holds the window's T inputs of n values.
pub fn slot_outputs(
    w: &MoeWeights,
    xs: &[&[f32]],
    ids: &[Option<usize>],
    (k, f): (usize, usize),
    fork: &dyn Fork,
) -> Vec<Option<Vec<f32>>> {
    // Each expert asked for, with the slots that chose it (ascending: a token's input once per slot).
    let mut users: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (slot, id) in ids.iter().enumerate() {
        if let Some(e) = id {
            users.entry(*e).or_default().push(slot);
        }
    }
    let n = xs.first().map_or(0, |x| x.len());
    let batch: Vec<_> = users
        .iter()
        .map(|(&e, slots)| (ExpertRows::of(w, e, f, n), slots.iter().map(|&s| xs[s / k]).collect::<Vec<_>>()))
        .collect();
    let mut out = vec![None; ids.len()];
    for (slots, ys) in users.values().zip(batch_outputs(&batch, fork)) {
        for (&s, y) in slots.iter().zip(ys) {
            out[s] = Some(y);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_gguf::GgmlType;

    #[test]
    fn tasks_cover_every_row_once_and_are_not_too_small() {
        // A Q2_0 gate (640 rows of 2,560: 720 bytes a row) and down (2,560 rows of 640: 180 bytes).
        for (rows, cols) in [(640, 2560), (2560, 640), (100, 2560)] {
            let bytes = vec![0u8; rows * cols / 64 * 18];
            let w = RowBytes { ty: GgmlType::Q2_0, cols, bytes: &bytes };
            for parts in [1, 6, 84, 1000] {
                let c = chunks(w, parts);
                let mut next = 0;
                for &(r0, n) in &c {
                    assert_eq!(r0, next, "{rows}×{cols} in {parts}: contiguous");
                    assert!(r0 % 8 == 0 && n > 0);
                    next = r0 + n;
                }
                assert_eq!(next, rows, "{rows}×{cols} in {parts}: every row");
                // Every task but the last holds at least TASK_BYTES of weights.
                assert!(c[..c.len() - 1].iter().all(|&(_, n)| n * w.row_bytes() >= TASK_BYTES));
            }
            // Cut for 14 threads, even a short product still makes several tasks.
            assert!(chunks(w, 84).len() >= 4, "{rows}×{cols}: {} tasks", chunks(w, 84).len());
        }
    }
}
