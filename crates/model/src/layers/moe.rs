//! The mixture of experts with its shared expert (spec §7; docs/ARITHMETIC.md § moe).

use super::experts;
use crate::ops::act::{glu, sigmoid};
use crate::ops::matvec::Inputs;
use crate::ops::softmax::softmax_inplace;
use crate::ops::topk::top_k;
use crate::weights::MoeWeights;

/// The router's choice: expert ids in rank order and their weights.
pub fn route(w: &MoeWeights, x: &[f32], k: usize) -> (Vec<usize>, Vec<f32>) {
    route_probs(w.router.matvec(x), k)
}

/// [`route`] from the router's logits.
fn route_probs(mut p: Vec<f32>, k: usize) -> (Vec<usize>, Vec<f32>) {
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

/// `W_down·(silu(W_gate·x) ⊙ (W_up·x))` for routed expert `e`, for each input of a window.
fn expert(w: &MoeWeights, xs: &[&[f32]], f: usize, e: usize) -> Vec<Vec<f32>> {
    let inputs = Inputs::new(xs);
    let g = w.gate_exps.m.matvec_rows_inputs(&inputs, w.gate_exps.first_row(e), f);
    let u = w.up_exps.m.matvec_rows_inputs(&inputs, w.up_exps.first_row(e), f);
    let h = glu(&g, &u);
    let h: Vec<&[f32]> = h.iter().map(Vec::as_slice).collect();
    w.down_exps.m.matvec_rows_inputs(&Inputs::new(&h), w.down_exps.first_row(e), xs[0].len())
}

/// The shared expert: the same form with its own width.
fn shared(w: &MoeWeights, inputs: &Inputs) -> Vec<Vec<f32>> {
    let h = glu(&w.gate_shexp.matvec_inputs(inputs), &w.up_shexp.matvec_inputs(inputs));
    w.down_shexp.matvec_window(&h.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// `y = Σ_i w_i·expert_{e_i}(x) + σ(w_shexp_gate·x)·shared(x)`, accumulated by fma in rank order, the
/// shared expert last.
pub fn moe(w: &MoeWeights, x: &[f32], k: usize, f: usize) -> Vec<f32> {
    moe_window(w, &[x], k, f).swap_remove(0)
}

/// [`moe`] for each token of a window: the router's, the shared expert's and each routed expert's
/// products over all the tokens that use them at once (each expert's rows read once for the window),
/// then each token's combination in its own rank order, as [`moe`] makes it.
pub fn moe_window(w: &MoeWeights, xs: &[&[f32]], k: usize, f: usize) -> Vec<Vec<f32>> {
    moe_routed(w, xs, &route_window(w, xs, k), f, None)
}

/// Each token's [`route`] for a window, the router's rows read once.
pub fn route_window(w: &MoeWeights, xs: &[&[f32]], k: usize) -> Vec<(Vec<usize>, Vec<f32>)> {
    w.router.matvec_window(xs).into_iter().map(|p| route_probs(p, k)).collect()
}

/// Which routed experts a layer takes from the host's kernels for experts off the device
/// (`layers/experts.rs`) rather than from the back-end's own products: a placement's misses.
pub type Misses<'a> = &'a (dyn Fn(usize) -> bool + Sync);

/// [`moe_window`] for routes already made, the experts `misses` names computed by the miss kernels (one
/// batch over the host's threads) and the rest by this back-end's products; the combination is one place
/// whatever computed each slot.
pub fn moe_routed(
    w: &MoeWeights,
    xs: &[&[f32]],
    routes: &[(Vec<usize>, Vec<f32>)],
    f: usize,
    misses: Option<Misses>,
) -> Vec<Vec<f32>> {
    let slots = slot_outputs(w, xs, routes, f, misses);
    let inputs = Inputs::new(xs);
    let gates = w.shexp_gate.matvec_inputs(&inputs);
    let shared = shared(w, &inputs);
    (0..xs.len())
        .map(|t| {
            let mut y = vec![0f32; xs[t].len()];
            for (out, &we) in slots[t].iter().zip(&routes[t].1) {
                for (v, &o) in y.iter_mut().zip(out) {
                    *v = we.mul_add(o, *v);
                }
            }
            let sg = sigmoid(gates[t][0]);
            for (v, &o) in y.iter_mut().zip(&shared[t]) {
                *v = sg.mul_add(o, *v);
            }
            y
        })
        .collect()
}

/// Each token's routed outputs in rank order: every expert the window uses computed once for the tokens
/// that chose it, by the miss kernels where `misses` says (`experts::slot_outputs`), else by this
/// back-end's products.
fn slot_outputs(
    w: &MoeWeights,
    xs: &[&[f32]],
    routes: &[(Vec<usize>, Vec<f32>)],
    f: usize,
    misses: Option<Misses>,
) -> Vec<Vec<Vec<f32>>> {
    let k = routes.first().map_or(0, |(ids, _)| ids.len());
    let missed = |e: usize| misses.is_some_and(|m| m(e));
    let asked: Vec<Option<usize>> =
        routes.iter().flat_map(|(ids, _)| ids.iter().map(|&e| missed(e).then_some(e))).collect();
    let mut host = experts::slot_outputs(w, xs, &asked, (k, f), &crate::team::Pool).into_iter();
    // The rest: each expert the window uses, with the (token, rank) pairs that chose it.
    let mut users: std::collections::BTreeMap<usize, Vec<(usize, usize)>> = Default::default();
    for (t, (ids, _)) in routes.iter().enumerate() {
        for (rank, &e) in ids.iter().enumerate().filter(|&(_, &e)| !missed(e)) {
            users.entry(e).or_default().push((t, rank));
        }
    }
    let mut slots: Vec<Vec<Vec<f32>>> =
        routes.iter().map(|(ids, _)| ids.iter().map(|_| host.next().flatten().unwrap_or_default()).collect()).collect();
    for (e, who) in users {
        let inputs: Vec<&[f32]> = who.iter().map(|&(t, _)| xs[t]).collect();
        for (&(t, rank), y) in who.iter().zip(expert(w, &inputs, f, e)) {
            slots[t][rank] = y;
        }
    }
    slots
}
