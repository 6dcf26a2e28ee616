//! Host side of kernels/misses.cu: a pass whose routed experts are not all on the card
//! (docs/PLACEMENT.md, "On the GPU"). A mailbox in memory both sides see (mapped pinned memory beside a
//! card; any memory in the tests), the host's loop that computes the slots the card does not hold
//! (`Mailbox::serve_one`, `MissServer`), and the card's launches that ask and take (`MissBox`).
//!
//! One request at a time, since the card runs its layers in order and waits for each answer:
//! 1. the card writes the layer, the window's T, each slot's expert (marked [`HELD`] for a slot it
//!    computes itself) and the MoE input, then sets `asked` to 1 (`miss_ask`);
//! 2. the host sees `asked`, clears it, counts every slot's routing (for the cache's ranking), computes
//!    the slots not held from the experts' bytes (`layers/experts.rs`, the same bits as the card's
//!    kernels), writes their outputs, sets `done`;
//! 3. the card sees `done` and takes the outputs into the MoE combination (`miss_take`); the next
//!    request clears `done`.
//!
//! Flags are 1 or 0, never counters, so a recorded graph asks the same way at every replay.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::LaunchConfig;
use strata_model::layers::experts::slot_outputs;
use strata_model::team::{Fork, Pool, Team, HOT};
use strata_model::weights::MoeWeights;

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The longest time from answering one request to seeing the next that counts as within a pass.
const GAP_MAX: Duration = Duration::from_millis(2);
use crate::runtime::mapped::MappedWords;

/// The most tokens a request holds (a verify or prompt window).
pub const MAX_T: usize = 8;
/// The most slots a token holds (the GPU router's bound, ops/moe.rs).
pub const MAX_K: usize = 64;
/// The most stream slots a block keeps (MB_MAX_STREAMS in misses.cu).
pub const MAX_STREAMS: usize = 64;

const ASKED: usize = 0;
const DONE: usize = 1;
const LAYER: usize = 2;
const TOKENS: usize = 3;
const IDS: usize = 4;
/// The mark on a slot's expert id that the card computes the slot itself (MB_HELD in misses.cu).
pub const HELD: u32 = 0x8000_0000;

/// One slot of a request: its expert, and whether the host computes it (else the card holds it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotAsk {
    pub expert: usize,
    pub host: bool,
}

/// What the host is told of each request's routing: the block, then one token's k experts (held or
/// not). The expert cache's counts (docs/PLACEMENT.md) come from it.
pub type Routed = Arc<dyn Fn(usize, &[usize]) + Send + Sync>;

/// The mailbox's words: the flags, the layer and T, then `MAX_T·k` slot ids, `MAX_T·n` input values and
/// `MAX_T·k·n` output values (f32 bits).
pub struct Mailbox<'m> {
    words: &'m [AtomicU32],
    k: usize,
    n: usize,
}

/// Why a request was not answered.
#[derive(Debug, PartialEq)]
pub enum MissError {
    /// No request came in the time allowed (the card stopped, or never asked).
    Silent(Duration),
    /// A request's numbers that no pass could have written.
    Bad(String),
}

impl std::fmt::Display for MissError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            MissError::Silent(d) => write!(f, "the card asked for no host experts in {:.1} s", d.as_secs_f64()),
            MissError::Bad(what) => write!(f, "a host-experts request with {what}"),
        }
    }
}

impl<'m> Mailbox<'m> {
    /// Words a mailbox of k slots a token and inputs of n values takes.
    pub fn words(k: usize, n: usize) -> usize {
        IDS + MAX_T * k + MAX_T * n + MAX_T * k * n
    }

    /// The mailbox over `words` (at least [`Mailbox::words`] of them).
    pub fn new(words: &'m [AtomicU32], k: usize, n: usize) -> Mailbox<'m> {
        assert!(k <= MAX_K && words.len() >= Self::words(k, n), "a mailbox too small for k = {k}, n = {n}");
        Mailbox { words, k, n }
    }

    fn x_at(&self) -> usize {
        IDS + MAX_T * self.k
    }

    fn out_at(&self) -> usize {
        self.x_at() + MAX_T * self.n
    }

    /// The card's side of step 1 (the tests play the card with it): a request for `layer`'s slots
    /// `ids` (T·k of them) over the inputs `xs`.
    pub fn ask(&self, layer: usize, ids: &[SlotAsk], xs: &[&[f32]]) {
        let w = self.words;
        w[LAYER].store(layer as u32, Ordering::Relaxed);
        w[TOKENS].store(xs.len() as u32, Ordering::Relaxed);
        for (i, id) in ids.iter().enumerate() {
            w[IDS + i].store(id.expert as u32 | if id.host { 0 } else { HELD }, Ordering::Relaxed);
        }
        for (t, x) in xs.iter().enumerate() {
            for (i, v) in x.iter().enumerate() {
                w[self.x_at() + t * self.n + i].store(v.to_bits(), Ordering::Relaxed);
            }
        }
        w[ASKED].store(1, Ordering::Release);
    }

    /// The card's side of step 3: whether the host has answered.
    pub fn answered(&self) -> bool {
        self.words[DONE].load(Ordering::Acquire) == 1
    }

    /// Slot `slot`'s output as the host wrote it.
    pub fn output(&self, slot: usize) -> Vec<f32> {
        let at = self.out_at() + slot * self.n;
        self.words[at..at + self.n].iter().map(|v| f32::from_bits(v.load(Ordering::Relaxed))).collect()
    }

    /// The card's clearing of `done` once it has read the outputs.
    pub fn take(&self) {
        self.words[DONE].store(0, Ordering::Release);
    }

    /// Waits (spinning, then yielding) until the card asks, up to `patience`.
    fn wait_asked(&self, patience: Duration) -> Result<(), MissError> {
        let start = Instant::now();
        let mut spins = 0u32;
        while !self.asked() {
            if spins < 4096 {
                std::hint::spin_loop();
                spins += 1;
            } else if start.elapsed() > patience {
                return Err(MissError::Silent(start.elapsed()));
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// The tokens of the request in the mailbox (read once it has asked).
    fn tokens(&self) -> u32 {
        self.words[TOKENS].load(Ordering::Relaxed)
    }

    /// Whether the card has asked.
    fn asked(&self) -> bool {
        self.words[ASKED].load(Ordering::Acquire) == 1
    }

    /// The host's side of step 2: one request answered from `layers`' experts (width f), waiting for it
    /// up to `patience`. Returns the layer it was for. A request no pass could write is answered with no
    /// outputs (so the card does not wait for ever) and refused.
    pub fn serve_one(&self, layers: &[&MoeWeights], f: usize, patience: Duration) -> Result<usize, MissError> {
        self.wait_asked(patience)?;
        self.serve_asked(layers, f, None, &Pool, |_, _| {})
    }

    /// A request that has come answered; `before` sees the outcome, and the time its parts took
    /// ([`Parts`]), before the card is told (so what it keeps is there by the time the card goes on).
    fn serve_asked(
        &self,
        layers: &[&MoeWeights],
        f: usize,
        routed: Option<&Routed>,
        fork: &dyn Fork,
        before: impl FnOnce(&Result<usize, MissError>, &Parts),
    ) -> Result<usize, MissError> {
        let w = self.words;
        w[ASKED].store(0, Ordering::Relaxed);
        let mut parts = Parts::default();
        // Whatever happens in the answer, the card is answered: a panic is refused like a bad request.
        let answer =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.answer(layers, f, routed, fork, &mut parts)))
                .unwrap_or_else(|_| Err(MissError::Bad("a computation that panicked".into())));
        before(&answer, &parts);
        w[DONE].store(1, Ordering::Release);
        answer
    }

    /// The request in the mailbox: its routing told to `routed`, then the slots the card does not hold
    /// computed and written.
    fn answer(
        &self,
        layers: &[&MoeWeights],
        f: usize,
        routed: Option<&Routed>,
        fork: &dyn Fork,
        parts: &mut Parts,
    ) -> Result<usize, MissError> {
        let start = Instant::now();
        let w = self.words;
        let (layer, t) = (w[LAYER].load(Ordering::Relaxed) as usize, w[TOKENS].load(Ordering::Relaxed) as usize);
        let moe = layers.get(layer).ok_or_else(|| MissError::Bad(format!("layer {layer} of {}", layers.len())))?;
        if !(1..=MAX_T).contains(&t) {
            return Err(MissError::Bad(format!("{t} tokens (1..={MAX_T})")));
        }
        let experts = moe.router.rows;
        let asked = (0..t * self.k)
            .map(|i| {
                let word = w[IDS + i].load(Ordering::Relaxed);
                match (word & !HELD) as usize {
                    e if e < experts => Ok(SlotAsk { expert: e, host: word & HELD == 0 }),
                    e => Err(MissError::Bad(format!("expert {e} of {experts}"))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(routed) = routed {
            let experts: Vec<usize> = asked.iter().map(|s| s.expert).collect();
            experts.chunks(self.k).for_each(|token| routed(layer, token));
        }
        let ids: Vec<Option<usize>> = asked.iter().map(|s| s.host.then_some(s.expert)).collect();
        let xs: Vec<Vec<f32>> = (0..t)
            .map(|i| {
                let at = self.x_at() + i * self.n;
                w[at..at + self.n].iter().map(|v| f32::from_bits(v.load(Ordering::Relaxed))).collect()
            })
            .collect();
        let rows: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let read = Instant::now();
        let outputs = slot_outputs(moe, &rows, &ids, (self.k, f), fork);
        let computed = Instant::now();
        for (slot, y) in outputs.into_iter().enumerate() {
            let Some(y) = y else { continue };
            let at = self.out_at() + slot * self.n;
            for (o, v) in w[at..at + self.n].iter().zip(y) {
                o.store(v.to_bits(), Ordering::Relaxed);
            }
        }
        *parts = Parts { read: read - start, computed: computed - read, written: computed.elapsed() };
        Ok(layer)
    }
}

/// Where a request's time went on the host: its slot ids, routing and inputs read from the mailbox; its
/// experts computed; their outputs written back.
#[derive(Default, Clone, Copy)]
pub struct Parts {
    pub read: Duration,
    pub computed: Duration,
    pub written: Duration,
}

/// A thread answering the card's requests for as long as it lives, from its own handles on the experts'
/// bytes (the file's mapping; clones of the layers' weights share it), with a team of threads of its own
/// for the products (spinning while requests come). Between passes it sleeps a millisecond at a time,
/// or until [`MissServer::wake`]. The first request it could not answer is
/// kept for [`MissServer::error`] (the card still gets an answer, so it never waits for ever).
pub struct MissServer {
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    /// Requests answered and the ns from seeing each to answering it: one token's (decode), then
    /// windows' (a prompt's, a verify pass's); then one-token requests seen within 2 ms of answering a
    /// one-token one, and the ns between the two (the card's work between its take and its next ask,
    /// if the host sees each ask at once).
    answered: Arc<[AtomicU64; 6]>,
    /// The one-token requests' [`Parts`] in all (ns).
    parts: Arc<[AtomicU64; 3]>,
    /// The thread that runs the loop (woken by [`MissServer::wake`]).
    worker: Option<std::thread::Thread>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl MissServer {
    /// Serves the mailbox in `words` (k slots a token, inputs of n) from `layers` (expert width f),
    /// telling `routed` each request's routing.
    pub fn spawn<W>(
        words: Arc<W>,
        (k, n, f): (usize, usize, usize),
        layers: Vec<MoeWeights>,
        routed: Option<Routed>,
    ) -> MissServer
    where
        W: AsRef<[AtomicU32]> + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let answered = Arc::new([0; 6].map(AtomicU64::new));
        let parts = Arc::new([0; 3].map(AtomicU64::new));
        let (stop2, error2, answered2, parts2) = (stop.clone(), error.clone(), answered.clone(), parts.clone());
        // The products run on a team of threads that spin while requests come (strata_model::team): a
        // pool that sleeps between them would pay its threads' wake-ups twice a request. As many
        // threads as the global pool, this one among them, but never the whole machine: the decoding
        // thread waits on the card and the cache's copier fills its staging while a request is
        // answered, and a worker they push off its core holds up the whole request (its part waits a
        // scheduler tick: milliseconds, where a request takes hundreds of microseconds).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = rayon::current_num_threads().min(cores.saturating_sub(2)).max(1);
        let (told, worker) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("host-experts".into())
            .spawn(move || {
                let team = Team::new(threads, "host-experts");
                let _ = told.send(std::thread::current());
                let mb = Mailbox::new(words.as_ref().as_ref(), k, n);
                let refs: Vec<&MoeWeights> = layers.iter().collect();
                // Spinning for HOT after a request (as its team does): a pass asks once a MoE layer, a
                // few hundred µs apart, and a sleeping thread would add its wake-up to each.
                let mut last = Instant::now() - HOT;
                // When the last one-token request was answered (None after a window's).
                let mut last_one: Option<Instant> = None;
                while !stop2.load(Ordering::Acquire) {
                    if !mb.asked() {
                        if last.elapsed() < HOT {
                            std::hint::spin_loop();
                        } else {
                            std::thread::park_timeout(Duration::from_millis(1));
                        }
                        continue;
                    }
                    let (seen, kind) = (Instant::now(), if mb.tokens() > 1 { 2 } else { 0 });
                    if let Some(gap) = last_one.map(|d| seen - d).filter(|g| kind == 0 && *g < GAP_MAX) {
                        answered2[4].fetch_add(1, Ordering::Relaxed);
                        answered2[5].fetch_add(gap.as_nanos() as u64, Ordering::Relaxed);
                    }
                    let _ = mb.serve_asked(&refs, f, routed.as_ref(), &team, |answer, p| {
                        if let Err(e) = answer {
                            error2.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e.to_string());
                        }
                        if kind == 0 {
                            for (a, d) in parts2.iter().zip([p.read, p.computed, p.written]) {
                                a.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
                            }
                        }
                        answered2[kind].fetch_add(1, Ordering::Relaxed);
                        answered2[kind + 1].fetch_add(seen.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    });
                    last = Instant::now();
                    last_one = (kind == 0).then_some(last);
                }
            })
            .expect("spawning the host-experts thread");
        let worker = worker.recv().ok();
        MissServer { stop, error, answered, parts, worker, handle: Some(handle) }
    }

    /// Wakes the thread for a pass just launched.
    pub fn wake(&self) {
        if let Some(w) = &self.worker {
            w.unpark();
        }
    }

    /// Requests answered so far and the time from seeing each to answering it, in all: those of one
    /// token, then those of windows.
    pub fn answered(&self) -> [(u64, Duration); 3] {
        let a = |i: usize| self.answered[i].load(Ordering::Relaxed);
        [0, 2, 4].map(|i| (a(i), Duration::from_nanos(a(i + 1))))
    }

    /// The one-token requests' [`Parts`] in all.
    pub fn one_token_parts(&self) -> Parts {
        let [r, c, w] = [0, 1, 2].map(|i| Duration::from_nanos(self.parts[i].load(Ordering::Relaxed)));
        Parts { read: r, computed: c, written: w }
    }

    /// The first request it could not answer, in words.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for MissServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A block's routing counts on the card and the flag saying whether its last request skipped the host
/// (`STRATA_ASK_MISSES_ONLY`).
pub type Counted<'a> = (&'a Buf<u32>, &'a Buf<i32>);

/// A request's stream slots (docs/PLACEMENT.md): how many, the experts the card can read from the
/// host's locked pages (ids lo..hi), and the table miss_ask writes their experts to.
#[derive(Clone, Copy)]
pub struct StreamAsk<'a> {
    pub slots: usize,
    pub lo: usize,
    pub hi: usize,
    pub of: &'a Buf<i32>,
    /// The guess slots' experts (after the stream slots; ops/moe/guess.rs), where the block has any.
    pub guessed: Option<&'a Buf<i32>>,
}

/// The mailbox on the card's side: mapped words for k slots a token and inputs of n values.
pub struct MissBox {
    words: Arc<MappedWords>,
    k: usize,
    n: usize,
}

impl MissBox {
    pub fn new(gpu: &Gpu, k: usize, n: usize) -> Result<MissBox, CudaError> {
        if k == 0 || k > MAX_K {
            return Err(CudaError::Shape(format!("host experts: {k} slots a token (1..={MAX_K})")));
        }
        Ok(MissBox { words: Arc::new(MappedWords::new(&gpu.ctx, Mailbox::words(k, n))?), k, n })
    }

    /// A thread answering this mailbox's requests from `layers` (expert width f) while it lives,
    /// telling `routed` each request's routing.
    pub fn serve(&self, layers: Vec<MoeWeights>, f: usize, routed: Option<Routed>) -> MissServer {
        MissServer::spawn(self.words.clone(), (self.k, self.n, f), layers, routed)
    }

    /// The host's view, for `Mailbox::serve_one`.
    pub fn mailbox(&self) -> Mailbox<'_> {
        Mailbox::new(self.words.words(), self.k, self.n)
    }

    fn check(&self, t: usize, bufs: &[(&str, usize, usize)]) -> Result<(), CudaError> {
        if !(1..=MAX_T).contains(&t) {
            return Err(CudaError::Shape(format!("host experts: a window of {t} tokens (1..={MAX_T})")));
        }
        for &(what, len, need) in bufs {
            if len < need {
                return Err(CudaError::Shape(format!("host experts: {what} of {len} values, {need} needed")));
            }
        }
        Ok(())
    }

    /// The request for `layer`: the window's T·k chosen experts `ids`, the layer's residency table
    /// `slot_of` (a cache slot or −1 for each expert) and the MoE input x (T rows of n). Writes each
    /// slot's cache slot to `cache_ids` for the card's gathers (0 for a slot the host computes: `take`
    /// overwrites its output), and each slot's expert to the mailbox, marked [`HELD`] where the card
    /// computes it. With stream slots, the first `streams.slots` distinct experts not held (of ids
    /// `streams.lo..streams.hi`) go to cache slots `held..` instead, their experts written to
    /// `streams.of` for the `miss_stream` launch that follows (ops/moe.rs).
    ///
    /// `counted` (`STRATA_ASK_MISSES_ONLY`): each slot's expert counted in its table on the card, and the
    /// host asked only where a slot is left to it (the flag says whether it was not, for `take`).
    pub fn ask(
        &self,
        gpu: &Gpu,
        (layer, t, held): (usize, usize, usize),
        (ids, slot_of, x): (&Buf<i32>, &Buf<i32>, &Buf<f32>),
        (cache_ids, counted): (&Buf<i32>, Option<Counted>),
        streams: Option<StreamAsk>,
    ) -> Result<(), CudaError> {
        let (k, n) = (self.k, self.n);
        self.check(t, &[("ids", ids.len(), t * k), ("inputs", x.len(), t * n), ("cache ids", cache_ids.len(), t * k)])?;
        if streams.is_some_and(|s| s.slots > MAX_STREAMS || s.of.len() < s.slots) {
            return Err(CudaError::Shape(format!("host experts: stream slots past {MAX_STREAMS} or their table")));
        }
        let name = if counted.is_some() { "miss_ask_counted" } else { "miss_ask" };
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, name)?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let i = |v: usize| Arg::I32(v as i32);
        let ptrs = [ids.ptr(gpu), slot_of.ptr(gpu), x.ptr(gpu), cache_ids.ptr(gpu)].map(Arg::Ptr);
        let (slots, lo, hi, of) = match streams {
            Some(s) => (s.slots, s.lo, s.hi, s.of.ptr(gpu)),
            None => (0, 0, 0, cache_ids.ptr(gpu)), // no stream slot: the table is never touched
        };
        // No guess slot: the table is never read.
        let guessed = streams.and_then(|s| s.guessed).map_or((0, 0), |g| (g.ptr(gpu), g.len()));
        let stream_args = [i(held), i(slots), i(lo), i(hi), Arg::Ptr(of), Arg::Ptr(guessed.0), i(guessed.1)];
        let counted_args = counted.map_or(Vec::new(), |(c, skip)| vec![Arg::Ptr(c.ptr(gpu)), Arg::Ptr(skip.ptr(gpu))]);
        let args =
            [&[Arg::Ptr(self.words.device_ptr()), i(layer), i(t), i(k), i(n)][..], &ptrs, &stream_args, &counted_args]
                .concat();
        launch(gpu, &f, name, cfg, &args)
    }

    /// A placed prompt window's tile of `t` ≤ 8 tokens (ops/moe/window.rs): the host asked for the slots
    /// the window's plan left to it (`host_slot`, 1 for those), the others marked [`HELD`]; `skip` says
    /// whether none was, for [`MissBox::take`]. Its experts `ids` (t·k), its inputs x (t rows of n).
    pub fn ask_window(
        &self,
        gpu: &Gpu,
        (layer, t): (usize, usize),
        (ids, host_slot, x): (&Buf<i32>, &Buf<i32>, &Buf<f32>),
        skip: &Buf<i32>,
    ) -> Result<(), CudaError> {
        let (k, n) = (self.k, self.n);
        self.check(
            t,
            &[("ids", ids.len(), t * k), ("host slots", host_slot.len(), t * k), ("inputs", x.len(), t * n)],
        )?;
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_ask_window")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let i = |v: usize| Arg::I32(v as i32);
        let ptrs = [ids.ptr(gpu), host_slot.ptr(gpu), x.ptr(gpu), skip.ptr(gpu)].map(Arg::Ptr);
        let args = [&[Arg::Ptr(self.words.device_ptr()), i(layer), i(t), i(k), i(n)][..], &ptrs].concat();
        launch(gpu, &f, "miss_ask_window", cfg, &args)
    }

    /// Once the host has answered, the slots it computed (those the mailbox does not mark [`HELD`]:
    /// neither held nor streamed) copied into eo (T·k rows of n), over what the card's gathers wrote
    /// there; the card's own rows are left as they are. Runs after those gathers.
    /// `skip`: the flag a counted ask left (nothing to wait for where it did not ask).
    pub fn take(&self, gpu: &Gpu, t: usize, eo: &Buf<f32>, skip: Option<&Buf<i32>>) -> Result<(), CudaError> {
        let (k, n) = (self.k, self.n);
        self.check(t, &[("outputs", eo.len(), t * k * n)])?;
        let name = if skip.is_some() { "miss_take_counted" } else { "miss_take" };
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, name)?;
        let cfg = LaunchConfig { grid_dim: ((t * k) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let i = |v: usize| Arg::I32(v as i32);
        let mut args = vec![Arg::Ptr(self.words.device_ptr()), i(t), i(k), i(n), Arg::Ptr(eo.ptr(gpu))];
        args.extend(skip.map(|s| Arg::Ptr(s.ptr(gpu))));
        launch(gpu, &f, name, cfg, &args)
    }
}
