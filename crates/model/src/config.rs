//! The model's geometry, read from GGUF metadata (spec §1). Every value comes from the file; a missing or
//! inconsistent key is an error naming it.

use strata_gguf::{GgufSet, Value};

use crate::error::ModelError;

pub const ARCH: &str = "qwen4exp";

/// Geometry of a qwen4exp model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub n_layer: usize,
    pub n_embd: usize,
    pub vocab: usize,
    pub full_attention_interval: usize,
    pub hc: usize,
    pub hc_rank: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub rope_dim: usize,
    pub rope_base: f64,
    pub context_length: usize,
    pub idx_heads: usize,
    pub idx_dim: usize,
    pub idx_top_k: usize,
    pub kpool: usize,
    pub ssm_state: usize,
    pub ssm_groups: usize,
    pub ssm_heads: usize,
    pub conv_kernel: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub expert_ff: usize,
    pub ple_dim: usize,
    pub ple: PleConfig,
    pub nextn_layers: usize,
}

/// The n-gram table's hashing (spec §6).
#[derive(Clone, Debug, PartialEq)]
pub struct PleConfig {
    pub ngram_size: usize,
    pub heads_per_ngram: usize,
    pub layer_multipliers: Vec<u64>,
    pub head_vocab_sizes: Vec<u64>,
    pub head_offsets: Vec<u64>,
    pub eos_token_id: u64,
}

impl Config {
    pub fn from_gguf(set: &GgufSet) -> Result<Config, ModelError> {
        let arch = set.get("general.architecture").and_then(Value::as_str);
        if arch != Some(ARCH) {
            return Err(ModelError::Metadata {
                key: "general.architecture".into(),
                what: format!("is {arch:?}, expected \"{ARCH}\""),
            });
        }
        let r = Reader(set);
        let vocab = match set.get(&format!("{ARCH}.vocab_size")) {
            Some(v) => v.as_u64().ok_or_else(|| r.bad("vocab_size", "not an unsigned integer"))? as usize,
            None => set
                .get("tokenizer.ggml.tokens")
                .and_then(Value::as_array)
                .map(|a| a.len())
                .ok_or_else(|| r.missing("vocab_size (or tokenizer.ggml.tokens)"))?,
        };
        let head_dim = r.usize("attention.key_length")?;
        if r.usize("attention.value_length")? != head_dim {
            return Err(r.bad("attention.value_length", "must equal attention.key_length"));
        }
        let c = Config {
            n_layer: r.usize("block_count")?,
            n_embd: r.usize("embedding_length")?,
            vocab,
            full_attention_interval: r.usize("full_attention_interval")?,
            hc: r.usize("hyper_connection.count")?,
            hc_rank: r.usize("hyper_connection.low_rank")?,
            n_head: r.usize("attention.head_count")?,
            n_head_kv: r.usize("attention.head_count_kv")?,
            head_dim,
            eps: r.f64("attention.layer_norm_rms_epsilon")? as f32,
            rope_dim: r.usize("rope.dimension_count")?,
            rope_base: r.f64("rope.freq_base")?,
            context_length: r.usize("context_length")?,
            idx_heads: r.usize("attention.indexer.head_count")?,
            idx_dim: r.usize("attention.indexer.key_length")?,
            idx_top_k: r.usize("attention.indexer.top_k")?,
            kpool: r.usize("attention.indexer.kpool")?,
            ssm_state: r.usize("ssm.state_size")?,
            ssm_groups: r.usize("ssm.group_count")?,
            ssm_heads: r.usize("ssm.time_step_rank")?,
            conv_kernel: r.usize("ssm.conv_kernel")?,
            n_expert: r.usize("expert_count")?,
            n_expert_used: r.usize("expert_used_count")?,
            expert_ff: r.usize("expert_feed_forward_length")?,
            ple_dim: r.usize("embedding_length_per_layer_input")?,
            ple: PleConfig {
                ngram_size: r.usize("ple.ngram_size")?,
                heads_per_ngram: r.usize("ple.heads_per_ngram")?,
                layer_multipliers: r.u64s("ple.layer_multipliers")?,
                head_vocab_sizes: r.u64s("ple.head_vocab_sizes")?,
                head_offsets: r.u64s("ple.head_offsets")?,
                eos_token_id: r.u64("ple.eos_token_id")?,
            },
            nextn_layers: r.usize("nextn_predict_layers")?,
        };
        if r.usize("expert_shared_count")? != 1 {
            return Err(r.bad("expert_shared_count", "only 1 shared expert is supported"));
        }
        c.check()?;
        Ok(c)
    }

    /// Whether layer l is a QSA (full attention) layer; the others are GDN.
    pub fn is_qsa(&self, l: usize) -> bool {
        l % self.full_attention_interval == self.full_attention_interval - 1
    }

    /// Number of PLE heads: (ngram_size − 1)·heads_per_ngram.
    pub fn ple_heads(&self) -> usize {
        (self.ple.ngram_size - 1) * self.ple.heads_per_ngram
    }

    /// Channels of the GDN input projection: q and k (Hk·S each) and v (Hv·S).
    pub fn ssm_conv_channels(&self) -> usize {
        2 * self.ssm_groups * self.ssm_state + self.ssm_heads * self.ssm_state
    }

    fn check(&self) -> Result<(), ModelError> {
        let bad = |key: &str, what: &str| Err(ModelError::Metadata { key: format!("{ARCH}.{key}"), what: what.into() });
        let nonzero = [
            ("block_count", self.n_layer),
            ("embedding_length", self.n_embd),
            ("vocab_size", self.vocab),
            ("full_attention_interval", self.full_attention_interval),
            ("hyper_connection.count", self.hc),
            ("hyper_connection.low_rank", self.hc_rank),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("attention.indexer.head_count", self.idx_heads),
            ("attention.indexer.kpool", self.kpool),
            ("ssm.group_count", self.ssm_groups),
            ("ssm.state_size", self.ssm_state),
            ("expert_count", self.n_expert),
            ("expert_used_count", self.n_expert_used),
            ("expert_feed_forward_length", self.expert_ff),
            ("embedding_length_per_layer_input", self.ple_dim),
            ("ple.ngram_size", self.ple.ngram_size.saturating_sub(1)),
            ("ple.heads_per_ngram", self.ple.heads_per_ngram),
        ];
        for (k, v) in nonzero {
            if v == 0 {
                return bad(k, "must be positive");
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad("attention.head_count", "must be a multiple of head_count_kv");
        }
        if !self.ssm_heads.is_multiple_of(self.ssm_groups) {
            return bad("ssm.time_step_rank", "must be a multiple of ssm.group_count");
        }
        if !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim || self.rope_dim > self.idx_dim {
            return bad("rope.dimension_count", "must be even and at most the head and indexer dims");
        }
        if self.conv_kernel != 4 {
            return bad("ssm.conv_kernel", "only 4 is supported");
        }
        if self.n_expert_used > self.n_expert {
            return bad("expert_used_count", "exceeds expert_count");
        }
        if self.eps.is_nan() || self.eps <= 0.0 {
            return bad("attention.layer_norm_rms_epsilon", "must be positive");
        }
        let heads = self.ple_heads();
        if heads * self.ple_dim != self.n_embd {
            return bad("embedding_length_per_layer_input", "PLE heads × row width must equal embedding_length");
        }
        if self.ple.layer_multipliers.len() != self.ple.ngram_size {
            return bad("ple.layer_multipliers", "needs one multiplier per n-gram position");
        }
        if self.ple.head_vocab_sizes.len() != heads || self.ple.head_offsets.len() != heads {
            return bad("ple.head_vocab_sizes", "needs one size and one offset per PLE head");
        }
        if self.ple.head_vocab_sizes.contains(&0) {
            return bad("ple.head_vocab_sizes", "sizes must be positive");
        }
        if self.n_layer < 2 {
            return bad("block_count", "the PLE block sits before layer 1: at least 2 layers");
        }
        Ok(())
    }
}

/// Reads `qwen4exp.*` keys with errors that name them.
struct Reader<'a>(&'a GgufSet);

impl Reader<'_> {
    fn get(&self, key: &str) -> Result<&Value, ModelError> {
        self.0.get(&format!("{ARCH}.{key}")).ok_or_else(|| self.missing(key))
    }

    fn missing(&self, key: &str) -> ModelError {
        ModelError::Metadata { key: format!("{ARCH}.{key}"), what: "missing".into() }
    }

    fn bad(&self, key: &str, what: &str) -> ModelError {
        ModelError::Metadata { key: format!("{ARCH}.{key}"), what: what.into() }
    }

    fn u64(&self, key: &str) -> Result<u64, ModelError> {
        self.get(key)?.as_u64().ok_or_else(|| self.bad(key, "not an unsigned integer"))
    }

    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        usize::try_from(self.u64(key)?).map_err(|_| self.bad(key, "too large"))
    }

    fn f64(&self, key: &str) -> Result<f64, ModelError> {
        self.get(key)?.as_f64().ok_or_else(|| self.bad(key, "not a number"))
    }

    fn u64s(&self, key: &str) -> Result<Vec<u64>, ModelError> {
        self.get(key)?
            .as_array()
            .and_then(|a| a.to_u64s())
            .ok_or_else(|| self.bad(key, "not an array of unsigned integers"))
    }
}
