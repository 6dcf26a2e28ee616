//! Speculative decoding writes the plain run's tokens and leaves the plain run's state, for every number
//! of drafts, greedy and sampled, with drafts rejected at every window position, stops inside a window,
//! a full context and a resumed conversation (docs/SPECULATION.md). On the built-in model, whose MTP
//! layer is trained (its drafts are accepted often enough for windows to be kept whole and cut).

use std::path::Path;
use std::sync::{Arc, Mutex};

use strata_engine::draft_vocab::DraftVocab;
use strata_engine::generate::{
    complete_state, generate, generate_guided, Drafts, Event, GenerateConfig, Generated, Stop,
};
use strata_engine::grammar::Grammars;
use strata_engine::sampler::{Penalties, SamplerConfig};
use strata_engine::tokenizer::Tokenizer;
use strata_gguf::GgufSet;
use strata_model::decoder::{CpuDecoder, Decoder};
use strata_model::ops::sample::SampleParams;
use strata_model::{KvMode, Model, RopeScaling, State};

fn model() -> Model {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
    Model::open(path, RopeScaling::None).unwrap()
}

fn cfg(n: usize, spec: usize, sampler: SamplerConfig) -> GenerateConfig {
    GenerateConfig {
        n_predict: n,
        stops: vec![],
        ignore_eos: true,
        max_context: 4096,
        sampler,
        logits: false,
        mark: None,
        spec: Drafts::Fixed(spec),
        draft_vocab: None,
    }
}

fn prompt() -> Vec<u32> {
    (0..19).map(|i| (i * 131 + 40) % 4000).collect()
}

/// A decoder whose draft at window position `at` is always wrong (the next id), so the window is cut
/// there (or earlier, where the model disagrees anyway).
struct Rejecting<D> {
    inner: D,
    at: usize,
    /// Every draft made, as the inner decoder made it.
    seen: Vec<u32>,
    /// The draft vocabularies given, in turn (each draft is checked to be in the last one).
    vocabs: Vec<Vec<u32>>,
}

fn rejecting<D: Decoder>(inner: D, at: usize) -> Rejecting<D> {
    Rejecting { inner, at, seen: Vec::new(), vocabs: Vec::new() }
}

impl<D: Decoder> Decoder for Rejecting<D> {
    fn vocab(&self) -> usize {
        self.inner.vocab()
    }
    fn position(&self) -> usize {
        self.inner.position()
    }
    fn window(&self) -> usize {
        self.inner.window()
    }
    fn advance(&mut self, t: &[u32]) -> Result<(), String> {
        self.inner.advance(t)
    }
    fn forward_last(&mut self, t: &[u32]) -> Result<Vec<f32>, String> {
        self.inner.forward_last(t)
    }
    fn forward_greedy(&mut self, t: &[u32]) -> Result<u32, String> {
        self.inner.forward_greedy(t)
    }
    fn forward_sample(&mut self, t: &[u32], p: &SampleParams, next: &SampleParams) -> Result<u32, String> {
        self.inner.forward_sample(t, p, next)
    }
    fn snapshot(&self) -> Result<State, String> {
        self.inner.snapshot()
    }
    fn restore(&mut self, s: &State) -> Result<(), String> {
        self.inner.restore(s)
    }
    fn start_drafting(&mut self) -> bool {
        self.inner.start_drafting()
    }
    fn set_draft_vocab(&mut self, ids: &[u32]) -> Result<(), String> {
        self.vocabs.push(ids.to_vec());
        self.inner.set_draft_vocab(ids)
    }
    /// Said here so that `--spec auto` drafts on the CPU in the test below.
    fn windows_pay(&self) -> bool {
        true
    }
    fn draft(&mut self, x: u32, n: usize, picks: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        let mut d = self.inner.draft(x, n, picks)?;
        if let Some(v) = self.vocabs.last().filter(|v| !v.is_empty()) {
            assert!(d.iter().all(|t| v.binary_search(t).is_ok()), "drafts {d:?} outside the draft vocabulary");
        }
        self.seen.extend(&d);
        let vocab = self.vocab() as u32;
        if let Some(t) = d.get_mut(self.at) {
            *t = (*t + 1) % vocab;
        }
        Ok(d)
    }
    fn verify(&mut self, w: &[u32], p: &[Option<SampleParams>]) -> Result<Vec<u32>, String> {
        self.inner.verify(w, p)
    }
    fn verify_logits(&mut self, w: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        self.inner.verify_logits(w)
    }
    fn gives_window_logits(&self) -> bool {
        self.inner.gives_window_logits()
    }
    fn accept(&mut self, kept: usize) -> Result<(), String> {
        self.inner.accept(kept)
    }
}

/// The generation, and the state it leaves once the last token is through the model: the trunk's
/// (checkpoint bytes without the MTP cells, which a plain run does not keep).
fn run(dec: &mut dyn Decoder, m: &Model, prompt: &[u32], c: &GenerateConfig) -> (Generated, Vec<u8>) {
    let (g, mut state) = run_state(dec, prompt, c);
    state.mtp = None;
    (g, bytes(m, &state))
}

fn run_state(dec: &mut dyn Decoder, prompt: &[u32], c: &GenerateConfig) -> (Generated, State) {
    let g = generate(dec, prompt, c, |_| Ok(())).unwrap();
    complete_state(dec, &g, c.max_context).unwrap();
    (g, dec.snapshot().unwrap())
}

fn bytes(m: &Model, s: &State) -> Vec<u8> {
    let mut out = Vec::new();
    s.save(&m.config, &mut out).unwrap();
    out
}

fn fresh(m: &Model) -> CpuDecoder<'_> {
    CpuDecoder::new(m, m.new_state(KvMode::F16).unwrap())
}

#[test]
fn greedy_speculation_writes_the_plain_tokens_for_every_n() {
    let m = model();
    let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(40, 0, SamplerConfig::default()));
    assert_eq!(plain.spec.passes, 0);
    let (mut kept_whole, mut cut) = (false, false);
    for n in 1..=7 {
        let (g, state) = run(&mut fresh(&m), &m, &prompt(), &cfg(40, n, SamplerConfig::default()));
        assert_eq!(g.tokens, plain.tokens, "N = {n}");
        assert!(state == plain_state, "N = {n}: the state differs from the plain run's");
        assert!(g.spec.passes > 0 && g.spec.passes < 40, "N = {n}: {:?}", g.spec);
        kept_whole |= g.spec.at[n - 1].1 > 0;
        cut |= g.spec.accepted < g.spec.drafted;
    }
    assert!(kept_whole && cut, "the drafts were never all accepted, or never rejected: the test misses a path");
}

/// The MTP layer's cells are the conversation's, whatever the number of drafts: every N leaves the same
/// cells, and a checkpoint holds them and reads back whole.
#[test]
fn the_mtp_cells_are_the_same_whatever_n_and_saved_in_checkpoints() {
    let m = model();
    let states: Vec<State> =
        (1..=7).map(|n| run_state(&mut fresh(&m), &prompt(), &cfg(24, n, SamplerConfig::default())).1).collect();
    let first = bytes(&m, &states[0]);
    let cells = states[0].mtp.as_ref().expect("drafting keeps MTP cells");
    assert_eq!(cells.from + cells.cache.k.len() + 1, states[0].pos, "a cell for every position but the last");
    for (n, s) in states.iter().enumerate() {
        assert!(bytes(&m, s) == first, "N = {}: the MTP cells differ from N = 1's", n + 1);
    }
    let back = State::load(&m.config, first.as_slice()).unwrap();
    assert!(bytes(&m, &back) == first, "a checkpoint with MTP cells reads back whole");
    // A damaged count is refused, not run.
    let mut bad = first.clone();
    let at = bad.len() - (4 * m.config.hc * m.config.n_embd + 8) - 1;
    bad[at] ^= 0x40;
    assert!(State::load(&m.config, bad.as_slice()).is_err());
}

#[test]
fn sampled_speculation_writes_the_plain_tokens() {
    let m = model();
    for seed in [1, 7] {
        let s = SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, seed, ..Default::default() };
        let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(32, 0, s.clone()));
        for n in [1, 3, 7] {
            let (g, state) = run(&mut fresh(&m), &m, &prompt(), &cfg(32, n, s.clone()));
            assert_eq!(g.tokens, plain.tokens, "seed {seed}, N = {n}");
            assert!(state == plain_state, "seed {seed}, N = {n}: the state differs");
        }
    }
}

#[test]
fn a_rejection_at_every_window_position_changes_no_token() {
    let m = model();
    for sampler in [
        SamplerConfig::default(),
        SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 3, ..Default::default() },
    ] {
        let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(24, 0, sampler.clone()));
        for n in [1, 4, 7] {
            for at in 0..n {
                let mut dec = rejecting(fresh(&m), at);
                let (g, state) = run(&mut dec, &m, &prompt(), &cfg(24, n, sampler.clone()));
                assert_eq!(g.tokens, plain.tokens, "N = {n}, rejected at {at}");
                assert!(state == plain_state, "N = {n}, rejected at {at}: the state differs");
                assert!(g.spec.at[at].1 == 0, "a draft made wrong at {at} was accepted: {:?}", g.spec);
            }
        }
    }
}

#[test]
fn stops_inside_a_window_and_a_full_context_end_where_the_plain_run_does() {
    let m = model();
    let (plain, _) = run(&mut fresh(&m), &m, &prompt(), &cfg(40, 0, SamplerConfig::default()));
    // A stop token: the first occurrence of the 12th token ends both runs there.
    let stop = plain.tokens[11];
    let at = plain.tokens.iter().position(|&t| t == stop).unwrap();
    let c = |spec| GenerateConfig { stops: vec![stop], ignore_eos: false, ..cfg(40, spec, SamplerConfig::default()) };
    let (a, sa) = run(&mut fresh(&m), &m, &prompt(), &c(0));
    for n in [2, 5, 7] {
        let (b, sb) = run(&mut fresh(&m), &m, &prompt(), &c(n));
        assert_eq!((b.stop, &b.tokens), (Stop::StopToken(stop), &plain.tokens[..=at].to_vec()), "N = {n}");
        assert_eq!(b.tokens, a.tokens);
        assert!(sa == sb, "N = {n}: the state after a stop differs");
    }
    // The length limit and a full context.
    for (n_predict, max_context) in [(13, 4096), (40, prompt().len() + 9)] {
        let c = |spec| GenerateConfig { max_context, ..cfg(n_predict, spec, SamplerConfig::default()) };
        let (a, sa) = run(&mut fresh(&m), &m, &prompt(), &c(0));
        for n in [3, 7] {
            let (b, sb) = run(&mut fresh(&m), &m, &prompt(), &c(n));
            assert_eq!((b.stop, &b.tokens), (a.stop, &a.tokens), "N = {n}, limit {n_predict}, context {max_context}");
            assert!(sa == sb, "N = {n}: the state differs");
        }
    }
}

/// `auto` drafts where the decoder says windows pay, choosing N as it goes; the tokens are the plain
/// run's. Where windows do not pay (the CPU decoder) it decodes plainly.
#[test]
fn auto_drafts_where_windows_pay_and_writes_the_plain_tokens() {
    let m = model();
    let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(48, 0, SamplerConfig::default()));
    let auto = GenerateConfig { spec: Drafts::Auto, ..cfg(48, 0, SamplerConfig::default()) };
    let (g, state) = run(&mut rejecting(fresh(&m), usize::MAX), &m, &prompt(), &auto);
    assert_eq!(g.tokens, plain.tokens);
    assert!(state == plain_state, "the state differs");
    assert!(g.spec.passes > 0 && g.spec.drafted > 0, "{:?}", g.spec);
    let (g, _) = run(&mut fresh(&m), &m, &prompt(), &auto);
    assert_eq!((g.tokens, g.spec.passes), (plain.tokens, 0), "the CPU decoder's windows do not pay");
}

/// Every third token below 3,000: a draft vocabulary spread over the built-in model's 4,096.
fn spread_vocab() -> Vec<u32> {
    (0..1000).map(|i| 3 * i).collect()
}

/// A draft vocabulary given as a list: every draft is among its tokens (Rejecting checks each), and the
/// tokens and the state are the plain run's.
#[test]
fn a_draft_vocabulary_keeps_drafts_inside_it_and_changes_no_token() {
    let m = model();
    let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(32, 0, SamplerConfig::default()));
    let mut dec = rejecting(fresh(&m), usize::MAX);
    dec.set_draft_vocab(&spread_vocab()).unwrap();
    let (g, state) = run(&mut dec, &m, &prompt(), &cfg(32, 3, SamplerConfig::default()));
    assert_eq!(g.tokens, plain.tokens);
    assert!(state == plain_state, "the state differs");
    assert!(!dec.seen.is_empty() && dec.seen.iter().all(|&t| t % 3 == 0 && t < 3000), "{:?}", dec.seen);
    assert!(plain.tokens.iter().any(|&t| t % 3 != 0), "the text has no token outside the draft vocabulary");
    // Lists out of order, or past the vocabulary, are refused.
    assert!(dec.set_draft_vocab(&[5, 5]).unwrap_err().contains("ascend"));
    assert!(dec.set_draft_vocab(&[1, 4096]).unwrap_err().contains("outside the vocabulary"));
}

/// `--draft-vocab K` as generation runs it: lists made from the tokens seen (the prompt's, seen twice,
/// among them, which the first K ids do not hold), every draft inside the list the decoder holds, the
/// plain run's tokens and state, and drafts of tokens past the first K.
#[test]
fn a_ranked_draft_vocabulary_follows_the_tokens_seen_and_changes_no_token() {
    let m = model();
    let prompt = [prompt(), prompt()].concat();
    let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt, &cfg(96, 0, SamplerConfig::default()));
    let k = 256;
    let mut dec = rejecting(fresh(&m), usize::MAX);
    let vocab = Some(Arc::new(Mutex::new(DraftVocab::new(k, m.config.vocab))));
    let (g, state) =
        run(&mut dec, &m, &prompt, &GenerateConfig { draft_vocab: vocab, ..cfg(96, 3, SamplerConfig::default()) });
    assert_eq!(g.tokens, plain.tokens);
    assert!(state == plain_state, "the state differs");
    let first = &dec.vocabs[0];
    assert!(first.len() == k && prompt.iter().all(|t| first.contains(t)), "the prompt's tokens are in");
    assert!(prompt.iter().any(|&t| t as usize >= k), "the prompt has no token past the first K ids");
    assert!(dec.vocabs.len() >= 2, "the list is made again as the reply goes on: {}", dec.vocabs.len());
    assert!(dec.seen.iter().any(|&t| t as usize >= k), "no draft past the first K ids");
}

#[test]
fn a_resumed_conversation_speculates_to_the_plain_tokens() {
    let m = model();
    let (_, saved) = run(&mut fresh(&m), &m, &prompt(), &cfg(10, 0, SamplerConfig::default()));
    let saved = State::load(&m.config, saved.as_slice()).unwrap();
    let more: Vec<u32> = (0..6).map(|i| (i * 17 + 300) % 4000).collect();
    let go = |spec| {
        let mut dec = fresh(&m);
        dec.start_drafting();
        dec.restore(&saved).unwrap();
        run(&mut dec, &m, &more, &cfg(30, spec, SamplerConfig::default()))
    };
    let (a, sa) = go(0);
    let (b, sb) = go(4);
    assert_eq!(a.tokens, b.tokens);
    assert!(sa == sb, "the resumed state differs");
    assert!(b.spec.passes > 0);
}

// On the GPU (ignored without one; bench/gpu_tests.sh runs them on the device machine): the same runs,
// checked against the CPU's plain run, so the device's windows, rewinds and MTP cells are held to the
// CPU's bits as well as to its own plain decoding.
mod gpu {
    use super::*;
    use std::sync::OnceLock;
    use strata_cuda::backend::decoder::CudaDecoder;
    use strata_cuda::backend::forward::CudaForward;
    use strata_cuda::ops::variants::Variants;
    use strata_cuda::{Gpu, Settings};

    /// The device, its kernels compiled and variants chosen once for the tests.
    fn device() -> &'static (Arc<Gpu>, Variants) {
        static DEVICE: OnceLock<(Arc<Gpu>, Variants)> = OnceLock::new();
        DEVICE.get_or_init(|| {
            let gpu = Gpu::new(0, Settings::read(&|k| std::env::var(k).ok()).0).expect("a CUDA device");
            let plan = strata_cuda::select::start::start(&gpu).expect("kernels").plan;
            (gpu, plan.variants())
        })
    }

    fn on_gpu(m: &Model) -> CudaDecoder<'_> {
        let (gpu, variants) = device();
        let fwd = CudaForward::upload(gpu.clone(), m, variants.clone()).unwrap();
        let state = fwd.new_state(KvMode::F16, 4096).unwrap();
        CudaDecoder::new(fwd, state, 0)
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_speculation_writes_the_cpu_plain_tokens_and_state_for_every_n() {
        let m = model();
        let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(40, 0, SamplerConfig::default()));
        let (g, state) = run(&mut on_gpu(&m), &m, &prompt(), &cfg(40, 0, SamplerConfig::default()));
        assert_eq!(g.tokens, plain.tokens, "the GPU's plain run");
        assert!(state == plain_state, "the GPU's plain state differs from the CPU's");
        // The CPU's speculating run's MTP cells, against which the GPU's are checked.
        let (_, cpu_cells) = run_state(&mut fresh(&m), &prompt(), &cfg(40, 3, SamplerConfig::default()));
        let (mut kept_whole, mut cut) = (false, false);
        for n in 1..=7 {
            let (g, full) = run_state(&mut on_gpu(&m), &prompt(), &cfg(40, n, SamplerConfig::default()));
            assert_eq!(g.tokens, plain.tokens, "N = {n}");
            assert!(bytes(&m, &full) == bytes(&m, &cpu_cells), "N = {n}: the state or MTP cells differ from the CPU's");
            kept_whole |= g.spec.at[n - 1].1 > 0;
            cut |= g.spec.accepted < g.spec.drafted;
        }
        assert!(kept_whole && cut, "the drafts were never all accepted, or never rejected: the test misses a path");
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_sampled_speculation_and_rejections_write_the_cpu_plain_tokens() {
        let m = model();
        for sampler in [
            SamplerConfig::default(),
            SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, seed: 7, ..Default::default() },
        ] {
            let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(24, 0, sampler.clone()));
            for n in [1, 4, 7] {
                let (g, state) = run(&mut on_gpu(&m), &m, &prompt(), &cfg(24, n, sampler.clone()));
                assert_eq!(g.tokens, plain.tokens, "N = {n}");
                assert!(state == plain_state, "N = {n}: the state differs");
                for at in 0..n {
                    let mut dec = rejecting(on_gpu(&m), at);
                    let (g, state) = run(&mut dec, &m, &prompt(), &cfg(24, n, sampler.clone()));
                    assert_eq!(g.tokens, plain.tokens, "N = {n}, rejected at {at}");
                    assert!(state == plain_state, "N = {n}, rejected at {at}: the state differs");
                    assert!(g.spec.at[at].1 == 0, "a draft made wrong at {at} was accepted: {:?}", g.spec);
                }
            }
        }
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_stops_contexts_draft_vocabularies_and_resumed_conversations_match_the_cpu() {
        let m = model();
        // The length limit and a full context.
        for (n_predict, max_context) in [(13, 4096), (40, prompt().len() + 9)] {
            let c = |spec| GenerateConfig { max_context, ..cfg(n_predict, spec, SamplerConfig::default()) };
            let (a, sa) = run(&mut fresh(&m), &m, &prompt(), &c(0));
            for n in [3, 7] {
                let (b, sb) = run(&mut on_gpu(&m), &m, &prompt(), &c(n));
                assert_eq!(
                    (b.stop, &b.tokens),
                    (a.stop, &a.tokens),
                    "N = {n}, limit {n_predict}, context {max_context}"
                );
                assert!(sa == sb, "N = {n}: the state differs");
            }
        }
        // A draft vocabulary.
        let (plain, plain_state) = run(&mut fresh(&m), &m, &prompt(), &cfg(32, 0, SamplerConfig::default()));
        let mut dec = rejecting(on_gpu(&m), usize::MAX);
        dec.set_draft_vocab(&spread_vocab()).unwrap();
        let (g, state) = run(&mut dec, &m, &prompt(), &cfg(32, 3, SamplerConfig::default()));
        assert_eq!(g.tokens, plain.tokens);
        assert!(state == plain_state, "the state differs");
        assert!(!dec.seen.is_empty() && dec.seen.iter().all(|&t| t % 3 == 0 && t < 3000), "{:?}", dec.seen);
        // The same drafts as the CPU's over the same list.
        let mut cpu = rejecting(fresh(&m), usize::MAX);
        cpu.set_draft_vocab(&spread_vocab()).unwrap();
        run(&mut cpu, &m, &prompt(), &cfg(32, 3, SamplerConfig::default()));
        assert_eq!(dec.seen, cpu.seen, "the drafts differ from the CPU's");
        // A conversation saved with MTP cells on the CPU, resumed on the GPU, and the other way round.
        let (_, saved) = run_state(&mut fresh(&m), &prompt(), &cfg(10, 2, SamplerConfig::default()));
        assert!(saved.mtp.is_some());
        let more: Vec<u32> = (0..6).map(|i| (i * 17 + 300) % 4000).collect();
        let (a, sa) = {
            let mut dec = fresh(&m);
            dec.restore(&saved).unwrap();
            run_state(&mut dec, &more, &cfg(30, 4, SamplerConfig::default()))
        };
        let mut dec = on_gpu(&m);
        dec.restore(&saved).unwrap();
        let (b, sb) = run_state(&mut dec, &more, &cfg(30, 4, SamplerConfig::default()));
        assert_eq!(a.tokens, b.tokens);
        assert!(bytes(&m, &sa) == bytes(&m, &sb), "the resumed state or its MTP cells differ");
        assert!(b.spec.passes > 0);
    }
}

/// Windows chosen on the host from each position's logits (a grammar's, or log-probabilities'): the
/// plain run's tokens, logits and state, for every N, greedy and sampled, under a JSON schema and with
/// none, and with a draft made wrong at each window position (the grammar is never given a refused one).
#[test]
fn windows_chosen_from_logits_under_a_grammar_write_the_plain_run() {
    let m = model();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
    let tok = std::sync::Arc::new(Tokenizer::from_gguf(&GgufSet::open(path).unwrap()).unwrap());
    let stops: Vec<u32> = [tok.eos, tok.im_end].into_iter().flatten().collect();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"w": {"type": "string", "maxLength": 30},
        "n": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}, "required": ["w", "n"]});
    // Tokens, every logits row's bits, the trunk's state after, and the passes made.
    let go = |dec: &mut dyn Decoder, c: &GenerateConfig, guided: bool| {
        let mut g = guided.then(|| grammars.json_schema(&schema).unwrap());
        let mut rows: Vec<Vec<u32>> = Vec::new();
        let out = generate_guided(dec, &prompt(), c, g.as_mut(), |e| {
            if let Event::Logits(l) = e {
                rows.push(l.iter().map(|x| x.to_bits()).collect());
            }
            Ok(())
        })
        .unwrap();
        complete_state(dec, &out, c.max_context).unwrap();
        let mut state = dec.snapshot().unwrap();
        state.mtp = None;
        (out.tokens, rows, bytes(&m, &state), out.spec.passes)
    };
    let mut cut = false;
    // Sampled with penalties too (they take the logits to the host as a grammar does).
    let penalties = Penalties { bias: vec![(10, 1.5), (11, -3.0)], presence: 0.4, frequency: 0.2 };
    let sampled = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 5, penalties };
    for sampler in [SamplerConfig::default(), sampled] {
        for guided in [true, false] {
            let mut c = cfg(32, 0, sampler.clone());
            (c.logits, c.stops, c.ignore_eos) = (true, stops.clone(), false);
            let plain = go(&mut fresh(&m), &c, guided);
            assert_eq!(plain.3, 0);
            if guided {
                let text: Vec<u32> = plain.0.iter().copied().filter(|t| !stops.contains(t)).collect();
                let v: serde_json::Value = serde_json::from_str(&tok.decode(&text).unwrap()).unwrap();
                assert!(v["w"].is_string(), "{v}");
            }
            for n in [2, 5] {
                c.spec = Drafts::Fixed(n);
                let spec = go(&mut fresh(&m), &c, guided);
                assert!(spec.3 > 0, "N = {n}: no window ran");
                assert_eq!(spec.0, plain.0, "N = {n}, guided {guided}");
                assert!(spec.1 == plain.1, "N = {n}, guided {guided}: the logits differ");
                assert!(spec.2 == plain.2, "N = {n}, guided {guided}: the state differs");
                for at in 0..n {
                    let mut dec = rejecting(fresh(&m), at);
                    let wrong = go(&mut dec, &c, guided);
                    assert_eq!(wrong.0, plain.0, "N = {n}, wrong at {at}, guided {guided}");
                    assert!(wrong.2 == plain.2, "N = {n}, wrong at {at}: the state differs");
                    cut |= wrong.3 > spec.3;
                }
            }
        }
    }
    assert!(cut, "a wrong draft never cost a pass: the test misses the refused path");
}
