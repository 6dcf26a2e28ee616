//! The CPU reference back-end: each block operation of [`crate::backend::Backend`] is the contract
//! function of `layers/` over the window: its products for every token at once (each weight read once a
//! window), the stateful steps token by token in order, so every token's bits are a single step's.

use crate::backend::{forward_window, mtp_step, Backend, HcId, MoeId};
use crate::layers::hc::{hc_read_window, hc_write};
use crate::layers::moe::{moe_routed, route_window, Misses};
use crate::layers::{gdn::gdn_window, ple::ple, qsa::qsa_dense, qsa::qsa_dense_append, qsa::qsa_window};
use crate::model::{Model, MTP_WINDOW};
use crate::ops::norm::rms_norm_inplace;
use crate::ops::topk::argmax;
use crate::routing::RoutingSink;
use crate::state::{LayerState, QsaState, State};
use crate::weights::{HcWeights, Layer, Mixer, MoeWeights, MtpWeights};

/// The CPU back-end over a loaded model.
pub struct Cpu<'a> {
    pub model: &'a Model,
    /// Routed experts computed by the kernels for experts off the device (`layers/experts.rs`) instead
    /// of this back-end's own products: a placement, to show that none changes a bit.
    pub misses: Option<&'a (dyn Fn(MoeId, usize) -> bool + Sync)>,
    /// Where the routers' choices go, if anywhere.
    pub profile: Option<&'a dyn RoutingSink>,
}

impl<'a> Cpu<'a> {
    pub fn new(model: &'a Model) -> Cpu<'a> {
        Cpu { model, misses: None, profile: None }
    }
}

impl Cpu<'_> {
    fn mtp(&self) -> &MtpWeights {
        self.model.weights.mtp.as_ref().expect("MTP steps are run only when the model has an MTP layer")
    }

    fn hc_weights(&self, id: HcId) -> &HcWeights {
        let w = &self.model.weights;
        match id {
            HcId::Attn(l) => &w.layers[l].hc_attn,
            HcId::Ffn(l) => &w.layers[l].hc_ffn,
            HcId::Head => &w.output_hc,
            HcId::MtpAttn => &self.mtp().layer.hc_attn,
            HcId::MtpFfn => &self.mtp().layer.hc_ffn,
            HcId::MtpHead => &self.mtp().output_hc,
        }
    }

    fn moe_weights(&self, id: MoeId) -> &MoeWeights {
        match id {
            MoeId::Layer(l) => &self.model.weights.layers[l].moe,
            MoeId::Mtp => &self.mtp().layer.moe,
        }
    }
}

impl Backend for Cpu<'_> {
    type Rows = Vec<Vec<f32>>;
    type State = State;
    type MtpCache = QsaState;
    type Error = std::convert::Infallible;

    fn embed(&self, tokens: &[u32]) -> Result<Self::Rows, Self::Error> {
        let (c, w) = (&self.model.config, &self.model.weights);
        Ok(tokens
            .iter()
            .map(|&t| {
                let mut e = vec![0f32; c.n_embd];
                w.token_embd.row(t as usize, &mut e);
                e.repeat(c.hc)
            })
            .collect())
    }

    fn ple(&self, r: &mut Self::Rows, tokens: &[u32], st: &mut State) -> Result<(), Self::Error> {
        let (c, w) = (&self.model.config, &self.model.weights);
        if let (Some(p), Some(pw)) = (&c.ple, &w.ple) {
            for (row, &t) in r.iter_mut().zip(tokens) {
                ple(row, pw, c, p, t, &mut st.ple);
            }
        }
        Ok(())
    }

    fn hc_read(&self, r: &Self::Rows, id: HcId) -> Result<(Self::Rows, Self::Rows), Self::Error> {
        let (w, c) = (self.hc_weights(id), &self.model.config);
        let rows: Vec<&[f32]> = r.iter().map(Vec::as_slice).collect();
        Ok(hc_read_window(&rows, w, c.hc, c.eps).into_iter().map(|read| (read.mixed, read.inject)).unzip())
    }

    fn hc_write(&self, r: &mut Self::Rows, y: &Self::Rows, inj: &Self::Rows) -> Result<(), Self::Error> {
        for ((row, y), inj) in r.iter_mut().zip(y).zip(inj) {
            hc_write(row, y, inj);
        }
        Ok(())
    }

    fn mixer(&self, l: usize, x: &Self::Rows, st: &mut State, pos: usize) -> Result<Self::Rows, Self::Error> {
        let (m, c) = (self.model, &self.model.config);
        let layer: &Layer = &m.weights.layers[l];
        // The window's products at once, each token's state steps in order (layers/gdn.rs, layers/qsa.rs).
        let xs: Vec<&[f32]> = x.iter().map(Vec::as_slice).collect();
        Ok(match (&layer.mixer, &mut st.layers[l]) {
            (Mixer::Gdn(g), LayerState::Gdn(s)) => {
                gdn_window(&xs, g, (c.ssm_state, c.ssm_groups, c.ssm_heads), c.eps, s)
            }
            (Mixer::Attn(q), LayerState::Attn(s)) => qsa_window(&xs, q, c, s, pos, c.ratio(l), &m.rope),
            _ => unreachable!("state built from the same config"),
        })
    }

    fn moe(&self, id: MoeId, x: &Self::Rows) -> Result<Self::Rows, Self::Error> {
        let (w, c) = (self.moe_weights(id), &self.model.config);
        let xs: Vec<&[f32]> = x.iter().map(Vec::as_slice).collect();
        let routes = route_window(w, &xs, c.n_expert_used);
        if let Some(p) = self.profile {
            routes.iter().for_each(|(ids, _)| p.record(id, ids));
        }
        let misses = self.misses.map(|m| move |e: usize| m(id, e));
        Ok(moe_routed(w, &xs, &routes, c.expert_ff, misses.as_ref().map(|m| m as Misses)))
    }

    fn logits(&self, fin: &Self::Rows) -> Result<Vec<Vec<f32>>, Self::Error> {
        Ok(fin.iter().map(|f| self.model.weights.output.matvec(f)).collect())
    }

    fn last_logits(&self, fin: &Self::Rows) -> Result<Vec<f32>, Self::Error> {
        Ok(fin.last().map(|f| self.model.weights.output.matvec(f)).unwrap_or_default())
    }

    fn last_argmax(&self, fin: &Self::Rows) -> Result<u32, Self::Error> {
        Ok(argmax(&self.last_logits(fin)?))
    }

    fn last_sample(&self, fin: &Self::Rows, p: &crate::ops::sample::SampleParams) -> Result<u32, Self::Error> {
        Ok(crate::ops::sample::sample(&self.last_logits(fin)?, p))
    }

    fn mtp_input(&self, r: &Self::Rows, next: &[u32]) -> Result<Self::Rows, Self::Error> {
        let (c, w, m) = (&self.model.config, &self.model.weights, self.mtp());
        let n = c.n_embd;
        Ok(r.iter()
            .zip(next)
            .map(|(r, &t)| {
                let mut e = vec![0f32; n];
                w.token_embd.row(t as usize, &mut e);
                rms_norm_inplace(&mut e, &m.enorm, c.eps);
                // Per stream: eh_proj · [enorm(e) | hnorm(R[s])], the embedding first.
                let mut cat = vec![0f32; 2 * n];
                cat[..n].copy_from_slice(&e);
                let mut rp = vec![0f32; c.hc * n];
                for s in 0..c.hc {
                    cat[n..].copy_from_slice(&r[s * n..(s + 1) * n]);
                    rms_norm_inplace(&mut cat[n..], &m.hnorm[s * n..(s + 1) * n], c.eps);
                    rp[s * n..(s + 1) * n].copy_from_slice(&m.eh_proj.matvec(&cat));
                }
                rp
            })
            .collect())
    }

    fn mtp_attention(&self, x: &Self::Rows, cache: &mut QsaState, pos: usize) -> Result<Self::Rows, Self::Error> {
        let (m, c) = (self.model, &self.model.config);
        let Mixer::Attn(q) = &self.mtp().layer.mixer else { unreachable!("the MTP layer is bound as attention") };
        Ok(x.iter().enumerate().map(|(i, x)| qsa_dense(x, q, c, cache, pos + i, &m.rope, MTP_WINDOW)).collect())
    }

    fn mtp_append(&self, x: &Self::Rows, cache: &mut QsaState, pos: usize) -> Result<(), Self::Error> {
        let (m, c) = (self.model, &self.model.config);
        let Mixer::Attn(q) = &self.mtp().layer.mixer else { unreachable!("the MTP layer is bound as attention") };
        for (i, x) in x.iter().enumerate() {
            qsa_dense_append(x, q, c, cache, pos + i, &m.rope);
        }
        Ok(())
    }
}

/// The CPU forward pass, on the model itself (the layer loop is backend.rs's, run on [`Cpu`]).
impl Model {
    /// Runs one token through the model at position `state.pos`; returns the vocabulary logits.
    pub fn forward(&self, state: &mut State, token: u32) -> Vec<f32> {
        self.forward_hidden(state, token).0
    }

    /// [`Model::forward`], also returning R, the residual streams after the last layer (the MTP layer's
    /// input, spec §9).
    pub fn forward_hidden(&self, state: &mut State, token: u32) -> (Vec<f32>, Vec<f32>) {
        let (mut logits, mut r) = self.forward_window(state, &[token]);
        (logits.remove(0), r.remove(0))
    }

    /// A window of tokens at positions `state.pos, …` on the CPU: each token's logits and residual
    /// streams, the same bits as one token at a time.
    pub fn forward_window(&self, state: &mut State, tokens: &[u32]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let pos = state.pos;
        let Ok(out) = forward_window(&Cpu::new(self), &self.config, state, tokens, pos);
        state.pos += tokens.len();
        out
    }

    /// One MTP draft step (spec §0.11, §9) from residual streams `r` at cell `pos` (the trunk's R_pos, or the
    /// previous step's R'), with `next` the token at pos + 1: returns the draft logits for pos + 2 and R'.
    /// `cache` is the MTP layer's own KV cache (dense attention over at most its last 32,768 cells).
    pub fn mtp_draft(&self, cache: &mut QsaState, r: &[f32], next: u32, pos: usize) -> Option<(Vec<f32>, Vec<f32>)> {
        self.weights.mtp.as_ref()?;
        let Ok((mut logits, mut rp)) = mtp_step(&Cpu::new(self), cache, &vec![r.to_vec()], &[next], pos);
        Some((logits.remove(0), rp.remove(0)))
    }
}
