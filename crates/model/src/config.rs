//! The model's geometry, read from GGUF metadata as llama.cpp's converter writes it (spec §0, §1). Every
//! value comes from the file and is checked against the others; a missing or inconsistent key is an
//! error naming it.

use strata_gguf::{GgufSet, Value};

use crate::error::ModelError;

pub const ARCH: &str = "qwen4exp";

/// What a trunk layer mixes tokens with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet (linear attention).
    Gdn,
    /// Gated attention; `ratio` is the QSA block size (`attention.compress_ratios[l]`), 0 = dense.
    Attn { ratio: usize },
}

/// Geometry of a qwen4exp model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Trunk layers (`block_count` less the MTP blocks).
    pub n_layer: usize,
    pub kinds: Vec<LayerKind>,
    pub n_embd: usize,
    pub vocab: usize,
    pub hc: usize,
    pub hc_rank: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub rope_dim: usize,
    pub rope_base: f64,
    pub context_length: usize,
    /// `rope.scaling.*` from the file, when it asks for linear or YaRN scaling.
    pub rope_scaling: Option<FileRopeScaling>,
    pub idx_heads: usize,
    pub idx_dim: usize,
    /// Tokens kept per query by the indexer (`top_k / ratio` whole blocks).
    pub idx_top_k: usize,
    pub ssm_state: usize,
    pub ssm_groups: usize,
    pub ssm_heads: usize,
    pub conv_kernel: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub expert_ff: usize,
    pub shexp_ff: usize,
    pub ple: Option<PleConfig>,
    pub nextn_layers: usize,
    /// Things worth saying once at load (dense attention layers and the like).
    pub notes: Vec<String>,
}

/// `rope.scaling.type` and its factor, as the file declares them.
#[derive(Clone, Debug, PartialEq)]
pub struct FileRopeScaling {
    pub kind: String,
    pub factor: f64,
    pub original_context: usize,
}

/// The n-gram table's hashing and block (spec §6).
#[derive(Clone, Debug, PartialEq)]
pub struct PleConfig {
    /// The trunk layer whose start runs the block (`ple.layers`, 0-based; one layer).
    pub layer: usize,
    pub ngram_size: usize,
    pub heads_per_ngram: usize,
    pub conv_kernel: usize,
    /// Values per table row (`embedding_length_per_layer_input`); the embedding is heads × row.
    pub row_dim: usize,
    pub layer_multipliers: Vec<u64>,
    pub head_vocab_sizes: Vec<u64>,
    pub head_offsets: Vec<u64>,
    pub eos_token_id: u64,
}

impl PleConfig {
    /// (ngram_size − 1)·heads_per_ngram.
    pub fn heads(&self) -> usize {
        (self.ngram_size - 1) * self.heads_per_ngram
    }

    /// Width of the concatenated embedding rows.
    pub fn embd_dim(&self) -> usize {
        self.heads() * self.row_dim
    }

    /// Frames of z the dilated conv looks back over: (kernel − 1)·ngram_size.
    pub fn history(&self) -> usize {
        (self.conv_kernel - 1) * self.ngram_size
    }
}

impl Config {
    pub fn from_gguf(set: &GgufSet) -> Result<Config, ModelError> {
        Self::read(&Reader::new(set))
    }

    /// Every `qwen4exp.*` key that reading `set` looks up (present or not), in order: the list a test
    /// rewrites one key at a time, so that no key is read and then ignored.
    pub fn keys_read(set: &GgufSet) -> Vec<String> {
        let r = Reader::new(set);
        let _ = Self::read(&r);
        let mut keys = r.read.into_inner();
        let mut seen = std::collections::HashSet::new();
        keys.retain(|k| seen.insert(k.clone()));
        keys
    }

    fn read(r: &Reader) -> Result<Config, ModelError> {
        let set = r.set;
        let arch = set.get("general.architecture").and_then(Value::as_str);
        if arch != Some(ARCH) {
            return Err(ModelError::Metadata {
                key: "general.architecture".into(),
                what: format!("is {arch:?}, expected \"{ARCH}\""),
            });
        }
        if r.opt("attention.indexer.kpool").is_some() {
            return Err(r.bad(
                "attention.indexer.kpool",
                "this file is in the retired layout of older `strata synth` (no compress_ratios); \
                 write it again with this version's `strata synth`",
            ));
        }
        let vocab = match r.opt("vocab_size") {
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
        let blocks = r.usize("block_count")?;
        let nextn_layers = r.opt_usize("nextn_predict_layers")?.unwrap_or(0);
        if nextn_layers >= blocks {
            return Err(r.bad("nextn_predict_layers", "must be below block_count (the trunk needs a layer)"));
        }
        let n_layer = blocks - nextn_layers;
        let expert_ff = r.usize_or_uniform_array("expert_feed_forward_length", blocks)?;
        let shexp_ff = match r.opt_usize("expert_shared_feed_forward_length")? {
            Some(v) => v,
            None => {
                r.opt_usize("feed_forward_length")?.ok_or_else(|| r.missing("expert_shared_feed_forward_length"))?
            }
        };
        let mut c = Config {
            n_layer,
            kinds: Vec::new(),
            n_embd: r.usize("embedding_length")?,
            vocab,
            hc: r.usize("hyper_connection.count")?,
            hc_rank: r.usize("hyper_connection.low_rank")?,
            n_head: r.usize("attention.head_count")?,
            n_head_kv: r.usize("attention.head_count_kv")?,
            head_dim,
            eps: r.f64("attention.layer_norm_rms_epsilon")? as f32,
            rope_dim: r.usize("rope.dimension_count")?,
            rope_base: r.f64("rope.freq_base")?,
            context_length: r.usize("context_length")?,
            rope_scaling: r.rope_scaling()?,
            idx_heads: r.usize("attention.indexer.head_count")?,
            idx_dim: r.usize("attention.indexer.key_length")?,
            idx_top_k: r.usize("attention.indexer.top_k")?,
            ssm_state: r.usize("ssm.state_size")?,
            ssm_groups: r.usize("ssm.group_count")?,
            ssm_heads: r.usize("ssm.time_step_rank")?,
            conv_kernel: r.usize("ssm.conv_kernel")?,
            n_expert: r.usize("expert_count")?,
            n_expert_used: r.usize("expert_used_count")?,
            expert_ff,
            shexp_ff,
            ple: None,
            nextn_layers,
            notes: Vec::new(),
        };
        c.check()?;
        r.check_rope_sections(c.rope_dim)?;
        if let Some(inner) = r.opt_usize("ssm.inner_size")? {
            if inner != c.ssm_heads * c.ssm_state {
                return Err(r.bad("ssm.inner_size", "must equal ssm.time_step_rank × ssm.state_size"));
            }
        }
        c.kinds = r.layer_kinds(blocks, n_layer)?;
        c.check_kinds()?;
        let dense: Vec<usize> = (0..n_layer).filter(|&l| c.kinds[l] == LayerKind::Attn { ratio: 0 }).collect();
        if !dense.is_empty() {
            c.notes.push(format!(
                "attention layers {dense:?} have block size 0 in {ARCH}.attention.compress_ratios: they run dense \
                 attention (the converter writes zeros when run under transformers 5; see README)"
            ));
        }
        c.ple = r.ple(&c)?;
        Ok(c)
    }

    /// Whether trunk layer l is an attention layer (QSA or dense); the others are GDN.
    pub fn is_attn(&self, l: usize) -> bool {
        matches!(self.kinds[l], LayerKind::Attn { .. })
    }

    /// The QSA block size of layer l (0 for dense attention and for GDN layers).
    pub fn ratio(&self, l: usize) -> usize {
        match self.kinds[l] {
            LayerKind::Attn { ratio } => ratio,
            LayerKind::Gdn => 0,
        }
    }

    /// Channels of the GDN input projection: q and k (Hk·S each) and v (Hv·S).
    pub fn ssm_conv_channels(&self) -> usize {
        2 * self.ssm_groups * self.ssm_state + self.ssm_heads * self.ssm_state
    }

    fn check(&self) -> Result<(), ModelError> {
        let bad = |key: &str, what: &str| Err(ModelError::Metadata { key: format!("{ARCH}.{key}"), what: what.into() });
        let nonzero = [
            ("embedding_length", self.n_embd),
            ("vocab_size", self.vocab),
            ("hyper_connection.low_rank", self.hc_rank),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("attention.indexer.head_count", self.idx_heads),
            ("attention.indexer.key_length", self.idx_dim),
            ("attention.indexer.top_k", self.idx_top_k),
            ("ssm.group_count", self.ssm_groups),
            ("ssm.state_size", self.ssm_state),
            ("ssm.time_step_rank", self.ssm_heads),
            ("ssm.conv_kernel", self.conv_kernel),
            ("expert_count", self.n_expert),
            ("expert_used_count", self.n_expert_used),
            ("expert_feed_forward_length", self.expert_ff),
            ("expert_shared_feed_forward_length", self.shexp_ff),
            ("context_length", self.context_length),
        ];
        for (k, v) in nonzero {
            if v == 0 {
                return bad(k, "must be positive");
            }
        }
        if self.hc < 2 {
            return bad("hyper_connection.count", "must be at least 2");
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
        if self.conv_kernel > 16 {
            return bad("ssm.conv_kernel", "at most 16 is supported");
        }
        if self.n_expert_used > self.n_expert {
            return bad("expert_used_count", "exceeds expert_count");
        }
        if !(self.eps > 0.0 && self.eps < 1.0) {
            return bad("attention.layer_norm_rms_epsilon", "must be in (0, 1)");
        }
        if !(self.rope_base > 1.0 && self.rope_base.is_finite()) {
            return bad("rope.freq_base", "must be a finite number above 1");
        }
        Ok(())
    }

    fn check_kinds(&self) -> Result<(), ModelError> {
        let bad = |key: &str, what: String| Err(ModelError::Metadata { key: format!("{ARCH}.{key}"), what });
        for (l, k) in self.kinds.iter().enumerate() {
            if let LayerKind::Attn { ratio } = *k {
                if ratio > 0 && !self.idx_top_k.is_multiple_of(ratio) {
                    return bad(
                        "attention.indexer.top_k",
                        format!("{} is not a multiple of layer {l}'s block size {ratio}", self.idx_top_k),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Reads `qwen4exp.*` keys with errors that name them, noting each key looked up.
struct Reader<'a> {
    set: &'a GgufSet,
    read: std::cell::RefCell<Vec<String>>,
}

impl<'a> Reader<'a> {
    fn new(set: &'a GgufSet) -> Reader<'a> {
        Reader { set, read: Default::default() }
    }

    fn opt(&self, key: &str) -> Option<&'a Value> {
        let key = format!("{ARCH}.{key}");
        let v = self.set.get(&key);
        self.read.borrow_mut().push(key);
        v
    }

    fn get(&self, key: &str) -> Result<&'a Value, ModelError> {
        self.opt(key).ok_or_else(|| self.missing(key))
    }

    fn missing(&self, key: &str) -> ModelError {
        ModelError::Metadata { key: format!("{ARCH}.{key}"), what: "missing".into() }
    }

    fn bad(&self, key: &str, what: &str) -> ModelError {
        ModelError::Metadata { key: format!("{ARCH}.{key}"), what: what.into() }
    }

    fn as_usize(&self, key: &str, v: &Value) -> Result<usize, ModelError> {
        let v = v.as_u64().ok_or_else(|| self.bad(key, "not an unsigned integer"))?;
        usize::try_from(v).ok().filter(|&v| v < 1 << 40).ok_or_else(|| self.bad(key, "too large"))
    }

    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        self.as_usize(key, self.get(key)?)
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        self.opt(key).map(|v| self.as_usize(key, v)).transpose()
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

    /// A scalar, or a per-layer array (`blocks` long) whose entries are all equal.
    fn usize_or_uniform_array(&self, key: &str, blocks: usize) -> Result<usize, ModelError> {
        match self.get(key)? {
            Value::Array(a) => {
                let v = a.to_u64s().ok_or_else(|| self.bad(key, "not an array of unsigned integers"))?;
                if v.len() != blocks {
                    return Err(self.bad(key, &format!("has {} entries, block_count is {blocks}", v.len())));
                }
                if v.windows(2).any(|w| w[0] != w[1]) {
                    return Err(self.bad(key, "differs between layers (not supported)"));
                }
                self.as_usize(key, &Value::U64(v[0]))
            }
            v => self.as_usize(key, v),
        }
    }

    /// Per trunk layer: GDN or attention (`attention.recurrent_layers`, else `full_attention_interval`),
    /// and each attention layer's block size from `attention.compress_ratios`.
    fn layer_kinds(&self, blocks: usize, n_layer: usize) -> Result<Vec<LayerKind>, ModelError> {
        let per_layer_len = |key: &str, len: usize| {
            if len == blocks || len == n_layer {
                Ok(())
            } else {
                Err(self.bad(key, &format!("has {len} entries; block_count is {blocks} ({n_layer} trunk layers)")))
            }
        };
        let recurrent: Vec<bool> = match self.opt("attention.recurrent_layers") {
            Some(v) => {
                let key = "attention.recurrent_layers";
                let b =
                    v.as_array().and_then(|a| a.to_bools()).ok_or_else(|| self.bad(key, "not an array of booleans"))?;
                per_layer_len(key, b.len())?;
                b
            }
            None => {
                let every = self.opt_usize("full_attention_interval")?.unwrap_or(4);
                if every == 0 {
                    return Err(self.bad("full_attention_interval", "must be positive"));
                }
                (0..n_layer).map(|l| !(l + 1).is_multiple_of(every)).collect()
            }
        };
        let ratios: Vec<u64> = match self.opt("attention.compress_ratios") {
            Some(_) => {
                let r = self.u64s("attention.compress_ratios")?;
                per_layer_len("attention.compress_ratios", r.len())?;
                r
            }
            None => vec![0; n_layer],
        };
        (0..n_layer)
            .map(|l| match (recurrent[l], ratios[l]) {
                (true, 0) => Ok(LayerKind::Gdn),
                (true, _) => Err(self.bad("attention.compress_ratios", &format!("is nonzero on GDN layer {l}"))),
                (false, r) if r <= 1 << 20 => Ok(LayerKind::Attn { ratio: r as usize }),
                (false, _) => Err(self.bad("attention.compress_ratios", &format!("layer {l}: too large"))),
            })
            .collect()
    }

    /// `rope.dimension_sections` (M-RoPE's split of the rotated pairs among time, height and width): text
    /// positions are equal in every section, so the rotation is plain NEOX rope over all of them, and the
    /// sections must cover exactly the `rope.dimension_count / 2` pairs.
    fn check_rope_sections(&self, rope_dim: usize) -> Result<(), ModelError> {
        let key = "rope.dimension_sections";
        if self.opt(key).is_none() {
            return Ok(());
        }
        let pairs: u128 = self.u64s(key)?.iter().map(|&s| s as u128).sum();
        if pairs != (rope_dim / 2) as u128 {
            return Err(self
                .bad(key, &format!("covers {pairs} pairs; rope.dimension_count {rope_dim} rotates {}", rope_dim / 2)));
        }
        Ok(())
    }

    fn rope_scaling(&self) -> Result<Option<FileRopeScaling>, ModelError> {
        let Some(kind) = self.opt("rope.scaling.type") else { return Ok(None) };
        let kind = kind.as_str().ok_or_else(|| self.bad("rope.scaling.type", "not a string"))?.to_string();
        match kind.as_str() {
            "none" => return Ok(None),
            "linear" | "yarn" => {}
            other => {
                return Err(self.bad("rope.scaling.type", &format!("\"{other}\" is not supported (none, linear, yarn)")))
            }
        }
        let factor = self.f64("rope.scaling.factor")?;
        if !(1.0..=1024.0).contains(&factor) {
            return Err(self.bad("rope.scaling.factor", "must be in [1, 1024]"));
        }
        let original_context = match self.opt_usize("rope.scaling.original_context_length")? {
            Some(v) if v > 0 => v,
            Some(_) => return Err(self.bad("rope.scaling.original_context_length", "must be positive")),
            None => self.usize("context_length")?,
        };
        Ok(Some(FileRopeScaling { kind, factor, original_context }))
    }

    /// The PLE keys, present when `ple.layers` lists a layer.
    fn ple(&self, c: &Config) -> Result<Option<PleConfig>, ModelError> {
        let layers = match self.opt("ple.layers") {
            Some(_) => self.u64s("ple.layers")?,
            None => Vec::new(),
        };
        if layers.is_empty() {
            // A PLE table with no layer to run it would be ignored silently: refuse the file instead.
            if self.set.tensor("per_layer_token_embd.weight").is_some() {
                return Err(self.bad("ple.layers", "is missing or empty, but the file has a PLE table"));
            }
            return Ok(None);
        }
        if layers.len() != 1 {
            return Err(self.bad("ple.layers", "lists more than one layer; the file holds one set of hash constants"));
        }
        let layer = layers[0] as usize;
        if layer >= c.n_layer || c.is_attn(layer) {
            return Err(self.bad("ple.layers", &format!("layer {layer} is not a GDN layer of the trunk")));
        }
        let p = PleConfig {
            layer,
            ngram_size: self.usize("ple.ngram_size")?,
            heads_per_ngram: self.usize("ple.heads_per_ngram")?,
            conv_kernel: self.usize("ple.conv_kernel")?,
            row_dim: self.usize("embedding_length_per_layer_input")?,
            layer_multipliers: self.u64s("ple.layer_multipliers")?,
            head_vocab_sizes: self.u64s("ple.head_vocab_sizes")?,
            head_offsets: self.u64s("ple.head_offsets")?,
            eos_token_id: self
                .get("ple.eos_token_id")?
                .as_u64()
                .ok_or_else(|| self.bad("ple.eos_token_id", "not an unsigned integer"))?,
        };
        if !(2..=8).contains(&p.ngram_size) {
            return Err(self.bad("ple.ngram_size", "must be in 2..=8"));
        }
        if p.heads_per_ngram == 0 || p.heads() > 256 {
            return Err(self.bad("ple.heads_per_ngram", "must give 1..=256 heads"));
        }
        if p.conv_kernel == 0 || p.conv_kernel > 16 {
            return Err(self.bad("ple.conv_kernel", "must be in 1..=16"));
        }
        if p.row_dim == 0 || p.embd_dim() > 1 << 20 {
            return Err(self.bad("embedding_length_per_layer_input", "must be positive (and not huge)"));
        }
        if p.layer_multipliers.len() < p.ngram_size {
            return Err(self.bad("ple.layer_multipliers", "needs one multiplier per n-gram position"));
        }
        if p.head_vocab_sizes.len() < p.heads() || p.head_offsets.len() < p.heads() {
            return Err(self.bad("ple.head_vocab_sizes", "needs one size and one offset per PLE head"));
        }
        for h in 0..p.heads() {
            if p.head_vocab_sizes[h] == 0 {
                return Err(self.bad("ple.head_vocab_sizes", "sizes must be positive"));
            }
            if p.head_offsets[h].checked_add(p.head_vocab_sizes[h]).is_none_or(|e| e > 1 << 40) {
                return Err(self.bad("ple.head_offsets", "a head's rows run past 2^40"));
            }
        }
        if p.eos_token_id >= c.vocab as u64 {
            return Err(self.bad("ple.eos_token_id", "is not in the vocabulary"));
        }
        Ok(Some(p))
    }
}
