//! How well a layer's router, applied to the layer's mixer input, guesses the experts the layer then
//! chooses from its MoE input (docs/PLACEMENT.md, "Guessed experts": a placed decode step streams the
//! guessed experts while the mixer runs, when the bus is idle). A back-end that runs the CPU's and, at
//! each trunk MoE, routes both inputs with the layer's router: of the k experts chosen, how many are in
//! the guess's top k and top 2k. And a stage earlier: the layer's router on the previous layer's MoE
//! input (known while that layer's experts are computed, so the bus could carry the guess then).

use std::sync::Mutex;

use strata_model::backend::{Backend, HcId, MoeId};
use strata_model::cpu::Cpu;
use strata_model::layers::moe::route;
use strata_model::ops::sample::SampleParams;
use strata_model::Model;

type Rows = Vec<Vec<f32>>;

/// Whether a cache holds a layer's expert (the misses are the others).
pub type Held<'a> = Box<dyn Fn(usize, usize) -> bool + Sync + 'a>;

/// Per layer, of the chosen experts (`all`), and of those a cache does not hold (`misses`).
#[derive(Clone, Copy, Default)]
struct Tally {
    /// Chosen experts in the guess's top k, in its top 2k, and chosen in all.
    in_k: u64,
    in_2k: u64,
    chosen: u64,
    /// Chosen experts in the top k of the guess a stage earlier, in it or in the mixer-input guess's top
    /// k (both guesses made), and chosen where there was an earlier guess.
    earlier_in_k: u64,
    either_in_k: u64,
    earlier_chosen: u64,
}

/// The guesses' shares of a layer's chosen experts: in the top k, in the top 2k, in the top k of the
/// guess a stage earlier, and in either guess's top k.
#[derive(Clone, Copy, Debug)]
pub struct Shares {
    pub in_k: f64,
    pub in_2k: f64,
    pub earlier_in_k: f64,
    pub either_in_k: f64,
}

/// The CPU back-end with the guesses counted: per layer, chosen experts in the guess's top k and top 2k
/// and in the earlier guess's top k, of all the chosen ones and of those `held` says a cache does not
/// hold.
pub struct Guessing<'a> {
    pub cpu: Cpu<'a>,
    model: &'a Model,
    held: Held<'a>,
    mixer_in: Mutex<Vec<Option<Rows>>>,
    /// The last trunk MoE's input and its layer.
    moe_in: Mutex<Option<(usize, Rows)>>,
    counts: Mutex<Vec<[Tally; 2]>>,
}

impl<'a> Guessing<'a> {
    pub fn new(cpu: Cpu<'a>, model: &'a Model, held: Held<'a>) -> Guessing<'a> {
        let layers = model.config.n_layer;
        let (mixer_in, counts) = (Mutex::new(vec![None; layers]), Mutex::new(vec![[Tally::default(); 2]; layers]));
        Guessing { cpu, model, held, mixer_in, moe_in: Mutex::new(None), counts }
    }

    /// Counting starts again (the prompt's routings left out).
    pub fn reset(&self) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter_mut().for_each(|c| *c = [Tally::default(); 2]);
    }

    /// Per layer: the guesses' shares of the chosen experts (`misses`: of those the cache did not hold).
    pub fn shares(&self, misses: bool) -> Vec<Shares> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let share = |a: u64, b: u64| a as f64 / b.max(1) as f64;
        let of = |t: &Tally| Shares {
            in_k: share(t.in_k, t.chosen),
            in_2k: share(t.in_2k, t.chosen),
            earlier_in_k: share(t.earlier_in_k, t.earlier_chosen),
            either_in_k: share(t.either_in_k, t.earlier_chosen),
        };
        counts.iter().map(|c| of(&c[usize::from(misses)])).collect()
    }

    fn keep_mixer_input(&self, id: HcId, x: &Rows) {
        if let HcId::Attn(l) = id {
            self.mixer_in.lock().unwrap_or_else(|e| e.into_inner())[l] = Some(x.clone());
        }
    }

    fn count(&self, l: usize, x: &Rows) {
        let earlier_in = self.moe_in.lock().unwrap_or_else(|e| e.into_inner()).replace((l, x.clone()));
        let Some(guess_in) = self.mixer_in.lock().unwrap_or_else(|e| e.into_inner())[l].take() else { return };
        let earlier_in = earlier_in.filter(|(p, r)| p + 1 == l && r.len() == x.len()).map(|(_, r)| r);
        let w = &self.model.weights.layers[l].moe;
        let k = self.model.config.n_expert_used;
        let wide = (2 * k).min(self.model.config.n_expert);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for (i, (xm, xg)) in x.iter().zip(&guess_in).enumerate() {
            let guess = route(w, xg, wide).0;
            let earlier = earlier_in.as_ref().map(|r| route(w, &r[i], k).0);
            for e in route(w, xm, k).0 {
                let missed = !(self.held)(l, e);
                for (t, on) in counts[l].iter_mut().zip([true, missed]) {
                    if on {
                        t.in_k += guess[..k].contains(&e) as u64;
                        t.in_2k += guess.contains(&e) as u64;
                        t.chosen += 1;
                        if let Some(g) = &earlier {
                            t.earlier_in_k += g.contains(&e) as u64;
                            t.either_in_k += (g.contains(&e) || guess[..k].contains(&e)) as u64;
                            t.earlier_chosen += 1;
                        }
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
    fn mtp_append(&self, x: &Rows, cache: &mut Self::MtpCache, pos: usize) -> Result<(), Self::Error> {
        self.cpu.mtp_append(x, cache, pos)
    }
}
