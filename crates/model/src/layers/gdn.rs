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
    let y: Vec<Vec<f32>> = (0..xs.len()).map(|t| recur(&u[t], &z[t], &beta[t], &alpha[t], w, dims, eps, st)).collect();
    w.out.matvec_window(&y.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// One token's conv and delta rule from its projections (`beta` before its sigmoid): the gated, normed
/// value heads that the output projection reads.
#[allow(clippy::too_many_arguments)]
fn recur(
    u: &[f32],
    z: &[f32],
    beta: &[f32],
    alpha: &[f32],
    w: &GdnWeights,
    (s, hk, hv): (usize, usize, usize),
    eps: f32,
    st: &mut GdnState,
) -> Vec<f32> {
    let mut conv: Vec<f32> = causal_conv(&mut st.conv, u, &w.conv).into_iter().map(silu).collect();
    let (qk, v) = conv.split_at_mut(2 * hk * s);
    let qscale = rsqrt(s as f32);
    for head in qk.chunks_mut(s) {
        l2_norm_inplace(head);
    }
    for q in qk[..hk * s].iter_mut() {
        *q *= qscale;
    }
    let (q, k) = qk.split_at(hk * s);
    let beta: Vec<f32> = beta.iter().map(|&b| sigmoid(b)).collect();
    let mut y = vec![0f32; hv * s];
    for j in 0..hv {
        // The converter stores value heads tiled: value head j reads key head j mod Hk.
        let i = j % hk;
        let gate = softplus(alpha[j] + w.dt_bias[j]) * w.a[j];
        let o = delta_rule(
            &mut st.m[j * s * s..(j + 1) * s * s],
            &q[i * s..(i + 1) * s],
            &k[i * s..(i + 1) * s],
            &v[j * s..(j + 1) * s],
            beta[j],
            exp(gate),
        );
        let yj = &mut y[j * s..(j + 1) * s];
        rms_norm(&o, &w.norm, eps, yj);
        for (a, &zz) in yj.iter_mut().zip(&z[j * s..(j + 1) * s]) {
            *a *= sigmoid(zz);
        }
    }
    y
}

/// One step of the gated delta rule on `m` (`[key dim a][value dim b]`):
/// `M ← decay·M`; `p[b] = Σ_a M[a][b]·k[a]`; `M[a][b] += k[a]·β(v[b] − p[b])`; `o[b] = Σ_a M[a][b]·q[a]`.
/// Each sum is an fma chain over a ascending from +0; the update is `fma(k[a], δ[b], M[a][b])`.
pub fn delta_rule(m: &mut [f32], q: &[f32], k: &[f32], v: &[f32], beta: f32, decay: f32) -> Vec<f32> {
    let s = q.len();
    for x in m.iter_mut() {
        *x *= decay;
    }
    let mut p = vec![0f32; s];
    for a in 0..s {
        for b in 0..s {
            p[b] = m[a * s + b].mul_add(k[a], p[b]);
        }
    }
    let delta: Vec<f32> = (0..s).map(|b| beta * (v[b] - p[b])).collect();
    for a in 0..s {
        for b in 0..s {
            m[a * s + b] = k[a].mul_add(delta[b], m[a * s + b]);
        }
    }
    let mut o = vec![0f32; s];
    for a in 0..s {
        for b in 0..s {
            o[b] = m[a * s + b].mul_add(q[a], o[b]);
        }
    }
    o
}
