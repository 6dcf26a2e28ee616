//! A skewed router, like a trained model's: expert popularity by a Zipf law. The synthetic router's
//! rows are random, so every expert is chosen about equally often, the worst case for a cache of the
//! hottest experts. Trained routers are skewed; `--router zipf` scales each router row by a gain so that
//! the expert of popularity rank r (its own random order in each layer) is among a token's top k with
//! probability `min(CAP, c / r^s)`, c fitted so the k choices add up. The gains are fitted on simulated
//! logits: with random rows of the model's width, a token's router logits are close to independent
//! normals of one spread, and a row's gain scales its logit's.
//!
//! The cap: the file has no router bias, and the router's input has no direction every token shares, so
//! a row's logit is as often negative as positive whatever its gain: no expert can be chosen by more
//! than half the tokens. The law's head is capped a little below that, where a finite gain reaches it.
//! On the full model (512 experts, 10 a token) the top fifth of the experts then take 72 % of the
//! routings, against 75 % for the law capped at once a token.

use strata_gguf::SplitMix64;

/// The routers `strata synth` writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Router {
    /// Random rows of one scale: every expert about equally popular.
    Uniform,
    /// Popularity ∝ 1 / rank^s (capped at once a token), its own order of experts in each layer.
    Zipf(f32),
}

impl Router {
    /// `uniform`, `zipf` (exponent 1) or `zipf:S`.
    pub fn parse(s: &str) -> Option<Router> {
        match s.split_once(':') {
            None if s == "uniform" => Some(Router::Uniform),
            None if s == "zipf" => Some(Router::Zipf(1.0)),
            Some(("zipf", e)) => e.parse().ok().filter(|e: &f32| *e > 0.0 && *e <= 4.0).map(Router::Zipf),
            _ => None,
        }
    }
}

/// The most a rank's probability may be (see the module's note).
pub const CAP: f64 = 0.45;

/// Each rank's probability of being among a token's `k` choices: `min(CAP, c / r^s)`, summing to k
/// (where `k ≤ CAP · experts`; beyond, every rank at the cap).
pub fn target(experts: usize, k: usize, s: f32) -> Vec<f64> {
    let law = |c: f64| (1..=experts).map(move |r| (c / (r as f64).powf(s as f64)).min(CAP));
    let (mut lo, mut hi) = (0.0, experts as f64 * (experts as f64).powf(s as f64));
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if law(mid).sum::<f64>() < k as f64 {
            lo = mid
        } else {
            hi = mid
        }
    }
    law(hi).collect()
}

/// Simulated tokens the gains are fitted on.
const SAMPLES: usize = 4096;
/// Fitting rounds.
const ROUNDS: usize = 60;

/// Gains by popularity rank (rank 1 first), root-mean-square 1, so that the top `k` of
/// `gain[r] · z[r]` over independent normal z follows [`target`].
pub fn rank_gains(experts: usize, k: usize, s: f32) -> Vec<f32> {
    let want = target(experts, k, s);
    // Normals by the sum of twelve uniforms (exact arithmetic: the same gains on every machine).
    let mut rng = SplitMix64::new(0x5a1f_0000 ^ experts as u64 ^ ((k as u64) << 20));
    let z: Vec<f32> = (0..SAMPLES * experts).map(|_| (0..12).map(|_| rng.uniform()).sum::<f32>() - 6.0).collect();
    let mut gain = vec![1f64; experts];
    let mut order: Vec<usize> = (0..experts).collect();
    for _ in 0..ROUNDS {
        let mut hits = vec![0u32; experts];
        for zs in z.chunks_exact(experts) {
            let logit = |e: usize| gain[e] * zs[e] as f64;
            // Descending logits, lower index first on ties (as the model's top-k).
            order.select_nth_unstable_by(k - 1, |&a, &b| logit(b).total_cmp(&logit(a)).then(a.cmp(&b)));
            for &e in &order[..k] {
                hits[e] += 1;
            }
        }
        for r in 0..experts {
            let got = (hits[r] as f64 / SAMPLES as f64).max(0.5 / SAMPLES as f64);
            gain[r] *= (want[r] / got).powf(0.3); // a damped multiplicative step
        }
    }
    let rms = (gain.iter().map(|g| g * g).sum::<f64>() / experts as f64).sqrt();
    gain.iter().map(|g| (g / rms) as f32).collect()
}

/// Gains by expert id for one layer: the ranks' gains in the layer's own random order (a Fisher–Yates
/// shuffle from `seed`).
pub fn layer_gains(rank_gains: &[f32], seed: u64) -> Vec<f32> {
    let mut ids: Vec<usize> = (0..rank_gains.len()).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut out = vec![0f32; rank_gains.len()];
    for (rank, &e) in ids.iter().enumerate() {
        out[e] = rank_gains[rank];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_sums_to_k_and_is_capped() {
        for (e, k) in [(16, 4), (64, 6), (512, 10)] {
            let t = target(e, k, 1.0);
            assert!((t.iter().sum::<f64>() - k as f64).abs() < 1e-6);
            assert!(t.iter().all(|&p| p <= CAP) && t.windows(2).all(|w| w[0] >= w[1]));
            // Below the cap, the law: rank r and 2r in the ratio 2.
            let r = t.iter().position(|&p| p < CAP).unwrap() + 1;
            assert!((t[r - 1] / t[2 * r - 1] - 2.0).abs() < 1e-9);
        }
    }

    #[test]
    fn fitted_gains_give_the_law_on_fresh_samples() {
        let (e, k) = (64, 6);
        let g = rank_gains(e, k, 1.0);
        let want = target(e, k, 1.0);
        let mut rng = SplitMix64::new(99);
        let mut hits = vec![0u32; e];
        let n = 20_000;
        for _ in 0..n {
            let z: Vec<f32> = (0..e).map(|r| g[r] * ((0..12).map(|_| rng.uniform()).sum::<f32>() - 6.0)).collect();
            let mut ids: Vec<usize> = (0..e).collect();
            ids.sort_by(|&a, &b| z[b].total_cmp(&z[a]));
            ids[..k].iter().for_each(|&i| hits[i] += 1);
        }
        // The top fifth's share of the routings, as the law gives it, within a point and a half.
        let fifth = e / 5;
        let share = |p: &[f64]| p[..fifth].iter().sum::<f64>() / k as f64;
        let got: Vec<f64> = hits.iter().map(|&h| h as f64 / n as f64).collect();
        assert!((share(&got) - share(&want)).abs() < 0.015, "{} vs {}", share(&got), share(&want));
        // Each rank within 0.05 of its probability.
        for r in 0..e {
            assert!((got[r] - want[r]).abs() < 0.05, "rank {}: {} vs {}", r + 1, got[r], want[r]);
        }
    }

    #[test]
    fn each_layer_has_its_own_order_of_the_same_gains() {
        let g = rank_gains(16, 4, 1.0);
        let (a, b) = (layer_gains(&g, 1), layer_gains(&g, 2));
        assert_ne!(a, b);
        let sorted = |v: &[f32]| {
            let mut v = v.to_vec();
            v.sort_by(|x, y| y.total_cmp(x));
            v
        };
        assert_eq!(sorted(&a), sorted(&g));
        assert_eq!(sorted(&b), sorted(&g));
    }

    #[test]
    fn router_names_parse_and_bad_ones_do_not() {
        assert_eq!(Router::parse("uniform"), Some(Router::Uniform));
        assert_eq!(Router::parse("zipf"), Some(Router::Zipf(1.0)));
        assert_eq!(Router::parse("zipf:1.5"), Some(Router::Zipf(1.5)));
        for bad in ["zipf:0", "zipf:-1", "zipf:x", "zipf:", "skewed", "zipf:9"] {
            assert_eq!(Router::parse(bad), None, "{bad}");
        }
    }
}
