//! Choosing the next token: greedy (the highest logit, the lowest id among equals) or sampling with
//! temperature, top-k and top-p (strata_model::ops::sample, the contract a GPU follows too) with a uniform
//! number a draw from a seeded generator, so a seed reproduces a run on either device.

use strata_gguf::SplitMix64;
pub use strata_model::ops::sample::SampleParams;
use strata_model::ops::sample::{sample, uniform_f32};
pub use strata_model::ops::topk::argmax;

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// 0 is greedy.
    pub temperature: f32,
    /// 0 keeps every token (the 4,096 most likely at most).
    pub top_k: usize,
    /// 1 keeps every token.
    pub top_p: f32,
    pub seed: u64,
    /// Biases and penalties on the logits before the draw (none by default).
    pub penalties: Penalties,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0, penalties: Penalties::default() }
    }
}

/// OpenAI's `logit_bias`, `presence_penalty` and `frequency_penalty`: applied on the host to a token's
/// logits before a grammar's mask and the draw (docs/ARITHMETIC.md § sample, "Penalties"), so a run that
/// has them takes its logits to the host on every device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Penalties {
    /// `(token, bias)`: `l = l + bias`.
    pub bias: Vec<(u32, f32)>,
    pub presence: f32,
    pub frequency: f32,
}

impl Penalties {
    pub fn is_none(&self) -> bool {
        self.bias.is_empty() && self.presence == 0.0 && self.frequency == 0.0
    }

    /// The logits of the token after the reply so far (`seen` counts its tokens): each bias added, then
    /// for each token the reply holds c > 0 times, `l = l − (frequency·c + presence)`.
    pub fn apply(&self, logits: &mut [f32], seen: &Seen) {
        for &(t, b) in &self.bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if self.presence == 0.0 && self.frequency == 0.0 {
            return;
        }
        for (&t, &c) in &seen.0 {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= self.frequency * c as f32 + self.presence;
            }
        }
    }
}

/// How many times each token occurs in the reply so far: what the penalties read, kept up as the reply
/// grows rather than recounted at every token.
#[derive(Clone, Debug, Default)]
pub struct Seen(std::collections::BTreeMap<u32, u32>);

impl Seen {
    pub fn of(tokens: &[u32]) -> Seen {
        let mut s = Seen::default();
        tokens.iter().for_each(|&t| s.add(t));
        s
    }

    pub fn add(&mut self, t: u32) {
        *self.0.entry(t).or_insert(0) += 1;
    }
}

impl SamplerConfig {
    pub fn greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= 0.0
    }
}

pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
}

impl SamplerConfig {
    /// The settings of the generation's `i`-th draw (from 0): what [`Sampler::next_params`] gives the
    /// `i`-th time, read by index so that a speculative window draws each position's token with the
    /// number a plain run would use there.
    pub fn params_at(&self, i: u64) -> SampleParams {
        let u = if self.greedy() { 0.0 } else { uniform_f32(SplitMix64::nth(self.seed, i)) };
        SampleParams { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p, u }
    }
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let rng = SplitMix64::new(cfg.seed);
        Sampler { cfg, rng }
    }

    /// The next draw's settings: one uniform number taken from the generator (none when greedy), so a
    /// draw made here and one made on a device from the same settings agree.
    pub fn next_params(&mut self) -> SampleParams {
        let u = if self.cfg.greedy() { 0.0 } else { uniform_f32(self.rng.next_u64()) };
        SampleParams { temperature: self.cfg.temperature, top_k: self.cfg.top_k, top_p: self.cfg.top_p, u }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = self.next_params();
        sample(logits, &p)
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
        let cfg = SamplerConfig { temperature: 1.0, top_k: 5, top_p: 1.0, seed: 9, ..Default::default() };
        let a: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        assert_eq!(a, b);
        // The 5 highest logits are 6.0 at ids 6, 13, 20, 27, 34.
        assert!(a.iter().all(|t| [6, 13, 20, 27, 34].contains(t)), "{a:?}");
        // A draw read by its index is the draw made in turn.
        let mut s = Sampler::new(cfg.clone());
        for i in 0..20 {
            let (a, b) = (s.next_params(), cfg.params_at(i));
            assert_eq!((a.u.to_bits(), a.temperature, a.top_k), (b.u.to_bits(), b.temperature, b.top_k), "draw {i}");
        }
        // Penalties: a bias added, a repeated token pushed down by its count.
        let p = Penalties { bias: vec![(3, 2.0)], presence: 0.5, frequency: 0.25 };
        let mut l = vec![1.0f32; 5];
        p.apply(&mut l, &Seen::of(&[1, 1, 4]));
        assert_eq!(l, vec![1.0, 1.0 - (0.25 * 2.0 + 0.5), 1.0, 3.0, 1.0 - (0.25 + 0.5)]);
        assert!(Penalties::default().is_none() && !p.is_none());
        let mut tight =
            Sampler::new(SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1e-6, seed: 1, ..Default::default() });
        assert_eq!(tight.sample(&logits), 6, "top-p keeps only the best");
    }
}
