//! Checkpoints on disk: a conversation's whole context state (spec §4–§6: KV caches, indexer keys, GDN conv
//! tails and recurrent matrices, PLE history) as bytes, restored exactly. The file names the model geometry
//! it belongs to; a checkpoint of another model, a truncated or a corrupt one is an error, never a panic.
//!
//! Layout (little-endian): magic `STRATACK`, version u32, geometry fingerprint u64, kv mode u8, pos u64,
//! then per layer its vectors, then the PLE history, then (version 3) the MTP layer's cells: a byte 0 (none)
//! or 1, then the first position with a cell, the cell count, K and V, and the pending R (empty or hc·n
//! values). Every vector is a u64 count and its elements. Version 2 files (no MTP section) still load.

use std::io::{Read, Write};

use crate::config::Config;
use crate::kv::{KvMode, KvStore};
use crate::state::{GdnState, LayerState, MtpCells, PleState, QsaState, State};

const MAGIC: &[u8; 8] = b"STRATACK";
const VERSION: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint: {0}")]
    Io(#[from] std::io::Error),
    #[error("checkpoint: {0}")]
    Invalid(String),
}

fn bad(what: impl Into<String>) -> CheckpointError {
    CheckpointError::Invalid(what.into())
}

/// A fingerprint of the geometry a state depends on.
fn fingerprint(c: &Config) -> u64 {
    strata_gguf::fnv1a(format!("{c:?}").bytes())
}

struct Out<W: Write>(W);

impl<W: Write> Out<W> {
    fn u64(&mut self, v: u64) -> std::io::Result<()> {
        self.0.write_all(&v.to_le_bytes())
    }
    fn f32s(&mut self, v: &[f32]) -> std::io::Result<()> {
        self.u64(v.len() as u64)?;
        v.iter().try_for_each(|x| self.0.write_all(&x.to_le_bytes()))
    }
    fn u16s(&mut self, v: &[u16]) -> std::io::Result<()> {
        self.u64(v.len() as u64)?;
        v.iter().try_for_each(|x| self.0.write_all(&x.to_le_bytes()))
    }
    fn i8s(&mut self, v: &[i8]) -> std::io::Result<()> {
        self.u64(v.len() as u64)?;
        self.0.write_all(&v.iter().map(|&x| x as u8).collect::<Vec<u8>>())
    }
}

struct In<R: Read> {
    r: R,
    /// Elements any one vector may hold: bounded by the geometry, so a corrupt count cannot allocate.
    max: u64,
}

impl<R: Read> In<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], CheckpointError> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                bad("truncated")
            } else {
                e.into()
            }
        })?;
        Ok(b)
    }
    fn u64(&mut self) -> Result<u64, CheckpointError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn count(&mut self, want: Option<usize>) -> Result<usize, CheckpointError> {
        let n = self.u64()?;
        if n > self.max || want.is_some_and(|w| w as u64 != n) {
            return Err(bad(format!("a vector of {n} elements does not fit this model")));
        }
        Ok(n as usize)
    }
    /// `n` elements read one by one; the vector grows as they arrive, so a corrupt count runs into the
    /// end of the file rather than into a huge allocation.
    fn vec<T>(
        &mut self,
        n: usize,
        mut one: impl FnMut(&mut Self) -> Result<T, CheckpointError>,
    ) -> Result<Vec<T>, CheckpointError> {
        let mut v = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            v.push(one(self)?);
        }
        Ok(v)
    }
    fn f32s(&mut self, want: Option<usize>) -> Result<Vec<f32>, CheckpointError> {
        let n = self.count(want)?;
        self.vec(n, |s| Ok(f32::from_le_bytes(s.bytes()?)))
    }
    fn u16s(&mut self) -> Result<Vec<u16>, CheckpointError> {
        let n = self.count(None)?;
        self.vec(n, |s| Ok(u16::from_le_bytes(s.bytes()?)))
    }
    fn i8s(&mut self) -> Result<Vec<i8>, CheckpointError> {
        let n = self.count(None)?;
        self.vec(n, |s| Ok(s.bytes::<1>()?[0] as i8))
    }
}

impl State {
    /// Writes the state; `c` is the model's config.
    pub fn save(&self, c: &Config, w: impl Write) -> Result<(), CheckpointError> {
        let mut o = Out(w);
        o.0.write_all(MAGIC)?;
        o.0.write_all(&VERSION.to_le_bytes())?;
        o.u64(fingerprint(c))?;
        o.0.write_all(&[match self.kv_mode {
            KvMode::F16 => 0,
            KvMode::Int8 => 1,
            KvMode::F32 => 2,
        }])?;
        o.u64(self.pos as u64)?;
        for l in &self.layers {
            match l {
                LayerState::Gdn(g) => {
                    o.f32s(&g.conv)?;
                    o.f32s(&g.m)?;
                }
                LayerState::Attn(q) => {
                    for kv in [&q.k, &q.v] {
                        let (halves, codes, scales, floats) = kv.parts();
                        o.u16s(halves)?;
                        o.i8s(codes)?;
                        o.u16s(scales)?;
                        o.f32s(floats)?;
                    }
                    o.f32s(&q.raw)?;
                    o.f32s(&q.blocks)?;
                }
            }
        }
        o.u64(self.ple.prev.len() as u64)?;
        for &p in &self.ple.prev {
            o.u64(p)?;
        }
        o.u64(self.ple.z.len() as u64)?;
        for z in &self.ple.z {
            o.f32s(z)?;
        }
        match &self.mtp {
            None => o.0.write_all(&[0])?,
            Some(m) => {
                o.0.write_all(&[1])?;
                o.u64(m.from as u64)?;
                o.u64(m.cache.k.len() as u64)?;
                for kv in [&m.cache.k, &m.cache.v] {
                    let (halves, codes, scales, floats) = kv.parts();
                    o.u16s(halves)?;
                    o.i8s(codes)?;
                    o.u16s(scales)?;
                    o.f32s(floats)?;
                }
                o.f32s(m.last_r.as_deref().unwrap_or_default())?;
            }
        }
        o.0.flush()?;
        Ok(())
    }

    /// Reads a state written by [`State::save`] for the same model.
    pub fn load(c: &Config, r: impl Read) -> Result<State, CheckpointError> {
        let mut i = In { r, max: 1 << 40 };
        if &i.bytes::<8>()? != MAGIC {
            return Err(bad("not a strata checkpoint"));
        }
        let version = u32::from_le_bytes(i.bytes()?);
        if !(2..=VERSION).contains(&version) {
            return Err(bad(format!("version {version}, expected 2 to {VERSION}")));
        }
        if i.u64()? != fingerprint(c) {
            return Err(bad("made for a model of another geometry"));
        }
        let kv_mode = match i.bytes::<1>()?[0] {
            0 => KvMode::F16,
            1 => KvMode::Int8,
            2 => KvMode::F32,
            m => return Err(bad(format!("unknown KV mode {m}"))),
        };
        let fresh = State::new(c, kv_mode);
        let pos = i.u64()?;
        if pos > u32::MAX as u64 {
            return Err(bad(format!("position {pos} is not a context position")));
        }
        let pos = pos as usize;
        // Bounds from the geometry and the position: no vector can be longer than these.
        let kv_dim = c.n_head_kv * c.head_dim;
        i.max = ((pos as u64 + 1) * kv_dim as u64)
            .max((c.ssm_heads * c.ssm_state * c.ssm_state) as u64)
            .max(((c.conv_kernel - 1) * c.ssm_conv_channels()) as u64)
            .max((c.hc * c.n_embd) as u64);
        let mut layers = Vec::with_capacity(fresh.layers.len());
        for (l, fresh_l) in fresh.layers.iter().enumerate() {
            layers.push(match fresh_l {
                LayerState::Gdn(g) => {
                    LayerState::Gdn(GdnState { conv: i.f32s(Some(g.conv.len()))?, m: i.f32s(Some(g.m.len()))? })
                }
                LayerState::Attn(_) => {
                    let (k, v) = (kv_store(&mut i, kv_mode, kv_dim, pos)?, kv_store(&mut i, kv_mode, kv_dim, pos)?);
                    let raw = i.f32s(None)?;
                    let blocks = i.f32s(None)?;
                    let r = c.ratio(l);
                    let (want_raw, want_blocks) = if r == 0 { (0, 0) } else { (pos % r, pos / r) };
                    if raw.len() != want_raw * c.idx_dim || blocks.len() != want_blocks * c.idx_dim {
                        return Err(bad("indexer keys do not match the position"));
                    }
                    LayerState::Attn(Box::new(QsaState { k, v, raw, blocks }))
                }
            });
        }
        if i.u64()? != fresh.ple.prev.len() as u64 {
            return Err(bad("PLE token history of the wrong length"));
        }
        let prev = (0..fresh.ple.prev.len())
            .map(|_| i.u64().and_then(|t| if t < c.vocab as u64 { Ok(t) } else { Err(bad("token id out of range")) }))
            .collect::<Result<Vec<u64>, _>>()?;
        let n_z = i.u64()?;
        if n_z != fresh.ple.z.len() as u64 {
            return Err(bad("PLE history of the wrong length"));
        }
        let z = (0..n_z).map(|_| i.f32s(Some(c.hc * c.n_embd))).collect::<Result<Vec<_>, _>>()?;
        let mtp = if version >= 3 { load_mtp(&mut i, c, pos, kv_mode)? } else { None };
        let mut rest = [0u8; 1];
        if i.r.read(&mut rest)? != 0 {
            return Err(bad("trailing bytes"));
        }
        Ok(State { pos, layers, ple: PleState { prev, z }, kv_mode, mtp })
    }
}

/// A KV store of `cells` cells as [`State::save`] wrote it.
fn kv_store<R: Read>(i: &mut In<R>, mode: KvMode, dim: usize, cells: usize) -> Result<KvStore, CheckpointError> {
    let (halves, codes, scales) = (i.u16s()?, i.i8s()?, i.u16s()?);
    let floats = i.f32s(None)?;
    KvStore::from_parts(mode, dim, halves, codes, scales, floats, cells).map_err(bad)
}

/// The MTP section of a version-3 checkpoint: cells from `from` up to the position (the last one pending
/// when R is held), checked against it.
fn load_mtp<R: Read>(i: &mut In<R>, c: &Config, pos: usize, mode: KvMode) -> Result<Option<MtpCells>, CheckpointError> {
    match i.bytes::<1>()?[0] {
        0 => return Ok(None),
        1 => {}
        b => return Err(bad(format!("unknown MTP section marker {b}"))),
    }
    let (from, cells) = (i.u64()?, i.u64()?);
    if from > pos as u64 || cells > pos as u64 {
        return Err(bad("MTP cells beyond the position"));
    }
    let (from, cells) = (from as usize, cells as usize);
    let dim = c.n_head_kv * c.head_dim;
    let (k, v) = (kv_store(i, mode, dim, cells)?, kv_store(i, mode, dim, cells)?);
    let r = i.f32s(None)?;
    let last_r = match r.len() {
        0 => None,
        n if n == c.hc * c.n_embd => Some(r),
        n => return Err(bad(format!("an MTP pending R of {n} values"))),
    };
    if from + cells + usize::from(last_r.is_some()) != pos {
        return Err(bad("MTP cells do not cover the positions since drafting began"));
    }
    Ok(Some(MtpCells { from, cache: QsaState { k, v, raw: Vec::new(), blocks: Vec::new() }, last_r }))
}
