//! The model: its file, config, weights and rope; the forward pass on the CPU back-end (the layer loop
//! itself is `backend::forward_window`, written once for every back-end).

use std::path::Path;

use strata_gguf::GgufSet;

use crate::config::Config;
use crate::error::ModelError;
use crate::kv::KvMode;
use crate::ops::rope::{Rope, RopeScaling};
use crate::state::{QsaState, State};
use crate::weights::Weights;

/// The MTP layer attends to at most this many of its own cells (spec §9).
pub const MTP_WINDOW: usize = 32_768;

pub struct Model {
    pub config: Config,
    pub weights: Weights,
    pub rope: Rope,
    /// The file set, kept for its metadata (tokenizer, chat template).
    pub gguf: GgufSet,
}

impl Model {
    /// Opens a model file (or shard set) and binds its tensors. `RopeScaling::None` takes the file's own
    /// `rope.scaling.*`, if it declares any.
    pub fn open(path: impl AsRef<Path>, scaling: RopeScaling) -> Result<Model, ModelError> {
        Model::from_set(GgufSet::open(path)?, scaling)
    }

    /// [`Model::open`] for a file set already open (or held in memory).
    pub fn from_set(gguf: GgufSet, scaling: RopeScaling) -> Result<Model, ModelError> {
        let config = Config::from_gguf(&gguf)?;
        let weights = Weights::load(&gguf, &config)?;
        let scaling = match (&config.rope_scaling, scaling) {
            (Some(f), RopeScaling::None) if f.kind == "linear" => RopeScaling::Linear(f.factor),
            (Some(f), RopeScaling::None) => RopeScaling::Yarn { factor: f.factor, orig_ctx: f.original_context as u64 },
            (_, s) => s,
        };
        let rope = Rope::new(config.rope_dim, config.rope_base, scaling);
        Ok(Model { config, weights, rope, gguf })
    }

    /// Whether the head is the token embedding (the file has no `output.weight`).
    pub fn tied_head(&self) -> bool {
        std::ptr::eq(&self.weights.output.bytes[..], &self.weights.token_embd.bytes[..])
    }

    /// One line on what was loaded: layers, widths, experts, the head, the norms' epsilon.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let attn = (0..c.n_layer).filter(|&l| c.is_attn(l)).count();
        format!(
            "{} layers ({} GDN, {attn} attention){}, width {}, vocabulary {}, {} experts (top {}), {}, rms eps {:e}",
            c.n_layer,
            c.n_layer - attn,
            if self.weights.mtp.is_some() { " + MTP" } else { "" },
            c.n_embd,
            c.vocab,
            c.n_expert,
            c.n_expert_used,
            if self.tied_head() { "tied head (no output.weight: token_embd is the head)" } else { "own head" },
            c.eps,
        )
    }

    /// Takes the MTP draft layer from a separate MTP-only file (`--mtp FILE`), in place of the model
    /// file's own, after checking its geometry against the model's.
    pub fn attach_mtp(&mut self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        let set = GgufSet::open(path)?;
        self.weights.mtp = Some(crate::weights::MtpWeights::load_sidecar(&set, &self.config)?);
        Ok(())
    }

    /// A fresh context. int8 KV needs each cell's k and v to be whole groups of 64 values.
    pub fn new_state(&self, kv: KvMode) -> Result<State, ModelError> {
        let dim = self.config.n_head_kv * self.config.head_dim;
        if kv == KvMode::Int8 && !dim.is_multiple_of(crate::kv::INT8_GROUP) {
            return Err(ModelError::Metadata {
                key: "qwen4exp.attention.head_count_kv".into(),
                what: format!("int8 KV needs k/v widths in groups of 64; this model's is {dim} (use fp16)"),
            });
        }
        Ok(State::new(&self.config, kv))
    }

    /// An empty cache for the MTP layer.
    pub fn mtp_cache(&self, kv: KvMode) -> QsaState {
        QsaState::new(&self.config, kv)
    }
}
