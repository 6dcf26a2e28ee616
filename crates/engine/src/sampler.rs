//! Choosing the next token: greedy (the highest logit, the lowest id among equals) or sampling with
//! temperature, top-k and top-p from a seeded generator, so a seed reproduces a run.

use strata_gguf::SplitMix64;
pub use strata_model::ops::topk::argmax;
use strata_model::ops::topk::score_key;

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// 0 is greedy.
    pub temperature: f32,
    /// 0 keeps every token.
    pub top_k: usize,
    /// 1 keeps every token.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let rng = SplitMix64::new(cfg.seed);
        Sampler { cfg, rng }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut idx: Vec<usize> = (0..logits.len()).filter(|&i| logits[i].is_finite()).collect();
        idx.sort_by(|&a, &b| score_key(logits[b]).cmp(&score_key(logits[a])).then(a.cmp(&b)));
        if self.cfg.top_k > 0 {
            idx.truncate(self.cfg.top_k);
        }
        if idx.is_empty() {
            return argmax(logits);
        }
        let m = logits[idx[0]] as f64;
        let t = self.cfg.temperature as f64;
        let w: Vec<f64> = idx.iter().map(|&i| ((logits[i] as f64 - m) / t).exp()).collect();
        let total: f64 = w.iter().sum();
        // top-p: the smallest prefix whose probability reaches p
        let mut keep = w.len();
        let mut acc = 0.0;
        for (j, &x) in w.iter().enumerate() {
            acc += x / total;
            if acc >= self.cfg.top_p as f64 {
                keep = j + 1;
                break;
            }
        }
        let kept: f64 = w[..keep].iter().sum();
        let mut r = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * kept;
        for (j, &x) in w[..keep].iter().enumerate() {
            if r < x {
                return idx[j] as u32;
            }
            r -= x;
        }
        idx[keep - 1] as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_lowest_id_among_equals() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0, 0.0]), 0);
    }

    #[test]
    fn sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
        let cfg = SamplerConfig { temperature: 1.0, top_k: 5, top_p: 1.0, seed: 9 };
        let a: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        assert_eq!(a, b);
        // The 5 highest logits are 6.0 at ids 6, 13, 20, 27, 34.
        assert!(a.iter().all(|t| [6, 13, 20, 27, 34].contains(t)), "{a:?}");
        let mut tight = Sampler::new(SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1e-6, seed: 1 });
        assert_eq!(tight.sample(&logits), 6, "top-p keeps only the best");
    }
}
