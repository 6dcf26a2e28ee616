//! A conversation's state on the device: each layer's GDN state or attention caches, and the PLE history;
//! made fresh, read back into the CPU's form (checkpoints) and written from it.

use strata_model::config::Config;
use strata_model::kv::KvMode;
use strata_model::state::{GdnState, LayerState, PleState};
use strata_model::State;

use crate::backend::weights::{block_size, MixerGpu, WeightsGpu};
use crate::ops::attn::AttnStateGpu;
use crate::ops::gdn::GdnStateGpu;
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

pub(crate) enum LayerStateGpu {
    Gdn(GdnStateGpu),
    Attn(Box<AttnStateGpu>),
}

/// A conversation's state on the device (and the PLE token history on the host).
pub struct CudaState {
    pub(crate) kv: KvMode,
    pub(crate) layers: Vec<LayerStateGpu>,
    pub(crate) ple_prev: Vec<u64>,
    pub(crate) ple_hist: Option<Buf<f32>>,
}

impl CudaState {
    /// A fresh conversation of at most `capacity` cells.
    pub fn new(g: &Gpu, w: &WeightsGpu, c: &Config, kv: KvMode, capacity: usize) -> Result<CudaState, CudaError> {
        let layers = w
            .layers
            .iter()
            .map(|l| {
                Ok(match &l.mixer {
                    MixerGpu::Gdn(gdn) => LayerStateGpu::Gdn(gdn.new_state(g)?),
                    MixerGpu::Attn(a, _) => LayerStateGpu::Attn(Box::new(a.new_state(g, kv, capacity)?)),
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let (ple_prev, ple_hist) = match &c.ple {
            Some(p) => (vec![p.eos_token_id; p.ngram_size - 1], Some(Buf::zeros(g, p.history() * c.hc * c.n_embd)?)),
            None => (Vec::new(), None),
        };
        Ok(CudaState { kv, layers, ple_prev, ple_hist })
    }

    /// The conversation as the CPU holds it (for a checkpoint), after `pos` tokens.
    pub fn download(&self, g: &Gpu, w: &WeightsGpu, c: &Config, pos: usize) -> Result<State, CudaError> {
        let st = self;
        let mut host = State::new(c, st.kv);
        host.pos = pos;
        for ((lw, ls), out) in w.layers.iter().zip(&st.layers).zip(&mut host.layers) {
            *out = match (&lw.mixer, ls, &*out) {
                (MixerGpu::Gdn(_), LayerStateGpu::Gdn(s), LayerState::Gdn(f)) => {
                    LayerState::Gdn(GdnState { conv: s.tail.read(g, f.conv.len())?, m: s.m.read(g, f.m.len())? })
                }
                (MixerGpu::Attn(a, cells), LayerStateGpu::Attn(s), _) => {
                    LayerState::Attn(Box::new(a.download_state(g, s, block_size(cells))?))
                }
                _ => return Err(CudaError::Shape("a layer's state of the other kind".into())),
            };
        }
        if let Some(hist) = &st.ple_hist {
            let frames = host.ple.z.len();
            let flat = hist.read(g, frames * c.hc * c.n_embd)?;
            host.ple =
                PleState { prev: st.ple_prev.clone(), z: flat.chunks(c.hc * c.n_embd).map(<[f32]>::to_vec).collect() };
        }
        Ok(host)
    }

    /// A conversation on the device continued from the CPU's state, with room for `capacity` cells.
    pub fn from_host(
        g: &Gpu,
        w: &WeightsGpu,
        c: &Config,
        host: &State,
        capacity: usize,
    ) -> Result<CudaState, CudaError> {
        let mut st = CudaState::new(g, w, c, host.kv_mode, capacity)?;
        st.load(g, w, c, host)?;
        Ok(st)
    }

    /// The CPU's state written over `st` (a checkpoint restored in place, within `st`'s capacity).
    pub fn load(&mut self, g: &Gpu, w: &WeightsGpu, c: &Config, host: &State) -> Result<(), CudaError> {
        let st = self;
        let fresh = State::new(c, host.kv_mode);
        let wrong = || CudaError::Shape("the saved state does not match the model".into());
        if host.layers.len() != st.layers.len() || host.ple.z.len() != fresh.ple.z.len() {
            return Err(wrong());
        }
        if host.kv_mode != st.kv {
            return Err(CudaError::Shape(format!("a state saved with {:?} KV into {:?} caches", host.kv_mode, st.kv)));
        }
        for (((lw, ls), h), f) in w.layers.iter().zip(&mut st.layers).zip(&host.layers).zip(&fresh.layers) {
            match (&lw.mixer, ls, h, f) {
                (MixerGpu::Gdn(_), LayerStateGpu::Gdn(s), LayerState::Gdn(h), LayerState::Gdn(f)) => {
                    if h.conv.len() != f.conv.len() || h.m.len() != f.m.len() {
                        return Err(wrong());
                    }
                    s.tail.write_at(g, 0, &h.conv)?;
                    s.m.write_at(g, 0, &h.m)?;
                }
                (MixerGpu::Attn(a, cells), LayerStateGpu::Attn(s), LayerState::Attn(h), _) => {
                    a.load_state(g, s, h, block_size(cells))?;
                }
                _ => return Err(wrong()),
            }
        }
        if let Some(hist) = &mut st.ple_hist {
            if host.ple.prev.len() != st.ple_prev.len() || host.ple.z.iter().any(|z| z.len() != fresh.ple.z[0].len()) {
                return Err(wrong());
            }
            st.ple_prev = host.ple.prev.clone();
            hist.write_at(g, 0, &host.ple.z.concat())?;
        }
        Ok(())
    }

    /// The attention layers' cell counts (0 for a GDN layer): the host's part of the state that a step's
    /// recording moves on.
    pub(crate) fn cells(&self) -> Vec<usize> {
        self.layers
            .iter()
            .map(|l| match l {
                LayerStateGpu::Attn(s) => s.cells,
                LayerStateGpu::Gdn(_) => 0,
            })
            .collect()
    }

    /// Whether every attention layer's cache has room for one more cell.
    pub(crate) fn room_for_one(&self) -> bool {
        self.layers.iter().all(|l| match l {
            LayerStateGpu::Attn(s) => s.cells < s.capacity,
            LayerStateGpu::Gdn(_) => true,
        })
    }

    pub(crate) fn set_cells(&mut self, cells: &[usize]) {
        for (l, &c) in self.layers.iter_mut().zip(cells) {
            if let LayerStateGpu::Attn(s) = l {
                s.cells = c;
            }
        }
    }
}
