//! The CUDA back-end with a conversation's state: what the generation loop drives on a GPU, decode steps
//! recorded a step ahead while the one before runs.

use strata_model::backend::trunk;
use strata_model::decoder::Decoder;
use strata_model::ops::sample::SampleParams;
use strata_model::State;

use crate::backend::forward::{Choice, Chosen, CudaForward, Late, Rows};
use crate::backend::state::CudaState;
use crate::runtime::error::CudaError;
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

impl<'a> CudaDecoder<'a> {
    pub fn new(fwd: CudaForward<'a>, state: CudaState, pos: usize) -> CudaDecoder<'a> {
        CudaDecoder { fwd, state, pos, ahead: None, handed: None, at_prompt_end: None }
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

    fn prompt_read(&mut self) {
        self.at_prompt_end = self.fwd.gpu.graph_stats();
    }

    fn report(&self) -> Option<String> {
        let lines = crate::backend::report::lines(&self.fwd, self.state.kv, self.pos, self.at_prompt_end);
        (!lines.is_empty()).then(|| lines.join("\n"))
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
