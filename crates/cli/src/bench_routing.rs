//! `strata bench routing`: how well a VRAM cache of experts would hold a model's routing (docs/PLACEMENT.md),
//! on the CPU back-end, no GPU needed. A prompt of random tokens, then greedy decoding; every routing goes
//! to caches of several sizes run by the engine's policy (`placement.rs`: re-ranked every few passes,
//! bounded swaps) and to a profile. For each size: the live cache's hit rate over the decoded tokens,
//! and the share of the routings that as many of the trunk's hottest experts took over the whole run
//! (what a cache that knew the counts beforehand would hold).

use std::sync::Mutex;

use anyhow::{Context, Result};
use strata_cuda::backend::budget::memory_plan;
use strata_model::backend::{forward_window, MoeId};
use strata_model::cpu::Cpu;
use strata_model::ops::topk::argmax;
use strata_model::placement::ExpertCache;
use strata_model::routing::{RoutingProfile, RoutingSink};
use strata_model::{KvMode, Model, RopeScaling};

/// The cache sizes tried, as shares of the trunk's experts.
const SHARES: [f64; 5] = [0.05, 0.1, 0.2, 0.33, 0.5];

struct Sinks {
    profile: RoutingProfile,
    caches: Vec<Mutex<ExpertCache>>,
}

impl RoutingSink for Sinks {
    fn record(&self, id: MoeId, experts: &[usize]) {
        self.profile.record(id, experts);
        for c in &self.caches {
            c.lock().unwrap_or_else(|e| e.into_inner()).record(id, experts);
        }
    }
}

pub fn run(path: &std::path::Path, prompt: usize, tokens: usize, every: usize, swaps: Option<usize>) -> Result<()> {
    let model = Model::open(path, RopeScaling::None).with_context(|| format!("loading {}", path.display()))?;
    let c = &model.config;
    if prompt == 0 || tokens == 0 || every == 0 || prompt + tokens > c.context_length.max(1) {
        anyhow::bail!("routing: --prompt and --tokens at least 1, together within the context; --every ≥ 1");
    }
    let experts = c.n_layer * c.n_expert;
    let plan = memory_plan(
        &model,
        KvMode::F16,
        prompt + tokens,
        u64::MAX / 2,
        u64::MAX / 2,
        (false, strata_cuda::backend::budget::Window::of(8)),
    )?;
    let slots: Vec<usize> = SHARES.iter().map(|s| (s * experts as f64).round() as usize).collect();
    let sinks = Sinks {
        profile: RoutingProfile::new(c.n_layer, c.n_expert),
        caches: slots
            .iter()
            // Swaps a re-rank: as asked, else an eighth of the cache (a whole cache turns over in 8 re-ranks).
            .map(|&s| Mutex::new(ExpertCache::new(c.n_layer, c.n_expert, s, every, swaps.unwrap_or(s.div_ceil(8)))))
            .collect(),
    };
    // The CPU back-end, each trunk MoE also guessed from the layer's mixer input (bench_guess.rs).
    // The misses counted apart are the 20 % cache's (SHARES[2]).
    let held: crate::bench_guess::Held =
        Box::new(|l, e| sinks.caches[2].lock().unwrap_or_else(|p| p.into_inner()).slot(MoeId::Layer(l), e).is_some());
    let cpu = crate::bench_guess::Guessing::new(Cpu { profile: Some(&sinks), ..Cpu::new(&model) }, &model, held);
    let mut st = model.new_state(KvMode::F16)?;
    let vocab = c.vocab as u32;
    let mut ids: Vec<u32> = (0..prompt as u32).map(|i| i.wrapping_mul(2_654_435_761) % (vocab - 3) + 3).collect();
    let end_pass = |sinks: &Sinks| {
        for cache in &sinks.caches {
            cache.lock().unwrap_or_else(|e| e.into_inner()).end_pass();
        }
    };
    let mut last = Vec::new();
    for (i, window) in ids.clone().chunks(32).enumerate() {
        let Ok((logits, _)) = forward_window(&cpu, c, &mut st, window, i * 32);
        last = logits.last().cloned().unwrap_or_default();
        end_pass(&sinks);
    }
    let before: Vec<(u64, u64)> = sinks.caches.iter().map(|c| c.lock().unwrap().hits_and_misses()).collect();
    cpu.reset();
    let t0 = std::time::Instant::now();
    for _ in 0..tokens {
        let next = argmax(&last);
        let pos = ids.len();
        ids.push(next);
        let Ok((logits, _)) = forward_window(&cpu, c, &mut st, &[next], pos);
        last = logits.into_iter().next().unwrap_or_default();
        end_pass(&sinks);
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}: {} layers of {} experts, {} a token; {prompt} prompt tokens, {tokens} decoded ({:.1} tok/s on the CPU)",
        path.display(),
        c.n_layer,
        c.n_expert,
        c.n_expert_used,
        tokens as f64 / secs
    );
    println!("cache re-ranked every {every} passes; a slot {:.2} MiB", plan.slot_bytes as f64 / (1u64 << 20) as f64);
    println!("| cache | slots | GiB | live hit rate (decoding) | the hottest, known beforehand |");
    println!("|---:|---:|---:|---:|---:|");
    for (i, cache) in sinks.caches.iter().enumerate() {
        let (h, m) = cache.lock().unwrap().hits_and_misses();
        let (h, m) = (h - before[i].0, m - before[i].1);
        let live = h as f64 / (h + m).max(1) as f64;
        let oracle = sinks.profile.hottest_share(slots[i]);
        let gib = slots[i] as f64 * plan.slot_bytes as f64 / (1u64 << 30) as f64;
        println!(
            "| {:.0} % | {} | {gib:.3} | {:.1} % | {:.1} % |",
            SHARES[i] * 100.0,
            slots[i],
            live * 100.0,
            oracle * 100.0
        );
    }
    // The guesses (docs/PLACEMENT.md, "Guessed experts"): the layer's router on its mixer's input, and a
    // stage earlier on the previous layer's MoE input (layers 1.. only).
    use crate::bench_guess::Shares;
    let shares = cpu.shares(false);
    let mean = |v: &[Shares], f: fn(&Shares) -> f64| 100.0 * v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let (k, wide) = (c.n_expert_used, (2 * c.n_expert_used).min(c.n_expert));
    println!(
        "a layer's router on its mixer's input, against its MoE input's choice (decoding): {:.1} % of the chosen experts in its top {k}, {:.1} % in its top {wide}",
        mean(&shares, |s| s.in_k),
        mean(&shares, |s| s.in_2k),
    );
    let misses = cpu.shares(true);
    println!(
        "of those the 20 % cache did not hold: {:.1} % in its top {k}, {:.1} % in its top {wide}",
        mean(&misses, |s| s.in_k),
        mean(&misses, |s| s.in_2k),
    );
    let (later, later_misses) = (&shares[1.min(shares.len())..], &misses[1.min(misses.len())..]);
    println!(
        "a stage earlier, on the previous layer's MoE input: {:.1} % in its top {k} ({:.1} % of the misses)",
        mean(later, |s| s.earlier_in_k),
        mean(later_misses, |s| s.earlier_in_k),
    );
    println!(
        "both guesses (a stage earlier, then the mixer's input for what it left): {:.1} % in either's top {k} ({:.1} % of the misses)",
        mean(later, |s| s.either_in_k),
        mean(later_misses, |s| s.either_in_k),
    );
    let by_layer: Vec<String> = shares
        .iter()
        .map(|s| format!("{:.0}/{:.0}/{:.0}", 100.0 * s.in_k, 100.0 * s.in_2k, 100.0 * s.earlier_in_k))
        .collect();
    println!("by layer (top k / top 2k / a stage earlier's top k, %): {}", by_layer.join(" "));
    Ok(())
}
