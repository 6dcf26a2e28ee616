//! The CUDA back-end with a conversation's state: what the generation loop drives on a GPU, decode steps
//! recorded a step ahead while the one before runs.

use strata_model::backend::trunk;
use strata_model::decoder::{check_draft_vocab, Decoder};
use strata_model::ops::sample::SampleParams;
use strata_model::State;

use crate::backend::forward::{Choice, Chosen, CudaForward, Late, Rows};
use crate::backend::speculate::{check_picks, Drafting};
use crate::backend::state::CudaState;
use crate::ops::draft::DraftHead;
use crate::ops::matvec::MAX_T;
use crate::runtime::buf::Buf;
use crate::runtime::error::CudaError;
use crate::runtime::profile::Call;
use crate::runtime::recorder::{GraphStats, Prepared};

/// The CUDA back-end with a conversation's state: what the generation loop drives on a GPU.
pub struct CudaDecoder<'a> {
    pub fwd: CudaForward<'a>,
    pub state: CudaState,
    pub pos: usize,
    /// The next decode step, recorded while this one ran (`STRATA_OVERLAP`).
    ahead: Option<Ahead>,
    /// When the last decode step's token went back to the caller (for the graphs' figures).
    handed: Option<std::time::Instant>,
    /// The graphs' figures as the prompt was read (the report's decode steps are those after).
    at_prompt_end: Option<GraphStats>,
    /// The MTP layer's cells and the draft chain's state, once drafting has started.
    drafting: Option<Drafting>,
    /// The head of the draft vocabulary (None: drafts choose among the whole vocabulary).
    draft_head: Option<DraftHead>,
    /// The next verify window, recorded while its draft chain ran.
    verify_ahead: Option<VerifyAhead>,
    /// Where the host's time in the draft calls went (the report's drafting line).
    draft_times: crate::backend::report::DraftTimes,
}

/// A verify window recorded while the draft chain before it ran on the card (`STRATA_OVERLAP`), with the
/// picks the chain was told the window will have: the host's recording overlaps the chain instead of
/// following it. Its
/// tokens go in once the drafts are read back (`Late`: the embedding's and the MTP cells' ids, the PLE
/// rows). Recording moved the host's counts on (the attention and MTP cells); they are put back at once
/// and set again when the window runs, so any other call may drop it.
struct VerifyAhead {
    step: Prepared,
    late: Vec<Late>,
    /// Where the window leaves the token chosen after each position.
    chosen: Buf<i32>,
    pos: usize,
    picks: Vec<Option<SampleParams>>,
    /// The attention layers' and the MTP layer's counts after the window.
    cells: Vec<usize>,
    mtp: (usize, bool),
}

/// The trunk over `tokens` at `pos` and, while drafting, the MTP cells it makes known: the final reads.
fn trunk_cells(
    fwd: &CudaForward,
    state: &mut CudaState,
    drafting: Option<&mut Drafting>,
    tokens: &[u32],
    pos: usize,
) -> Result<Rows, CudaError> {
    let (fin, r) = trunk(fwd, &fwd.model.config, state, tokens, pos)?;
    if let Some(d) = drafting {
        d.cells_after(fwd, &r, tokens, pos)?;
    }
    Ok(fin)
}

/// What a verify window's step records: the trunk over `window`, the MTP cells it makes known, and the
/// token chosen after each position (left on the device).
fn verify_step(
    fwd: &CudaForward,
    state: &mut CudaState,
    d: &mut Drafting,
    window: &[u32],
    pos: usize,
    picks: &[Option<SampleParams>],
) -> Result<Buf<i32>, CudaError> {
    let fin = trunk_cells(fwd, state, Some(d), window, pos)?;
    fwd.choose_rows(&fin, picks)
}

/// The verify window at `pos` choosing by `picks` (one a token) recorded ahead (see [`VerifyAhead`]).
fn record_verify(
    fwd: &CudaForward,
    state: &mut CudaState,
    d: &mut Drafting,
    pos: usize,
    picks: &[Option<SampleParams>],
) -> Result<VerifyAhead, CudaError> {
    let (cells, mtp) = (state.cells(), d.counts());
    d.before_window(pos);
    state.begin_window()?;
    let placeholders = [0u32; MAX_T];
    fwd.gpu.host_kind("verify windows");
    let out = fwd.prepare(|| verify_step(fwd, state, d, &placeholders[..picks.len()], pos, picks));
    let after = (state.cells(), d.counts());
    state.set_cells(&cells);
    d.set_counts(mtp);
    state.end_window();
    let (chosen, step, late) = out?;
    Ok(VerifyAhead { step, late, chosen, pos, picks: picks.to_vec(), cells: after.0, mtp: after.1 })
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
    /// The position it was recorded for, and the cell counts after it (the attention layers', and the
    /// MTP layer's while drafting).
    pos: usize,
    cells: Vec<usize>,
    mtp: Option<(usize, bool)>,
}

/// A decode step: the trunk over `tokens`, the MTP cells it makes known while drafting, and the token
/// after them chosen as `how`.
fn plain_step(
    fwd: &CudaForward,
    state: &mut CudaState,
    drafting: Option<&mut Drafting>,
    tokens: &[u32],
    pos: usize,
    how: Choice,
) -> Result<Chosen, CudaError> {
    let fin = trunk_cells(fwd, state, drafting, tokens, pos)?;
    fwd.choose_head(&fin, how)
}

impl<'a> CudaDecoder<'a> {
    pub fn new(fwd: CudaForward<'a>, state: CudaState, pos: usize) -> CudaDecoder<'a> {
        CudaDecoder {
            fwd,
            state,
            pos,
            ahead: None,
            handed: None,
            at_prompt_end: None,
            drafting: None,
            draft_head: None,
            verify_ahead: None,
            draft_times: Default::default(),
        }
    }

    /// Drafting on from the current position (the MTP layer uploaded and its cells and the verify
    /// windows' rewind slots made, the first time); an error when the model has no MTP layer.
    fn start(&mut self) -> Result<(), CudaError> {
        if self.drafting.as_ref().is_some_and(|d| d.active) {
            return Ok(());
        }
        self.make_drafting()?;
        self.drafting.as_mut().expect("made above").start(self.pos);
        Ok(())
    }

    /// No draft chain kept ahead (see speculate.rs `ChainAhead`): the call that drops it moves the
    /// conversation otherwise than the chain assumed.
    fn drop_chain_ahead(&mut self) {
        if let Some(d) = &mut self.drafting {
            d.drop_ahead();
        }
    }

    /// The MTP layer, its cells' room and the rewind slots, made once.
    fn make_drafting(&mut self) -> Result<(), CudaError> {
        if self.drafting.is_none() {
            if self.fwd.mtp().is_err() {
                self.fwd.upload_mtp()?;
            }
            self.state.keep_points(&self.fwd.gpu)?;
            self.drafting = Some(Drafting::new(&self.fwd, self.state.kv, self.state.capacity())?);
        }
        Ok(())
    }
}

impl CudaDecoder<'_> {
    /// `tokens` (a decode step, or a prompt's last window) choosing the token after them as `how`, with
    /// the next decode step (choosing as `next`) recorded while they run (`STRATA_OVERLAP`): a decode
    /// step is the one recorded ahead when it was recorded for this position and choice, else recorded
    /// now. After a prompt's last window the first decode step is recorded (and its graph captured, the
    /// first time) while the window runs, not after its token is known.
    fn overlapped(&mut self, tokens: &[u32], how: Choice, next: Choice) -> Result<u32, CudaError> {
        self.drop_chain_ahead();
        let chosen = match self.ahead.take() {
            Some(a) if tokens.len() == 1 && a.pos == self.pos && a.how == how => {
                let t0 = std::time::Instant::now();
                self.fwd.write_late(&a.late, tokens, &mut self.state)?;
                self.fwd.gpu.note(|s| s.late_ns += t0.elapsed().as_nanos() as u64);
                self.state.set_cells(&a.cells);
                if let (Some(d), Some(m)) = (self.drafting.as_mut(), a.mtp) {
                    d.set_counts(m);
                }
                if let Some(h) = self.handed.take() {
                    self.fwd.gpu.note(|s| s.between_ns += h.elapsed().as_nanos() as u64);
                }
                self.fwd.gpu.run_prepared(a.step)?;
                a.chosen
            }
            _ => {
                let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
                let drafting = self.drafting.as_mut().filter(|d| d.active);
                fwd.step(|| plain_step(fwd, state, drafting, tokens, pos, how))?
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
        let mut drafting = self.drafting.as_mut().filter(|d| d.active);
        let mtp_before = drafting.as_ref().map(|d| d.counts());
        fwd.gpu.host_kind("decode steps");
        let ahead = fwd.prepare(|| plain_step(fwd, state, drafting.as_deref_mut(), &[0], pos, next));
        let cells = self.state.cells();
        self.state.set_cells(&before);
        let mtp = drafting.map(|d| {
            let after = d.counts();
            d.set_counts(mtp_before.expect("taken with it"));
            after
        });
        let (next_chosen, step, late) = ahead?;
        self.ahead = Some(Ahead { step, late, how: next, chosen: next_chosen, pos: self.pos, cells, mtp });
        let id = chosen.read(&self.fwd.gpu)?;
        self.fwd.end_pass()?;
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
        self.verify_ahead = None;
        self.drop_chain_ahead();
        if let Some(p) = &self.fwd.gpu.profile {
            p.begin(if tokens.len() == 1 { Call::Step } else { Call::Prompt }).map_err(e)?;
        }
        let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
        let drafting = self.drafting.as_mut().filter(|d| d.active);
        let out = fwd.step(|| head(fwd, &trunk_cells(fwd, state, drafting, tokens, pos)?)).map_err(e)?;
        self.pos += tokens.len();
        let r = read(fwd, out).map_err(e)?;
        fwd.end_pass().map_err(e)?;
        Ok(r)
    }
}

impl Decoder for CudaDecoder<'_> {
    fn vocab(&self) -> usize {
        self.fwd.model.config.vocab
    }

    fn position(&self) -> usize {
        self.pos
    }

    /// A prompt's windows: `STRATA_PROMPT_WINDOW` tokens (the kernels' widest, 8, by default; placed, the
    /// memory plan's choice: backend/budget.rs `PLACED_WINDOWS`). A window past 8 runs each op over tiles
    /// of 8 (forward.rs).
    fn window(&self) -> usize {
        self.fwd.prompt_window
    }

    fn advance(&mut self, tokens: &[u32]) -> Result<(), String> {
        self.with_trunk(tokens, |_, _| Ok(()), |_, ()| Ok(()))
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let rows = self.fwd.vocab_rows();
        let head = |fwd: &CudaForward, fin: &Rows| fwd.timed("head", || fwd.last_head(fin));
        self.with_trunk(tokens, head, |fwd, y| y.read(&fwd.gpu, rows))
    }

    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32, String> {
        self.choose(tokens, Choice::Greedy, Choice::Greedy)
    }

    fn forward_sample(&mut self, tokens: &[u32], p: &SampleParams, next: &SampleParams) -> Result<u32, String> {
        self.choose(tokens, Choice::Draw(*p), Choice::Draw(*next))
    }

    /// A verify window of T tokens costs less than T steps here (on the H200 at 4K: T = 2 1.6 steps,
    /// T = 8 3.3; bench/results/2026-12-03-h200-spec), so `--spec auto` drafts where the acceptance it
    /// measures pays for the window (engine/src/tuner.rs).
    fn windows_pay(&self) -> bool {
        true
    }

    fn start_drafting(&mut self) -> bool {
        self.start().is_ok()
    }

    fn set_draft_vocab(&mut self, ids: &[u32]) -> Result<(), String> {
        check_draft_vocab(ids, self.fwd.vocab_rows())?;
        self.drop_chain_ahead(); // recorded with the head before
        self.draft_head = match ids {
            [] => None,
            _ => Some(self.fwd.draft_vocab(ids).map_err(|e| e.to_string())?),
        };
        Ok(())
    }

    fn draft(&mut self, x: u32, n: usize, picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        let e = |e: CudaError| e.to_string();
        let (fwd, pos) = (&self.fwd, self.pos);
        let d = self.drafting.as_mut().filter(|d| d.active).ok_or("drafting has not started")?;
        if n == 0 || n >= crate::ops::matvec::MAX_T {
            return Err(format!("{n} drafts (1..{})", crate::ops::matvec::MAX_T));
        }
        (self.ahead, self.verify_ahead) = (None, None);
        if let Some(p) = &fwd.gpu.profile {
            p.begin(Call::Drafts).map_err(e)?;
        }
        let t0 = std::time::Instant::now();
        fwd.gpu.host_kind("draft chains");
        let ids = match d.take_ahead(&fwd.gpu, (n, pos)) {
            Some((step, ids)) => {
                fwd.gpu.run_prepared(step).map_err(e)?;
                ids
            }
            None => fwd.step(|| d.chain(fwd, (x, n, pos), self.draft_head.as_ref())).map_err(e)?,
        };
        let t1 = std::time::Instant::now();
        // The window that checks these drafts, recorded while the chain runs (its error only means the
        // window is recorded when it runs), greedy or sampled: the window's draws are known here.
        let g = &fwd.gpu;
        if picks.len() == n + 1 && g.settings.overlap && g.graphs_on() && !g.recording() {
            self.verify_ahead = record_verify(fwd, &mut self.state, d, pos, picks).ok();
        }
        let t2 = std::time::Instant::now();
        let ids = ids.read(&fwd.gpu, n + 1).map_err(e)?;
        self.draft_times.add(n, [t1 - t0, t2 - t1, t2.elapsed()]);
        fwd.end_pass().map_err(e)?;
        Ok(ids[1..].iter().map(|&t| t as u32).collect())
    }

    fn verify(&mut self, window: &[u32], picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        let e = |e: CudaError| e.to_string();
        check_picks(window, picks)?;
        let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
        let d = self.drafting.as_mut().filter(|d| d.active).ok_or("drafting has not started")?;
        let ahead = self.verify_ahead.take().filter(|a| a.pos == pos && a.picks == picks);
        self.ahead = None;
        d.drop_ahead();
        if let Some(p) = &fwd.gpu.profile {
            p.begin(Call::Verify).map_err(e)?;
        }
        d.before_window(pos);
        state.begin_window().map_err(e)?;
        let ids = match ahead {
            Some(a) => {
                state.set_cells(&a.cells);
                d.set_counts(a.mtp);
                fwd.write_late(&a.late, window, state).map_err(e)?;
                fwd.gpu.run_prepared(a.step).map_err(e)?;
                a.chosen
            }
            None => fwd.step(|| verify_step(fwd, state, d, window, pos, picks)).map_err(e)?,
        };
        d.ran_window(window.len());
        self.pos += window.len();
        // The next pass's chain, recorded while this window runs, for the window kept whole and as many
        // drafts again (`STRATA_CHAIN_AHEAD`; its error only means the chain is recorded when asked).
        let (g, t) = (&fwd.gpu, window.len());
        if g.settings.chain_ahead && t > 1 && g.graphs_on() && !g.recording() {
            let _ = d.chain_after_window(fwd, (&ids, t - 1), (t - 1, self.pos), self.draft_head.as_ref());
        }
        let ids = ids.read(&fwd.gpu, window.len()).map_err(e)?;
        fwd.end_pass().map_err(e)?;
        Ok(ids.iter().map(|&t| t as u32).collect())
    }

    fn verify_logits(&mut self, window: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        let e = |e: CudaError| e.to_string();
        check_picks(window, &vec![None; window.len()])?;
        let (fwd, state, pos) = (&self.fwd, &mut self.state, self.pos);
        let d = self.drafting.as_mut().filter(|d| d.active).ok_or("drafting has not started")?;
        (self.ahead, self.verify_ahead) = (None, None);
        d.drop_ahead();
        if let Some(p) = &fwd.gpu.profile {
            p.begin(Call::Verify).map_err(e)?;
        }
        d.before_window(pos);
        state.begin_window().map_err(e)?;
        let head = |fin: &Rows| fwd.timed("head", || fwd.rows_head(fin));
        let y = fwd.step(|| head(&trunk_cells(fwd, state, Some(&mut *d), window, pos)?)).map_err(e)?;
        d.ran_window(window.len());
        self.pos += window.len();
        let vocab = fwd.vocab_rows();
        let rows = y.read(&fwd.gpu, window.len() * vocab).map_err(e)?;
        fwd.end_pass().map_err(e)?;
        Ok(rows.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    fn gives_window_logits(&self) -> bool {
        true
    }

    fn accept(&mut self, kept: usize) -> Result<(), String> {
        let e = |e: CudaError| e.to_string();
        let d = self.drafting.as_mut().filter(|d| d.active).ok_or("drafting has not started")?;
        let t = d.accept(kept, self.pos, &self.fwd.gpu).map_err(e)?;
        if kept < t {
            d.drop_ahead(); // recorded for the whole window kept
        }
        self.state.rewind(&self.fwd.gpu, kept, t).map_err(e)?;
        self.pos = self.pos - t + kept;
        Ok(())
    }

    fn prompt_read(&mut self) {
        self.at_prompt_end = self.fwd.gpu.graph_stats();
        self.fwd.gpu.host_profile_reset();
    }

    fn card_ms(&mut self) -> Option<f64> {
        self.fwd.gpu.card_ms_take().ok().flatten()
    }

    fn memory(&self) -> Option<(u64, u64)> {
        let (free, total) = self.fwd.gpu.memory().ok()?;
        Some(((total - free) as u64, total as u64))
    }

    fn report(&self) -> Option<String> {
        let mut lines = crate::backend::report::lines(&self.fwd, self.state.kv, self.pos, self.at_prompt_end);
        lines.extend(self.draft_times.line());
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    fn snapshot(&self) -> Result<State, String> {
        let e = |e: CudaError| e.to_string();
        let mut host = self.fwd.download_state(&self.state, self.pos).map_err(e)?;
        if let Some(d) = self.drafting.as_ref().filter(|d| d.active) {
            host.mtp = Some(d.download(&self.fwd).map_err(e)?);
        }
        Ok(host)
    }

    fn restore(&mut self, state: &State) -> Result<(), String> {
        (self.ahead, self.verify_ahead) = (None, None); // recorded for the conversation being replaced
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
        // The MTP cells with it, or none: drafting starts again from here when asked.
        match &state.mtp {
            Some(m) => {
                self.make_drafting().map_err(|e| e.to_string())?;
                let d = self.drafting.as_mut().expect("made above");
                d.load(&self.fwd, m).map_err(|e| e.to_string())?;
            }
            None => {
                if let Some(d) = &mut self.drafting {
                    d.active = false;
                }
            }
        }
        Ok(())
    }
}
