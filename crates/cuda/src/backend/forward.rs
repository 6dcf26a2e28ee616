//! The CUDA back-end of the forward pass: [`strata_model::backend::Backend`] on the device, so the one
//! layer loop (`forward_window`) runs here too. Every operation is a twin of the CPU's (the parity tools
//! check each, and `strata parity forward_parity` the whole pass). Activations stay on the device; the
//! logits come back to the host.

use std::sync::{Arc, Mutex};

use strata_model::backend::{trunk, Backend, HcId, MoeId};
use strata_model::config::LayerKind;
use strata_model::decoder::Decoder;
use strata_model::kv::KvMode;
use strata_model::layers::ple::table_rows;
use strata_model::model::MTP_WINDOW;
use strata_model::ops::sample::SampleParams;
use strata_model::state::{GdnState, LayerState, PleState};
use strata_model::weights::{Mixer, PleWeights};
use strata_model::{Model, State};

use crate::ops::attn::{attention, rope_rows, AttnDims, AttnGpu, AttnStateGpu, Cells};
use crate::ops::gdn::{gdn, GdnGpu, GdnStateGpu};
use crate::ops::hc::{hc_read, hc_write, HcGpu, HcScratch, Pending, MAX_T};
use crate::ops::layout::Layouts;
use crate::ops::matvec::{embed, matvec, matvec_at, MatrixGpu};
use crate::ops::moe::{moe, MoeGpu};
use crate::ops::variants::Variants;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use crate::runtime::profile::ProfileMode;
use crate::runtime::recorder::Prepared;

/// A window's rows on the device: `t` rows of `width` values.
pub struct Rows {
    pub buf: Buf<f32>,
    pub t: usize,
    pub width: usize,
}

enum MixerGpu {
    Gdn(GdnGpu),
    Attn(AttnGpu, Cells),
}

struct LayerGpu {
    hc_attn: HcGpu,
    mixer: MixerGpu,
    hc_ffn: HcGpu,
    moe: MoeGpu,
}

/// The MTP draft layer on the device (uploaded on request: only drafting needs it).
struct MtpGpu {
    enorm: Buf<f32>,
    hnorm: Buf<f32>,
    eh_proj: MatrixGpu,
    layer: LayerGpu,
    head: HcGpu,
}

struct PleGpu {
    key: MatrixGpu,
    value: MatrixGpu,
    norm_key: Buf<f32>,
    norm_query: Buf<f32>,
    norm_conv: Buf<f32>,
    conv: Buf<f32>,
}

/// A window's (first position, tokens) and their rope rows.
type WindowRope = ((usize, usize), Arc<Buf<f32>>);

/// The model's weights on the device.
pub struct CudaForward<'a> {
    pub gpu: Arc<Gpu>,
    model: &'a Model,
    /// The variant of each kernel family its weights run (the plan's).
    pub variants: Variants,
    embd: Arc<MatrixGpu>,
    /// The head: the embedding's own device copy when the file ties them.
    output: Arc<MatrixGpu>,
    layers: Vec<LayerGpu>,
    head: HcGpu,
    ple: Option<PleGpu>,
    mtp: Option<MtpGpu>,
    /// The HC reads' intermediates and outputs; each read hands its outputs out and leaves fresh ones.
    scratch: Mutex<HcScratch>,
    /// The rope rows of the last window's positions (first, tokens), which all its attention layers share.
    rope: Mutex<Option<WindowRope>>,
    /// While a step is prepared ahead (`STRATA_OVERLAP`): the staged inputs that depend on its token,
    /// left as placeholders and written once the token is known.
    late: Mutex<Option<Vec<Late>>>,
}

/// A staged input of a step prepared ahead that depends on its token: the device address of its bytes.
enum Late {
    /// The embedding's token id.
    Id(u64),
    /// The PLE table rows of the token (and the PLE history moves on by it).
    PleRows(u64),
}

enum LayerStateGpu {
    Gdn(GdnStateGpu),
    Attn(Box<AttnStateGpu>),
}

/// A conversation's state on the device (and the PLE token history on the host).
pub struct CudaState {
    kv: KvMode,
    layers: Vec<LayerStateGpu>,
    ple_prev: Vec<u64>,
    ple_hist: Option<Buf<f32>>,
}

impl<'a> CudaForward<'a> {
    /// Copies the model's weights to the device, each family to run in `variants` (the plan's); a weight
    /// type without a kernel is refused by name.
    pub fn upload(gpu: Arc<Gpu>, model: &'a Model, variants: Variants) -> Result<CudaForward<'a>, CudaError> {
        let (c, w, v) = (&model.config, &model.weights, &variants);
        let g = &*gpu;
        let dims = attn_dims(c);
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
                moe: MoeGpu::upload(g, &lw.moe, (c.n_expert_used, c.expert_ff), v)?,
            });
        }
        let ple = match &w.ple {
            Some(p) => Some(upload_ple(g, p, &v.layouts)?),
            None => None,
        };
        let embd = Arc::new(MatrixGpu::upload(g, &w.token_embd, &v.layouts)?);
        Ok(CudaForward {
            output: if std::ptr::eq(&w.output.bytes[..], &w.token_embd.bytes[..]) {
                embd.clone()
            } else {
                Arc::new(MatrixGpu::upload(g, &w.output, &v.layouts)?)
            },
            embd,
            head: HcGpu::upload(g, &w.output_hc, c.hc, c.eps, v.hc)?,
            scratch: Mutex::new(HcScratch::new(g, c.n_embd, c.hc, c.hc_rank)?),
            rope: Mutex::new(None),
            late: Mutex::new(None),
            layers,
            ple,
            mtp: None,
            model,
            gpu,
            variants,
        })
    }

    /// Uploads the MTP draft layer (an attention layer run dense over its own cache, spec §9), for
    /// [`strata_model::backend::mtp_step`]; an error when the model has none.
    pub fn upload_mtp(&mut self) -> Result<(), CudaError> {
        let (c, g, v) = (&self.model.config, &*self.gpu, &self.variants);
        let m = self.model.weights.mtp.as_ref().ok_or_else(|| CudaError::Shape("the model has no MTP layer".into()))?;
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
                moe: MoeGpu::upload(g, &m.layer.moe, (c.n_expert_used, c.expert_ff), v)?,
            },
            head: HcGpu::upload(g, &m.output_hc, c.hc, c.eps, v.hc)?,
        });
        Ok(())
    }

    /// An empty cache for the MTP layer, room for `capacity` drafted cells ([`CudaForward::upload_mtp`] first).
    pub fn mtp_cache(&self, kv: KvMode, capacity: usize) -> Result<AttnStateGpu, CudaError> {
        match &self.mtp()?.layer.mixer {
            MixerGpu::Attn(a, _) => a.new_state(&self.gpu, kv, capacity),
            MixerGpu::Gdn(_) => unreachable!("uploaded as attention"),
        }
    }

    fn mtp(&self) -> Result<&MtpGpu, CudaError> {
        self.mtp.as_ref().ok_or_else(|| CudaError::Shape("the MTP layer is not on the device (upload_mtp)".into()))
    }

    /// A fresh conversation of at most `capacity` cells.
    pub fn new_state(&self, kv: KvMode, capacity: usize) -> Result<CudaState, CudaError> {
        let c = &self.model.config;
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(match &l.mixer {
                    MixerGpu::Gdn(g) => LayerStateGpu::Gdn(g.new_state(&self.gpu)?),
                    MixerGpu::Attn(a, _) => LayerStateGpu::Attn(Box::new(a.new_state(&self.gpu, kv, capacity)?)),
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let (ple_prev, ple_hist) = match &c.ple {
            Some(p) => {
                (vec![p.eos_token_id; p.ngram_size - 1], Some(Buf::zeros(&self.gpu, p.history() * c.hc * c.n_embd)?))
            }
            None => (Vec::new(), None),
        };
        Ok(CudaState { kv, layers, ple_prev, ple_hist })
    }

    /// The conversation as the CPU holds it (for a checkpoint), after `pos` tokens.
    pub fn download_state(&self, st: &CudaState, pos: usize) -> Result<State, CudaError> {
        let (c, g) = (&self.model.config, &*self.gpu);
        let mut host = State::new(c, st.kv);
        host.pos = pos;
        for ((lw, ls), out) in self.layers.iter().zip(&st.layers).zip(&mut host.layers) {
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
    pub fn state_from_host(&self, host: &State, capacity: usize) -> Result<CudaState, CudaError> {
        let mut st = self.new_state(host.kv_mode, capacity)?;
        self.load_state(&mut st, host)?;
        Ok(st)
    }

    /// The CPU's state written over `st` (a checkpoint restored in place, within `st`'s capacity).
    pub fn load_state(&self, st: &mut CudaState, host: &State) -> Result<(), CudaError> {
        let g = &*self.gpu;
        let fresh = State::new(&self.model.config, host.kv_mode);
        let wrong = || CudaError::Shape("the saved state does not match the model".into());
        if host.layers.len() != st.layers.len() || host.ple.z.len() != fresh.ple.z.len() {
            return Err(wrong());
        }
        if host.kv_mode != st.kv {
            return Err(CudaError::Shape(format!("a state saved with {:?} KV into {:?} caches", host.kv_mode, st.kv)));
        }
        for (((lw, ls), h), f) in self.layers.iter().zip(&mut st.layers).zip(&host.layers).zip(&fresh.layers) {
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

    /// `f`, its device time added to the op-family profile when one is kept.
    fn timed<R>(&self, family: &'static str, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        self.gpu.timed(ProfileMode::Families, family, f)
    }

    fn hc(&self, id: HcId) -> Result<&HcGpu, CudaError> {
        match id {
            HcId::Attn(l) => Ok(&self.layers[l].hc_attn),
            HcId::Ffn(l) => Ok(&self.layers[l].hc_ffn),
            HcId::Head => Ok(&self.head),
            HcId::MtpAttn => Ok(&self.mtp()?.layer.hc_attn),
            HcId::MtpFfn => Ok(&self.mtp()?.layer.hc_ffn),
            HcId::MtpHead => Ok(&self.mtp()?.head),
        }
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

/// The PLE gate by ple_gate_z_split (a thread a chunk of 8: n a multiple of 8, n/8 ≤ 1024 threads), unless
/// `STRATA_PLE_SPLIT=0`; else by ple_gate_z. The same bits.
fn ple_split(s: &crate::runtime::settings::Settings, n: usize) -> bool {
    s.ple_split && n.is_multiple_of(8) && n / 8 <= 1024
}

fn attn_dims(c: &strata_model::config::Config) -> AttnDims {
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

impl CudaForward<'_> {
    /// The read `id` of the streams `r`, after the pending write if one is given (in place in R). The
    /// outputs leave with the rows; the next read writes into fresh buffers (no copy, no memset: gr_up
    /// writes all of mixed, gr_down all of inj where there are inject rows, and a head read's inj is never
    /// read), so a pending inj, which is the previous read's, is never the buffer being written.
    fn read_streams(&self, r: &Rows, pending: Option<Pending>, id: HcId) -> Result<(Rows, Rows), CudaError> {
        let (c, g) = (&self.model.config, &*self.gpu);
        let w = self.hc(id)?;
        let p = r.buf.ptr(g);
        let mut s = self.scratch.lock().expect("HC scratch lock");
        // The outputs are made here, fresh for each read (a step's arena while one is recorded), and
        // leave with the rows.
        s.mixed = Buf::uninit(g, MAX_T * c.n_embd)?;
        s.inj = Buf::uninit(g, MAX_T * c.hc)?;
        hc_read(g, w, p, p, pending, r.t, &s)?;
        let mixed = std::mem::replace(&mut s.mixed, Buf::empty());
        let inj = std::mem::replace(&mut s.inj, Buf::empty());
        Ok((Rows { buf: mixed, t: r.t, width: c.n_embd }, Rows { buf: inj, t: r.t, width: c.hc }))
    }

    /// The rope rows of positions `first .. first + t`: made once a window, shared by its attention layers.
    fn window_rope(&self, first: usize, t: usize) -> Result<Arc<Buf<f32>>, CudaError> {
        let mut kept = self.rope.lock().expect("rope rows lock");
        match &*kept {
            Some((key, rows)) if *key == (first, t) => Ok(rows.clone()),
            _ => {
                let rows = Arc::new(rope_rows(&self.gpu, &self.model.rope, first..first + t)?);
                *kept = Some(((first, t), rows.clone()));
                Ok(rows)
            }
        }
    }

    /// `f` as one step on the card: one CUDA graph (graph.rs). Buffers it makes stay valid until the next
    /// step; the window's rope rows are made anew (the last ones were in the last step's memory).
    pub fn step<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        *self.rope.lock().expect("rope rows lock") = None;
        self.gpu.step(f)
    }

    /// Keeps a late input's place while a step is prepared ahead.
    fn note_late(&self, late: impl FnOnce() -> Late) {
        if let Some(v) = self.late.lock().expect("late inputs lock").as_mut() {
            v.push(late());
        }
    }

    /// `f` recorded as the next step (of one token, at the decoder's next position) without its token:
    /// the step and its late inputs (`Gpu::prepare`).
    fn prepare<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<(R, Prepared, Vec<Late>), CudaError> {
        *self.rope.lock().expect("rope rows lock") = None;
        *self.late.lock().expect("late inputs lock") = Some(Vec::new());
        let out = self.gpu.prepare(f);
        let late = self.late.lock().expect("late inputs lock").take().unwrap_or_default();
        let (r, p) = out?;
        Ok((r, p, late))
    }

    /// A prepared step's late inputs written for its token `t` (the PLE history moves on by it).
    fn write_late(&self, late: &[Late], t: u32, st: &mut CudaState) -> Result<(), CudaError> {
        for l in late {
            match *l {
                Late::Id(ptr) => self.gpu.write_staged(ptr, &(t as i32).to_le_bytes())?,
                Late::PleRows(ptr) => {
                    let (Some(p), Some(pw)) = (&self.model.config.ple, &self.model.weights.ple) else {
                        return Err(CudaError::Shape("PLE rows staged for a model without PLE".into()));
                    };
                    let mut emb = vec![0f32; p.embd_dim()];
                    let t0 = std::time::Instant::now();
                    table_rows(p, pw, t, &mut st.ple_prev, &mut emb);
                    self.gpu.note(|s| s.ple_ns += t0.elapsed().as_nanos() as u64);
                    let bytes: Vec<u8> = emb.iter().flat_map(|v| v.to_le_bytes()).collect();
                    self.gpu.write_staged(ptr, &bytes)?;
                }
            }
        }
        Ok(())
    }

    /// The token after the window's last chosen on the device (argmax.rs's word or sample.rs's id), left
    /// there.
    fn choose_head(&self, fin: &Rows, how: Choice) -> Result<Chosen, CudaError> {
        let (g, rows) = (&self.gpu, self.output.rows);
        self.timed("head", || {
            let logits = self.last_head(fin)?;
            Ok(match how {
                Choice::Greedy => Chosen::Argmax(crate::ops::argmax::argmax_start(g, &logits, rows)?),
                Choice::Draw(p) => Chosen::Drawn(crate::ops::sample::sample_start(g, &logits, rows, &p)?),
            })
        })
    }

    /// `tokens` through the trunk at `pos`, then the token after them chosen: what one decode step
    /// records.
    fn choose_trunk(&self, st: &mut CudaState, tokens: &[u32], pos: usize, how: Choice) -> Result<Chosen, CudaError> {
        let (fin, _) = trunk(self, &self.model.config, st, tokens, pos)?;
        self.choose_head(&fin, how)
    }

    /// The logits of the window's last token, on the device.
    fn last_head(&self, fin: &Rows) -> Result<Buf<f32>, CudaError> {
        let (g, n) = (&*self.gpu, self.model.config.n_embd);
        let y = Buf::<f32>::uninit(g, self.output.rows)?;
        let last = fin.buf.ptr(g) + ((fin.t.max(1) - 1) * n * 4) as u64;
        matvec_at(g, &self.output, last, y.ptr(g), 1)?;
        Ok(y)
    }
}

/// The QSA block size of an attention layer (0: dense).
fn block_size(cells: &Cells) -> usize {
    match cells {
        Cells::Qsa(r) => *r,
        Cells::Dense(_) => 0,
    }
}

impl Backend for CudaForward<'_> {
    type Rows = Rows;
    type State = CudaState;
    type MtpCache = AttnStateGpu;
    type Error = CudaError;

    fn embed(&self, tokens: &[u32]) -> Result<Rows, CudaError> {
        self.timed("embed", || {
            let c = &self.model.config;
            let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
            let (t, width) = (tokens.len(), c.hc * c.n_embd);
            let buf = Buf::uninit(&self.gpu, t * width)?; // embed writes every stream of every token
            let staged = Buf::from_host(&self.gpu, &ids)?;
            self.note_late(|| Late::Id(staged.ptr(&self.gpu)));
            embed(&self.gpu, &self.embd, &staged, &buf, t, c.hc)?;
            Ok(Rows { buf, t, width })
        })
    }

    fn ple(&self, r: &mut Rows, tokens: &[u32], st: &mut CudaState) -> Result<(), CudaError> {
        self.timed("ple", || {
            let (c, g) = (&self.model.config, &*self.gpu);
            let (Some(p), Some(pg), Some(pw), Some(hist)) = (&c.ple, &self.ple, &self.model.weights.ple, &st.ple_hist)
            else {
                return Ok(());
            };
            let (n, hc) = (c.n_embd, c.hc);
            let wide = hc * n;
            let late = self.late.lock().expect("late inputs lock").is_some();
            for (i, &t) in tokens.iter().enumerate() {
                // The table rows are read on the host, from the memory-mapped file (when the step is
                // prepared ahead, once its token is known: `write_late`).
                let mut emb = vec![0f32; p.embd_dim()];
                if !late {
                    table_rows(p, pw, t, &mut st.ple_prev, &mut emb);
                }
                let eb = Buf::from_host(g, &emb)?;
                self.note_late(|| Late::PleRows(eb.ptr(g)));
                let (key, value) = (Buf::<f32>::zeros(g, wide)?, Buf::<f32>::zeros(g, n)?);
                matvec(g, &pg.key, &eb, &key, 1)?;
                matvec(g, &pg.value, &eb, &value, 1)?;
                let (query, gated, z) =
                    (Buf::<f32>::zeros(g, wide)?, Buf::<f32>::zeros(g, wide)?, Buf::<f32>::zeros(g, wide)?);
                let row = r.buf.ptr(g) + (i * wide * 4) as u64;
                // A block a stream and a thread a chunk of 8 (ple_gate_z_split), or a warp a stream
                // (ple_gate_z): the same bits.
                let (name, grid, threads, smem) = if ple_split(&g.settings, n) {
                    ("ple_gate_z_split", hc, (n / 8).next_multiple_of(32), (n / 8 + 1) * 4)
                } else {
                    ("ple_gate_z", 1, 32 * hc, 0)
                };
                let cfg = cudarc::driver::LaunchConfig {
                    grid_dim: (grid as u32, 1, 1),
                    block_dim: (threads as u32, 1, 1),
                    shared_mem_bytes: smem as u32,
                };
                let f = g.function(&crate::ops::sources::PLE_FILE, name)?;
                let args = [
                    key.ptr(g),
                    row,
                    query.ptr(g),
                    value.ptr(g),
                    pg.norm_key.ptr(g),
                    pg.norm_query.ptr(g),
                    pg.norm_conv.ptr(g),
                    gated.ptr(g),
                    z.ptr(g),
                ];
                launch(
                    g,
                    &f,
                    name,
                    cfg,
                    &[&args.map(Arg::Ptr)[..], &[Arg::I32(n as i32), Arg::I32(hc as i32), Arg::F32(c.eps)]].concat(),
                )?;
                let f = g.function(&crate::ops::sources::PLE_FILE, "ple_conv")?;
                let cfg = cudarc::driver::LaunchConfig {
                    grid_dim: (wide.div_ceil(256) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let args = [row, gated.ptr(g), z.ptr(g), hist.ptr(g), pg.conv.ptr(g)].map(Arg::Ptr);
                let ints = [wide, p.conv_kernel, p.ngram_size].map(|v| Arg::I32(v as i32));
                launch(g, &f, "ple_conv", cfg, &[&args[..], &ints[..]].concat())?;
            }
            Ok(())
        })
    }

    fn hc_read(&self, r: &Rows, id: HcId) -> Result<(Rows, Rows), CudaError> {
        self.timed("hc read", || self.read_streams(r, None, id))
    }

    /// The pending write done by the read's first kernel (gr_norm adds y·2σ(inj/hc) into R as it reads it).
    fn hc_write_read(&self, r: &mut Rows, (y, inj): (&Rows, &Rows), id: HcId) -> Result<(Rows, Rows), CudaError> {
        let pending = Pending::of(&y.buf, &inj.buf);
        self.timed("hc read", || self.read_streams(r, Some(pending), id))
    }

    fn hc_write(&self, r: &mut Rows, y: &Rows, inj: &Rows) -> Result<(), CudaError> {
        self.timed("hc write", || {
            let c = &self.model.config;
            hc_write(&self.gpu, r.buf.ptr(&self.gpu), &y.buf, &inj.buf, c.n_embd, c.hc, r.t)
        })
    }

    fn mixer(&self, l: usize, x: &Rows, st: &mut CudaState, pos: usize) -> Result<Rows, CudaError> {
        self.timed(if self.model.config.is_attn(l) { "attention" } else { "gdn" }, || {
            let g = &*self.gpu;
            let n = self.model.config.n_embd;
            let buf = match (&self.layers[l].mixer, &mut st.layers[l]) {
                (MixerGpu::Gdn(w), LayerStateGpu::Gdn(s)) => gdn(g, w, s, &x.buf, x.t)?,
                (MixerGpu::Attn(w, cells), LayerStateGpu::Attn(s)) => {
                    attention(g, w, s, &x.buf, x.t, *cells, (&self.model.rope, &*self.window_rope(pos, x.t)?))?
                }
                _ => unreachable!("state built from the same layers"),
            };
            Ok(Rows { buf, t: x.t, width: n })
        })
    }

    fn moe(&self, id: MoeId, x: &Rows) -> Result<Rows, CudaError> {
        self.timed("moe", || {
            let w = match id {
                MoeId::Layer(l) => &self.layers[l].moe,
                MoeId::Mtp => &self.mtp()?.layer.moe,
            };
            let n = self.model.config.n_embd;
            let (buf, _) = moe(&self.gpu, w, &x.buf, x.t)?;
            Ok(Rows { buf, t: x.t, width: n })
        })
    }

    fn logits(&self, fin: &Rows) -> Result<Vec<Vec<f32>>, CudaError> {
        self.timed("head", || {
            let vocab = self.output.rows;
            let y = Buf::<f32>::uninit(&self.gpu, fin.t * vocab)?;
            matvec(&self.gpu, &self.output, &fin.buf, &y, fin.t)?;
            Ok(y.read(&self.gpu, fin.t * vocab)?.chunks(vocab).map(<[f32]>::to_vec).collect())
        })
    }

    fn last_logits(&self, fin: &Rows) -> Result<Vec<f32>, CudaError> {
        self.timed("head", || {
            let y = self.last_head(fin)?;
            y.read(&self.gpu, self.output.rows)
        })
    }

    fn last_argmax(&self, fin: &Rows) -> Result<u32, CudaError> {
        self.timed("head", || crate::ops::argmax::argmax(&self.gpu, &self.last_head(fin)?, self.output.rows))
    }

    fn last_sample(&self, fin: &Rows, p: &SampleParams) -> Result<u32, CudaError> {
        self.timed("head", || crate::ops::sample::sample(&self.gpu, &self.last_head(fin)?, self.output.rows, p))
    }

    fn mtp_input(&self, r: &Rows, next: &[u32]) -> Result<Rows, CudaError> {
        self.timed("mtp", || {
            let (c, g, m) = (&self.model.config, &*self.gpu, self.mtp()?);
            let (n, hc, t) = (c.n_embd, c.hc, r.t);
            if next.len() != t {
                return Err(CudaError::Shape(format!("{} next tokens for {t} rows of streams", next.len())));
            }
            let ids: Vec<i32> = next.iter().map(|&x| x as i32).collect();
            let e = Buf::<f32>::uninit(g, t * n)?;
            embed(g, &self.embd, &Buf::from_host(g, &ids)?, &e, t, 1)?;
            let rows = t * hc;
            let cat = Buf::<f32>::uninit(g, rows * 2 * n)?;
            let f = g.function(&crate::ops::sources::MTP_FILE, "mtp_input")?;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (rows.div_ceil(4) as u32, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let ptrs = [e.ptr(g), r.buf.ptr(g), m.enorm.ptr(g), m.hnorm.ptr(g), cat.ptr(g)].map(Arg::Ptr);
            let ints = [n, hc, rows].map(|v| Arg::I32(v as i32));
            launch(g, &f, "mtp_input", cfg, &[&ptrs[..], &ints[..], &[Arg::F32(c.eps)]].concat())?;
            // eh_proj on every (token, stream) row, at most a window's worth a call: R' in the streams' layout.
            let buf = Buf::<f32>::uninit(g, rows * n)?;
            for first in (0..rows).step_by(crate::ops::matvec::MAX_T) {
                let k = (rows - first).min(crate::ops::matvec::MAX_T);
                let (x, y) = (cat.ptr(g) + (first * 2 * n * 4) as u64, buf.ptr(g) + (first * n * 4) as u64);
                matvec_at(g, &m.eh_proj, x, y, k)?;
            }
            Ok(Rows { buf, t, width: hc * n })
        })
    }

    fn mtp_attention(&self, x: &Rows, cache: &mut AttnStateGpu, pos: usize) -> Result<Rows, CudaError> {
        self.timed("mtp", || {
            let MixerGpu::Attn(w, cells) = &self.mtp()?.layer.mixer else { unreachable!("uploaded as attention") };
            let rows = self.window_rope(pos, x.t)?;
            let buf = attention(&self.gpu, w, cache, &x.buf, x.t, *cells, (&self.model.rope, &rows))?;
            Ok(Rows { buf, t: x.t, width: self.model.config.n_embd })
        })
    }
}

/// The CUDA back-end with a conversation's state: what the generation loop drives on a GPU.
pub struct CudaDecoder<'a> {
    pub fwd: CudaForward<'a>,
    pub state: CudaState,
    pub pos: usize,
    /// The next decode step, recorded while this one ran (`STRATA_OVERLAP`).
    ahead: Option<Ahead>,
    /// When the last decode step's token went back to the caller (for the graphs' figures).
    handed: Option<std::time::Instant>,
}

/// A decode step of one token recorded ahead, while the step before it ran on the card: the host's
/// recording (about 1,400 ops) then overlaps the card's work instead of following it. Its token goes in
/// once known (the embedding's id and the PLE rows, staged as placeholders). Recording moved the
/// attention layers' cell counts on; they are put back at once and set again when the step runs, so
/// the decoder's state is the one it shows until then. Any other call drops it, and so does a step
/// that chooses its token otherwise than it was recorded to.
struct Ahead {
    step: Prepared,
    late: Vec<Late>,
    /// How it chooses its token, and where it leaves it.
    how: Choice,
    chosen: Chosen,
    /// The position it was recorded for, and the cell counts after it.
    pos: usize,
    cells: Vec<usize>,
}

/// How a decode step chooses its token on the device.
#[derive(Clone, Copy, PartialEq)]
enum Choice {
    Greedy,
    Draw(SampleParams),
}

/// Where a step left its token: an argmax's word or a draw's id.
enum Chosen {
    Argmax(Buf<u64>),
    Drawn(Buf<i32>),
}

impl Chosen {
    fn read(&self, gpu: &Gpu) -> Result<u32, CudaError> {
        match self {
            Chosen::Argmax(best) => crate::ops::argmax::argmax_id(gpu, best),
            Chosen::Drawn(id) => Ok(id.read(gpu, 1)?[0] as u32),
        }
    }
}

impl CudaState {
    /// The attention layers' cell counts (0 for a GDN layer): the host's part of the state that a step's
    /// recording moves on.
    fn cells(&self) -> Vec<usize> {
        self.layers
            .iter()
            .map(|l| match l {
                LayerStateGpu::Attn(s) => s.cells,
                LayerStateGpu::Gdn(_) => 0,
            })
            .collect()
    }

    /// Whether every attention layer's cache has room for one more cell.
    fn room_for_one(&self) -> bool {
        self.layers.iter().all(|l| match l {
            LayerStateGpu::Attn(s) => s.cells < s.capacity,
            LayerStateGpu::Gdn(_) => true,
        })
    }

    fn set_cells(&mut self, cells: &[usize]) {
        for (l, &c) in self.layers.iter_mut().zip(cells) {
            if let LayerStateGpu::Attn(s) = l {
                s.cells = c;
            }
        }
    }
}

impl<'a> CudaDecoder<'a> {
    pub fn new(fwd: CudaForward<'a>, state: CudaState, pos: usize) -> CudaDecoder<'a> {
        CudaDecoder { fwd, state, pos, ahead: None, handed: None }
    }
}

impl CudaDecoder<'_> {
    /// `tokens` (a decode step, or a prompt's last window) choosing the token after them as `how`, with
    /// the next decode step (choosing as `next`) recorded while they run (`STRATA_OVERLAP`): a decode
    /// step is the one recorded ahead when it was recorded for this position and choice, else recorded
    /// now. After a prompt's last window the first decode step is recorded (and its graph captured, the
    /// first time) while the window runs, not after its token is known.
    fn overlapped(&mut self, tokens: &[u32], how: Choice, next: Choice) -> Result<u32, CudaError> {
        let chosen = match self.ahead.take() {
            Some(a) if tokens.len() == 1 && a.pos == self.pos && a.how == how => {
                let t0 = std::time::Instant::now();
                self.fwd.write_late(&a.late, tokens[0], &mut self.state)?;
                self.fwd.gpu.note(|s| s.late_ns += t0.elapsed().as_nanos() as u64);
                self.state.set_cells(&a.cells);
                if let Some(h) = self.handed.take() {
                    self.fwd.gpu.note(|s| s.between_ns += h.elapsed().as_nanos() as u64);
                }
                self.fwd.gpu.run_prepared(a.step)?;
                a.chosen
            }
            _ => {
                let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
                fwd.step(|| fwd.choose_trunk(state, tokens, pos, how))?
            }
        };
        self.pos += tokens.len();
        // The next step, recorded while this one runs; its token is a placeholder until written. None
        // when the context is full (the caller stops there).
        if !self.state.room_for_one() {
            return chosen.read(&self.fwd.gpu);
        }
        self.handed = None;
        let before = self.state.cells();
        let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
        let ahead = fwd.prepare(|| fwd.choose_trunk(state, &[0], pos, next));
        let cells = self.state.cells();
        self.state.set_cells(&before);
        let (next_chosen, step, late) = ahead?;
        self.ahead = Some(Ahead { step, late, how: next, chosen: next_chosen, pos: self.pos, cells });
        let id = chosen.read(&self.fwd.gpu)?;
        self.handed = Some(std::time::Instant::now());
        Ok(id)
    }

    /// `tokens` through the model and the token after them chosen on the device as `how`; with steps
    /// recorded ahead, [`CudaDecoder::overlapped`], telling it that the next one chooses as `next`.
    fn choose(&mut self, tokens: &[u32], how: Choice, next: Choice) -> Result<u32, String> {
        let g = &self.fwd.gpu;
        if g.settings.overlap && g.graphs_on() && !g.recording() {
            return self.overlapped(tokens, how, next).map_err(|e| e.to_string());
        }
        self.with_trunk(tokens, |fwd, fin| fwd.choose_head(fin, how), |fwd, chosen| chosen.read(&fwd.gpu))
    }
}

impl CudaDecoder<'_> {
    /// Runs `tokens` through the trunk (a decode step when there is one token, for the profile) and
    /// `head` on their final reads, as one step on the card; then `read` on what the head left there.
    fn with_trunk<D, R>(
        &mut self,
        tokens: &[u32],
        head: impl FnOnce(&CudaForward, &Rows) -> Result<D, CudaError>,
        read: impl FnOnce(&CudaForward, D) -> Result<R, CudaError>,
    ) -> Result<R, String> {
        let e = |e: CudaError| e.to_string();
        self.ahead = None; // a step recorded ahead runs only as the next decode step
        if let Some(p) = &self.fwd.gpu.profile {
            p.begin(tokens.len() == 1).map_err(e)?;
        }
        let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
        let out = fwd
            .step(|| {
                let (fin, _) = trunk(fwd, &fwd.model.config, state, tokens, pos)?;
                head(fwd, &fin)
            })
            .map_err(e)?;
        self.pos += tokens.len();
        read(fwd, out).map_err(e)
    }
}

impl Decoder for CudaDecoder<'_> {
    fn vocab(&self) -> usize {
        self.fwd.model.config.vocab
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn window(&self) -> usize {
        crate::ops::matvec::MAX_T
    }

    fn advance(&mut self, tokens: &[u32]) -> Result<(), String> {
        self.with_trunk(tokens, |_, _| Ok(()), |_, ()| Ok(()))
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let rows = self.fwd.output.rows;
        let head = |fwd: &CudaForward, fin: &Rows| fwd.timed("head", || fwd.last_head(fin));
        self.with_trunk(tokens, head, |fwd, y| y.read(&fwd.gpu, rows))
    }

    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32, String> {
        self.choose(tokens, Choice::Greedy, Choice::Greedy)
    }

    fn forward_sample(&mut self, tokens: &[u32], p: &SampleParams, next: &SampleParams) -> Result<u32, String> {
        self.choose(tokens, Choice::Draw(*p), Choice::Draw(*next))
    }

    fn report(&self) -> Option<String> {
        let p = self.fwd.gpu.profile.as_ref()?;
        let layouts = format!("matvec layouts: {}", self.fwd.variants.layouts.summary());
        Some(p.report(Some(&layouts)).unwrap_or_else(|e| format!("profile: {e}")))
    }

    fn snapshot(&self) -> Result<State, String> {
        self.fwd.download_state(&self.state, self.pos).map_err(|e| e.to_string())
    }

    fn restore(&mut self, state: &State) -> Result<(), String> {
        self.ahead = None; // recorded for the conversation being replaced
        self.handed = None;
        let loaded = self.fwd.load_state(&mut self.state, state);
        // A failed load leaves the caches half written: the conversation starts again from nothing.
        if let Err(e) = loaded {
            self.pos = 0;
            let fresh = State::new(&self.fwd.model.config, self.state.kv);
            self.fwd.load_state(&mut self.state, &fresh).map_err(|e| e.to_string())?;
            return Err(e.to_string());
        }
        self.pos = state.pos;
        Ok(())
    }
}

/// The bytes one decode step reads at a depth of `cells`: every weight but the embedding table (one row),
/// the host-side PLE table and the MTP block, the routed experts scaled to the chosen share, and per
/// attention layer the K and V cells it attends (all on a dense layer, `top_k` on a QSA layer) and the block
/// keys it scores, per GDN layer its state matrices read and written. The floor of a step is these bytes over the card's copy bandwidth.
pub fn decode_bytes(model: &Model, kv: KvMode, cells: usize) -> u64 {
    let c = &model.config;
    let used = c.n_expert_used as f64 / c.n_expert.max(1) as f64;
    let weights: f64 = model
        .gguf
        .tensors()
        .filter(|(_, t)| !matches!(t.name.as_str(), "per_layer_token_embd.weight" | "token_embd.weight"))
        .filter(|(_, t)| !t.name.contains(".nextn."))
        .map(|(_, t)| {
            let b = t.ty.bytes_for(t.n_elements).unwrap_or(0) as f64;
            if t.name.contains("_exps") {
                b * used
            } else {
                b
            }
        })
        .sum();
    let per_cell = kv.cell_bytes(c.n_head_kv * c.head_dim) as f64;
    let attn: f64 = c
        .kinds
        .iter()
        .map(|k| match *k {
            LayerKind::Attn { ratio: 0 } => 2.0 * per_cell * cells as f64,
            LayerKind::Attn { ratio } => {
                2.0 * per_cell * cells.min(c.idx_top_k) as f64 + 4.0 * (c.idx_dim * cells / ratio) as f64
            }
            // The recurrent matrices, read and written.
            LayerKind::Gdn => 2.0 * 4.0 * (c.ssm_heads * c.ssm_state * c.ssm_state) as f64,
        })
        .sum();
    (weights + attn) as u64
}

/// What a model takes on the device at a context of `cells`, in bytes.
pub struct DevicePlan {
    /// Every weight but the host-side PLE table and the MTP block.
    pub weights: u64,
    /// K and V in the KV mode, and the indexer's raw and block keys (f32), of every attention layer.
    pub caches: u64,
    /// The largest temporaries of a window of 8 tokens: attention scores over every cell, the logits,
    /// the expert activations, the window's streams.
    pub scratch: u64,
}

pub fn plan_bytes(model: &Model, kv: KvMode, cells: usize) -> DevicePlan {
    let weights: u64 = model
        .gguf
        .tensors()
        .filter(|(_, t)| t.name != "per_layer_token_embd.weight" && !t.name.contains(".nextn."))
        .map(|(_, t)| t.ty.bytes_for(t.n_elements).unwrap_or(0))
        .sum();
    let c = &model.config;
    let per_cell = kv.cell_bytes(c.n_head_kv * c.head_dim) as u64;
    let attn_layers = (0..c.n_layer).filter(|&l| c.is_attn(l)).count() as u64;
    let caches = attn_layers * cells as u64 * (2 * per_cell + 2 * 4 * c.idx_dim as u64);
    let per_token = c.n_head * cells
        + c.vocab
        + 2 * c.n_expert
        + c.n_expert_used * (3 * c.expert_ff + c.n_embd)
        + 3 * c.shexp_ff
        + 4 * c.hc * c.n_embd;
    // A step run as one graph keeps every temporary of its layers at once (graph.rs: its arena does not
    // reuse memory within a step), about this many floats a token a layer, plus a chunk of arena and one
    // of staging at least.
    let per_layer = 4 * (c.n_embd + c.hc)
        + 2 * c.n_expert
        + c.n_expert_used * (3 * c.expert_ff + c.n_embd)
        + 3 * c.shexp_ff
        + 2 * c.ssm_conv_channels()
        + 4 * c.n_head * c.head_dim
        + 4 * c.n_embd;
    let arena = (c.n_layer * per_layer + c.vocab) as u64 * 4 * crate::ops::matvec::MAX_T as u64;
    let chunks = 2 * crate::runtime::recorder::CHUNK as u64;
    let scratch = 4 * crate::ops::matvec::MAX_T as u64 * per_token as u64 + arena.max(chunks);
    DevicePlan { weights, caches, scratch }
}
