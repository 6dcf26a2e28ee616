//! Hyper-connections (spec §3; docs/ARITHMETIC.md § hc): the read that mixes the hc residual streams
//! into one layer input, and the write that adds a layer's output back to every stream.

use crate::ops::act::{sigmoid, silu};
use crate::ops::dot::dot;
use crate::ops::matvec::{Dequantized, Matrix};
use crate::ops::norm::rms_scale;
use crate::weights::HcWeights;

/// The read's outputs: the layer input (n values) and the inject scalars (hc; empty without inject rows).
pub struct HcRead {
    pub mixed: Vec<f32>,
    pub inject: Vec<f32>,
}

/// `R` holds the hc streams of n values, stream 0 first; `eps` is the norm's (the file's rms epsilon).
pub fn hc_read(r: &[f32], w: &HcWeights, hc: usize, eps: f32) -> HcRead {
    hc_read_window(&[r], w, hc, eps).swap_remove(0)
}

/// [`hc_read`] for each token of a window, its two products over all the tokens at once (each weight
/// row dequantized once for the window).
pub fn hc_read_window(rs: &[&[f32]], w: &HcWeights, hc: usize, eps: f32) -> Vec<HcRead> {
    use rayon::prelude::*;
    let hcf = hc as f32;
    // The per-token steps on the threads (each token's own values: the same bits in any order).
    // 1. per-stream rms; xn = (R·rs)·w
    let xn: Vec<Vec<f32>> = rs.par_iter().map(|r| normed(r, w, hc, eps)).collect();
    let xr: Vec<&[f32]> = xn.iter().map(Vec::as_slice).collect();
    // 2. lo = silu((W_down·xn)/hc) (§ hc: dequantize-then-dot for every weight type)
    let kept = w.kept.as_ref();
    let lo: Vec<Vec<f32>> = products(&w.down, kept.map(|k| &k.0), &xr)
        .into_iter()
        .map(|d| d.into_iter().map(|v| silu(v / hcf)).collect())
        .collect();
    // 3. g = W_up·lo
    let g = products(&w.up, kept.map(|k| &k.1), &lo.iter().map(Vec::as_slice).collect::<Vec<_>>());
    xn.par_iter().zip(g).map(|(xn, g)| HcRead { mixed: mix(xn, &g, hc), inject: inject(xn, w, hc) }).collect()
}

/// `m`'s dequantize-then-dot products of each input, from its rows kept dequantized where it has them
/// (`HcWeights::kept`: the same bits).
fn products(m: &Matrix, kept: Option<&Dequantized>, xs: &[&[f32]]) -> Vec<Vec<f32>> {
    match kept {
        Some(k) => k.matvec_window(xs),
        None => m.matvec_dequantized_window(xs),
    }
}

/// Step 1: each stream scaled by its rms and the norm's weights.
fn normed(r: &[f32], w: &HcWeights, hc: usize, eps: f32) -> Vec<f32> {
    let n = r.len() / hc;
    let mut xn = vec![0f32; r.len()];
    for c in 0..hc {
        let s = c * n..(c + 1) * n;
        let rs = rms_scale(&r[s.clone()], eps);
        for ((o, &v), &g) in xn[s.clone()].iter_mut().zip(&r[s.clone()]).zip(&w.norm[s]) {
            *o = (v * rs) * g;
        }
    }
    xn
}

/// Step 4: mixed[d] = (Σ_c xn[c][d]·σ(g[c][d])) / hc, c in order.
fn mix(xn: &[f32], g: &[f32], hc: usize) -> Vec<f32> {
    let n = xn.len() / hc;
    (0..n)
        .map(|d| {
            let mut s = xn[d] * sigmoid(g[d]);
            for c in 1..hc {
                s += xn[c * n + d] * sigmoid(g[c * n + d]);
            }
            s / hc as f32
        })
        .collect()
}

/// Step 5: inj[c] = W_inject[c]·xn.
fn inject(xn: &[f32], w: &HcWeights, hc: usize) -> Vec<f32> {
    match &w.inject {
        Some(m) => {
            let mut row = vec![0f32; m.cols];
            (0..hc)
                .map(|c| {
                    m.row(c, &mut row);
                    dot(&row, xn)
                })
                .collect()
        }
        None => Vec::new(),
    }
}

/// `R[c][d] += y[d]·(2·σ(inj[c]/hc))`: the product rounded, then the sum.
pub fn hc_write(r: &mut [f32], y: &[f32], inject: &[f32]) {
    let hc = inject.len();
    let n = y.len();
    for (c, &inj) in inject.iter().enumerate() {
        let f = 2.0 * sigmoid(inj / hc as f32);
        for (v, &yd) in r[c * n..(c + 1) * n].iter_mut().zip(y) {
            *v += yd * f;
        }
    }
}
