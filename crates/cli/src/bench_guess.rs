//! How well a layer's router, applied to the layer's mixer input, guesses the experts the layer then
//! chooses from its MoE input (docs/PLACEMENT.md, "To build": a placed decode step could stream the
//! guessed experts while the mixer runs, when the bus is idle). A back-end that runs the CPU's and, at
//! each trunk MoE, routes both inputs with the layer's router: of the k experts chosen, how many are in
//! the guess's top k and top 2k.

use std::sync::Mutex;

use strata_model::backend::{Backend, HcId, MoeId};
use strata_model::cpu::Cpu;
use strata_model::layers::moe::route;
use strata_model::ops::sample::SampleParams;
use strata_model::Model;

type Rows = Vec<Vec<f32>>;

/// Whether a cache holds a layer's expert (the misses are the others).
pub type Held<'a> = Box<dyn Fn(usize, usize) -> bool + Sync + 'a>;

/// The CPU back-end with the guesses counted: per layer, chosen experts in the guess's top k, in its top
/// 2k, and chosen in all; then the same of the chosen experts `held` says a cache does not hold.
pub struct Guessing<'a> {
    pub cpu: Cpu<'a>,
    model: &'a Model,
    held: Held<'a>,
    mixer_in: Mutex<Vec<Option<Rows>>>,
    counts: Mutex<Vec<[u64; 6]>>,
}

impl<'a> Guessing<'a> {
    pub fn new(cpu: Cpu<'a>, model: &'a Model, held: Held<'a>) -> Guessing<'a> {
        let layers = model.config.n_layer;
        let (mixer_in, counts) = (Mutex::new(vec![None; layers]), Mutex::new(vec![[0; 6]; layers]));
        Guessing { cpu, model, held, mixer_in, counts }
    }

    /// Counting starts again (the prompt's routings left out).
    pub fn reset(&self) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter_mut().for_each(|c| *c = [0; 6]);
    }

    /// Per layer: the shares of the chosen experts in the guess's top k and top 2k (`misses`: of those the
    /// cache did not hold).
    pub fn shares(&self, misses: bool) -> Vec<(f64, f64)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let o = if misses { 3 } else { 0 };
        let share = |c: &[u64; 6], i: usize| c[o + i] as f64 / c[o + 2].max(1) as f64;
        counts.iter().map(|c| (share(c, 0), share(c, 1))).collect()
    }

    fn keep_mixer_input(&self, id: HcId, x: &Rows) {
        if let HcId::Attn(l) = id {
            self.mixer_in.lock().unwrap_or_else(|e| e.into_inner())[l] = Some(x.clone());
        }
    }

    fn count(&self, l: usize, x: &Rows) {
        let Some(guess_in) = self.mixer_in.lock().unwrap_or_else(|e| e.into_inner())[l].take() else { return };
        let w = &self.model.weights.layers[l].moe;
        let k = self.model.config.n_expert_used;
        let wide = (2 * k).min(self.model.config.n_expert);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for (xm, xg) in x.iter().zip(&guess_in) {
            let guess = route(w, xg, wide).0;
            for e in route(w, xm, k).0 {
                let (narrow, wide) = (guess[..k].contains(&e) as u64, guess.contains(&e) as u64);
                let missed = !(self.held)(l, e);
                for (o, on) in [(0, true), (3, missed)] {
                    if on {
                        counts[l][o] += narrow;
                        counts[l][o + 1] += wide;
                        counts[l][o + 2] += 1;
                    }
                }
            }
        }
    }
}

impl Backend for Guessing<'_> {
    type Rows = Rows;
    type State = <Cpu<'static> as Backend>::State;
    type MtpCache = <Cpu<'static> as Backend>::MtpCache;
    type Error = std::convert::Infallible;

    fn embed(&self, tokens: &[u32]) -> Result<Rows, Self::Error> {
        self.cpu.embed(tokens)
    }
    fn ple(&self, r: &mut Rows, tokens: &[u32], st: &mut Self::State) -> Result<(), Self::Error> {
        self.cpu.ple(r, tokens, st)
    }
    fn hc_read(&self, r: &Rows, id: HcId) -> Result<(Rows, Rows), Self::Error> {
        let out = self.cpu.hc_read(r, id)?;
        self.keep_mixer_input(id, &out.0);
        Ok(out)
    }
    fn hc_write(&self, r: &mut Rows, y: &Rows, inj: &Rows) -> Result<(), Self::Error> {
        self.cpu.hc_write(r, y, inj)
    }
    fn hc_write_read(&self, r: &mut Rows, pending: (&Rows, &Rows), id: HcId) -> Result<(Rows, Rows), Self::Error> {
        let out = self.cpu.hc_write_read(r, pending, id)?;
        self.keep_mixer_input(id, &out.0);
        Ok(out)
    }
    fn mixer(&self, l: usize, x: &Rows, st: &mut Self::State, pos: usize) -> Result<Rows, Self::Error> {
        self.cpu.mixer(l, x, st, pos)
    }
    fn moe(&self, id: MoeId, x: &Rows) -> Result<Rows, Self::Error> {
        if let MoeId::Layer(l) = id {
            self.count(l, x);
        }
        self.cpu.moe(id, x)
    }
    fn logits(&self, fin: &Rows) -> Result<Vec<Vec<f32>>, Self::Error> {
        self.cpu.logits(fin)
    }
    fn last_logits(&self, fin: &Rows) -> Result<Vec<f32>, Self::Error> {
        self.cpu.last_logits(fin)
    }
    fn last_argmax(&self, fin: &Rows) -> Result<u32, Self::Error> {
        self.cpu.last_argmax(fin)
    }
    fn last_sample(&self, fin: &Rows, p: &SampleParams) -> Result<u32, Self::Error> {
        self.cpu.last_sample(fin, p)
    }
    fn mtp_input(&self, r: &Rows, next: &[u32]) -> Result<Rows, Self::Error> {
        self.cpu.mtp_input(r, next)
    }
    fn mtp_attention(&self, x: &Rows, cache: &mut Self::MtpCache, pos: usize) -> Result<Rows, Self::Error> {
        self.cpu.mtp_attention(x, cache, pos)
    }
}
