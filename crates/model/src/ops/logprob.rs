//! Log-probabilities of the next token from the exact logits (docs/ARITHMETIC.md § logprob): the
//! model's own distribution (temperature 1, before any grammar's mask or sampling setting), on the host,
//! so every device that gives the same logits gives the same numbers.

use super::act::{exp, ln};
use super::topk::top_k;

/// The log-softmax's normaliser of one position's logits, computed once and read for any token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogNorm {
    /// The largest finite logit.
    pub max: f32,
    /// `ln Σ exp(x_j − max)` over the finite logits, added in id order from +0.
    pub ln_sum: f32,
}

impl LogNorm {
    pub fn of(logits: &[f32]) -> LogNorm {
        let max = logits.iter().filter(|x| x.is_finite()).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        let sum = logits.iter().filter(|x| x.is_finite()).fold(0.0f32, |s, &x| s + exp(x - max));
        LogNorm { max, ln_sum: if sum > 0.0 { ln(sum) } else { f32::NAN } }
    }

    /// `(x − max) − ln_sum`: −∞ for a logit that is not finite.
    pub fn logprob(&self, x: f32) -> f32 {
        if x.is_finite() {
            (x - self.max) - self.ln_sum
        } else {
            f32::NEG_INFINITY
        }
    }
}

/// The `n` most likely tokens (§ topk order: the higher logit, then the lower id) with their
/// log-probabilities.
pub fn top_logprobs(logits: &[f32], norm: &LogNorm, n: usize) -> Vec<(u32, f32)> {
    top_k(logits, n).into_iter().map(|i| (i as u32, norm.logprob(logits[i]))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_sum_to_one_and_rank_as_the_logits() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let norm = LogNorm::of(&logits);
        let total: f64 = logits.iter().map(|&x| (norm.logprob(x) as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-4, "{total}");
        // Against f64 arithmetic: within a few ulp of the normaliser's size.
        let m = logits.iter().cloned().fold(f64::MIN, |a, b| a.max(b as f64));
        let ln_sum = logits.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
        for &x in &logits[..50] {
            assert!((norm.logprob(x) as f64 - ((x as f64 - m) - ln_sum)).abs() < 1e-5);
        }
        let top = top_logprobs(&logits, &norm, 3);
        assert_eq!(top.len(), 3);
        assert!(top[0].1 >= top[1].1 && top[1].1 >= top[2].1);
        assert!(top[0].0 < top[1].0, "equal logits: the lower id first");
        // A masked (−∞) logit has no probability and never counts in the sum.
        let mut masked = logits.clone();
        masked[7] = f32::NEG_INFINITY;
        assert_eq!(LogNorm::of(&masked).logprob(masked[7]), f32::NEG_INFINITY);
    }
}
