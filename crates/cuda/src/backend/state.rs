//! A conversation's state on the device: each layer's GDN state or attention caches, and the PLE history;
//! made fresh, read back into the CPU's form (checkpoints) and written from it.

use strata_model::config::Config;
use strata_model::kv::KvMode;
use strata_model::state::{GdnState, LayerState, PleState};
use strata_model::State;

use crate::backend::weights::{block_size, MixerGpu, WeightsGpu};
use crate::ops::attn::AttnStateGpu;
use crate::ops::gdn::GdnStateGpu;
use crate::ops::matvec::MAX_T;
use crate::ops::rewind::RewindTable;
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

pub(crate) enum LayerStateGpu {
    Gdn(Box<GdnStateGpu>),
    Attn(Box<AttnStateGpu>),
}

/// A conversation's state on the device (and the PLE token history on the host).
pub struct CudaState {
    pub(crate) kv: KvMode,
    pub(crate) layers: Vec<LayerStateGpu>,
    pub(crate) ple_prev: Vec<u64>,
    pub(crate) ple_hist: Option<Buf<f32>>,
    /// While drafting: what a verify window keeps for its rewind.
    pub(crate) points: Option<WindowPoints>,
}

/// A verify window's rewind points on the device (docs/SPECULATION.md). While `keep` is set, the window's
/// kernels write the state after each token but the last into slots (the GDN layers' own, and the PLE
/// history's here), the host keeps the PLE token history after each token, and a rewind to the point
/// after token t copies slot t back (ops/rewind.rs) and puts the attention layers' cell counts back: their
/// caches only append, so the cells past a count are never read.
pub(crate) struct WindowPoints {
    pub(crate) keep: bool,
    /// The attention layers' cell counts before the window.
    cells: Vec<usize>,
    /// The PLE token history after each token of the window.
    pub(crate) ple_prev: Vec<Vec<u64>>,
    /// Slot t: the PLE z frames after token t.
    pub(crate) ple_slots: Option<Buf<f32>>,
    table: RewindTable,
}

impl CudaState {
    /// A fresh conversation of at most `capacity` cells.
    pub fn new(g: &Gpu, w: &WeightsGpu, c: &Config, kv: KvMode, capacity: usize) -> Result<CudaState, CudaError> {
        let layers = w
            .layers
            .iter()
            .map(|l| {
                Ok(match &l.mixer {
                    MixerGpu::Gdn(gdn) => LayerStateGpu::Gdn(Box::new(gdn.new_state(g)?)),
                    MixerGpu::Attn(a, _) => LayerStateGpu::Attn(Box::new(a.new_state(g, kv, capacity)?)),
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let (ple_prev, ple_hist) = match &c.ple {
            Some(p) => (vec![p.eos_token_id; p.ngram_size - 1], Some(Buf::zeros(g, p.history() * c.hc * c.n_embd)?)),
            None => (Vec::new(), None),
        };
        Ok(CudaState { kv, layers, ple_prev, ple_hist, points: None })
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

    /// The cells each attention layer's cache has room for (the context).
    pub(crate) fn capacity(&self) -> usize {
        self.layers
            .iter()
            .filter_map(|l| match l {
                LayerStateGpu::Attn(s) => Some(s.capacity),
                LayerStateGpu::Gdn(_) => None,
            })
            .min()
            .unwrap_or(0)
    }

    /// Whether every attention layer's cache has room for one more cell.
    pub(crate) fn room_for_one(&self) -> bool {
        self.layers.iter().all(|l| match l {
            LayerStateGpu::Attn(s) => s.cells < s.capacity,
            LayerStateGpu::Gdn(_) => true,
        })
    }

    /// Room for verify windows' rewind points (made once, when drafting starts): the GDN layers' slots
    /// and the PLE history's, and the table of them that a rewind copies from.
    pub(crate) fn keep_points(&mut self, g: &Gpu) -> Result<(), CudaError> {
        if self.points.is_some() {
            return Ok(());
        }
        for l in &mut self.layers {
            if let LayerStateGpu::Gdn(s) = l {
                s.keep_slots(g)?;
            }
        }
        let ple_slots = match &self.ple_hist {
            Some(h) => Some(Buf::uninit(g, (MAX_T - 1) * h.len())?),
            None => None,
        };
        let mut pairs = Vec::new();
        for l in &self.layers {
            if let LayerStateGpu::Gdn(s) = l {
                let slots = s.slots.as_ref().expect("made above");
                pairs.extend([(&s.m, &slots.m), (&s.tail, &slots.tail)]);
            }
        }
        if let (Some(h), Some(slots)) = (&self.ple_hist, &ple_slots) {
            pairs.push((h, slots));
        }
        let table = RewindTable::new(g, &pairs, MAX_T - 1)?;
        self.points = Some(WindowPoints { keep: false, cells: Vec::new(), ple_prev: Vec::new(), ple_slots, table });
        Ok(())
    }

    /// The next window keeps its rewind points (until [`CudaState::rewind`]).
    pub(crate) fn begin_window(&mut self) -> Result<(), CudaError> {
        let cells = self.cells();
        let p = self.points.as_mut().ok_or_else(|| CudaError::Shape("a verify window before drafting".into()))?;
        p.keep = true;
        p.cells = cells;
        p.ple_prev.clear();
        Ok(())
    }

    /// The window recorded ahead is not run now: its rewind points are not kept.
    pub(crate) fn end_window(&mut self) {
        if let Some(p) = &mut self.points {
            p.keep = false;
        }
    }

    /// The state after the first `kept` tokens of the `t`-token window just run (1 ≤ kept ≤ t): nothing
    /// to do when all are kept, else slot kept − 1 copied back and the cell counts put back.
    pub(crate) fn rewind(&mut self, g: &Gpu, kept: usize, t: usize) -> Result<(), CudaError> {
        let p = self.points.as_mut().ok_or_else(|| CudaError::Shape("a rewind before drafting".into()))?;
        p.keep = false;
        if kept == 0 || kept > t {
            return Err(CudaError::Shape(format!("kept {kept} of a window of {t}")));
        }
        if kept == t {
            return Ok(());
        }
        if self.ple_hist.is_some() {
            let prev = p.ple_prev.get(kept - 1).ok_or_else(|| CudaError::Shape("a window without PLE points".into()));
            self.ple_prev = prev?.clone();
        }
        p.table.rewind(g, kept - 1)?;
        // A GDN layer's entry is ignored by set_cells.
        let cells: Vec<usize> = p.cells.iter().map(|&c| c + kept).collect();
        self.set_cells(&cells);
        Ok(())
    }

    pub(crate) fn set_cells(&mut self, cells: &[usize]) {
        for (l, &c) in self.layers.iter_mut().zip(cells) {
            if let LayerStateGpu::Attn(s) = l {
                s.cells = c;
            }
        }
    }
}
