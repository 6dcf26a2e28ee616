//! A model and one conversation's state on some device, behind one trait the generation loop drives:
//! [`Decoder`], and its CPU form, [`CpuDecoder`] (the GPU's is crates/cuda's).

use crate::backend::{mtp_step, trunk, Backend};
use crate::cpu::Cpu;
use crate::model::Model;
use crate::ops::sample::SampleParams;
use crate::ops::topk::argmax;
use crate::rewind::Point;
use crate::state::{QsaState, State};

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

    /// Turns drafting on from the next token on (the MTP layer's cache then gets a cell at every
    /// position); false when this decoder cannot draft (no MTP layer, or not implemented here).
    fn start_drafting(&mut self) -> bool {
        false
    }
    /// `n` greedy drafts of the tokens after `x`, the last generated token (at [`Decoder::position`]).
    fn draft(&mut self, _x: u32, _n: usize) -> Result<Vec<u32>, String> {
        Err("this decoder does not draft".into())
    }
    /// Runs `window` (x, then the drafts) through the trunk and returns the token chosen after each of its
    /// positions: the argmax where `picks[i]` is `None`, else the token drawn with it. A point is kept
    /// after each token for [`Decoder::accept`].
    fn verify(&mut self, _window: &[u32], _picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        Err("this decoder does not draft".into())
    }
    /// Keeps the first `kept` tokens (1 ..= its length) of the window just verified and drops the rest.
    fn accept(&mut self, _kept: usize) -> Result<(), String> {
        Err("this decoder does not draft".into())
    }
    /// A device's own report at the end of a run (its figures, a profile when asked for), if any.
    fn report(&self) -> Option<String> {
        None
    }
}

/// The CPU back-end with a conversation's state.
pub struct CpuDecoder<'a> {
    pub model: &'a Model,
    pub state: State,
    /// The MTP layer's cache and what drafting keeps between calls, once [`Decoder::start_drafting`].
    drafting: Option<Drafting>,
}

/// What a drafting decoder keeps (docs/SPECULATION.md, "The MTP layer's cache").
struct Drafting {
    /// Cell p from the trunk's R_p and the token at p + 1, for the positions from `from` on whose next
    /// token is known; then any provisional cells of the last draft chain.
    cache: QsaState,
    /// The first position with a cell.
    from: usize,
    /// The trunk's R at the last position, whose next token is not known yet.
    last_r: Option<Vec<f32>>,
    /// The verify window's tokens, R at each position and the point after each.
    window: Vec<(u32, Vec<f32>, Point)>,
}

impl<'a> CpuDecoder<'a> {
    pub fn new(model: &'a Model, state: State) -> CpuDecoder<'a> {
        CpuDecoder { model, state, drafting: None }
    }

    /// Runs `tokens` through the trunk, then `head` on their final reads; while drafting, the MTP
    /// layer's cells of the positions whose next token this makes known.
    fn with_trunk<R>(&mut self, tokens: &[u32], head: impl FnOnce(&Cpu, &Vec<Vec<f32>>) -> R) -> R {
        if let Some(&first) = tokens.first() {
            self.cells_before(first);
        }
        let (cpu, pos) = (Cpu { model: self.model }, self.state.pos);
        let Ok((fin, r)) = trunk(&cpu, &self.model.config, &mut self.state, tokens, pos);
        self.state.pos += tokens.len();
        if self.drafting.is_some() && !tokens.is_empty() {
            let n = tokens.len();
            self.write_cells(&r[..n - 1], &tokens[1..], pos);
            if let Some(d) = &mut self.drafting {
                d.last_r = Some(r[n - 1].clone());
            }
        }
        head(&cpu, &fin)
    }

    /// The cell of the position before the next, now that its next token `next` is known.
    fn cells_before(&mut self, next: u32) {
        if let Some(r) = self.drafting.as_mut().and_then(|d| d.last_r.take()) {
            let pos = self.state.pos - 1;
            self.write_cells(&[r], &[next], pos);
        }
    }

    /// MTP cells at positions pos.. from the trunk's `rows` and the tokens after them (the layer's whole
    /// step: its cell is what the cache keeps).
    fn write_cells(&mut self, rows: &[Vec<f32>], next: &[u32], pos: usize) {
        let (Some(d), false) = (self.drafting.as_mut(), rows.is_empty()) else { return };
        let cpu = Cpu { model: self.model };
        let _ = mtp_step(&cpu, &mut d.cache, &rows.to_vec(), next, pos);
    }
}

impl Decoder for CpuDecoder<'_> {
    fn vocab(&self) -> usize {
        self.model.config.vocab
    }

    fn position(&self) -> usize {
        self.state.pos
    }

    fn window(&self) -> usize {
        8
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
        if self.drafting.is_none() {
            let cache = self.model.mtp_cache(self.state.kv_mode);
            self.drafting = Some(Drafting { cache, from: self.state.pos, last_r: None, window: Vec::new() });
        }
        true
    }

    fn draft(&mut self, x: u32, n: usize) -> Result<Vec<u32>, String> {
        let Some(r) = self.drafting.as_ref().and_then(|d| d.last_r.clone()) else {
            return Err("no draft before a token has been through the trunk".into());
        };
        let cpu = Cpu { model: self.model };
        let d = self.drafting.as_mut().expect("checked above");
        // The first step writes the real cell of the position before x; the chain's are provisional.
        let (mut rows, mut next, mut pos) = (vec![r], x, self.state.pos - 1);
        let mut drafts = Vec::with_capacity(n);
        for _ in 0..n {
            let Ok((logits, rp)) = mtp_step(&cpu, &mut d.cache, &rows, &[next], pos);
            next = argmax(&logits[0]);
            drafts.push(next);
            (rows, pos) = (rp, pos + 1);
        }
        if n > 0 {
            d.last_r = None; // its cell is written
        }
        Ok(drafts)
    }

    fn verify(&mut self, window: &[u32], picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        if self.drafting.is_none() || window.is_empty() || picks.len() != window.len() {
            return Err("a verify window needs drafting on and a pick per token".into());
        }
        // The draft chain's provisional cells go; the one before the window stays (or is written now).
        let first = self.state.pos;
        if let Some(d) = &mut self.drafting {
            d.cache.k.truncate(first - d.from);
            d.cache.v.truncate(first - d.from);
            d.window.clear();
        }
        self.cells_before(window[0]);
        let mut chosen = Vec::with_capacity(window.len());
        for (&t, pick) in window.iter().zip(picks) {
            let (cpu, pos) = (Cpu { model: self.model }, self.state.pos);
            let Ok((fin, r)) = trunk(&cpu, &self.model.config, &mut self.state, &[t], pos);
            self.state.pos += 1;
            let Ok(c) = match pick {
                None => cpu.last_argmax(&fin),
                Some(p) => cpu.last_sample(&fin, p),
            };
            chosen.push(c);
            let point = self.state.point();
            self.drafting.as_mut().expect("checked above").window.push((t, r[0].clone(), point));
        }
        Ok(chosen)
    }

    fn accept(&mut self, kept: usize) -> Result<(), String> {
        let Some(d) = self.drafting.as_mut() else { return Err("no window to accept".into()) };
        if kept == 0 || kept > d.window.len() {
            return Err(format!("kept {kept} of a window of {}", d.window.len()));
        }
        let window = std::mem::take(&mut d.window);
        self.state.rewind(&window[kept - 1].2)?;
        let first = self.state.pos - kept;
        let rows: Vec<Vec<f32>> = window[..kept - 1].iter().map(|w| w.1.clone()).collect();
        let next: Vec<u32> = window[1..kept].iter().map(|w| w.0).collect();
        self.write_cells(&rows, &next, first);
        if let Some(d) = &mut self.drafting {
            d.last_r = Some(window[kept - 1].1.clone());
        }
        Ok(())
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
        // The MTP layer's cells start again from the restored position (checkpoints do not hold them yet).
        if let Some(d) = &mut self.drafting {
            *d = Drafting { cache: self.model.mtp_cache(fresh.kv_mode), from: state.pos, last_r: None, window: Vec::new() };
        }
        if !same_kinds || state.kv_mode != fresh.kv_mode || state.ple.z.len() != fresh.ple.z.len() {
            if let Some(d) = &mut self.drafting {
                d.from = 0;
            }
            self.state = fresh;
            return Err("the state does not match the model and its KV mode".into());
        }
        self.state = state.clone();
        Ok(())
    }
}
