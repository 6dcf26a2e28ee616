//! Softmax (docs/ARITHMETIC.md § softmax): the max, eˣ⁻ᵐᵃˣ by the project's exp, the sum by the
//! reduction contract, then each term divided by the sum.

use super::act::exp;
use super::dot::sum;

/// Softmax in place.
pub fn softmax_inplace(x: &mut [f32]) {
    let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in x.iter_mut() {
        *v = exp(*v - m);
    }
    let s = sum(x);
    for v in x.iter_mut() {
        *v /= s;
    }
}
