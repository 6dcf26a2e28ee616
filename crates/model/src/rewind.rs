//! Going back to an earlier point of a conversation: what a speculative verify window keeps so that the
//! cells after the last accepted token can be dropped (docs/SPECULATION.md). A [`Point`] holds what a
//! token's step overwrites (each GDN layer's conv tail and recurrent matrices, each attention layer's
//! incomplete block of indexer keys, the PLE history, the MTP layer's pending R) and the lengths of what
//! it only appends to (KV cells, complete index blocks, MTP cells); [`State::rewind`] puts those back and cuts the rest, leaving the state
//! a run that stopped at the point would hold, byte for byte.

use crate::state::{GdnState, LayerState, PleState, State};

/// The MTP cells a point keeps: their count and the pending R.
#[derive(Clone, Debug)]
struct MtpPoint {
    cells: usize,
    last_r: Option<Vec<f32>>,
}

/// A state's position and what its later steps overwrite or append to.
#[derive(Clone, Debug)]
pub struct Point {
    pub pos: usize,
    layers: Vec<LayerPoint>,
    ple: PleState,
    mtp: Option<MtpPoint>,
}

#[derive(Clone, Debug)]
enum LayerPoint {
    Gdn(GdnState),
    Attn { cells: usize, raw: Vec<f32>, blocks: usize },
}

impl State {
    /// The point this state is at now.
    pub fn point(&self) -> Point {
        let layers = self
            .layers
            .iter()
            .map(|l| match l {
                LayerState::Gdn(g) => LayerPoint::Gdn(g.clone()),
                LayerState::Attn(q) => {
                    LayerPoint::Attn { cells: q.k.len(), raw: q.raw.clone(), blocks: q.blocks.len() }
                }
            })
            .collect();
        let mtp = self.mtp.as_ref().map(|m| MtpPoint { cells: m.cache.k.len(), last_r: m.last_r.clone() });
        Point { pos: self.pos, layers, ple: self.ple.clone(), mtp }
    }

    /// Back to `p`, a point this state passed (taken from it, at or before its position). Refused, with
    /// the state left as it was, for a point ahead of it or of another model's layout.
    pub fn rewind(&mut self, p: &Point) -> Result<(), String> {
        if p.pos > self.pos || p.layers.len() != self.layers.len() {
            return Err(format!("no rewind from position {} to a point at {} of another layout", self.pos, p.pos));
        }
        let fits = self.layers.iter().zip(&p.layers).all(|(l, lp)| match (l, lp) {
            (LayerState::Gdn(_), LayerPoint::Gdn(_)) => true,
            (LayerState::Attn(q), LayerPoint::Attn { cells, blocks, .. }) => {
                *cells <= q.k.len() && *cells <= q.v.len() && *blocks <= q.blocks.len()
            }
            _ => false,
        });
        let mtp_fits = match (&self.mtp, &p.mtp) {
            (None, None) => true,
            (Some(m), Some(mp)) => mp.cells <= m.cache.k.len(),
            _ => false,
        };
        if !fits || !mtp_fits {
            return Err(format!("the point at {} is not one this state passed", p.pos));
        }
        for (l, lp) in self.layers.iter_mut().zip(&p.layers) {
            match (l, lp) {
                (LayerState::Gdn(g), LayerPoint::Gdn(saved)) => g.clone_from(saved),
                (LayerState::Attn(q), LayerPoint::Attn { cells, raw, blocks }) => {
                    q.k.truncate(*cells);
                    q.v.truncate(*cells);
                    q.raw.clone_from(raw);
                    q.blocks.truncate(*blocks);
                }
                _ => unreachable!("checked above"),
            }
        }
        self.ple.clone_from(&p.ple);
        if let (Some(m), Some(mp)) = (&mut self.mtp, &p.mtp) {
            m.cache.k.truncate(mp.cells);
            m.cache.v.truncate(mp.cells);
            m.last_r.clone_from(&mp.last_r);
        }
        self.pos = p.pos;
        Ok(())
    }
}
