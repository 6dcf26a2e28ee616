//! A model and one conversation's state on some device, behind one trait the generation loop drives:
//! [`Decoder`], and its CPU form, [`CpuDecoder`] (the GPU's is crates/cuda's).

use crate::backend::{mtp_cells, mtp_read, trunk, Backend};
use crate::cpu::Cpu;
use crate::model::Model;
use crate::ops::matvec::Matrix;
use crate::ops::sample::SampleParams;
use crate::ops::topk::argmax;
use crate::rewind::Point;
use crate::state::{MtpCells, State};

/// A model and one conversation's state on some device: what the generation loop drives.
pub trait Decoder {
    fn vocab(&self) -> usize;
    /// Tokens held (the position of the next one).
    fn position(&self) -> usize;
    /// The most tokens one `forward` call takes.
    fn window(&self) -> usize;
    /// Runs `tokens` at the current position without the head (a prompt's windows before its last).
    fn advance(&mut self, tokens: &[u32]) -> Result<(), String>;
    /// Runs `tokens`: the logits of the last only.
    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String>;
    /// Runs `tokens`: the greedy token after the last (`argmax` of its logits, on the device that has them).
    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32, String>;
    /// Runs `tokens`: the token drawn after the last with `p` (ops/sample.rs), on the device that has the
    /// logits. `next` is what the following step, if one comes, draws with: a device may record that step
    /// while this one runs.
    fn forward_sample(&mut self, tokens: &[u32], p: &SampleParams, next: &SampleParams) -> Result<u32, String>;
    /// The conversation as the CPU holds it: what a checkpoint saves, whichever device made it.
    fn snapshot(&self) -> Result<State, String>;
    /// `state` (a [`Decoder::snapshot`] of this model, or a fresh one) in place of the conversation held:
    /// the next token goes at `state.pos`. On an error the decoder holds an empty conversation.
    fn restore(&mut self, state: &State) -> Result<(), String>;
    /// The prompt has been read: what follows are decode steps (a device's report tells them apart).
    fn prompt_read(&mut self) {}

    // Speculation (docs/SPECULATION.md). A decoder that cannot draft keeps these defaults.

    /// Whether windows cost little enough here against single steps for drafts to pay, so that `--spec
    /// auto` drafts: not on the CPU, where a window reads each weight once but keeps its tokens' own work
    /// (windows of 2 and 4 cost 1.8 and 3.2 steps of the built-in model), and every step while drafting
    /// writes an MTP cell too.
    fn windows_pay(&self) -> bool {
        false
    }

    /// Turns drafting on from the next token on (the MTP layer's cache then gets a cell at every
    /// position); false when this decoder cannot draft (no MTP layer, or not implemented here).
    fn start_drafting(&mut self) -> bool {
        false
    }
    /// Drafts choose among the tokens `ids` only ([`check_draft_vocab`]: ascending, inside the
    /// vocabulary), by a head of those rows (a cheaper draft; the verify pass's full head decides, so the
    /// tokens written do not change); empty: the whole vocabulary.
    fn set_draft_vocab(&mut self, _ids: &[u32]) -> Result<(), String> {
        Ok(())
    }
    /// `n` greedy drafts of the tokens after `x`, the last generated token (at [`Decoder::position`]).
    /// `picks` are those the window that verifies them will be given (n + 1: see [`Decoder::verify`]), so
    /// that a device can prepare that window while the drafts run.
    fn draft(&mut self, _x: u32, _n: usize, _picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        Err("this decoder does not draft".into())
    }
    /// Runs `window` (x, then the drafts) through the trunk and returns the token chosen after each of its
    /// positions: the argmax where `picks[i]` is `None`, else the token drawn with it. A point is kept
    /// after each token for [`Decoder::accept`].
    fn verify(&mut self, _window: &[u32], _picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        Err("this decoder does not draft".into())
    }
    /// [`Decoder::verify`] giving each position's logits instead of a chosen token, for a caller that
    /// masks them (a grammar) or reports them (log-probabilities) before it chooses. A point is kept
    /// after each token as `verify` keeps one.
    fn verify_logits(&mut self, _window: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        Err("this decoder gives no window's logits".into())
    }
    /// Whether [`Decoder::verify_logits`] is there.
    fn gives_window_logits(&self) -> bool {
        false
    }
    /// Keeps the first `kept` tokens (1 ..= its length) of the window just verified and drops the rest.
    fn accept(&mut self, _kept: usize) -> Result<(), String> {
        Err("this decoder does not draft".into())
    }
    /// A device's own report at the end of a run (its figures, a profile when asked for), if any.
    fn report(&self) -> Option<String> {
        None
    }
    /// Where a device times its steps on the card (the GPU's `STRATA_GAPS=1`): the mean ms of the steps
    /// run since the last call, which starts the count afresh. None where it does not.
    fn card_ms(&mut self) -> Option<f64> {
        None
    }
    /// The device's memory in use and in all, in bytes (the server's monitor); None on the CPU.
    fn memory(&self) -> Option<(u64, u64)> {
        None
    }
}

/// The CPU back-end with a conversation's state.
pub struct CpuDecoder<'a> {
    pub model: &'a Model,
    pub state: State,
    /// The verify window's tokens with the trunk's R at each, and the point before it (an accept that
    /// keeps fewer goes back there and runs the kept tokens again).
    window: Vec<(u32, Vec<f32>)>,
    before: Option<Point>,
    /// The head of the draft vocabulary and its tokens (None: the whole head).
    draft_head: Option<(Matrix, Vec<u32>)>,
}

/// A draft vocabulary's tokens as [`Decoder::set_draft_vocab`] takes them: ascending (so a tie between
/// two rows goes to the lower id, as in the whole head's argmax), each inside the vocabulary.
pub fn check_draft_vocab(ids: &[u32], vocab: usize) -> Result<(), String> {
    if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
        return Err(format!("a draft vocabulary's tokens must ascend ({} then {})", w[0], w[1]));
    }
    match ids.last() {
        Some(&last) if last as usize >= vocab => {
            Err(format!("a draft vocabulary's token {last} is outside the vocabulary ({vocab} tokens)"))
        }
        _ => Ok(()),
    }
}

/// `f` on one of the thread pool's threads (`rayon::scope` from outside the pool runs it there): the CPU
/// decoder's passes run so, since a caller outside the pool would be one thread more than the cores while
/// the pool's threads look for work after each product (two threads were slower than one on 2 cores).
fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

impl<'a> CpuDecoder<'a> {
    pub fn new(model: &'a Model, state: State) -> CpuDecoder<'a> {
        CpuDecoder { model, state, window: Vec::new(), before: None, draft_head: None }
    }

    /// Runs `tokens` through the trunk, then `head` on their final reads; while drafting (the state holds
    /// MTP cells), the cells of the positions whose next token this makes known.
    fn with_trunk<R: Send>(&mut self, tokens: &[u32], head: impl FnOnce(&Cpu, &Vec<Vec<f32>>) -> R + Send) -> R {
        on_pool(|| self.trunk_then(tokens, head))
    }

    fn trunk_then<R>(&mut self, tokens: &[u32], head: impl FnOnce(&Cpu, &Vec<Vec<f32>>) -> R) -> R {
        if let Some(&first) = tokens.first() {
            self.cell_before(first);
        }
        let (cpu, pos) = (Cpu::new(self.model), self.state.pos);
        let Ok((fin, mut r)) = trunk(&cpu, &self.model.config, &mut self.state, tokens, pos);
        self.state.pos += tokens.len();
        if self.state.mtp.is_some() && !r.is_empty() {
            let last = r.pop();
            self.write_cells(&r, &tokens[1..], pos);
            self.state.mtp.as_mut().expect("checked above").last_r = last;
        }
        head(&cpu, &fin)
    }

    /// The cell of the last position, now that its next token `next` is known.
    fn cell_before(&mut self, next: u32) {
        if let Some(r) = self.state.mtp.as_mut().and_then(|m| m.last_r.take()) {
            let pos = self.state.pos - 1;
            self.write_cells(&[r], &[next], pos);
        }
    }

    /// MTP cells at positions pos.. from the trunk's `rows` and the tokens after them.
    fn write_cells(&mut self, rows: &[Vec<f32>], next: &[u32], pos: usize) {
        let (Some(m), false) = (self.state.mtp.as_mut(), rows.is_empty()) else { return };
        let Ok(()) = mtp_cells(&Cpu::new(self.model), &mut m.cache, &rows.to_vec(), next, pos);
    }

    /// `n` greedy drafts after `x` ([`Decoder::draft`]).
    fn draft_chain(&mut self, x: u32, n: usize) -> Result<Vec<u32>, String> {
        let pos = self.state.pos;
        let Some(m) = self.state.mtp.as_mut().filter(|m| m.last_r.is_some()) else {
            return Err("no draft before a token has been through the trunk while drafting".into());
        };
        // The first step writes the real cell of the position before x; the chain's are provisional.
        let cpu = Cpu::new(self.model);
        let (mut rows, mut next, mut at) = (vec![m.last_r.clone().expect("checked above")], x, pos - 1);
        let mut drafts = Vec::with_capacity(n);
        let (head, ids) = match &self.draft_head {
            Some((head, ids)) => (head, Some(ids)),
            None => (&self.model.weights.output, None),
        };
        let mut logits = vec![0f32; head.rows];
        for _ in 0..n {
            let Ok((fin, rp)) = mtp_read(&cpu, &mut m.cache, &rows, &[next], at);
            head.matvec_rows(&fin[0], 0, &mut logits);
            let i = argmax(&logits);
            next = ids.map_or(i, |ids| ids[i as usize]);
            drafts.push(next);
            (rows, at) = (rp, at + 1);
        }
        if n > 0 {
            m.last_r = None; // its cell is written
        }
        Ok(drafts)
    }

    /// [`Decoder::verify`]: the window through the trunk at once, the token chosen after each position.
    fn verify_window(&mut self, window: &[u32], picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        if picks.len() != window.len() {
            return Err("a verify window needs a pick per token".into());
        }
        let mut picks = picks.iter();
        self.verify_each(window, |cpu, fin| {
            let Ok(c) = match picks.next().expect("a pick per token") {
                None => cpu.last_argmax(fin),
                Some(p) => cpu.last_sample(fin, p),
            };
            c
        })
    }

    /// Runs the verify window through the trunk in one pass (each weight read once for it; the bits of
    /// its tokens one by one), then `head` on each position's final read in turn. The point before the
    /// window is kept for [`Decoder::accept`].
    fn verify_each<R>(
        &mut self,
        window: &[u32],
        mut head: impl FnMut(&Cpu, &Vec<Vec<f32>>) -> R,
    ) -> Result<Vec<R>, String> {
        if self.state.mtp.is_none() || window.is_empty() {
            return Err("a verify window needs drafting on and a token".into());
        }
        // The draft chain's provisional cells go; the one before the window stays (or is written now).
        let first = self.state.pos;
        if let Some(m) = &mut self.state.mtp {
            m.cache.k.truncate(first - m.from);
            m.cache.v.truncate(first - m.from);
        }
        self.cell_before(window[0]);
        self.before = Some(self.state.point());
        let cpu = Cpu::new(self.model);
        let Ok((fin, r)) = trunk(&cpu, &self.model.config, &mut self.state, window, first);
        self.state.pos += window.len();
        self.window = window.iter().copied().zip(r).collect();
        Ok(fin.into_iter().map(|f| head(&cpu, &vec![f])).collect())
    }

    /// [`Decoder::accept`]: where fewer than the window's tokens are kept, back to the point before it
    /// and the kept tokens through the trunk again (a window of them: the same state as the first pass
    /// left after them); then the MTP cells of the kept positions from the first pass's R.
    fn accept_window(&mut self, kept: usize) -> Result<(), String> {
        if kept == 0 || kept > self.window.len() {
            return Err(format!("kept {kept} of a window of {}", self.window.len()));
        }
        let window = std::mem::take(&mut self.window);
        let before = self.before.take().ok_or("no verify window to accept")?;
        let first = before.pos;
        if kept < window.len() {
            self.state.rewind(&before)?;
            let tokens: Vec<u32> = window[..kept].iter().map(|w| w.0).collect();
            let Ok(_) = trunk(&Cpu::new(self.model), &self.model.config, &mut self.state, &tokens, first);
            self.state.pos += kept;
        }
        let rows: Vec<Vec<f32>> = window[..kept - 1].iter().map(|w| w.1.clone()).collect();
        let next: Vec<u32> = window[1..kept].iter().map(|w| w.0).collect();
        self.write_cells(&rows, &next, first);
        if let Some(m) = &mut self.state.mtp {
            m.last_r = Some(window[kept - 1].1.clone());
        }
        Ok(())
    }
}

impl Decoder for CpuDecoder<'_> {
    fn vocab(&self) -> usize {
        self.model.config.vocab
    }

    fn position(&self) -> usize {
        self.state.pos
    }

    /// A prompt's windows on the CPU: each weight is read once a window (cpu.rs), and the window's
    /// tokens share the threads in the layers' per-token steps (GDN heads, QSA's selection and attention,
    /// the HC reads). Of 32, 128 and 256 tokens, 256 read the built-in model's 2K and 8K prompts fastest
    /// on the 2-core build machine (bench/results/2026-12-07-cpu-prompt/).
    fn window(&self) -> usize {
        256
    }

    fn advance(&mut self, tokens: &[u32]) -> Result<(), String> {
        self.with_trunk(tokens, |_, _| ());
        Ok(())
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let Ok(v) = self.with_trunk(tokens, |cpu, fin| cpu.last_logits(fin));
        Ok(v)
    }

    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32, String> {
        let Ok(v) = self.with_trunk(tokens, |cpu, fin| cpu.last_argmax(fin));
        Ok(v)
    }

    fn forward_sample(&mut self, tokens: &[u32], p: &SampleParams, _next: &SampleParams) -> Result<u32, String> {
        let Ok(v) = self.with_trunk(tokens, |cpu, fin| cpu.last_sample(fin, p));
        Ok(v)
    }

    fn start_drafting(&mut self) -> bool {
        if self.model.weights.mtp.is_none() {
            return false;
        }
        if self.state.mtp.is_none() {
            let cache = self.model.mtp_cache(self.state.kv_mode);
            self.state.mtp = Some(MtpCells { from: self.state.pos, cache, last_r: None });
        }
        true
    }

    fn set_draft_vocab(&mut self, ids: &[u32]) -> Result<(), String> {
        check_draft_vocab(ids, self.model.config.vocab)?;
        self.draft_head = match ids {
            [] => None,
            _ => Some((self.model.weights.output.gather_rows(ids).ok_or("the head's rows")?, ids.to_vec())),
        };
        Ok(())
    }

    fn draft(&mut self, x: u32, n: usize, _picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        on_pool(|| self.draft_chain(x, n))
    }

    fn verify(&mut self, window: &[u32], picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        on_pool(|| self.verify_window(window, picks))
    }

    fn verify_logits(&mut self, window: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        on_pool(|| {
            self.verify_each(window, |cpu, fin| {
                let Ok(l) = cpu.last_logits(fin);
                l
            })
        })
    }

    fn gives_window_logits(&self) -> bool {
        true
    }

    fn accept(&mut self, kept: usize) -> Result<(), String> {
        on_pool(|| self.accept_window(kept))
    }

    fn snapshot(&self) -> Result<State, String> {
        Ok(self.state.clone())
    }

    fn restore(&mut self, state: &State) -> Result<(), String> {
        let fresh = State::new(&self.model.config, self.state.kv_mode);
        let same_kinds = state.layers.len() == fresh.layers.len()
            && state
                .layers
                .iter()
                .zip(&fresh.layers)
                .all(|(a, b)| std::mem::discriminant(a) == std::mem::discriminant(b));
        (self.window, self.before) = (Vec::new(), None);
        if !same_kinds || state.kv_mode != fresh.kv_mode || state.ple.z.len() != fresh.ple.z.len() {
            self.state = fresh;
            return Err("the state does not match the model and its KV mode".into());
        }
        self.state = state.clone();
        Ok(())
    }
}
