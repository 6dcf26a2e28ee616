//! Norms (docs/ARITHMETIC.md § norm). One rule everywhere: the sum of squares by the reduction contract,
//! the scale `rs = 1/√(mean + eps)` by IEEE division and square root, and each output
//! `(x·rs)·gamma` — the scale first, then the gamma (two roundings), as transformers computes it.
//!
//! Every rms norm takes the file's `attention.layer_norm_rms_epsilon` (`Config::eps`), as transformers'
//! `rms_norm_eps` reaches every norm; the delta rule's l2 norm alone has a fixed epsilon ([`L2_EPS`]).

use super::act::rsqrt;
use super::dot::sum_squares;

/// The l2 norm's epsilon: transformers' `l2norm(…, eps=1e-6)` in the gated delta rule is a constant, not
/// `rms_norm_eps`.
pub const L2_EPS: f32 = 1e-6;

/// 1/√(mean(x²) + eps).
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    rsqrt(sum_squares(x) / x.len() as f32 + eps)
}

/// `out[d] = (x[d]·rs)·w[d]` with rs the rms scale of x.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let rs = rms_scale(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * rs) * g;
    }
}

/// rms_norm in place.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let rs = rms_scale(x, eps);
    for (v, &g) in x.iter_mut().zip(w) {
        *v = (*v * rs) * g;
    }
}

/// rms_norm applied to each group of `group` values, gamma `w` covering all of x.
pub fn grouped_rms_norm(x: &[f32], w: &[f32], group: usize, eps: f32, out: &mut [f32]) {
    for ((xg, wg), og) in x.chunks(group).zip(w.chunks(group)).zip(out.chunks_mut(group)) {
        rms_norm(xg, wg, eps, og);
    }
}

/// L2 normalisation in place: `x·(1/√(Σx² + L2_EPS))`.
pub fn l2_norm_inplace(x: &mut [f32]) {
    let rs = rsqrt(sum_squares(x) + L2_EPS);
    for v in x.iter_mut() {
        *v *= rs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epsilon_is_the_one_given() {
        // A small vector, where eps is not lost beside the mean square.
        let x = [1e-3f32, -2e-3, 3e-3, 0.0];
        let ms = (1e-6f32 + 4e-6 + 9e-6) / 4.0;
        assert_eq!(rms_scale(&x, 1e-5), rsqrt(ms + 1e-5));
        assert_ne!(rms_scale(&x, 1e-5), rms_scale(&x, 1e-6));
        let mut a = x;
        rms_norm_inplace(&mut a, &[1.0; 4], 1e-5);
        let mut b = [0f32; 4];
        rms_norm(&x, &[1.0; 4], 1e-5, &mut b);
        assert_eq!(a, b);
    }
}
