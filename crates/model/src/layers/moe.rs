//! The mixture of experts with its shared expert (spec §7; docs/ARITHMETIC.md § moe).

use crate::ops::act::{sigmoid, silu};
use crate::ops::softmax::softmax_inplace;
use crate::ops::topk::top_k;
use crate::weights::MoeWeights;

/// The router's choice: expert ids in rank order and their weights.
pub fn route(w: &MoeWeights, x: &[f32], k: usize) -> (Vec<usize>, Vec<f32>) {
    let mut p = w.router.matvec(x);
    softmax_inplace(&mut p);
    let ids = top_k(&p, k);
    let mut total = 0f32;
    for &e in &ids {
        total += p[e];
    }
    let denom = total.max(f32::from_bits(0x3880_0000)); // 2⁻¹⁴
    let weights = ids.iter().map(|&e| p[e] / denom).collect();
    (ids, weights)
}

/// `W_down·(silu(W_gate·x) ⊙ (W_up·x))` for routed expert `e`.
fn expert(w: &MoeWeights, x: &[f32], f: usize, e: usize) -> Vec<f32> {
    let (mut g, mut u) = (vec![0f32; f], vec![0f32; f]);
    w.gate_exps.m.matvec_rows(x, w.gate_exps.first_row(e), &mut g);
    w.up_exps.m.matvec_rows(x, w.up_exps.first_row(e), &mut u);
    let h: Vec<f32> = g.iter().zip(&u).map(|(&a, &b)| silu(a) * b).collect();
    let mut y = vec![0f32; x.len()];
    w.down_exps.m.matvec_rows(&h, w.down_exps.first_row(e), &mut y);
    y
}

/// The shared expert: the same form with its own width.
fn shared(w: &MoeWeights, x: &[f32]) -> Vec<f32> {
    let g = w.gate_shexp.matvec(x);
    let u = w.up_shexp.matvec(x);
    let h: Vec<f32> = g.iter().zip(&u).map(|(&a, &b)| silu(a) * b).collect();
    w.down_shexp.matvec(&h)
}

/// `y = Σ_i w_i·expert_{e_i}(x) + σ(w_shexp_gate·x)·shared(x)`, accumulated by fma in rank order, the
/// shared expert last.
pub fn moe(w: &MoeWeights, x: &[f32], k: usize, f: usize) -> Vec<f32> {
    let (ids, weights) = route(w, x, k);
    let mut y = vec![0f32; x.len()];
    for (&e, &we) in ids.iter().zip(&weights) {
        for (v, o) in y.iter_mut().zip(expert(w, x, f, e)) {
            *v = we.mul_add(o, *v);
        }
    }
    let sg = sigmoid(w.shexp_gate.matvec(x)[0]);
    for (v, o) in y.iter_mut().zip(shared(w, x)) {
        *v = sg.mul_add(o, *v);
    }
    y
}
