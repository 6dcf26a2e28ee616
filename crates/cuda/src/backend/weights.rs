//! The model's weights on the device: each layer's mixer, HC reads and MoE block, the embedding and the
//! head, the PLE block and (on request) the MTP layer, every family uploaded to run the plan's variant.

use std::sync::{Arc, Mutex};

use strata_model::config::LayerKind;
use strata_model::model::MTP_WINDOW;
use strata_model::weights::{Mixer, MoeWeights, PleWeights};
use strata_model::Model;

use crate::backend::cache::CardCache;
use crate::ops::attn::{AttnDims, AttnGpu, Cells};
use crate::ops::gdn::GdnGpu;
use crate::ops::hc::HcGpu;
use crate::ops::layout::Layouts;
use crate::ops::matvec::MatrixGpu;
use crate::ops::misses::{MissBox, MissServer};
use crate::ops::moe::{MoeGpu, Placement, Staging, StreamFrom, STAGED};
use crate::ops::variants::Variants;
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use crate::runtime::pinned::{fault_in, whole_pages, PinnedRanges};

pub(crate) enum MixerGpu {
    Gdn(GdnGpu),
    Attn(AttnGpu, Cells),
}

pub(crate) struct LayerGpu {
    pub(crate) hc_attn: HcGpu,
    pub(crate) mixer: MixerGpu,
    pub(crate) hc_ffn: HcGpu,
    pub(crate) moe: MoeGpu,
}

/// The MTP draft layer on the device (uploaded on request: only drafting needs it).
pub(crate) struct MtpGpu {
    pub(crate) enorm: Buf<f32>,
    pub(crate) hnorm: Buf<f32>,
    pub(crate) eh_proj: MatrixGpu,
    pub(crate) layer: LayerGpu,
    pub(crate) head: HcGpu,
}

pub(crate) struct PleGpu {
    pub(crate) key: MatrixGpu,
    pub(crate) value: MatrixGpu,
    pub(crate) norm_key: Buf<f32>,
    pub(crate) norm_query: Buf<f32>,
    pub(crate) norm_conv: Buf<f32>,
    pub(crate) conv: Buf<f32>,
}

/// Routed experts in host memory (`--gpu-mem`, `STRATA_HOST_EXPERTS=N`; docs/PLACEMENT.md): the card
/// holds N experts a block in a cache ranked by the routing, the host computes the rest, answering the
/// blocks' requests through one mailbox (the trunk's blocks are 0..n_layer, the MTP layer's n_layer) on a
/// thread of its own.
pub(crate) struct HostExperts {
    pub(crate) cache: Mutex<CardCache>,
    mailbox: Arc<MissBox>,
    pub(crate) server: MissServer,
    /// The experts' pages locked in RAM (`Placing::pin`), for as long as the server and the card's
    /// stream slots read them.
    _pinned: Option<PinnedRanges>,
    /// Each block's stream slots, where its experts are locked and `STRATA_STREAM_SLOTS` asks for them.
    streams: Vec<Option<StreamFrom>>,
    /// The placed prompt windows' staging area (ops/moe/window.rs), where blocks stream and
    /// `STRATA_WINDOW_STREAM` is on; made once the blocks are on the card.
    pub(crate) staging: Option<Staging>,
}

/// Where routed experts go when they do not all fit the card (docs/PLACEMENT.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Placing {
    /// Experts each MoE block holds on the card.
    pub held: usize,
    /// The experts' pages of the mapped file locked in RAM (the memory plan's pinned home), else left to
    /// the page cache (`--mmap-experts`, or RAM too short).
    pub pin: bool,
    /// Where the cache's routing counts are kept between runs (`strata_model::routing_file`): read for
    /// the first holding, written as the run goes. None: the cache starts from each block's first experts.
    pub counts: Option<std::path::PathBuf>,
    /// The tokens of a prompt window the memory plan sized the scratch for (`MemoryPlan::window`).
    pub window: usize,
}

/// The routed experts' bytes of every block (the trunk's and the MTP layer's), as the file's mapping
/// holds them.
fn expert_bytes(model: &Model) -> Vec<&[u8]> {
    let w = &model.weights;
    let blocks = w.layers.iter().map(|l| &l.moe).chain(w.mtp.as_ref().map(|m| &m.layer.moe));
    blocks.flat_map(|m| [&m.gate_exps.m.bytes[..], &m.up_exps.m.bytes[..], &m.down_exps.m.bytes[..]]).collect()
}

/// The experts' pages locked in RAM, or, where the driver cannot lock the file's pages, read in once;
/// said on standard error with the time it took.
fn pin_experts(g: &Gpu, model: &Model, mapped: bool) -> Option<PinnedRanges> {
    let t0 = std::time::Instant::now();
    let bytes = expert_bytes(model);
    let ranges: Vec<(usize, usize)> = bytes.iter().map(|b| (b.as_ptr() as usize, b.len())).collect();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match PinnedRanges::register(&g.ctx, &ranges, mapped) {
        Ok(p) => {
            eprintln!("host: experts {:.2} GiB locked in RAM in {:.1} s", gib(p.bytes), t0.elapsed().as_secs_f64());
            Some(p)
        }
        Err(e) => {
            let read = fault_in(&bytes);
            eprintln!(
                "note: the experts' pages could not be locked ({e}); {:.2} GiB read into RAM in {:.1} s instead",
                gib(read),
                t0.elapsed().as_secs_f64()
            );
            None
        }
    }
}

/// The placed prompt windows' staging areas (ops/moe/window.rs): none where the windows stream nothing
/// (`STRATA_WINDOW_STREAM=0`, or the host counting the routings: `STRATA_ASK_MISSES_ONLY=0`), two where a
/// chunk's copies overlap the chunk before's gathers (`STRATA_WINDOW_OVERLAP`), else one.
fn staging_areas(g: &Gpu) -> usize {
    let s = &g.settings;
    match s.window_stream && s.ask_misses_only {
        true => 1 + usize::from(s.window_overlap),
        false => 0,
    }
}

/// The experts lo..hi of a stacked tensor at `a` (`bytes` long, `len` bytes an expert) whose bytes lie
/// whole in its locked pages (`whole_pages`), with the first locked byte: None where no expert does, or
/// `len` is not whole words.
fn locked_experts(a: usize, bytes: usize, len: usize) -> Option<(usize, usize, usize)> {
    let (first, end) = whole_pages(a, bytes);
    if len == 0 || !len.is_multiple_of(4) || first >= end {
        return None;
    }
    let (lo, hi) = ((first - a).div_ceil(len), (end - a) / len);
    (lo < hi).then_some((first, lo, hi))
}

/// Block `w`'s stream slots over the locked pages `pinned`: each projection's card address of expert 0
/// and the experts whose bytes lie whole in locked pages (a tensor's first and last pages are not locked
/// where they hold other bytes: runtime/pinned.rs). None where no expert can be read so.
pub(crate) fn stream_from(
    pinned: &PinnedRanges,
    w: &MoeWeights,
    (slots, guesses, second): (usize, usize, usize),
) -> Option<StreamFrom> {
    let experts = w.router.rows;
    let fused = std::ptr::eq(&w.gate_exps.m.bytes[..], &w.up_exps.m.bytes[..]);
    let (mut src, mut lo, mut hi) = ([0u64; 3], 0, experts);
    for (i, s) in [&w.gate_exps, &w.up_exps, &w.down_exps].into_iter().enumerate() {
        if i == 1 && fused {
            continue; // copied with the gate half
        }
        let len = s.stride * s.m.row_view().row_bytes();
        let a = s.m.bytes.as_ptr() as usize;
        let (first, l, h) = locked_experts(a, s.m.bytes.len(), len)?;
        (lo, hi) = (lo.max(l), hi.min(h));
        src[i] = pinned.device_address(first).ok()?.wrapping_sub((first - a) as u64);
    }
    (lo < hi).then_some(StreamFrom { slots, guesses, second: second.min(guesses), src, lo, hi })
}

impl HostExperts {
    fn new(g: &Gpu, model: &Model, placing: Placing) -> Result<HostExperts, CudaError> {
        // Mapped for the card only where its stream slots read the pages.
        let _pinned = if placing.pin { pin_experts(g, model, g.settings.stream_slots > 0) } else { None };
        let w = &model.weights;
        let blocks: Vec<&MoeWeights> =
            w.layers.iter().map(|l| &l.moe).chain(w.mtp.as_ref().map(|m| &m.layer.moe)).collect();
        // Stream and guess slots come out of each block's share of the budget (at least one slot stays
        // the cache's).
        let slots = g.settings.stream_slots.min(placing.held.saturating_sub(1));
        let first = g.settings.guess_slots.min(placing.held.saturating_sub(1 + slots));
        // With the early guess, `STRATA_GUESS_MIXER_SLOTS` more for a second guess at the mixer.
        let second = match g.settings.guess_early {
            true => g.settings.guess_mixer_slots.min(placing.held.saturating_sub(1 + slots + first)),
            false => 0,
        };
        let guesses = first + second;
        let streams: Vec<Option<StreamFrom>> = match &_pinned {
            Some(p) if slots > 0 => blocks.iter().map(|b| stream_from(p, b, (slots, guesses, second))).collect(),
            _ => vec![None; blocks.len()],
        };
        let streaming = streams.iter().filter(|s| s.is_some()).count();
        // The prompt windows' staging area (STAGED experts of a block's shapes) comes out of the blocks'
        // shares too.
        let staged = match streaming > 0 {
            true => (STAGED * staging_areas(g)).div_ceil(blocks.len()),
            false => 0,
        };
        let per_block = (placing.held - if streaming > 0 { slots + guesses } else { 0 }).saturating_sub(staged).max(1);
        if g.settings.stream_slots > 0 && g.settings.stream_slots_asked {
            match (streaming, &_pinned) {
                (0, Some(_)) => eprintln!("note: STRATA_STREAM_SLOTS: none used (a block's share holds one slot, no expert lies whole in locked pages, or the driver gave no card address for them)"),
                (0, None) => eprintln!("note: STRATA_STREAM_SLOTS needs the experts' pages locked in RAM; none used"),
                _ => {}
            }
        }
        if streaming > 0 {
            let guessing = match (guesses, second) {
                (0, _) => String::new(),
                (_, 0) => format!(" and {guesses} guess slots"),
                _ => format!(" and {guesses} guess slots ({second} guessed at the mixer)"),
            };
            eprintln!(
                "expert cache: {slots} stream slots{guessing} a block ({streaming} of {} blocks), {per_block} experts held",
                blocks.len()
            );
        }
        let c = &model.config;
        let mailbox = Arc::new(MissBox::new(g, c.n_expert_used, c.n_embd)?);
        let (every, swaps) = (g.settings.cache_every, g.settings.cache_swaps);
        let cache = CardCache::new(g, (c.n_layer, c.n_expert, per_block), (every, swaps), placing.counts)?;
        let blocks = w.layers.iter().map(|l| l.moe.clone()).chain(w.mtp.as_ref().map(|m| m.layer.moe.clone()));
        // The host counts each request's routings for the cache's ranking, unless the card counts them
        // itself (`STRATA_ASK_MISSES_ONLY`: the host then sees only the requests it computes for).
        let routed = (!g.settings.ask_misses_only).then(|| cache.routed());
        let server = mailbox.serve(blocks.collect(), c.expert_ff, routed);
        Ok(HostExperts { cache: Mutex::new(cache), mailbox, server, _pinned, streams, staging: None })
    }

    /// Block `index`'s placement: the experts its cache holds now (its first N at the start).
    fn placement(&self, index: usize) -> Placement {
        let held = self.cache.lock().unwrap_or_else(|p| p.into_inner()).held(index);
        Placement { held, index, mailbox: self.mailbox.clone(), stream: self.streams.get(index).copied().flatten() }
    }
}

/// The model's weights on the device.
pub struct WeightsGpu {
    pub(crate) embd: Arc<MatrixGpu>,
    /// The head: the embedding's own device copy when the file ties them.
    pub(crate) output: Arc<MatrixGpu>,
    pub(crate) layers: Vec<LayerGpu>,
    pub(crate) head: HcGpu,
    pub(crate) ple: Option<PleGpu>,
    pub(crate) mtp: Option<MtpGpu>,
    pub(crate) host: Option<HostExperts>,
}

impl WeightsGpu {
    /// Copies the model's weights to the device, each family to run in `v`'s variants (the plan's); a
    /// weight type without a kernel is refused by name. The MTP layer is uploaded apart ([`Self::upload_mtp`]).
    /// `placing`: experts a MoE block holds on the card, the host computing the rest (None: all of them
    /// on the card, unless `STRATA_HOST_EXPERTS` says otherwise).
    pub fn upload(g: &Gpu, model: &Model, v: &Variants, placing: Option<Placing>) -> Result<WeightsGpu, CudaError> {
        let (c, w) = (&model.config, &model.weights);
        let dims = attn_dims(c);
        // Pages locked only where stream slots are asked for (the parity runs' way to reach `miss_stream`).
        let pin = g.settings.stream_slots_asked && g.settings.stream_slots > 0;
        let placing = placing.or(g.settings.host_experts.map(|held| Placing {
            held,
            pin,
            counts: None,
            window: g.settings.prompt_window(),
        }));
        let mut host = placing.map(|p| HostExperts::new(g, model, p)).transpose()?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for (l, lw) in w.layers.iter().enumerate() {
            let mixer = match (&lw.mixer, c.kinds[l]) {
                (Mixer::Gdn(gw), _) => {
                    MixerGpu::Gdn(GdnGpu::upload(g, gw, (c.ssm_state, c.ssm_groups, c.ssm_heads), c.eps, v)?)
                }
                (Mixer::Attn(aw), LayerKind::Attn { ratio }) => {
                    let cells = if ratio > 0 { Cells::Qsa(ratio) } else { Cells::Dense(usize::MAX) };
                    MixerGpu::Attn(AttnGpu::upload(g, aw, dims, v)?, cells)
                }
                (Mixer::Attn(_), LayerKind::Gdn) => unreachable!("weights bound from the same config"),
            };
            layers.push(LayerGpu {
                hc_attn: HcGpu::upload(g, &lw.hc_attn, c.hc, c.eps, v.hc)?,
                mixer,
                hc_ffn: HcGpu::upload(g, &lw.hc_ffn, c.hc, c.eps, v.hc)?,
                moe: MoeGpu::upload(
                    g,
                    &lw.moe,
                    (c.n_expert_used, c.expert_ff),
                    v,
                    host.as_ref().map(|h| h.placement(l)),
                )?,
            });
        }
        if let (Some(h), Some(first)) = (host.as_mut(), layers.first()) {
            if staging_areas(g) > 0 && h.streams.iter().any(Option::is_some) {
                h.staging = Some(Staging::new(g, &first.moe, staging_areas(g))?);
            }
        }
        let ple = match &w.ple {
            Some(p) => Some(upload_ple(g, p, &v.layouts)?),
            None => None,
        };
        let embd = Arc::new(MatrixGpu::upload(g, &w.token_embd, &v.layouts)?);
        Ok(WeightsGpu {
            output: if std::ptr::eq(&w.output.bytes[..], &w.token_embd.bytes[..]) {
                embd.clone()
            } else {
                Arc::new(MatrixGpu::upload(g, &w.output, &v.layouts)?)
            },
            embd,
            head: HcGpu::upload(g, &w.output_hc, c.hc, c.eps, v.hc)?,
            layers,
            ple,
            mtp: None,
            host,
        })
    }

    /// Uploads the MTP draft layer (an attention layer run dense over its own cache, spec §9), for
    /// [`strata_model::backend::mtp_step`]; an error when the model has none.
    pub fn upload_mtp(&mut self, g: &Gpu, model: &Model, v: &Variants) -> Result<(), CudaError> {
        let c = &model.config;
        let m = model.weights.mtp.as_ref().ok_or_else(|| CudaError::Shape("the model has no MTP layer".into()))?;
        let Mixer::Attn(aw) = &m.layer.mixer else {
            return Err(CudaError::Shape("the MTP layer is not an attention layer".into()));
        };
        let attn = AttnGpu::upload(g, aw, attn_dims(c), v)?;
        self.mtp = Some(MtpGpu {
            enorm: Buf::from_host(g, &m.enorm)?,
            hnorm: Buf::from_host(g, &m.hnorm)?,
            eh_proj: MatrixGpu::upload(g, &m.eh_proj, &v.layouts)?,
            layer: LayerGpu {
                hc_attn: HcGpu::upload(g, &m.layer.hc_attn, c.hc, c.eps, v.hc)?,
                mixer: MixerGpu::Attn(attn, Cells::Dense(MTP_WINDOW)),
                hc_ffn: HcGpu::upload(g, &m.layer.hc_ffn, c.hc, c.eps, v.hc)?,
                moe: MoeGpu::upload(
                    g,
                    &m.layer.moe,
                    (c.n_expert_used, c.expert_ff),
                    v,
                    self.host.as_ref().map(|h| h.placement(c.n_layer)),
                )?,
            },
            head: HcGpu::upload(g, &m.output_hc, c.hc, c.eps, v.hc)?,
        });
        Ok(())
    }

    pub(crate) fn mtp(&self) -> Result<&MtpGpu, CudaError> {
        self.mtp.as_ref().ok_or_else(|| CudaError::Shape("the MTP layer is not on the device (upload_mtp)".into()))
    }
}

fn upload_ple(g: &Gpu, p: &PleWeights, lay: &Layouts) -> Result<PleGpu, CudaError> {
    Ok(PleGpu {
        key: MatrixGpu::upload(g, &p.key, lay)?,
        value: MatrixGpu::upload(g, &p.value, lay)?,
        norm_key: Buf::from_host(g, &p.norm_key)?,
        norm_query: Buf::from_host(g, &p.norm_query)?,
        norm_conv: Buf::from_host(g, &p.norm_conv)?,
        conv: Buf::from_host(g, &p.conv)?,
    })
}

pub(crate) fn attn_dims(c: &strata_model::config::Config) -> AttnDims {
    AttnDims {
        hq: c.n_head,
        hkv: c.n_head_kv,
        dh: c.head_dim,
        rot: c.rope_dim,
        hi: c.idx_heads,
        di: c.idx_dim,
        top_k: c.idx_top_k,
        eps: c.eps,
    }
}

/// The QSA block size of an attention layer (0: dense).
pub(crate) fn block_size(cells: &Cells) -> usize {
    match cells {
        Cells::Qsa(r) => *r,
        Cells::Dense(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::locked_experts;

    #[test]
    fn only_experts_whole_in_locked_pages_are_streamed() {
        // A tensor at 1,000 of 10 experts of 2,000 bytes: pages 4,096..20,480 are whole inside it, so
        // expert 2 (5,000..7,000) is the first whole in them and expert 8 (17,000..19,000) the last.
        assert_eq!(locked_experts(1000, 20_000, 2000), Some((4096, 2, 9)));
        // Page-aligned: every expert.
        assert_eq!(locked_experts(8192, 8 * 4096, 4096), Some((8192, 0, 8)));
        // No whole page, or no expert whole in them, or a length of odd bytes: none.
        assert_eq!(locked_experts(1000, 3000, 1000), None);
        assert_eq!(locked_experts(100, 8192, 8000), None);
        assert_eq!(locked_experts(4096, 8192, 4094), None);
    }
}
