//! The model and its forward pass (spec §2), one token at a time.

use std::path::Path;

use strata_gguf::GgufSet;

use crate::config::Config;
use crate::error::ModelError;
use crate::kv::KvMode;
use crate::layers::{gdn::gdn, hc::hc_read, hc::hc_write, moe::moe, ple::ple, qsa::qsa, qsa::qsa_dense};
use crate::ops::norm::rms_norm_inplace;
use crate::ops::rope::{Rope, RopeScaling};
use crate::state::QsaState;

/// The MTP layer attends to at most this many of its own cells (spec §9).
pub const MTP_WINDOW: usize = 32_768;
use crate::state::{LayerState, State};
use crate::weights::{Mixer, Weights};

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

    /// Runs one token through the model at position `state.pos`; returns the vocabulary logits.
    pub fn forward(&self, state: &mut State, token: u32) -> Vec<f32> {
        self.forward_hidden(state, token).0
    }

    /// [`Model::forward`], also returning R, the residual streams after the last layer (the MTP layer's
    /// input, spec §9).
    pub fn forward_hidden(&self, state: &mut State, token: u32) -> (Vec<f32>, Vec<f32>) {
        let c = &self.config;
        let w = &self.weights;
        let pos = state.pos;
        let mut e = vec![0f32; c.n_embd];
        w.token_embd.row(token as usize, &mut e);
        let mut r: Vec<f32> = e.repeat(c.hc);
        for (l, (layer, ls)) in w.layers.iter().zip(state.layers.iter_mut()).enumerate() {
            if let (Some(p), Some(pw)) = (&c.ple, &w.ple) {
                if p.layer == l {
                    ple(&mut r, pw, c, p, token, &mut state.ple);
                }
            }
            let read = hc_read(&r, &layer.hc_attn, c.hc);
            let y = match (&layer.mixer, ls) {
                (Mixer::Gdn(g), LayerState::Gdn(s)) => gdn(&read.mixed, g, c, s),
                (Mixer::Attn(q), LayerState::Attn(s)) => qsa(&read.mixed, q, c, s, pos, c.ratio(l), &self.rope),
                _ => unreachable!("state built from the same config"),
            };
            hc_write(&mut r, &y, &read.inject);
            let read = hc_read(&r, &layer.hc_ffn, c.hc);
            hc_write(&mut r, &moe(&layer.moe, &read.mixed, c.n_expert_used, c.expert_ff), &read.inject);
        }
        let fin = hc_read(&r, &w.output_hc, c.hc);
        state.pos += 1;
        (w.output.matvec(&fin.mixed), r)
    }

    /// One MTP draft step (spec §0.11, §9) from residual streams `r` at cell `pos` (the trunk's R_pos, or the
    /// previous step's R'), with `next` the token at pos + 1: returns the draft logits for pos + 2 and R'.
    /// `cache` is the MTP layer's own KV cache (dense attention over at most its last 32,768 cells).
    pub fn mtp_draft(&self, cache: &mut QsaState, r: &[f32], next: u32, pos: usize) -> Option<(Vec<f32>, Vec<f32>)> {
        let (c, w) = (&self.config, &self.weights);
        let m = w.mtp.as_ref()?;
        let n = c.n_embd;
        let mut e = vec![0f32; n];
        w.token_embd.row(next as usize, &mut e);
        rms_norm_inplace(&mut e, &m.enorm);
        // Per stream: eh_proj · [enorm(e) | hnorm(R[s])], the embedding first.
        let mut cat = vec![0f32; 2 * n];
        cat[..n].copy_from_slice(&e);
        let mut rp = vec![0f32; c.hc * n];
        for s in 0..c.hc {
            cat[n..].copy_from_slice(&r[s * n..(s + 1) * n]);
            rms_norm_inplace(&mut cat[n..], &m.hnorm[s * n..(s + 1) * n]);
            rp[s * n..(s + 1) * n].copy_from_slice(&m.eh_proj.matvec(&cat));
        }
        let Mixer::Attn(q) = &m.layer.mixer else { unreachable!("the MTP layer is bound as attention") };
        let read = hc_read(&rp, &m.layer.hc_attn, c.hc);
        hc_write(&mut rp, &qsa_dense(&read.mixed, q, c, cache, pos, &self.rope, MTP_WINDOW), &read.inject);
        let read = hc_read(&rp, &m.layer.hc_ffn, c.hc);
        hc_write(&mut rp, &moe(&m.layer.moe, &read.mixed, c.n_expert_used, c.expert_ff), &read.inject);
        let fin = hc_read(&rp, &m.output_hc, c.hc);
        Some((w.output.matvec(&fin.mixed), rp))
    }

    /// An empty cache for the MTP layer.
    pub fn mtp_cache(&self, kv: KvMode) -> QsaState {
        QsaState::new(&self.config, kv)
    }
}
