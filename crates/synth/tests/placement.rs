//! Where a routed expert is computed changes no bit (docs/PLACEMENT.md). A layer's slots are computed
//! partly by the kernels for experts off the device (`layers/experts.rs`: a batch of experts from their
//! bytes, cut into tasks of a few rows) and partly by the CPU back-end's own products (each matrix's rows
//! over threads). They give the logits of the CPU back-end alone, for every expert type, in the trunk
//! and in the MTP layer. And the skewed router `strata synth --router zipf` writes is skewed on the
//! model, as its law says.

use std::path::Path;

use strata_gguf::GgmlType;
use strata_model::backend::{forward_window, mtp_step, MoeId};
use strata_model::cpu::Cpu;
use strata_model::placement::ExpertCache;
use strata_model::routing::{RoutingProfile, RoutingSink};
use strata_model::{KvMode, Model, RopeScaling};
use strata_synth::{Options, Preset, Router};

fn synthetic(preset: Preset, experts: GgmlType, router: Router) -> Model {
    // The model maps the file: it stays readable after the folder goes.
    let dir = strata_scratch::Scratch::new("placement");
    let path = dir.join("m.gguf");
    strata_synth::write(&path, &Options { preset, experts, seed: 3, router }, &|_, _| {}).unwrap();
    Model::open(&path, RopeScaling::None).unwrap()
}

type Misses<'a> = &'a (dyn Fn(MoeId, usize) -> bool + Sync);

/// Every logit of a prompt in two windows, then of one MTP step from its last position, as bytes.
fn logits(model: &Model, misses: Option<Misses>, tokens: &[u32]) -> Vec<u8> {
    let cpu = Cpu { misses, ..Cpu::new(model) };
    let c = &model.config;
    let mut st = model.new_state(KvMode::F16).unwrap();
    let mut out = Vec::new();
    let mut last_r = Vec::new();
    for (first, n) in [(0, 7), (7, tokens.len() - 8)] {
        let Ok((l, r)) = forward_window(&cpu, c, &mut st, &tokens[first..first + n], first);
        out.extend(l.into_iter().flatten());
        last_r = r;
    }
    if model.weights.mtp.is_some() {
        let mut cache = model.mtp_cache(KvMode::F16);
        let pos = tokens.len() - 2;
        let r = vec![last_r.pop().unwrap()];
        let Ok((l, _)) = mtp_step(&cpu, &mut cache, &r, &tokens[tokens.len() - 1..], pos);
        out.extend(l.into_iter().flatten());
    }
    out.into_iter().flat_map(f32::to_le_bytes).collect()
}

fn placements_change_no_bit_of(name: &str, model: &Model) {
    let vocab = model.config.vocab as u32;
    let tokens: Vec<u32> = (0..16).map(|i| (i * 7919 + 13) % (vocab - 3) + 3).collect();
    let all = |_: MoeId, _: usize| true;
    let even = |_: MoeId, e: usize| e.is_multiple_of(2);
    let by_layer = |id: MoeId, e: usize| match id {
        MoeId::Layer(l) => (l + e).is_multiple_of(3),
        MoeId::Mtp => e % 3 == 1,
    };
    let placements: [(&str, Misses); 3] = [("every expert", &all), ("even ids", &even), ("by layer", &by_layer)];
    // Four threads: the back-end splits rows over them, the miss kernels experts.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    pool.install(|| {
        let base = logits(model, None, &tokens);
        for (what, m) in placements {
            assert!(logits(model, Some(m), &tokens) == base, "{name}: misses at {what} changed the logits");
        }
    });
}

#[test]
fn placements_change_no_bit_for_every_synthetic_expert_type() {
    for ty in [GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ3_S] {
        placements_change_no_bit_of(&format!("tiny {ty}"), &synthetic(Preset::tiny(), ty, Router::Uniform));
    }
}

#[test]
fn placements_change_no_bit_on_converter_written_and_trained_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Q8_0 experts (the converter's), and the built-in trained model's IQ4_NL ones.
    for file in ["fixtures/real/qwen4exp-real-q8_0.gguf", "models/fortunes.gguf"] {
        let model = Model::open(root.join(file), RopeScaling::None).unwrap();
        placements_change_no_bit_of(file, &model);
    }
}

/// The share of the routings the top fifth of each layer's experts take, over `tokens` tokens.
fn top_fifth_share(model: &Model, tokens: usize) -> f64 {
    let c = &model.config;
    let profile = RoutingProfile::new(c.n_layer, c.n_expert);
    let cpu = Cpu { profile: Some(&profile), ..Cpu::new(model) };
    let mut st = model.new_state(KvMode::F16).unwrap();
    let ids: Vec<u32> = (0..tokens as u32).map(|i| i.wrapping_mul(2_654_435_761) % (c.vocab as u32 - 3) + 3).collect();
    for (i, chunk) in ids.chunks(8).enumerate() {
        let Ok(_) = forward_window(&cpu, c, &mut st, chunk, i * 8);
    }
    profile.top_share(c.n_expert / 5)
}

#[test]
fn the_zipf_router_is_skewed_on_the_model() {
    // Tiny's widths with 64 experts, 6 a token (the small preset's), so a fifth is 12 experts.
    let preset = Preset { n_expert: 64, n_expert_used: 6, ..Preset::tiny() };
    let law = strata_synth::router::target(64, 6, 1.0)[..12].iter().sum::<f64>() / 6.0;
    let uniform = top_fifth_share(&synthetic(preset.clone(), GgmlType::Q2_0, Router::Uniform), 256);
    let zipf = top_fifth_share(&synthetic(preset, GgmlType::Q2_0, Router::Zipf(1.0)), 256);
    eprintln!("top fifth's share of the routings: uniform {uniform:.3}, zipf {zipf:.3} (the law: {law:.3})");
    assert!(uniform < 0.35, "the uniform router's top fifth took {uniform:.3}");
    assert!((zipf - law).abs() < 0.08, "the zipf router's top fifth took {zipf:.3}, its law {law:.3}");
}

/// An expert cache as a back-end would keep it, re-ranked after every few layers' routings: so its slots
/// change in the middle of a window.
struct LiveCache {
    cache: std::sync::Mutex<ExpertCache>,
    every: usize,
    recorded: std::sync::atomic::AtomicUsize,
}

impl RoutingSink for LiveCache {
    fn record(&self, id: MoeId, experts: &[usize]) {
        let mut c = self.cache.lock().unwrap();
        c.record(id, experts);
        if self.recorded.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.every == self.every - 1 {
            c.rerank();
        }
    }
}

/// Decode with a live cache of `slots` experts: the logits of every token, and the cache's hit rate.
fn with_cache(model: &Model, slots: usize, tokens: &[u32]) -> (Vec<u8>, f64) {
    let c = &model.config;
    let live = LiveCache {
        cache: std::sync::Mutex::new(ExpertCache::new(c.n_layer, c.n_expert, slots, 1, 32)),
        every: 5,
        recorded: Default::default(),
    };
    let misses = |id: MoeId, e: usize| live.cache.lock().unwrap().slot(id, e).is_none();
    let cpu = Cpu { misses: Some(&misses), profile: Some(&live), ..Cpu::new(model) };
    let mut st = model.new_state(KvMode::F16).unwrap();
    let mut out = Vec::new();
    // A prompt window, then windows of 1 and 3 tokens (decode steps and verify windows).
    let mut at = 0;
    for n in [6, 1, 3, 1, 1, 3].into_iter().chain(std::iter::repeat(1)) {
        if at + n > tokens.len() {
            break;
        }
        let Ok((l, _)) = forward_window(&cpu, c, &mut st, &tokens[at..at + n], at);
        out.extend(l.into_iter().flatten().flat_map(f32::to_le_bytes));
        at += n;
    }
    let rate = live.cache.lock().unwrap().hit_rate();
    (out, rate)
}

#[test]
fn a_live_cache_changes_no_bit_cold_or_warm_and_holds_more_of_a_skewed_router() {
    let preset = Preset { n_expert: 64, n_expert_used: 6, ..Preset::tiny() };
    let tokens: Vec<u32> = (0..48).map(|i| (i * 7919 + 13) % 4000 + 3).collect();
    let mut rates = Vec::new();
    for router in [Router::Uniform, Router::Zipf(1.0)] {
        let model = synthetic(preset.clone(), GgmlType::Q2_0, router);
        let (base, none) = with_cache(&model, 0, &tokens);
        assert_eq!(none, 0.0, "no slots, no hits");
        let all = model.config.n_layer * 64;
        // Slots for a twentieth, a fifth and all of the trunk's experts.
        for slots in [all / 20, all / 5, all] {
            let (got, rate) = with_cache(&model, slots, &tokens);
            assert!(got == base, "{router:?}, {slots} slots: the logits changed");
            rates.push((router, slots, rate));
        }
    }
    for (router, slots, rate) in &rates {
        eprintln!("{router:?}: {slots} slots, hit rate {rate:.3}");
    }
    // More slots hold more; the skewed router's hottest experts more than the uniform one's.
    for r in rates.chunks(3) {
        assert!(r[0].2 < r[1].2 && r[1].2 < r[2].2, "{r:?}");
    }
    assert!(rates[4].2 > rates[1].2 + 0.05, "a fifth of the slots: zipf {} against uniform {}", rates[4].2, rates[1].2);
}
