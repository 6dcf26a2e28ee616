//! The forward pass of spec §2, written once over a back-end. A back-end (the CPU reference here, CUDA in
//! crates/cuda) implements the block-level operations; [`forward_window`] is the layer loop, and
//! [`mtp_step`] runs the MTP draft layer through the same layer step.
//!
//! A window is T tokens (1..=8 on the GPU) moving through the layers together. Every operation computes
//! each token of the window exactly as it would compute that token alone — the same bits (docs/
//! ARITHMETIC.md) — carrying state (GDN, QSA caches, PLE history) from token to token in order. So a
//! window of T tokens equals T single-token steps, on every back-end.

use crate::config::Config;

/// Which hyper-connection read: a layer's two halves, the final read, or the MTP layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcId {
    Attn(usize),
    Ffn(usize),
    Head,
    MtpAttn,
    MtpFfn,
    MtpHead,
}

/// Which MoE block: a trunk layer's or the MTP layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeId {
    Layer(usize),
    Mtp,
}

/// The block-level operations of the forward pass on one device.
pub trait Backend {
    /// A window's activations, one row per token.
    type Rows;
    /// The context state (caches, recurrent states, PLE history) on this device.
    type State;
    /// The MTP layer's own KV cache.
    type MtpCache;
    /// What can go wrong on this device (nothing on the CPU; a launch or an allocation on a GPU).
    type Error;

    /// The residual streams of each token: its embedding row repeated hc times.
    fn embed(&self, tokens: &[u32]) -> Result<Self::Rows, Self::Error>;
    /// The PLE block of spec §6 on each token's streams, in order (it advances the history).
    fn ple(&self, r: &mut Self::Rows, tokens: &[u32], st: &mut Self::State) -> Result<(), Self::Error>;
    /// The read of spec §3: each token's layer input and its inject scalars (none for the final reads).
    fn hc_read(&self, r: &Self::Rows, id: HcId) -> Result<(Self::Rows, Self::Rows), Self::Error>;
    /// `R[c] += y·2σ(inj[c]/hc)` for each token.
    fn hc_write(&self, r: &mut Self::Rows, y: &Self::Rows, inj: &Self::Rows) -> Result<(), Self::Error>;
    /// [`Backend::hc_write`] then [`Backend::hc_read`] of the same streams (a device may do both in one pass).
    fn hc_write_read(
        &self,
        r: &mut Self::Rows,
        (y, inj): (&Self::Rows, &Self::Rows),
        id: HcId,
    ) -> Result<(Self::Rows, Self::Rows), Self::Error> {
        self.hc_write(r, y, inj)?;
        self.hc_read(r, id)
    }
    /// Trunk layer l's token mixer (GDN or attention) for tokens at positions pos, pos + 1, ….
    fn mixer(&self, l: usize, x: &Self::Rows, st: &mut Self::State, pos: usize) -> Result<Self::Rows, Self::Error>;
    /// The MoE of spec §7 for each token.
    fn moe(&self, id: MoeId, x: &Self::Rows) -> Result<Self::Rows, Self::Error>;
    /// The head: logits of each token from its final read.
    fn logits(&self, fin: &Self::Rows) -> Result<Vec<Vec<f32>>, Self::Error>;
    /// The head of the window's last token only (what a prompt's windows and sampling need).
    fn last_logits(&self, fin: &Self::Rows) -> Result<Vec<f32>, Self::Error>;
    /// The greedy token after the window's last: `argmax` of its logits (ops/topk.rs), where they are.
    fn last_argmax(&self, fin: &Self::Rows) -> Result<u32, Self::Error>;
    /// The token drawn after the window's last by `sample` (ops/sample.rs) from its logits, where they are.
    fn last_sample(&self, fin: &Self::Rows, p: &crate::ops::sample::SampleParams) -> Result<u32, Self::Error>;
    /// The MTP layer's input R' from the streams `r` and the next tokens (spec §0.11).
    fn mtp_input(&self, r: &Self::Rows, next: &[u32]) -> Result<Self::Rows, Self::Error>;
    /// The MTP layer's dense attention over its own cache, for tokens at positions pos, pos + 1, ….
    fn mtp_attention(&self, x: &Self::Rows, cache: &mut Self::MtpCache, pos: usize) -> Result<Self::Rows, Self::Error>;
    /// [`Backend::mtp_attention`]'s cells alone: the tokens' K and V appended at positions pos, pos + 1, …,
    /// with no query, scores or output (the cells of positions no draft is asked of).
    fn mtp_append(&self, x: &Self::Rows, cache: &mut Self::MtpCache, pos: usize) -> Result<(), Self::Error>;
    /// What is made from now on belongs to trunk layer `layer` (None: to the window): a device may take
    /// layer l's temporaries back from layer l + 2 on, since a layer's outputs are read by the next layer
    /// and never later. Nothing on the CPU.
    fn layer_scope(&self, _layer: Option<usize>) {}
}

/// Each token's logits, and the window's residual streams after the last layer.
pub type Step<B> = Result<(Vec<Vec<f32>>, <B as Backend>::Rows), <B as Backend>::Error>;

/// A half's output and inject scalars whose write into R waits for the next read (which does both).
type Pending<B> = Option<(<B as Backend>::Rows, <B as Backend>::Rows)>;

/// The read `id` of R, after the pending write if there is one.
fn read<B: Backend>(
    b: &B,
    r: &mut B::Rows,
    pending: &mut Pending<B>,
    id: HcId,
) -> Result<(B::Rows, B::Rows), B::Error> {
    match pending.take() {
        Some((y, inj)) => b.hc_write_read(r, (&y, &inj), id),
        None => b.hc_read(r, id),
    }
}

/// One layer's two halves around a token mixer: `mix` for the first half, the MoE `moe` for the second;
/// the second half's write is left pending for the next read.
fn layer_step<B: Backend>(
    b: &B,
    r: &mut B::Rows,
    pending: &mut Pending<B>,
    (attn, ffn): (HcId, HcId),
    moe: MoeId,
    mix: impl FnOnce(&B::Rows) -> Result<B::Rows, B::Error>,
) -> Result<(), B::Error> {
    let (x, inj) = read(b, r, pending, attn)?;
    let y = mix(&x)?;
    let (x, inj) = b.hc_write_read(r, (&y, &inj), ffn)?;
    let y = b.moe(moe, &x)?;
    *pending = Some((y, inj));
    Ok(())
}

/// Spec §2 for a window of tokens at positions `pos, pos + 1, …`: the logits of each token, and the
/// residual streams after the last layer (the MTP layer's input).
pub fn forward_window<B: Backend>(b: &B, c: &Config, st: &mut B::State, tokens: &[u32], pos: usize) -> Step<B> {
    let (fin, r) = trunk(b, c, st, tokens, pos)?;
    Ok((b.logits(&fin)?, r))
}

/// Spec §2 up to the head: each token's final read, and the residual streams after the last layer.
pub fn trunk<B: Backend>(
    b: &B,
    c: &Config,
    st: &mut B::State,
    tokens: &[u32],
    pos: usize,
) -> Result<(B::Rows, B::Rows), B::Error> {
    let mut r = b.embed(tokens)?;
    let mut pending = None;
    for l in 0..c.n_layer {
        b.layer_scope(Some(l));
        if c.ple.as_ref().is_some_and(|p| p.layer == l) {
            if let Some((y, inj)) = pending.take() {
                b.hc_write(&mut r, &y, &inj)?;
            }
            b.ple(&mut r, tokens, st)?;
        }
        let mix = |x: &B::Rows| b.mixer(l, x, st, pos);
        layer_step(b, &mut r, &mut pending, (HcId::Attn(l), HcId::Ffn(l)), MoeId::Layer(l), mix)?;
    }
    b.layer_scope(None);
    // The final read also makes the last write, so R holds every layer's (the MTP layer's input).
    let (fin, _) = read(b, &mut r, &mut pending, HcId::Head)?;
    Ok((fin, r))
}

/// One MTP draft step (spec §0.11, §9) for each row of `r` (streams at cell pos + i) with `next[i]` the
/// token at the following cell: the draft logits and R', which feeds the next draft step.
pub fn mtp_step<B: Backend>(b: &B, cache: &mut B::MtpCache, r: &B::Rows, next: &[u32], pos: usize) -> Step<B> {
    let (fin, rp) = mtp_read(b, cache, r, next, pos)?;
    Ok((b.logits(&fin)?, rp))
}

/// The MTP cells of the rows of `r` (streams at cell pos + i) with `next[i]` the token at the following
/// cell: what the layer's cache keeps of [`mtp_step`]. A cell is the attention's K and V of the layer's
/// first read, so only the input, that read and the K and V projections run (the same ops as the step's
/// start, so the same cells), not the attention itself, the MoE, the final read or the head.
pub fn mtp_cells<B: Backend>(
    b: &B,
    cache: &mut B::MtpCache,
    r: &B::Rows,
    next: &[u32],
    pos: usize,
) -> Result<(), B::Error> {
    let rp = b.mtp_input(r, next)?;
    let (x, _) = b.hc_read(&rp, HcId::MtpAttn)?;
    b.mtp_append(&x, cache, pos)
}

/// [`mtp_step`] up to the head: each row's final read, and R' (a draft head over part of the vocabulary
/// takes it from here).
pub fn mtp_read<B: Backend>(
    b: &B,
    cache: &mut B::MtpCache,
    r: &B::Rows,
    next: &[u32],
    pos: usize,
) -> Result<(B::Rows, B::Rows), B::Error> {
    let mut rp = b.mtp_input(r, next)?;
    let mut pending = None;
    let mix = |x: &B::Rows| b.mtp_attention(x, cache, pos);
    layer_step(b, &mut rp, &mut pending, (HcId::MtpAttn, HcId::MtpFfn), MoeId::Mtp, mix)?;
    let (fin, _) = read(b, &mut rp, &mut pending, HcId::MtpHead)?;
    Ok((fin, rp))
}
