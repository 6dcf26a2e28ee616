//! The CUDA back-end of the forward pass: [`strata_model::backend::Backend`] on the device, so the one
//! layer loop (`forward_window`) runs here too. Every operation is a twin of the CPU's (the parity tools
//! check each, and `strata parity forward_parity` the whole pass). Activations stay on the device; the
//! logits come back to the host.

use std::sync::{Arc, Mutex};

use strata_model::backend::{Backend, HcId, MoeId};
use strata_model::kv::KvMode;
use strata_model::layers::ple::table_rows;
use strata_model::ops::sample::SampleParams;
use strata_model::{Model, State};

use crate::backend::state::{CudaState, LayerStateGpu};
use crate::backend::weights::{MixerGpu, MtpGpu, Placing, WeightsGpu};
use crate::ops::attn::{append_cells, attention, rope_rows, AttnStateGpu};
use crate::ops::draft::DraftHead;
use crate::ops::gdn::gdn;
use crate::ops::hc::{can_read_long, hc_read, hc_read_long, hc_write, HcGpu, HcScratch, Pending, MAX_T};
use crate::ops::matvec::{embed, matvec, matvec_at, tiles};
use crate::ops::moe::moe_then;
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

impl Rows {
    /// Rows `first .. first + k`, owning nothing (valid while these are).
    fn tile(&self, gpu: &Gpu, first: usize, k: usize) -> Result<Rows, CudaError> {
        Ok(Rows { buf: self.buf.view(gpu, first * self.width, k * self.width)?, t: k, width: self.width })
    }
}

/// A window's (first position, tokens) and their rope rows.
type WindowRope = ((usize, usize), Arc<Buf<f32>>);

/// The forward pass on the device: the model's weights there and what its steps share.
pub struct CudaForward<'a> {
    pub gpu: Arc<Gpu>,
    pub(crate) model: &'a Model,
    /// The variant of each kernel family its weights run (the plan's).
    pub variants: Variants,
    w: WeightsGpu,
    /// The HC reads' intermediates and outputs; each read hands its outputs out and leaves fresh ones.
    scratch: Mutex<HcScratch>,
    /// The rope rows of the last window's positions (first, tokens), which all its attention layers share.
    rope: Mutex<Option<WindowRope>>,
    /// While a step is prepared ahead (`STRATA_OVERLAP`): the staged inputs that depend on its token,
    /// left as placeholders and written once the token is known.
    late: Mutex<Option<Vec<Late>>>,
    /// The next MTP input's token, already on the device (a draft chain's last choice), in place of the
    /// host's: taken by the next [`Backend::mtp_input`].
    draft_ids: Mutex<Option<Buf<i32>>>,
    /// The tokens of a prompt window: the memory plan's where the experts are placed, else the settings'.
    pub(crate) prompt_window: usize,
}

/// A staged input of a step prepared ahead that depends on its tokens: the device address of its bytes.
pub(crate) enum Late {
    /// Token ids: the last `count` tokens of the step's window (the embedding's: all of them; the MTP
    /// cells' inputs: those after the first, or all of them after a waiting cell).
    Ids { ptr: u64, count: usize },
    /// The PLE table rows of the window's next token (in order: the first such entry is the first token's),
    /// and the PLE history moves on by it.
    PleRows(u64),
}

impl<'a> CudaForward<'a> {
    /// Copies the model's weights to the device, each family to run in `variants` (the plan's); a weight
    /// type without a kernel is refused by name.
    pub fn upload(gpu: Arc<Gpu>, model: &'a Model, variants: Variants) -> Result<CudaForward<'a>, CudaError> {
        Self::upload_placed(gpu, model, variants, None)
    }

    /// [`Self::upload`] with some experts of each MoE block on the card and the rest computed by the host
    /// (docs/PLACEMENT.md); None: all on the card.
    pub fn upload_placed(
        gpu: Arc<Gpu>,
        model: &'a Model,
        variants: Variants,
        placing: Option<Placing>,
    ) -> Result<CudaForward<'a>, CudaError> {
        let c = &model.config;
        let prompt_window = placing.as_ref().map_or(gpu.settings.prompt_window(), |p| p.window);
        Ok(CudaForward {
            prompt_window,
            w: WeightsGpu::upload(&gpu, model, &variants, placing)?,
            scratch: Mutex::new(HcScratch::new(&gpu, c.n_embd, c.hc, c.hc_rank)?),
            rope: Mutex::new(None),
            late: Mutex::new(None),
            draft_ids: Mutex::new(None),
            model,
            gpu,
            variants,
        })
    }

    /// Uploads the MTP draft layer (an attention layer run dense over its own cache, spec §9), for
    /// [`strata_model::backend::mtp_step`]; an error when the model has none.
    pub fn upload_mtp(&mut self) -> Result<(), CudaError> {
        self.w.upload_mtp(&self.gpu, self.model, &self.variants)
    }

    /// The end of a pass, called once its output has been read (so the host has counted all its
    /// routings): the card's expert cache makes its last swaps resident and, every few passes, begins
    /// the next (backend/cache.rs). Nothing where every expert is on the card.
    pub fn end_pass(&self) -> Result<(), CudaError> {
        let Some(h) = &self.w.host else { return Ok(()) };
        h.cache.lock().unwrap_or_else(|p| p.into_inner()).end_pass(&self.gpu, &self.placed_blocks())
    }

    /// Each MoE block's device and host weights (the trunk's, then the MTP layer's, None before it is
    /// uploaded): what the expert cache's passes work on.
    fn placed_blocks(&self) -> Vec<Option<(&crate::ops::moe::MoeGpu, &strata_model::weights::MoeWeights)>> {
        let w = &self.model.weights;
        let trunk = self.w.layers.iter().zip(&w.layers).map(|(g, l)| Some((&g.moe, &l.moe)));
        let mtp = match (&self.w.mtp, &w.mtp) {
            (Some(g), Some(m)) => Some((&g.layer.moe, &m.layer.moe)),
            _ => None,
        };
        trunk.chain(std::iter::once(mtp)).collect()
    }

    /// Routings the card's expert cache held and did not, and the experts it copied in (None where every
    /// expert is on the card); the card's own counts taken first where it keeps them.
    pub fn cache_counts(&self) -> Option<(u64, u64, u64)> {
        let h = self.w.host.as_ref()?;
        let mut cache = h.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = cache.take_card_counts(&self.gpu, &self.placed_blocks()) {
            eprintln!("note: the card's routing counts could not be read: {e}");
        }
        Some(cache.counts())
    }

    /// Requests the host's thread answered for placed blocks, and its time answering them.
    pub fn host_answers(&self) -> Option<[(u64, std::time::Duration); 3]> {
        self.w.host.as_ref().map(|h| h.server.answered())
    }

    /// Where the one-token requests' time went on the host, in all.
    pub fn host_parts(&self) -> Option<crate::ops::misses::Parts> {
        self.w.host.as_ref().map(|h| h.server.one_token_parts())
    }

    /// A fresh conversation of at most `capacity` cells.
    pub fn new_state(&self, kv: KvMode, capacity: usize) -> Result<CudaState, CudaError> {
        CudaState::new(&self.gpu, &self.w, &self.model.config, kv, capacity)
    }

    /// The conversation as the CPU holds it (for a checkpoint), after `pos` tokens.
    pub fn download_state(&self, st: &CudaState, pos: usize) -> Result<State, CudaError> {
        st.download(&self.gpu, &self.w, &self.model.config, pos)
    }

    /// A conversation on the device continued from the CPU's state, with room for `capacity` cells.
    pub fn state_from_host(&self, host: &State, capacity: usize) -> Result<CudaState, CudaError> {
        CudaState::from_host(&self.gpu, &self.w, &self.model.config, host, capacity)
    }

    /// The CPU's state written over `st` (a checkpoint restored in place, within `st`'s capacity).
    pub fn load_state(&self, st: &mut CudaState, host: &State) -> Result<(), CudaError> {
        st.load(&self.gpu, &self.w, &self.model.config, host)
    }

    /// An empty cache for the MTP layer, room for `capacity` drafted cells ([`CudaForward::upload_mtp`] first).
    pub fn mtp_cache(&self, kv: KvMode, capacity: usize) -> Result<AttnStateGpu, CudaError> {
        match &self.mtp()?.layer.mixer {
            MixerGpu::Attn(a, _) => a.new_state(&self.gpu, kv, capacity),
            MixerGpu::Gdn(_) => unreachable!("uploaded as attention"),
        }
    }

    pub(crate) fn mtp(&self) -> Result<&MtpGpu, CudaError> {
        self.w.mtp()
    }

    /// The head's rows: the vocabulary the logits cover.
    pub(crate) fn vocab_rows(&self) -> usize {
        self.w.output.rows
    }

    /// `f`, its device time added to the op-family profile when one is kept.
    pub(crate) fn timed<R>(
        &self,
        family: &'static str,
        f: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        self.gpu.timed(ProfileMode::Families, family, f)
    }

    fn hc(&self, id: HcId) -> Result<&HcGpu, CudaError> {
        match id {
            HcId::Attn(l) => Ok(&self.w.layers[l].hc_attn),
            HcId::Ffn(l) => Ok(&self.w.layers[l].hc_ffn),
            HcId::Head => Ok(&self.w.head),
            HcId::MtpAttn => Ok(&self.mtp()?.layer.hc_attn),
            HcId::MtpFfn => Ok(&self.mtp()?.layer.hc_ffn),
            HcId::MtpHead => Ok(&self.mtp()?.head),
        }
    }
}

/// The PLE gate by ple_gate_z_split (a thread a chunk of 8: n a multiple of 8, n/8 ≤ 1024 threads), unless
/// `STRATA_PLE_SPLIT=0`; else by ple_gate_z. The same bits.
fn ple_split(s: &crate::runtime::settings::Settings, n: usize) -> bool {
    s.ple_split && n.is_multiple_of(8) && n / 8 <= 1024
}

impl CudaForward<'_> {
    /// The read `id` of the streams `r`, after the pending write if one is given (in place in R), tile by
    /// tile in a window longer than the kernels take, or there in one pass with `STRATA_HC_LONG`.
    fn read_streams(&self, r: &Rows, pending: Option<(&Rows, &Rows)>, id: HcId) -> Result<(Rows, Rows), CudaError> {
        let (c, g) = (&self.model.config, &*self.gpu);
        let at = |first: usize| r.buf.ptr(g) + (first * r.width * 4) as u64;
        if r.t <= MAX_T {
            return self.read_tile(at(0), pending.map(|(y, inj)| Pending::of(&y.buf, &inj.buf)), r.t, id);
        }
        let (n, hc) = (c.n_embd, c.hc);
        let w = self.hc(id)?;
        if g.settings.hc_long && can_read_long(g, w) {
            // The whole window at once, each weight chunk read once for 32 tokens (hc.cu's long kernels).
            let s = HcScratch::window(g, (w.n, w.hc, w.r), r.t)?;
            let pending = pending.map(|(y, inj)| Pending::of(&y.buf, &inj.buf));
            hc_read_long(g, w, (at(0), at(0)), pending, r.t, &s)?;
            return Ok((Rows { buf: s.mixed, t: r.t, width: n }, Rows { buf: s.inj, t: r.t, width: hc }));
        }
        let (mixed, inj) = (Buf::uninit(g, r.t * n)?, Buf::uninit(g, r.t * hc)?); // every tile's copied in
        for (first, k) in tiles(r.t) {
            let tiles = pending.map(|(y, i)| Ok::<_, CudaError>((y.tile(g, first, k)?, i.tile(g, first, k)?)));
            let tiles = tiles.transpose()?;
            let (m, i) = self.read_tile(at(first), tiles.as_ref().map(|(y, i)| Pending::of(&y.buf, &i.buf)), k, id)?;
            mixed.copy_from(g, first * n, &m.buf, k * n)?;
            inj.copy_from(g, first * hc, &i.buf, k * hc)?;
        }
        Ok((Rows { buf: mixed, t: r.t, width: n }, Rows { buf: inj, t: r.t, width: hc }))
    }

    /// The read of `t` ≤ MAX_T tokens' streams at `p`. The outputs leave with the rows; the next read
    /// writes into fresh buffers (no copy, no memset: gr_up writes all of mixed, gr_down all of inj where
    /// there are inject rows, and a head read's inj is never read), so a pending inj, which is the
    /// previous read's, is never the buffer being written.
    fn read_tile(&self, p: u64, pending: Option<Pending>, t: usize, id: HcId) -> Result<(Rows, Rows), CudaError> {
        let (c, g) = (&self.model.config, &*self.gpu);
        let w = self.hc(id)?;
        let mut s = self.scratch.lock().expect("HC scratch lock");
        // The outputs are made here, fresh for each read (a step's arena while one is recorded), and
        // leave with the rows.
        s.mixed = Buf::uninit(g, MAX_T * c.n_embd)?;
        s.inj = Buf::uninit(g, MAX_T * c.hc)?;
        hc_read(g, w, p, p, pending, t, &s)?;
        let mixed = std::mem::replace(&mut s.mixed, Buf::empty());
        let inj = std::mem::replace(&mut s.inj, Buf::empty());
        Ok((Rows { buf: mixed, t, width: c.n_embd }, Rows { buf: inj, t, width: c.hc }))
    }

    /// `f` on each tile of `x` (given its first row), its outputs of `width` values a row made the
    /// window's rows; `f` on `x` itself where the kernels take it whole.
    fn tiled(
        &self,
        x: &Rows,
        width: usize,
        mut f: impl FnMut(&Rows, usize) -> Result<Buf<f32>, CudaError>,
    ) -> Result<Rows, CudaError> {
        if x.t <= MAX_T {
            return Ok(Rows { buf: f(x, 0)?, t: x.t, width });
        }
        let g = &*self.gpu;
        let out = Buf::uninit(g, x.t * width)?; // every tile's rows copied in
        for (first, k) in tiles(x.t) {
            let y = f(&x.tile(g, first, k)?, first)?;
            out.copy_from(g, first * width, &y, k * width)?;
        }
        Ok(Rows { buf: out, t: x.t, width })
    }

    /// The rope rows of a tile's positions: rows `first .. first + k` of the window's.
    fn rope_tile(rows: &Buf<f32>, g: &Gpu, t: usize, (first, k): (usize, usize)) -> Result<Buf<f32>, CudaError> {
        let per = rows.len() / t.max(1);
        rows.view(g, first * per, k * per)
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
    pub(crate) fn prepare<R>(
        &self,
        f: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<(R, Prepared, Vec<Late>), CudaError> {
        *self.rope.lock().expect("rope rows lock") = None;
        *self.late.lock().expect("late inputs lock") = Some(Vec::new());
        let out = self.gpu.prepare(f);
        let late = self.late.lock().expect("late inputs lock").take().unwrap_or_default();
        let (r, p) = out?;
        Ok((r, p, late))
    }

    /// A prepared step's late inputs written for its window `tokens` (the PLE history moves on by each;
    /// in a verify window, its rewind points keep the history after each token but the last).
    pub(crate) fn write_late(&self, late: &[Late], tokens: &[u32], st: &mut CudaState) -> Result<(), CudaError> {
        let mut ple_token = 0;
        for l in late {
            match *l {
                Late::Ids { ptr, count } => {
                    let ids = tokens.get(tokens.len().wrapping_sub(count)..).filter(|_| count <= tokens.len());
                    let ids = ids.ok_or_else(|| CudaError::Shape(format!("{count} late ids of {}", tokens.len())))?;
                    let bytes: Vec<u8> = ids.iter().flat_map(|&t| (t as i32).to_le_bytes()).collect();
                    self.gpu.write_staged(ptr, &bytes)?;
                }
                Late::PleRows(ptr) => {
                    let (Some(p), Some(pw)) = (&self.model.config.ple, &self.model.weights.ple) else {
                        return Err(CudaError::Shape("PLE rows staged for a model without PLE".into()));
                    };
                    let t =
                        *tokens.get(ple_token).ok_or_else(|| CudaError::Shape("more PLE rows than tokens".into()))?;
                    let mut emb = vec![0f32; p.embd_dim()];
                    let t0 = std::time::Instant::now();
                    table_rows(p, pw, t, &mut st.ple_prev, &mut emb);
                    self.gpu.note(|s| s.ple_ns += t0.elapsed().as_nanos() as u64);
                    let bytes: Vec<u8> = emb.iter().flat_map(|v| v.to_le_bytes()).collect();
                    self.gpu.write_staged(ptr, &bytes)?;
                    ple_token += 1;
                    if let Some(pts) = st.points.as_mut().filter(|p| p.keep && ple_token < tokens.len()) {
                        pts.ple_prev.push(st.ple_prev.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// The token after the window's last chosen on the device (argmax.rs's word or sample.rs's id), left
    /// there.
    pub(crate) fn choose_head(&self, fin: &Rows, how: Choice) -> Result<Chosen, CudaError> {
        let (g, rows) = (&self.gpu, self.w.output.rows);
        self.timed("head", || {
            let logits = self.last_head(fin)?;
            Ok(match how {
                Choice::Greedy => Chosen::Argmax(crate::ops::argmax::argmax_start(g, &logits, rows)?),
                Choice::Draw(p) => Chosen::Drawn(crate::ops::sample::sample_start(g, &logits, rows, &p)?),
            })
        })
    }

    /// The next MTP input's token read from `id` on the device (one id) instead of the host's.
    pub(crate) fn next_draft_input(&self, id: Buf<i32>) {
        *self.draft_ids.lock().expect("draft ids lock") = Some(id);
    }

    /// The head of a draft vocabulary: the rows of `ids` (ascending, inside the head).
    pub(crate) fn draft_vocab(&self, ids: &[u32]) -> Result<DraftHead, CudaError> {
        DraftHead::gather(&self.gpu, &self.w.output, ids)
    }

    /// A draft's choice from the MTP layer's final read `fin` (one row): the argmax over the whole head,
    /// or over a draft vocabulary's rows (`vocab`), written at `ids[at]` on the device.
    pub(crate) fn draft_head(
        &self,
        fin: &Rows,
        vocab: Option<&DraftHead>,
        ids: &Buf<i32>,
        at: usize,
    ) -> Result<(), CudaError> {
        self.timed("draft head", || {
            let g = &*self.gpu;
            let head = vocab.map_or(&*self.w.output, |v| &v.rows);
            let y = Buf::<f32>::uninit(g, head.rows)?;
            matvec_at(g, head, fin.buf.ptr(g), y.ptr(g), 1)?;
            match vocab {
                None => crate::ops::argmax::argmax_into(g, &y, head.rows, ids, at),
                Some(v) => v.put(g, &crate::ops::argmax::argmax_start(g, &y, head.rows)?, ids, at),
            }
        })
    }

    /// The token after each of the window's positions chosen on the device, as a plain step would choose
    /// it there: the argmax where `picks[i]` is None, else the draw with it. Left on the device (t ids).
    pub(crate) fn choose_rows(&self, fin: &Rows, picks: &[Option<SampleParams>]) -> Result<Buf<i32>, CudaError> {
        self.timed("head", || {
            let (g, vocab) = (&*self.gpu, self.w.output.rows);
            if picks.len() != fin.t {
                return Err(CudaError::Shape(format!("{} picks for a window of {}", picks.len(), fin.t)));
            }
            let y = self.rows_head(fin)?;
            let ids = Buf::<i32>::uninit(g, fin.t)?; // every entry written below
            for (i, pick) in picks.iter().enumerate() {
                let row = y.view(g, i * vocab, vocab)?;
                match pick {
                    None => crate::ops::argmax::argmax_into(g, &row, vocab, &ids, i)?,
                    Some(p) => crate::ops::sample::sample_into(g, &row, vocab, p, &ids, i)?,
                }
            }
            Ok(ids)
        })
    }

    /// The logits of every token of the window, row after row, on the device.
    pub(crate) fn rows_head(&self, fin: &Rows) -> Result<Buf<f32>, CudaError> {
        let (g, vocab) = (&*self.gpu, self.w.output.rows);
        let y = Buf::<f32>::uninit(g, fin.t * vocab)?; // the product writes every row
        matvec(g, &self.w.output, &fin.buf, &y, fin.t)?;
        Ok(y)
    }

    /// The logits of the window's last token, on the device.
    pub(crate) fn last_head(&self, fin: &Rows) -> Result<Buf<f32>, CudaError> {
        let (g, n) = (&*self.gpu, self.model.config.n_embd);
        let y = Buf::<f32>::uninit(g, self.w.output.rows)?;
        let last = fin.buf.ptr(g) + ((fin.t.max(1) - 1) * n * 4) as u64;
        matvec_at(g, &self.w.output, last, y.ptr(g), 1)?;
        Ok(y)
    }
}

impl Backend for CudaForward<'_> {
    type Rows = Rows;
    type State = CudaState;
    type MtpCache = AttnStateGpu;
    type Error = CudaError;

    fn layer_scope(&self, layer: Option<usize>) {
        self.gpu.layer_scope(layer);
    }

    fn embed(&self, tokens: &[u32]) -> Result<Rows, CudaError> {
        self.timed("embed", || {
            let c = &self.model.config;
            let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
            let (t, width) = (tokens.len(), c.hc * c.n_embd);
            let buf = Buf::uninit(&self.gpu, t * width)?; // embed writes every stream of every token
            let staged = Buf::from_host(&self.gpu, &ids)?;
            self.note_late(|| Late::Ids { ptr: staged.ptr(&self.gpu), count: tokens.len() });
            embed(&self.gpu, &self.w.embd, &staged, &buf, t, c.hc)?;
            Ok(Rows { buf, t, width })
        })
    }

    fn ple(&self, r: &mut Rows, tokens: &[u32], st: &mut CudaState) -> Result<(), CudaError> {
        self.timed("ple", || {
            let (c, g) = (&self.model.config, &*self.gpu);
            let (Some(p), Some(pg), Some(pw), Some(hist)) =
                (&c.ple, &self.w.ple, &self.model.weights.ple, &st.ple_hist)
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
                // A verify window's rewind point after this token (the last token's is the state itself);
                // the history's token ids are kept here, or by `write_late` once the tokens are known.
                if let Some(pts) = st.points.as_mut().filter(|p| p.keep && i + 1 < tokens.len()) {
                    let slots = pts.ple_slots.as_ref().expect("made with the history");
                    slots.copy_from(g, i * hist.len(), hist, hist.len())?;
                    if !late {
                        pts.ple_prev.push(st.ple_prev.clone());
                    }
                }
            }
            Ok(())
        })
    }

    fn hc_read(&self, r: &Rows, id: HcId) -> Result<(Rows, Rows), CudaError> {
        self.timed("hc read", || self.read_streams(r, None, id))
    }

    /// The pending write done by the read's first kernel (gr_norm adds y·2σ(inj/hc) into R as it reads it).
    fn hc_write_read(&self, r: &mut Rows, (y, inj): (&Rows, &Rows), id: HcId) -> Result<(Rows, Rows), CudaError> {
        self.timed("hc read", || self.read_streams(r, Some((y, inj)), id))
    }

    fn hc_write(&self, r: &mut Rows, y: &Rows, inj: &Rows) -> Result<(), CudaError> {
        self.timed("hc write", || {
            let c = &self.model.config;
            hc_write(&self.gpu, r.buf.ptr(&self.gpu), &y.buf, &inj.buf, c.n_embd, c.hc, r.t)
        })
    }

    fn mixer(&self, l: usize, x: &Rows, st: &mut CudaState, pos: usize) -> Result<Rows, CudaError> {
        // A placed block's guessed experts brought over the bus while the mixer runs (ops/moe/guess.rs),
        // unless the block before guessed them (`STRATA_GUESS_EARLY`); then a second guess here for the
        // experts that one left, where the block has slots for it (`STRATA_GUESS_MIXER_SLOTS`).
        let (moe, s) = (&self.w.layers[l].moe, &self.gpu.settings);
        if self.w.host.is_some() && s.guess_slots > 0 && !s.guess_early {
            self.timed("guess", || crate::ops::moe::guess(&self.gpu, moe, &x.buf, x.t))?;
        }
        if self.w.host.is_some() && s.guess_early && s.guess_mixer_slots > 0 {
            self.timed("guess", || crate::ops::moe::guess_second(&self.gpu, moe, &x.buf, x.t))?;
        }
        self.timed(if self.model.config.is_attn(l) { "attention" } else { "gdn" }, || {
            let g = &*self.gpu;
            let n = self.model.config.n_embd;
            let keep = st.points.as_ref().is_some_and(|p| p.keep);
            let t = x.t;
            let rope = match &self.w.layers[l].mixer {
                MixerGpu::Attn(..) => Some(self.window_rope(pos, t)?),
                MixerGpu::Gdn(_) => None,
            };
            self.tiled(x, n, |x, first| match (&self.w.layers[l].mixer, &mut st.layers[l]) {
                (MixerGpu::Gdn(w), LayerStateGpu::Gdn(s)) => gdn(g, w, s, &x.buf, x.t, keep),
                (MixerGpu::Attn(w, cells), LayerStateGpu::Attn(s)) => {
                    let rope = rope.as_deref().expect("made for attention above");
                    let rows = Self::rope_tile(rope, g, t, (first, x.t))?;
                    attention(g, w, s, &x.buf, x.t, *cells, (&self.model.rope, &rows))
                }
                _ => unreachable!("state built from the same layers"),
            })
        })
    }

    fn moe(&self, id: MoeId, x: &Rows) -> Result<Rows, CudaError> {
        self.timed("moe", || {
            let w = match id {
                MoeId::Layer(l) => &self.w.layers[l].moe,
                MoeId::Mtp => &self.mtp()?.layer.moe,
            };
            // A request the host could not answer (in an earlier pass) stops the next.
            if let Some(e) = self.w.host.as_ref().and_then(|h| h.server.error()) {
                return Err(CudaError::Shape(format!("host experts: {e}")));
            }
            // A placed block's long prompt window brings each expert it does not hold once (ops/moe/window.rs).
            let staging = self.w.host.as_ref().and_then(|h| h.staging.as_ref());
            if let Some(st) = staging.filter(|st| crate::ops::moe::window_fits(&self.gpu, w, st, x.t)) {
                let (buf, _) = crate::ops::moe::moe_window(&self.gpu, w, st, &x.buf, x.t)?;
                return Ok(Rows { buf, t: x.t, width: self.model.config.n_embd });
            }
            // A long prompt window with every expert on the card: the slots grouped by expert (ops/moe/grouped.rs).
            if crate::ops::moe::grouped_fits(&self.gpu, w, x.t) {
                let (buf, _) = crate::ops::moe::moe_grouped(&self.gpu, w, &x.buf, x.t)?;
                return Ok(Rows { buf, t: x.t, width: self.model.config.n_embd });
            }
            // With `STRATA_GUESS_EARLY`, the next trunk block's experts guessed from this block's input.
            let next = match id {
                MoeId::Layer(l) if self.gpu.settings.guess_early => self.w.layers.get(l + 1).map(|n| &n.moe),
                _ => None,
            };
            self.tiled(x, self.model.config.n_embd, |x, _| Ok(moe_then(&self.gpu, w, &x.buf, x.t, next)?.0))
        })
    }

    fn logits(&self, fin: &Rows) -> Result<Vec<Vec<f32>>, CudaError> {
        self.timed("head", || {
            let vocab = self.w.output.rows;
            let y = self.tiled(fin, vocab, |fin, _| self.rows_head(fin))?;
            Ok(y.buf.read(&self.gpu, fin.t * vocab)?.chunks(vocab).map(<[f32]>::to_vec).collect())
        })
    }

    fn last_logits(&self, fin: &Rows) -> Result<Vec<f32>, CudaError> {
        self.timed("head", || {
            let y = self.last_head(fin)?;
            y.read(&self.gpu, self.w.output.rows)
        })
    }

    fn last_argmax(&self, fin: &Rows) -> Result<u32, CudaError> {
        self.timed("head", || crate::ops::argmax::argmax(&self.gpu, &self.last_head(fin)?, self.w.output.rows))
    }

    fn last_sample(&self, fin: &Rows, p: &SampleParams) -> Result<u32, CudaError> {
        self.timed("head", || crate::ops::sample::sample(&self.gpu, &self.last_head(fin)?, self.w.output.rows, p))
    }

    fn mtp_input(&self, r: &Rows, next: &[u32]) -> Result<Rows, CudaError> {
        self.timed("mtp", || {
            let (c, g, m) = (&self.model.config, &*self.gpu, self.mtp()?);
            let (n, hc, t) = (c.n_embd, c.hc, r.t);
            if next.len() != t {
                return Err(CudaError::Shape(format!("{} next tokens for {t} rows of streams", next.len())));
            }
            let ids = match self.draft_ids.lock().expect("draft ids lock").take() {
                Some(on_device) if on_device.len() == t => on_device,
                Some(_) => return Err(CudaError::Shape("a draft's device token for a window of rows".into())),
                None => {
                    let staged = Buf::from_host(g, &next.iter().map(|&x| x as i32).collect::<Vec<i32>>())?;
                    self.note_late(|| Late::Ids { ptr: staged.ptr(g), count: t });
                    staged
                }
            };
            let e = Buf::<f32>::uninit(g, t * n)?;
            embed(g, &self.w.embd, &ids, &e, t, 1)?;
            let rows = t * hc;
            let cat = Buf::<f32>::uninit(g, rows * 2 * n)?;
            let f = g.function(&crate::ops::sources::MTP_FILE, "mtp_input")?;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: (2 * (n / 8) * 4) as u32, // the chunks' sums of squares
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
            let (g, t) = (&*self.gpu, x.t);
            let rope = self.window_rope(pos, t)?;
            self.tiled(x, self.model.config.n_embd, |x, first| {
                let rows = Self::rope_tile(&rope, g, t, (first, x.t))?;
                attention(g, w, cache, &x.buf, x.t, *cells, (&self.model.rope, &rows))
            })
        })
    }

    fn mtp_append(&self, x: &Rows, cache: &mut AttnStateGpu, pos: usize) -> Result<(), CudaError> {
        self.timed("mtp", || {
            let MixerGpu::Attn(w, _) = &self.mtp()?.layer.mixer else { unreachable!("uploaded as attention") };
            let (g, t) = (&*self.gpu, x.t);
            let rope = self.window_rope(pos, t)?;
            for (first, k) in tiles(t) {
                let rows = Self::rope_tile(&rope, g, t, (first, k))?;
                append_cells(g, w, cache, &x.tile(g, first, k)?.buf, k, &rows)?;
            }
            Ok(())
        })
    }
}

/// How a decode step chooses its token on the device.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Choice {
    Greedy,
    Draw(SampleParams),
}

/// Where a step left its token: an argmax's word or a draw's id.
pub(crate) enum Chosen {
    Argmax(Buf<u64>),
    Drawn(Buf<i32>),
}

impl Chosen {
    pub(crate) fn read(&self, gpu: &Gpu) -> Result<u32, CudaError> {
        match self {
            Chosen::Argmax(best) => crate::ops::argmax::argmax_id(gpu, best),
            Chosen::Drawn(id) => Ok(id.read(gpu, 1)?[0] as u32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{tiles, MAX_T};

    /// A window's tiles cover it in order, each at most the kernels' widest, only the last shorter.
    #[test]
    fn tiles_cover_the_window_in_order() {
        assert_eq!(tiles(5).collect::<Vec<_>>(), [(0, 5)]);
        assert_eq!(tiles(MAX_T).collect::<Vec<_>>(), [(0, MAX_T)]);
        assert_eq!(tiles(2 * MAX_T + 3).collect::<Vec<_>>(), [(0, MAX_T), (MAX_T, MAX_T), (2 * MAX_T, 3)]);
        for t in 1..=100 {
            let v: Vec<_> = tiles(t).collect();
            assert_eq!(v.iter().map(|&(_, k)| k).sum::<usize>(), t);
            assert!(v.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0 && w[0].1 == MAX_T));
        }
    }
}
