//! The mixture of experts with its shared expert (spec §7; docs/ARITHMETIC.md § moe).

use crate::ops::act::{sigmoid, silu};
use crate::ops::matvec::Matrix;
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

/// `W_down·(silu(W_gate·x) ⊙ (W_up·x))` for the expert whose rows start at `first` (f rows of gate/up,
/// n rows of down).
fn expert(gate: &Matrix, up: &Matrix, down: &Matrix, x: &[f32], f: usize, e: usize) -> Vec<f32> {
    let (mut g, mut u) = (vec![0f32; f], vec![0f32; f]);
    gate.matvec_rows(x, e * f, &mut g);
    up.matvec_rows(x, e * f, &mut u);
    let h: Vec<f32> = g.iter().zip(&u).map(|(&a, &b)| silu(a) * b).collect();
    let n = down.rows / (gate.rows / f);
    let mut y = vec![0f32; n];
    down.matvec_rows(&h, e * n, &mut y);
    y
}

/// `y = Σ_i w_i·expert_{e_i}(x) + σ(w_shexp_gate·x)·shared(x)`, accumulated by fma in rank order, the
/// shared expert last.
pub fn moe(w: &MoeWeights, x: &[f32], k: usize, f: usize) -> Vec<f32> {
    let (ids, weights) = route(w, x, k);
    let mut y = vec![0f32; x.len()];
    for (&e, &we) in ids.iter().zip(&weights) {
        let eo = expert(&w.gate_exps, &w.up_exps, &w.down_exps, x, f, e);
        for (v, o) in y.iter_mut().zip(eo) {
            *v = we.mul_add(o, *v);
        }
    }
    let sg = sigmoid(w.shexp_gate.matvec(x)[0]);
    let so = expert(&w.gate_shexp, &w.up_shexp, &w.down_shexp, x, f, 0);
    for (v, o) in y.iter_mut().zip(so) {
        *v = sg.mul_add(o, *v);
    }
    y
}
