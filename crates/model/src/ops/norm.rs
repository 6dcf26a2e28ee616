//! Norms (docs/ARITHMETIC.md § norm). One rule everywhere: the sum of squares by the reduction contract,
//! the scale `rs = 1/√(mean + eps)` by IEEE division and square root, and each output
//! `(x·rs)·gamma` — the scale first, then the gamma (two roundings), as transformers computes it.

use super::act::rsqrt;
use super::dot::sum_squares;

pub const EPS: f32 = 1e-6;

/// 1/√(mean(x²) + eps).
pub fn rms_scale(x: &[f32]) -> f32 {
    rsqrt(sum_squares(x) / x.len() as f32 + EPS)
}

/// `out[d] = (x[d]·rs)·w[d]` with rs the rms scale of x.
pub fn rms_norm(x: &[f32], w: &[f32], out: &mut [f32]) {
    let rs = rms_scale(x);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * rs) * g;
    }
}

/// rms_norm in place.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32]) {
    let rs = rms_scale(x);
    for (v, &g) in x.iter_mut().zip(w) {
        *v = (*v * rs) * g;
    }
}

/// rms_norm applied to each group of `group` values, gamma `w` covering all of x.
pub fn grouped_rms_norm(x: &[f32], w: &[f32], group: usize, out: &mut [f32]) {
    for ((xg, wg), og) in x.chunks(group).zip(w.chunks(group)).zip(out.chunks_mut(group)) {
        rms_norm(xg, wg, og);
    }
}

/// L2 normalisation in place: `x·(1/√(Σx² + eps))`.
pub fn l2_norm_inplace(x: &mut [f32]) {
    let rs = rsqrt(sum_squares(x) + EPS);
    for v in x.iter_mut() {
        *v *= rs;
    }
}
