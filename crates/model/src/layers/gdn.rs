//! Gated DeltaNet (spec §4; docs/ARITHMETIC.md § gdn): a causal conv, then per value head the gated delta
//! rule on an S×S state.

use crate::ops::act::{exp, rsqrt, sigmoid, silu, softplus};
use crate::ops::matvec::Inputs;
use crate::ops::norm::{l2_norm_inplace, rms_norm};
use crate::state::GdnState;
use crate::weights::GdnWeights;

/// Causal depthwise conv of width K: `c[ch] = Σ_{i<K} w[ch][i]·frame_i[ch]` by fma from the oldest
/// frame, the frames being the K − 1 stored ones then the current one; then the state keeps the last
/// K − 1 (`tail` holds them, oldest first).
pub fn causal_conv(tail: &mut [f32], cur: &[f32], w: &[f32]) -> Vec<f32> {
    let ch = cur.len();
    let held = tail.len() / ch;
    let k = held + 1;
    let out = (0..ch)
        .map(|c| {
            let mut s = 0f32;
            for i in 0..held {
                s = w[k * c + i].mul_add(tail[i * ch + c], s);
            }
            w[k * c + held].mul_add(cur[c], s)
        })
        .collect();
    if held > 0 {
        tail.copy_within(ch.., 0);
        tail[(held - 1) * ch..].copy_from_slice(cur);
    }
    out
}

/// One token through the layer, for head dim S, Hk key heads and Hv value heads (`dims`, the config's
/// `ssm_state`, `ssm_groups`, `ssm_heads`), and the output norm's epsilon `eps` (the q and k l2 norms keep
/// their own fixed one).
pub fn gdn_dims(x: &[f32], w: &GdnWeights, dims: (usize, usize, usize), eps: f32, st: &mut GdnState) -> Vec<f32> {
    gdn_window(&[x], w, dims, eps, st).swap_remove(0)
}

/// A window of tokens through the layer in order: the projections of all of them at once (each weight
/// read once for the window), the conv and the delta rule token by token, then the output projection at
/// once. Each token's bits are those of [`gdn_dims`] on it in turn.
pub fn gdn_window(
    xs: &[&[f32]],
    w: &GdnWeights,
    dims: (usize, usize, usize),
    eps: f32,
    st: &mut GdnState,
) -> Vec<Vec<f32>> {
    let inputs = Inputs::new(xs);
    let u = w.qkv.matvec_inputs(&inputs);
    let z = w.gate.matvec_inputs(&inputs);
    let beta = w.beta.matvec_inputs(&inputs);
    let alpha = w.alpha.matvec_inputs(&inputs);
    let tokens: Vec<Token> = (0..xs.len()).map(|t| token(&u[t], &beta[t], &alpha[t], w, dims, st)).collect();
    let (s, hv) = (dims.0, dims.2);
    // Value heads are independent: each runs the window's tokens in order on its own state (the same
    // steps as token by token, so the same bits), the heads side by side on the threads.
    let head = |j: usize, m: &mut [f32]| -> Vec<Vec<f32>> {
        let i = j % dims.1; // the converter stores value heads tiled: value head j reads key head j mod Hk
        (0..tokens.len())
            .map(|t| {
                let tk = &tokens[t];
                let o = delta_rule(
                    m,
                    &tk.q[i * s..(i + 1) * s],
                    &tk.k[i * s..(i + 1) * s],
                    &tk.v[j * s..(j + 1) * s],
                    tk.beta[j],
                    tk.decay[j],
                );
                let mut yj = vec![0f32; s];
                rms_norm(&o, &w.norm, eps, &mut yj);
                for (a, &zz) in yj.iter_mut().zip(&z[t][j * s..(j + 1) * s]) {
                    *a *= sigmoid(zz);
                }
                yj
            })
            .collect()
    };
    let by_head: Vec<Vec<Vec<f32>>> = if tokens.len() > 1 {
        use rayon::prelude::*;
        st.m.par_chunks_mut(s * s).enumerate().map(|(j, m)| head(j, m)).collect()
    } else {
        st.m.chunks_mut(s * s).enumerate().map(|(j, m)| head(j, m)).collect()
    };
    let y: Vec<Vec<f32>> =
        (0..tokens.len()).map(|t| (0..hv).flat_map(|j| by_head[j][t].iter().copied()).collect()).collect();
    w.out.matvec_window(&y.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// One token's conv output made ready for the delta rule: q (l2-normed, scaled) and k (l2-normed) of
/// each key head, v of each value head, and each value head's β and decay.
struct Token {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    beta: Vec<f32>,
    decay: Vec<f32>,
}

/// The token's conv (its state moved on) and what the delta rule reads of it (`beta` before its
/// sigmoid).
fn token(
    u: &[f32],
    beta: &[f32],
    alpha: &[f32],
    w: &GdnWeights,
    (s, hk, hv): (usize, usize, usize),
    st: &mut GdnState,
) -> Token {
    let mut conv: Vec<f32> = causal_conv(&mut st.conv, u, &w.conv).into_iter().map(silu).collect();
    let v = conv.split_off(2 * hk * s);
    let qscale = rsqrt(s as f32);
    for head in conv.chunks_mut(s) {
        l2_norm_inplace(head);
    }
    for q in conv[..hk * s].iter_mut() {
        *q *= qscale;
    }
    let k = conv.split_off(hk * s);
    let decay = (0..hv).map(|j| exp(softplus(alpha[j] + w.dt_bias[j]) * w.a[j])).collect();
    Token { q: conv, k, v, beta: beta.iter().map(|&b| sigmoid(b)).collect(), decay }
}

/// One step of the gated delta rule on `m` (`[key dim a][value dim b]`):
/// `M ← decay·M`; `p[b] = Σ_a M[a][b]·k[a]`; `M[a][b] += k[a]·β(v[b] − p[b])`; `o[b] = Σ_a M[a][b]·q[a]`.
/// Each sum is an fma chain over a ascending from +0; the update is `fma(k[a], δ[b], M[a][b])`.
pub fn delta_rule(m: &mut [f32], q: &[f32], k: &[f32], v: &[f32], beta: f32, decay: f32) -> Vec<f32> {
    let s = q.len();
    // Two passes over M, each value's operations in the order above: the decay and p's fma in the first,
    // the update and o's fma in the second (each sum still over a ascending).
    let mut p = vec![0f32; s];
    for (a, row) in m.chunks_exact_mut(s).enumerate() {
        for (x, pb) in row.iter_mut().zip(p.iter_mut()) {
            *x *= decay;
            *pb = x.mul_add(k[a], *pb);
        }
    }
    let delta: Vec<f32> = (0..s).map(|b| beta * (v[b] - p[b])).collect();
    let mut o = vec![0f32; s];
    for (a, row) in m.chunks_exact_mut(s).enumerate() {
        for ((x, &d), ob) in row.iter_mut().zip(&delta).zip(o.iter_mut()) {
            *x = k[a].mul_add(d, *x);
            *ob = x.mul_add(q[a], *ob);
        }
    }
    o
}
