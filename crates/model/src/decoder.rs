//! A model and one conversation's state on some device, behind one trait the generation loop drives:
//! [`Decoder`], and its CPU form, [`CpuDecoder`] (the GPU's is crates/cuda's).

use crate::backend::{trunk, Backend};
use crate::cpu::Cpu;
use crate::model::Model;
use crate::ops::sample::SampleParams;
use crate::state::State;

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
    /// A device's own report at the end of a run (its figures, a profile when asked for), if any.
    fn report(&self) -> Option<String> {
        None
    }
}

/// The CPU back-end with a conversation's state.
pub struct CpuDecoder<'a> {
    pub model: &'a Model,
    pub state: State,
}

impl CpuDecoder<'_> {
    /// Runs `tokens` through the trunk, then `head` on their final reads.
    fn with_trunk<R>(&mut self, tokens: &[u32], head: impl FnOnce(&Cpu, &Vec<Vec<f32>>) -> R) -> R {
        let (cpu, pos) = (Cpu { model: self.model }, self.state.pos);
        let Ok((fin, _)) = trunk(&cpu, &self.model.config, &mut self.state, tokens, pos);
        self.state.pos += tokens.len();
        head(&cpu, &fin)
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
        if !same_kinds || state.kv_mode != fresh.kv_mode || state.ple.z.len() != fresh.ple.z.len() {
            self.state = fresh;
            return Err("the state does not match the model and its KV mode".into());
        }
        self.state = state.clone();
        Ok(())
    }
}
