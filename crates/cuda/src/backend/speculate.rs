//! Drafting and verify windows on the device (docs/SPECULATION.md): the MTP layer's cells kept beside the
//! trunk's state, a draft chain run on the card in one step (each draft's token fed to the next from the
//! device), a verify window's choices at every position, and the rewind after it.

use strata_model::backend::{mtp_cells, mtp_read};
use strata_model::kv::KvMode;
use strata_model::ops::sample::SampleParams;
use strata_model::state::MtpCells;

use crate::backend::forward::{CudaForward, Rows};
use crate::backend::weights::MixerGpu;
use crate::ops::attn::AttnStateGpu;
use crate::ops::draft::DraftHead;
use crate::ops::matvec::MAX_T;
use crate::runtime::buf::Buf;
use crate::runtime::error::CudaError;
use crate::runtime::recorder::Prepared;

/// The MTP layer's cells and what drafting keeps between passes. Cell i is position `from + i`: made
/// from the trunk's streams there and the token after it, so the cells are the conversation's, whatever
/// was drafted.
pub(crate) struct Drafting {
    /// Whether the cells are kept now (a conversation restored without them stops it).
    pub active: bool,
    cache: AttnStateGpu,
    from: usize,
    /// The streams of the last trunk pass's tokens (up to a window of rows).
    rows: Buf<f32>,
    /// The streams of the last position, whose cell waits for its next token while `waiting` (until a
    /// draft writes it). Kept in a buffer of its own, so that a step's copies from it are at the same
    /// addresses whatever window came before (a step graph matches its copies by address).
    last_r: Buf<f32>,
    waiting: bool,
    /// The length of the verify window just run (0: none since the last accept).
    window: usize,
    /// The first token and the drafts of a chain recorded ahead (`STRATA_CHAIN_AHEAD`): outside any
    /// step's arena, so that the window before may leave its last choice here for the chain.
    ahead_ids: Buf<i32>,
    /// The next pass's chain, recorded while the window before it ran, for that window kept whole.
    ahead: Option<ChainAhead>,
}

/// A draft chain recorded while the verify window before it ran on the card (`STRATA_CHAIN_AHEAD`), for
/// the outcome that keeps the whole window: its first token is that window's last choice, read on the
/// device, so nothing of it waits for the host. Recording moved the MTP cells' counts on; they were put
/// back at once and are set again when it runs. An accept of fewer tokens, or another count of drafts,
/// drops it (the chain is then recorded when asked, as without it).
pub(crate) struct ChainAhead {
    step: Prepared,
    pos: usize,
    n: usize,
    /// The MTP cells' counts after the chain.
    mtp: (usize, bool),
}

impl Drafting {
    /// Room for the cells of `capacity` positions ([`CudaForward::upload_mtp`] first).
    pub(crate) fn new(fwd: &CudaForward, kv: KvMode, capacity: usize) -> Result<Drafting, CudaError> {
        let c = &fwd.model.config;
        Ok(Drafting {
            active: false,
            cache: fwd.mtp_cache(kv, capacity)?,
            from: 0,
            rows: Buf::uninit(&fwd.gpu, MAX_T * c.hc * c.n_embd)?,
            last_r: Buf::uninit(&fwd.gpu, c.hc * c.n_embd)?,
            waiting: false,
            window: 0,
            ahead_ids: Buf::uninit(&fwd.gpu, MAX_T)?,
            ahead: None,
        })
    }

    /// Cells kept from position `pos` on (none yet).
    pub(crate) fn start(&mut self, pos: usize) {
        (self.active, self.from, self.cache.cells, self.waiting, self.window) = (true, pos, 0, false, 0);
        self.ahead = None;
    }

    /// Inside the step that ran the trunk over `tokens` at `pos`, leaving the streams `r`: the cells whose
    /// next token this makes known (the position before the window's, from its kept row, and every
    /// token's but the last), then the streams kept for the next pass.
    pub(crate) fn cells_after(
        &mut self,
        fwd: &CudaForward,
        r: &Rows,
        tokens: &[u32],
        pos: usize,
    ) -> Result<(), CudaError> {
        let (g, t, w) = (&*fwd.gpu, r.t, r.width);
        let lead = usize::from(self.waiting);
        let n = lead + t - 1;
        if self.from + self.cache.cells + lead != pos {
            return Err(CudaError::Shape(format!(
                "MTP cells to {} before a window at {pos}",
                self.from + self.cache.cells
            )));
        }
        if n > 0 {
            // The rows in place where they lie together (a decode step's: the kept row alone), else copied
            // side by side.
            let buf = match (self.waiting, t) {
                (false, _) => r.buf.view(g, 0, n * w)?,
                (true, 1) => self.last_r.view(g, 0, w)?,
                (true, _) => {
                    let cat = Buf::<f32>::uninit(g, n * w)?;
                    cat.copy_from(g, 0, &self.last_r, w)?;
                    cat.copy_from(g, w, &r.buf, (t - 1) * w)?;
                    cat
                }
            };
            mtp_cells(fwd, &mut self.cache, &Rows { buf, t: n, width: w }, &tokens[1 - lead..], pos - lead)?;
        }
        if (2..=MAX_T).contains(&t) {
            // A verify window's rows, one of which `accept` may cut to (a step's one row is `last_r`; a
            // longer prompt window's are not kept).
            self.rows.copy_from(g, 0, &r.buf, t * w)?;
        }
        self.last_r.copy_from(g, 0, &r.buf.view(g, (t - 1) * w, w)?, w)?;
        self.waiting = true;
        Ok(())
    }

    /// `n` greedy drafts after `x` (the token at `pos`, not yet through the trunk), chained on the device
    /// in one step: the first writes the real cell of `pos − 1`, the rest provisional ones (cut by the
    /// verify window), each choosing among `vocab`'s tokens where there is one. Left on the device: x then
    /// the drafts.
    pub(crate) fn chain(
        &mut self,
        fwd: &CudaForward,
        (x, n, pos): (u32, usize, usize),
        vocab: Option<&DraftHead>,
    ) -> Result<Buf<i32>, CudaError> {
        let ids = Buf::<i32>::from_host(&fwd.gpu, &[x as i32; MAX_T])?;
        self.chain_on(fwd, ids, (x, n, pos), vocab)
    }

    /// [`Drafting::chain`] from the token the window just run chose last (its `chosen[at]`, copied on the
    /// device into the ids kept outside the steps' arena), for a chain recorded before that token is
    /// known: after a window kept whole, at `pos` (the position after it).
    pub(crate) fn chain_after_window(
        &mut self,
        fwd: &CudaForward,
        (chosen, at): (&Buf<i32>, usize),
        (n, pos): (usize, usize),
        vocab: Option<&DraftHead>,
    ) -> Result<(), CudaError> {
        let g = &*fwd.gpu;
        self.ahead_ids.copy_from(g, 0, &chosen.view(g, at, 1)?, 1)?;
        let ids = self.ahead_ids.view(g, 0, MAX_T)?;
        // The chain's own first token is read on the device; the host's is a placeholder. Recorded from
        // the counts an accept of the whole window will leave.
        self.ahead = None;
        let counts = self.counts();
        let whole =
            pos.checked_sub(1 + self.from).ok_or_else(|| CudaError::Shape("a chain before its cells".into()))?;
        (self.cache.cells, self.waiting) = (whole, true);
        let out = fwd.prepare(|| self.chain_on(fwd, ids, (0, n, pos), vocab));
        let after = self.counts();
        self.set_counts(counts);
        let (_, step, late) = out?;
        if !late.is_empty() {
            return Err(CudaError::Shape("a chain recorded ahead with inputs the host would write".into()));
        }
        self.ahead = Some(ChainAhead { step, pos, n, mtp: after });
        Ok(())
    }

    /// The chain recorded ahead for `n` drafts at `pos`, where there is one, its counts set as after it
    /// (the decoder runs its step), and where its drafts will be: None otherwise (any kept is dropped).
    pub(crate) fn take_ahead(&mut self, gpu: &crate::Gpu, (n, pos): (usize, usize)) -> Option<(Prepared, Buf<i32>)> {
        // Recorded from the counts an accept of the whole window leaves: those must be the counts now.
        let whole = (pos.checked_sub(1 + self.from)?, true);
        let a = self.ahead.take().filter(|a| (a.n, a.pos) == (n, pos) && self.counts() == whole)?;
        let ids = self.ahead_ids.view(gpu, 0, MAX_T).ok()?;
        self.set_counts(a.mtp);
        Some((a.step, ids))
    }

    /// No chain kept ahead (the conversation moved otherwise than it assumed).
    pub(crate) fn drop_ahead(&mut self) {
        self.ahead = None;
    }

    fn chain_on(
        &mut self,
        fwd: &CudaForward,
        ids: Buf<i32>,
        (x, n, pos): (u32, usize, usize),
        vocab: Option<&DraftHead>,
    ) -> Result<Buf<i32>, CudaError> {
        let g = &*fwd.gpu;
        if !self.waiting {
            return Err(CudaError::Shape("no draft before a token has been through the trunk while drafting".into()));
        }
        let w = self.last_r.len();
        let mut rows = Rows { buf: self.last_r.view(g, 0, w)?, t: 1, width: w };
        for i in 0..n {
            fwd.next_draft_input(ids.view(g, i, 1)?);
            let (fin, rp) = mtp_read(fwd, &mut self.cache, &rows, &[x], pos - 1 + i)?;
            fwd.draft_head(&fin, vocab, &ids, i + 1)?;
            rows = rp;
        }
        if n > 0 {
            self.waiting = false; // its cell is written
        }
        Ok(ids)
    }

    /// The host's counts a window's recording moves on: the cells held and whether one waits.
    pub(crate) fn counts(&self) -> (usize, bool) {
        (self.cache.cells, self.waiting)
    }

    pub(crate) fn set_counts(&mut self, (cells, waiting): (usize, bool)) {
        (self.cache.cells, self.waiting) = (cells, waiting);
    }

    /// Before a verify window at `pos`: the draft chain's provisional cells cut.
    pub(crate) fn before_window(&mut self, pos: usize) {
        if !self.waiting {
            self.cache.cells = pos - self.from;
        }
    }

    /// After a verify window of `t` tokens.
    pub(crate) fn ran_window(&mut self, t: usize) {
        self.window = t;
    }

    /// The first `kept` tokens of the window just verified kept (`end`: the position after the whole
    /// window): the cells past the last kept token's cut, and its streams the row whose cell waits. The
    /// window's length.
    pub(crate) fn accept(&mut self, kept: usize, end: usize, gpu: &crate::Gpu) -> Result<usize, CudaError> {
        let t = std::mem::take(&mut self.window);
        if kept == 0 || kept > t {
            return Err(CudaError::Shape(format!("kept {kept} of a window of {t}")));
        }
        self.cache.cells = end - t + kept - 1 - self.from;
        if kept < t {
            let w = self.last_r.len();
            self.last_r.copy_from(gpu, 0, &self.rows.view(gpu, (kept - 1) * w, w)?, w)?;
        }
        self.waiting = true;
        Ok(t)
    }

    /// The cells as the CPU holds them (a checkpoint).
    pub(crate) fn download(&self, fwd: &CudaForward) -> Result<MtpCells, CudaError> {
        let (g, w) = (&*fwd.gpu, self.last_r.len());
        let cache = fwd.mtp_attn()?.download_state(g, &self.cache, 0)?;
        let last_r = if self.waiting { Some(self.last_r.read(g, w)?) } else { None };
        Ok(MtpCells { from: self.from, cache, last_r })
    }

    /// The CPU's cells written over these (a checkpoint restored).
    pub(crate) fn load(&mut self, fwd: &CudaForward, m: &MtpCells) -> Result<(), CudaError> {
        let (g, w) = (&*fwd.gpu, self.last_r.len());
        fwd.mtp_attn()?.load_state(g, &mut self.cache, &m.cache, 0)?;
        self.waiting = match &m.last_r {
            Some(r) if r.len() == w => {
                self.last_r.write_at(g, 0, r)?;
                true
            }
            Some(_) => return Err(CudaError::Shape("saved MTP streams of another width".into())),
            None => false,
        };
        (self.active, self.from, self.window) = (true, m.from, 0);
        self.ahead = None;
        Ok(())
    }
}

/// A verify window's picks, checked against its tokens.
pub(crate) fn check_picks(window: &[u32], picks: &[Option<SampleParams>]) -> Result<(), String> {
    if window.is_empty() || window.len() > MAX_T || picks.len() != window.len() {
        return Err(format!("a verify window of {} tokens (1..={MAX_T}) with {} picks", window.len(), picks.len()));
    }
    Ok(())
}

impl CudaForward<'_> {
    /// The MTP layer's attention weights (for its cells' download and upload).
    fn mtp_attn(&self) -> Result<&crate::ops::attn::AttnGpu, CudaError> {
        match &self.mtp()?.layer.mixer {
            MixerGpu::Attn(a, _) => Ok(a),
            MixerGpu::Gdn(_) => Err(CudaError::Shape("an MTP layer that is not attention".into())),
        }
    }
}
