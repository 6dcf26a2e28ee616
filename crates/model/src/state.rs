//! The context state of one conversation (spec §4–§6): per GDN layer the conv tail and the recurrent
//! matrices, per QSA layer the KV cache and the indexer's keys, and the PLE history. Cloning it is a
//! checkpoint; restoring a clone resumes exactly where it was taken.

use crate::config::Config;
use crate::kv::{KvMode, KvStore};

#[derive(Clone, Debug)]
pub enum LayerState {
    Gdn(GdnState),
    Attn(Box<QsaState>),
}

#[derive(Clone, Debug)]
pub struct GdnState {
    /// The last K − 1 frames of the conv input, oldest first (zero at the start).
    pub conv: Vec<f32>,
    /// Hv matrices of S×S, `[key dim][value dim]`.
    pub m: Vec<f32>,
}

#[derive(Clone, Debug)]
pub struct QsaState {
    pub k: KvStore,
    pub v: KvStore,
    /// Raw indexer keys of the cells of the incomplete block (f32; empty on dense layers).
    pub raw: Vec<f32>,
    /// Keys of the complete blocks, di values each.
    pub blocks: Vec<f32>,
}

#[derive(Clone, Debug, Default)]
pub struct PleState {
    /// The ngram_size − 1 previous tokens as given, most recent first; `ple.eos_token_id` before the start.
    pub prev: Vec<u64>,
    /// The last (K − 1)·ngram_size frames of z (hc·n each), oldest first; never reset.
    pub z: Vec<Vec<f32>>,
}

#[derive(Clone, Debug)]
pub struct State {
    /// Tokens processed (the position of the next one).
    pub pos: usize,
    pub layers: Vec<LayerState>,
    pub ple: PleState,
    pub kv_mode: KvMode,
    /// The MTP layer's cache, while drafting (docs/SPECULATION.md); `None` otherwise.
    pub mtp: Option<MtpCells>,
}

/// The MTP layer's cache: cell p from the trunk's R_p and the token at p + 1, for each position p from
/// `from` on whose next token is known (a draft chain's provisional cells after them while it runs).
#[derive(Clone, Debug)]
pub struct MtpCells {
    /// The first position with a cell (where drafting began).
    pub from: usize,
    /// Dense attention cells (no indexer).
    pub cache: QsaState,
    /// The trunk's R at the last position (hc·n values), whose next token is not known yet.
    pub last_r: Option<Vec<f32>>,
}

impl State {
    pub fn new(c: &Config, kv_mode: KvMode) -> State {
        let layers = (0..c.n_layer)
            .map(|l| {
                if c.is_attn(l) {
                    LayerState::Attn(Box::new(QsaState::new(c, kv_mode)))
                } else {
                    LayerState::Gdn(GdnState {
                        conv: vec![0.0; (c.conv_kernel - 1) * c.ssm_conv_channels()],
                        m: vec![0.0; c.ssm_heads * c.ssm_state * c.ssm_state],
                    })
                }
            })
            .collect();
        let ple = match &c.ple {
            Some(p) => PleState {
                prev: vec![p.eos_token_id; p.ngram_size - 1],
                z: vec![vec![0.0; c.hc * c.n_embd]; p.history()],
            },
            None => PleState::default(),
        };
        State { pos: 0, layers, ple, kv_mode, mtp: None }
    }

    /// The bytes the state holds in memory (its arrays), for a cache's budget.
    pub fn host_bytes(&self) -> usize {
        fn kv(k: &crate::kv::KvStore) -> usize {
            let (h, c, s, f) = k.parts();
            2 * h.len() + c.len() + 2 * s.len() + 4 * f.len()
        }
        let layers: usize = self
            .layers
            .iter()
            .map(|l| match l {
                LayerState::Gdn(g) => 4 * (g.conv.len() + g.m.len()),
                LayerState::Attn(q) => kv(&q.k) + kv(&q.v) + 4 * (q.raw.len() + q.blocks.len()),
            })
            .sum();
        let mtp = self
            .mtp
            .as_ref()
            .map_or(0, |m| kv(&m.cache.k) + kv(&m.cache.v) + 4 * m.last_r.as_ref().map_or(0, Vec::len));
        layers + mtp + 8 * self.ple.prev.len() + self.ple.z.iter().map(|z| 4 * z.len()).sum::<usize>()
    }
}

impl QsaState {
    /// An empty cache of an attention layer.
    pub fn new(c: &Config, kv_mode: KvMode) -> QsaState {
        let dim = c.n_head_kv * c.head_dim;
        QsaState { k: KvStore::new(kv_mode, dim), v: KvStore::new(kv_mode, dim), raw: Vec::new(), blocks: Vec::new() }
    }
}
