//! The context state of one conversation (spec §4–§6): per GDN layer the conv tail and the recurrent
//! matrices, per QSA layer the KV cache and the indexer's keys, and the PLE history. Cloning it is a
//! checkpoint; restoring a clone resumes exactly where it was taken.

use crate::config::Config;
use crate::kv::{KvMode, KvStore};

#[derive(Clone, Debug)]
pub enum LayerState {
    Gdn(GdnState),
    Qsa(QsaState),
}

#[derive(Clone, Debug)]
pub struct GdnState {
    /// The last 3 frames of the conv input, oldest first (zero at the start).
    pub conv: Vec<f32>,
    /// Hv matrices of S×S, `[key dim][value dim]`.
    pub m: Vec<f32>,
}

#[derive(Clone, Debug)]
pub struct QsaState {
    pub k: KvStore,
    pub v: KvStore,
    /// Raw indexer keys of the cells of the incomplete block (f32).
    pub raw: Vec<f32>,
    /// Keys of the complete blocks, di values each.
    pub blocks: Vec<f32>,
}

#[derive(Clone, Debug, Default)]
pub struct PleState {
    /// The two previous tokens, most recent first (None before the start).
    pub prev: [Option<u32>; 2],
    /// The last 9 frames of z (hc·n each), oldest first; never reset.
    pub z: Vec<Vec<f32>>,
}

#[derive(Clone, Debug)]
pub struct State {
    /// Tokens processed (the position of the next one).
    pub pos: usize,
    pub layers: Vec<LayerState>,
    pub ple: PleState,
    pub kv_mode: KvMode,
}

impl State {
    pub fn new(c: &Config, kv_mode: KvMode) -> State {
        let layers = (0..c.n_layer)
            .map(|l| {
                if c.is_qsa(l) {
                    let dim = c.n_head_kv * c.head_dim;
                    LayerState::Qsa(QsaState {
                        k: KvStore::new(kv_mode, dim),
                        v: KvStore::new(kv_mode, dim),
                        raw: Vec::new(),
                        blocks: Vec::new(),
                    })
                } else {
                    LayerState::Gdn(GdnState {
                        conv: vec![0.0; 3 * c.ssm_conv_channels()],
                        m: vec![0.0; c.ssm_heads * c.ssm_state * c.ssm_state],
                    })
                }
            })
            .collect();
        let ple = PleState { prev: [None, None], z: vec![vec![0.0; c.hc * c.n_embd]; 9] };
        State { pos: 0, layers, ple, kv_mode }
    }
}
