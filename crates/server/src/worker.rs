//! The engine's thread: one generation at a time, in the order the requests came (a bounded FIFO queue),
//! each reading only the tokens past the longest saved state its prompt begins with.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::draft_vocab::DraftVocab;
use strata_engine::generate::{generate_guided, Drafts, Event, GenerateConfig, GenerateError, SpecStats, Stop};
use strata_engine::grammar::Guide;
use strata_engine::sampler::SamplerConfig;
use strata_engine::tokenizer::Tokenizer;
use strata_model::decoder::Decoder;
use strata_model::State;
use tokio::sync::mpsc::UnboundedSender;

use crate::convo::Convos;
use crate::logprobs::{entry, TokenLogprob};
use crate::text::TextStream;

/// What a request asks the engine for.
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    /// Generate past the model's stop tokens (for benchmarks: a reply of exactly `max_tokens`).
    pub ignore_eos: bool,
    /// The grammar the reply is decoded under (boxed: a job waits in the queue by value).
    pub guide: Option<Box<Guide>>,
    /// Log-probabilities asked for, with this many alternatives a token.
    pub logprobs: Option<usize>,
    pub updates: UnboundedSender<Update>,
    /// When the request came (its time to first token counts the wait in the queue).
    pub arrived: Instant,
}

/// What the engine tells the request, in order: `Started`, `Prefill`s, `Text`s, then `Done` or `Failed`.
#[derive(Debug)]
pub enum Update {
    /// The generation has begun, `reused` of the prompt's tokens taken from a saved state.
    Started {
        reused: usize,
    },
    Prefill {
        done: usize,
        total: usize,
    },
    /// The next token's log-probabilities (when asked for), before the text it brings.
    Logprob(Box<TokenLogprob>),
    Text(String),
    Done(Box<Finish>),
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A stop token or a stop string.
    Stop,
    /// `max_tokens` generated.
    Length,
    /// The context is full.
    ContextFull,
}

#[derive(Clone, Debug)]
pub struct Finish {
    pub reason: Reason,
    pub prompt_tokens: usize,
    pub reused: usize,
    pub completion_tokens: usize,
    /// The stop string that ended the text, if one did.
    pub stop_string: Option<String>,
    /// From the engine's start on the request to its first token (restoring a state, reading the prompt).
    pub prefill: Duration,
    /// From the request's arrival to its first token.
    pub first_token: Duration,
    pub decode: Duration,
    /// Speculation's passes, drafts and accepted drafts (zero without it, or when a stop string ended it).
    pub spec: SpecStats,
}

/// Speculation's totals since the start (passes, drafts, accepted drafts), for /v1/status.
#[derive(Default)]
pub struct SpecTotals {
    pub passes: AtomicUsize,
    pub drafted: AtomicUsize,
    pub accepted: AtomicUsize,
}

/// The generation running now, as /v1/status shows it.
#[derive(Clone, Debug)]
pub struct Running {
    pub prompt_tokens: usize,
    pub reused: usize,
    /// The prompt's tokens the decoder holds so far (the reused ones included).
    pub read: usize,
    pub generated: usize,
    pub since: Instant,
    pub first_token: Option<Instant>,
}

impl Running {
    /// The prompt read so far, in tokens a second (while it is read, then up to the first token).
    pub fn prefill_rate(&self) -> f64 {
        let t = self.first_token.unwrap_or_else(Instant::now) - self.since;
        (self.read - self.reused) as f64 / t.as_secs_f64().max(1e-9)
    }

    /// Tokens a second after the first.
    pub fn decode_rate(&self) -> Option<f64> {
        let t = self.first_token?.elapsed().as_secs_f64();
        (self.generated > 1 && t > 0.0).then(|| (self.generated - 1) as f64 / t)
    }
}

type Now = Arc<Mutex<Option<Running>>>;

/// What the engine thread last said of itself, for /v1/status (the web page's monitor).
#[derive(Clone, Debug, Default)]
pub struct Monitor {
    /// The last finished generation's prompt and decode rates, in tokens a second.
    pub last_prefill_rate: Option<f64>,
    pub last_decode_rate: Option<f64>,
    /// Saved conversations, their bytes, and the cache's budget in bytes.
    pub cached: (usize, usize, usize),
    /// The device's memory in use and in all, in bytes (None on the CPU).
    pub memory: Option<(u64, u64)>,
}

type Shown = Arc<Mutex<Monitor>>;

/// The sending side of the queue, shared by the request handlers.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<Job>,
    waiting: Arc<AtomicUsize>,
    capacity: usize,
    now: Now,
    spec: Arc<SpecTotals>,
    shown: Shown,
}

/// The receiving side, for [`work`].
pub struct Jobs {
    rx: Receiver<Job>,
    waiting: Arc<AtomicUsize>,
    now: Now,
    spec: Arc<SpecTotals>,
    shown: Shown,
}

/// A queue of at most `capacity` waiting jobs.
pub fn queue(capacity: usize) -> (Queue, Jobs) {
    let capacity = capacity.max(1);
    let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
    let waiting = Arc::new(AtomicUsize::new(0));
    let now = Now::default();
    let spec = Arc::new(SpecTotals::default());
    let shown = Shown::default();
    let queue =
        Queue { tx, waiting: waiting.clone(), capacity, now: now.clone(), spec: spec.clone(), shown: shown.clone() };
    (queue, Jobs { rx, waiting, now, spec, shown })
}

impl Queue {
    /// Queues `job`; `Err` (the job back) when the queue is full (or the engine has stopped).
    pub fn submit(&self, job: Job) -> Result<(), Box<Job>> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let r = self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(j) | TrySendError::Disconnected(j) => Box::new(j),
        });
        if r.is_err() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        metrics::gauge!("strata_queue_depth").set(self.waiting() as f64);
        r
    }

    /// Jobs waiting for the engine (the running one not counted).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Speculation's totals since the start.
    pub fn spec(&self) -> &SpecTotals {
        &self.spec
    }

    /// The generation running now, if any.
    pub fn running(&self) -> Option<Running> {
        self.now.lock().ok()?.clone()
    }

    /// What the engine last said of itself.
    pub fn monitor(&self) -> Monitor {
        self.shown.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

fn set(now: &Now, f: impl FnOnce(&mut Option<Running>)) {
    if let Ok(mut g) = now.lock() {
        f(&mut g);
    }
}

/// The engine's side: the decoder, the text tools and the saved states.
pub struct Engine<'a> {
    pub dec: &'a mut dyn Decoder,
    pub tok: &'a Tokenizer,
    /// The model's end-of-text and end-of-turn tokens.
    pub stop_tokens: Vec<u32>,
    pub max_context: usize,
    /// A fresh conversation (the decoder's reset).
    pub fresh: State,
    /// Drafts per verify window.
    pub spec: Drafts,
    /// The decoder's draft vocabulary (`--draft-vocab K`), counting every request's tokens.
    pub draft_vocab: Option<Arc<Mutex<DraftVocab>>>,
    pub convos: Convos<State>,
    /// The tokens the decoder holds now; `None` when unknown (after a device error).
    pub live: Option<Vec<u32>>,
}

/// Runs jobs until every [`Queue`] is dropped.
pub fn work(jobs: Jobs, engine: &mut Engine) {
    engine.show(&jobs.shown, None);
    while let Ok(mut job) = jobs.rx.recv() {
        jobs.waiting.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!("strata_queue_depth").set(jobs.waiting.load(Ordering::SeqCst) as f64);
        // A client that left while its request waited.
        if job.updates.is_closed() {
            continue;
        }
        metrics::gauge!("strata_running").set(1.0);
        let out = engine.run(&mut job, &jobs.now);
        set(&jobs.now, |r| *r = None);
        metrics::gauge!("strata_running").set(0.0);
        let _ = job.updates.send(match out {
            Ok(f) => {
                record(&f);
                engine.show(&jobs.shown, Some(&f));
                let t = &jobs.spec;
                t.passes.fetch_add(f.spec.passes, Ordering::Relaxed);
                t.drafted.fetch_add(f.spec.drafted, Ordering::Relaxed);
                t.accepted.fetch_add(f.spec.accepted, Ordering::Relaxed);
                Update::Done(Box::new(f))
            }
            Err(e) => Update::Failed(e),
        });
    }
}

fn record(f: &Finish) {
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    eprintln!(
        "generation: prompt {} tokens ({} reused) read in {:.2} s ({:.1} tok/s); {} tokens in {:.2} s ({:.1} tok/s); \
         first token {:.2} s after the request; {:?}",
        f.prompt_tokens,
        f.reused,
        f.prefill.as_secs_f64(),
        rate(f.prompt_tokens - f.reused, f.prefill),
        f.completion_tokens,
        f.decode.as_secs_f64(),
        rate(f.completion_tokens.saturating_sub(1), f.decode),
        f.first_token.as_secs_f64(),
        f.reason,
    );
    metrics::counter!("strata_prompt_tokens_total").increment(f.prompt_tokens as u64);
    metrics::counter!("strata_reused_prompt_tokens_total").increment(f.reused as u64);
    metrics::counter!("strata_generated_tokens_total").increment(f.completion_tokens as u64);
    let read = f.prompt_tokens - f.reused;
    if read > 0 && !f.prefill.is_zero() {
        metrics::gauge!("strata_prefill_tokens_per_second").set(read as f64 / f.prefill.as_secs_f64());
    }
    if f.completion_tokens > 1 && !f.decode.is_zero() {
        metrics::gauge!("strata_decode_tokens_per_second")
            .set((f.completion_tokens - 1) as f64 / f.decode.as_secs_f64());
    }
    metrics::histogram!("strata_time_to_first_token_seconds").record(f.first_token.as_secs_f64());
    metrics::counter!("strata_spec_passes_total").increment(f.spec.passes as u64);
    metrics::counter!("strata_drafted_tokens_total").increment(f.spec.drafted as u64);
    metrics::counter!("strata_accepted_drafts_total").increment(f.spec.accepted as u64);
}

/// The client went away (its updates channel closed).
fn gone() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client closed the request")
}

impl Engine<'_> {
    fn run(&mut self, job: &mut Job, now: &Now) -> Result<Finish, String> {
        let t0 = Instant::now();
        if job.prompt.is_empty() {
            return Err("the prompt is empty".into());
        }
        let reused = self.resume(&job.prompt)?;
        set(now, |r| {
            *r = Some(Running {
                prompt_tokens: job.prompt.len(),
                reused,
                read: reused,
                generated: 0,
                since: t0,
                first_token: None,
            })
        });
        let _ = job.updates.send(Update::Started { reused });
        let n = job.prompt.len();
        // The prompt read from `reused` on; the state where the assistant's turn begins (all but the
        // prompt's last token) is saved at the mark, which the conversation's next request begins with.
        let cfg = GenerateConfig {
            n_predict: job.max_tokens,
            stops: self.stop_tokens.clone(),
            ignore_eos: job.ignore_eos,
            max_context: self.max_context,
            sampler: job.sampler.clone(),
            logits: job.logprobs.is_some(),
            mark: Some(n - 1 - reused),
            spec: self.spec,
            draft_vocab: self.draft_vocab.clone(),
        };
        let mut text = TextStream::new(self.tok, job.stop.clone());
        let mut tokens = Vec::new();
        let mut read = reused; // the prompt's tokens the decoder holds
        let mut stopped_by_string = false;
        let mut first: Option<Duration> = None;
        let convos = &mut self.convos;
        let mut guide = job.guide.take();
        let mut last_logits = Vec::new();
        let out = generate_guided(&mut *self.dec, &job.prompt[reused..], &cfg, guide.as_deref_mut(), |ev| match ev {
            Event::Prompt { done, .. } => {
                read = reused + done;
                set(now, |r| {
                    if let Some(r) = r {
                        r.read = read;
                    }
                });
                job.updates.send(Update::Prefill { done: read, total: n }).map_err(|_| gone())
            }
            Event::Mark(dec) => {
                save(convos, dec, job.prompt[..read].to_vec());
                Ok(())
            }
            Event::Logits(l) => {
                if job.logprobs.is_some() {
                    last_logits.clear();
                    last_logits.extend_from_slice(l);
                }
                Ok(())
            }
            Event::Token(t) => {
                first.get_or_insert_with(|| t0.elapsed());
                tokens.push(t);
                set(now, |r| {
                    if let Some(r) = r {
                        r.generated += 1;
                        r.first_token.get_or_insert_with(Instant::now);
                    }
                });
                if self.stop_tokens.contains(&t) && !job.ignore_eos {
                    return Ok(());
                }
                if let Some(n) = job.logprobs {
                    let e = entry(self.tok, &last_logits, t, n);
                    job.updates.send(Update::Logprob(Box::new(e))).map_err(|_| gone())?;
                }
                let (delta, stop) = text.push(t);
                if !delta.is_empty() {
                    job.updates.send(Update::Text(delta)).map_err(|_| gone())?;
                }
                if stop {
                    stopped_by_string = true;
                    return Err(std::io::Error::other("a stop string"));
                }
                Ok(())
            }
        });
        // The decoder holds the prompt (or the part read when the client left during it) and every
        // generated token but the last.
        let mut held = job.prompt[..read].to_vec();
        held.extend(tokens.iter().take(tokens.len().saturating_sub(1)));
        let mut spec = SpecStats::default();
        let reason = match out {
            Ok(g) => {
                spec = g.spec;
                match g.stop {
                    Stop::Length => Reason::Length,
                    Stop::StopToken(_) => Reason::Stop,
                    Stop::ContextFull => Reason::ContextFull,
                }
            }
            Err(GenerateError::Caller(_)) if stopped_by_string => Reason::Stop,
            Err(GenerateError::Caller(e)) => {
                self.live = Some(held);
                return Err(e.to_string());
            }
            Err(e) => {
                self.live = None;
                return Err(e.to_string());
            }
        };
        self.live = Some(held);
        if !stopped_by_string {
            let tail = text.finish();
            if !tail.is_empty() {
                let _ = job.updates.send(Update::Text(tail));
            }
        }
        let prefill = first.unwrap_or_else(|| t0.elapsed());
        Ok(Finish {
            reason,
            prompt_tokens: n,
            reused,
            completion_tokens: tokens.len(),
            stop_string: text.matched().map(str::to_string),
            prefill,
            first_token: (t0 + prefill).duration_since(job.arrived),
            decode: t0.elapsed().saturating_sub(prefill),
            spec,
        })
    }

    /// Puts the decoder at the longest state `prompt` begins with (the one it holds, or a saved one, or
    /// none) and says how many of its tokens that covers. The state left is saved first.
    fn resume(&mut self, prompt: &[u32]) -> Result<usize, String> {
        if let Some(live) = &self.live {
            if live.len() < prompt.len() && prompt.starts_with(live) {
                return Ok(live.len());
            }
        }
        if let Some(live) = self.live.take() {
            if !live.is_empty() && !self.convos.contains(&live) {
                self.save(live);
            }
        }
        let (reused, state) = match self.convos.longest_prefix(prompt) {
            Some((n, s)) => (n, s),
            None => (0, &self.fresh),
        };
        let out = self.dec.restore(state);
        self.live = Some(prompt[..reused].to_vec());
        match out {
            Ok(()) => Ok(reused),
            // The decoder then holds an empty conversation: the prompt is read whole.
            Err(e) => {
                eprintln!("note: a saved conversation could not be restored ({e}); reading the prompt whole");
                self.live = Some(Vec::new());
                Ok(0)
            }
        }
    }

    /// Saves the decoder's state under `tokens` (what it holds).
    fn save(&mut self, tokens: Vec<u32>) {
        save(&mut self.convos, &*self.dec, tokens);
    }
}

impl Engine<'_> {
    /// Tells the monitor the last generation's rates (when one has ended), the cache and the memory.
    fn show(&self, shown: &Shown, f: Option<&Finish>) {
        let Ok(mut m) = shown.lock() else { return };
        if let Some(f) = f {
            let rate = |n: usize, d: Duration| (n > 0 && !d.is_zero()).then(|| n as f64 / d.as_secs_f64());
            m.last_prefill_rate = rate(f.prompt_tokens - f.reused, f.prefill);
            m.last_decode_rate = rate(f.completion_tokens.saturating_sub(1), f.decode);
        }
        let (n, held) = self.convos.usage();
        m.cached = (n, held, self.convos.budget());
        m.memory = self.dec.memory();
    }
}

/// Saves `dec`'s state under `tokens` (what it holds) among `convos`.
fn save(convos: &mut Convos<State>, dec: &dyn Decoder, tokens: Vec<u32>) {
    if !convos.keeps() {
        return; // no copy of the state made for nothing
    }
    if let Ok(state) = dec.snapshot() {
        let bytes = state.host_bytes();
        convos.put(tokens, state, bytes);
        let (n, held) = convos.usage();
        metrics::gauge!("strata_cached_conversations").set(n as f64);
        metrics::gauge!("strata_cached_bytes").set(held as f64);
    }
}
