//! Sampling a token from logits (docs/ARITHMETIC.md § sample): temperature, top-k and top-p in single
//! precision, every sum in one fixed order, so the GPU's `sample` kernel draws the same token.

use super::act::exp;
use super::topk::{argmax, score_key};

/// The most candidates a draw considers: top-k 0 (every token) or above this keeps the 4,096 most likely.
pub const MAX_CANDIDATES: usize = 4096;

/// One draw's settings; `u` is the draw's uniform number in [0, 1) (the caller's seeded generator).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleParams {
    /// 0 or below is greedy.
    pub temperature: f32,
    /// 0 keeps every token (up to [`MAX_CANDIDATES`]).
    pub top_k: usize,
    /// 1 keeps every candidate.
    pub top_p: f32,
    pub u: f32,
}

/// The uniform number of a draw from 64 random bits: the top 24 bits over 2²⁴ (exact in f32).
pub fn uniform_f32(bits: u64) -> f32 {
    (bits >> 40) as f32 / 16_777_216.0
}

/// How many candidates a draw from `finite` finite logits takes.
pub fn candidates(top_k: usize, finite: usize) -> usize {
    let k = if top_k == 0 { MAX_CANDIDATES } else { top_k.min(MAX_CANDIDATES) };
    k.min(finite)
}

/// The token drawn from `logits`:
/// 1. Greedy ([`argmax`]) when the temperature is not above 0 or no logit is finite.
/// 2. The candidates: the K finite logits with the highest [`score_key`], lower id first among equals,
///    in that order (K from [`candidates`]).
/// 3. `w_j = exp((v_j − v_0) / T)`.
/// 4. `total` is the w_j added in rank order. The kept prefix ends at the first j where
///    `acc = acc + w_j / total` reaches `top_p` (else all K); `kept` is its w_j added in rank order.
/// 5. `r = u·kept`. Walking the prefix, the first j with `r < w_j` is drawn, else `r = r − w_j`; the last
///    kept candidate if none.
pub fn sample(logits: &[f32], p: &SampleParams) -> u32 {
    if p.temperature.is_nan() || p.temperature <= 0.0 {
        return argmax(logits);
    }
    let finite = logits.iter().filter(|v| v.is_finite()).count();
    let k = candidates(p.top_k, finite);
    if k == 0 {
        return argmax(logits);
    }
    // Finite logits only, ordered by key descending then id ascending: a total order, so selecting the
    // first k and sorting them gives the same list as sorting everything.
    let order = |&a: &u32, &b: &u32| score_key(logits[b as usize]).cmp(&score_key(logits[a as usize])).then(a.cmp(&b));
    let mut ids: Vec<u32> = (0..logits.len() as u32).filter(|&i| logits[i as usize].is_finite()).collect();
    if k < ids.len() {
        ids.select_nth_unstable_by(k - 1, order);
        ids.truncate(k);
    }
    ids.sort_unstable_by(order);
    let m = logits[ids[0] as usize];
    let w: Vec<f32> = ids.iter().map(|&i| exp((logits[i as usize] - m) / p.temperature)).collect();
    ids[draw(&w, p.top_p, p.u)]
}

/// Steps 4 and 5 of [`sample`] over the candidates' weights in rank order: the index drawn.
fn draw(w: &[f32], top_p: f32, u: f32) -> usize {
    let total = w.iter().fold(0.0f32, |s, &x| s + x);
    let mut keep = w.len();
    let mut acc = 0.0f32;
    for (j, &x) in w.iter().enumerate() {
        acc += x / total;
        if acc >= top_p {
            keep = j + 1;
            break;
        }
    }
    let kept = w[..keep].iter().fold(0.0f32, |s, &x| s + x);
    let mut r = u * kept;
    for (j, &x) in w[..keep].iter().enumerate() {
        if r < x {
            return j;
        }
        r -= x;
    }
    keep - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, u: f32) -> SampleParams {
        SampleParams { temperature, top_k, top_p, u }
    }

    #[test]
    fn greedy_when_cold_or_nothing_is_finite() {
        let l = [1.0, 3.0, 3.0, -1.0];
        assert_eq!(sample(&l, &params(0.0, 0, 1.0, 0.5)), 1);
        assert_eq!(sample(&[f32::NAN, f32::INFINITY], &params(1.0, 0, 1.0, 0.5)), argmax(&[f32::NAN, f32::INFINITY]));
    }

    #[test]
    fn the_draw_walks_the_ranked_weights() {
        // Two equal best logits (ids 2 and 5, lower id first), then the rest far below: u below one half
        // takes id 2, above it id 5.
        let mut l = vec![-50.0f32; 8];
        l[2] = 4.0;
        l[5] = 4.0;
        assert_eq!(sample(&l, &params(1.0, 0, 1.0, 0.25)), 2);
        assert_eq!(sample(&l, &params(1.0, 0, 1.0, 0.75)), 5);
        // top-k 1 keeps only id 2; a tiny top-p keeps only the first ranked.
        assert_eq!(sample(&l, &params(1.0, 1, 1.0, 0.99)), 2);
        assert_eq!(sample(&l, &params(1.0, 0, 1e-6, 0.99)), 2);
    }

    #[test]
    fn non_finite_logits_are_never_drawn() {
        let l = [f32::NAN, 1.0, f32::INFINITY, 1.0, f32::NEG_INFINITY];
        for u in [0.0, 0.3, 0.6, 0.999] {
            let t = sample(&l, &params(1.0, 0, 1.0, u));
            assert!(t == 1 || t == 3, "{t}");
        }
    }

    #[test]
    fn candidates_are_capped() {
        assert_eq!(candidates(0, 10), 10);
        assert_eq!(candidates(0, 100_000), MAX_CANDIDATES);
        assert_eq!(candidates(40, 100_000), 40);
        assert_eq!(candidates(1 << 20, 100_000), MAX_CANDIDATES);
        // Past the cap, the draw stays among the 4,096 most likely tokens.
        let l: Vec<f32> = (0..10_000).map(|i| -(i as f32) * 1e-4).collect();
        for u in [0.0, 0.5, 0.9999] {
            assert!(sample(&l, &params(100.0, 0, 1.0, u)) < MAX_CANDIDATES as u32);
        }
    }

    #[test]
    fn uniform_is_exact_and_below_one() {
        assert_eq!(uniform_f32(0), 0.0);
        assert!(uniform_f32(u64::MAX) < 1.0);
        assert_eq!(uniform_f32(1 << 63), 0.5);
    }
}
