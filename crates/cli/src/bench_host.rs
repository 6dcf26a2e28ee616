//! The host's products, benched. `strata bench host_qdot`: the matrix products (§ qdot's kernels,
//! ops/qdot_x86.rs, and § matvec's dequantize-then-dot, ops/dot.rs) at each vector level this CPU has, one
//! thread and all of them, one input and windows, against the floor of the weight bytes at the host's read
//! rate measured in the same run, each checked for the scalar path's bits. `strata bench host_experts`: the
//! kernels for experts off the device over a model's own experts.

use std::time::{Duration, Instant};

use anyhow::Result;
use rayon::prelude::*;
use strata_gguf::{quant, GgmlType, SplitMix64, TensorBytes};
use strata_model::ops::matvec::Matrix;
use strata_model::ops::vector::{self, Vector};

/// The host's read rate in bytes a second: every thread summing its part of a buffer of `bytes`.
fn read_rate(bytes: usize, threads: usize) -> f64 {
    let buf: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let s: u64 = pool
            .install(|| buf.par_chunks(1 << 16).map(|c| c.iter().fold(0u64, |a, &v| a ^ v)).reduce(|| 0, |a, b| a ^ b));
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(s);
    }
    bytes as f64 / best
}

/// The median of 200 calls, each after spinning `gap_us` (as the host's server does while the card
/// works between two requests, its helpers idle).
fn gapped(gap_us: u64, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..200)
        .map(|_| {
            let idle = Instant::now();
            while idle.elapsed() < Duration::from_micros(gap_us) {
                std::hint::spin_loop();
            }
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The fastest of calls over at least `min` of time.
fn time(min: Duration, mut f: impl FnMut()) -> f64 {
    let (start, mut best, mut n) = (Instant::now(), f64::INFINITY, 0);
    while n < 3 || start.elapsed() < min {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        n += 1;
    }
    best
}

pub fn run(rows: usize, cols: usize, window: usize, ms: u64, only: &[String]) -> Result<()> {
    if rows == 0 || cols == 0 || !cols.is_multiple_of(32) || window == 0 || window > 64 {
        anyhow::bail!("host_qdot: --rows ≥ 1, --cols a multiple of 32, --window 1..=64");
    }
    let mut types = vec![
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q2_0,
        GgmlType::IQ4_NL,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::BF16,
    ];
    if !only.is_empty() {
        let named = |n: &String| GgmlType::from_name(n).filter(|t| types.contains(t));
        let chosen: Option<Vec<GgmlType>> = only.iter().map(named).collect();
        types = chosen.ok_or_else(|| anyhow::anyhow!("host_qdot: --types takes {types:?}"))?;
    }
    let all = rayon::current_num_threads();
    let levels: Vec<Vector> = Vector::ALL.into_iter().filter(|v| v.available()).collect();
    let rates = [(1, read_rate(1 << 30, 1)), (all, read_rate(1 << 30, all))];
    println!("host read rate: {:.1} GB/s (1 thread), {:.1} GB/s ({all} threads)", rates[0].1 / 1e9, rates[1].1 / 1e9);
    println!("{rows} × {cols} per type; a window of {window} inputs beside one; best of ≥ {ms} ms each");
    let heads: String = levels.iter().map(|v| format!(" {} µs |", v.name())).collect();
    println!("| type | threads | inputs | MB |{heads} floor µs | best × floor | same bits |");
    println!("|---|---:|---:|---:|{}---:|---:|---|", "---:|".repeat(levels.len()));
    let mut rng = SplitMix64::new(7);
    let was = vector::current();
    // § qdot's types, then § matvec's (dequantized rows, § dot's fma chains: the IQ experts and the BF16
    // HC weights).
    for ty in types {
        if !cols.is_multiple_of(ty.block_size()) {
            println!("| {ty} | (rows of {cols} are not whole blocks of {}) |", ty.block_size());
            continue;
        }
        let blocks = rows * cols / ty.block_size();
        let m = Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(quant::random_blocks(ty, blocks, &mut rng)) };
        let xs: Vec<Vec<f32>> = (0..window).map(|_| (0..cols).map(|_| rng.uniform() - 0.5).collect()).collect();
        let thread_counts = if all > 1 { &rates[..] } else { &rates[..1] };
        let windows: &[usize] = if window > 1 { &[1, window] } else { &[1] };
        for &(threads, rate) in thread_counts {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
            for &t in windows {
                let x: Vec<&[f32]> = xs[..t].iter().map(Vec::as_slice).collect();
                let mut us = Vec::new();
                let mut outs = Vec::new();
                for &v in &levels {
                    vector::set(v);
                    let mut last = Vec::new();
                    // Inside the pool for the whole timing: a hand-off to it per call would be timed too.
                    us.push(pool.install(|| time(Duration::from_millis(ms), || last = m.matvec_window(&x))) * 1e6);
                    // Compared by bits: a product may be a NaN (random BF16 weights overflow), equal to itself.
                    outs.push(last.iter().flatten().map(|v| v.to_bits()).collect::<Vec<u32>>());
                }
                let same = outs.windows(2).all(|w| w[0] == w[1]);
                let mb = m.bytes.len() as f64 / 1e6;
                let floor = m.bytes.len() as f64 / rate * 1e6;
                let best = us.iter().copied().fold(f64::INFINITY, f64::min);
                let times: String = us.iter().map(|u| format!(" {u:.1} |")).collect();
                println!(
                    "| {ty} | {threads} | {t} | {mb:.1} |{times} {floor:.1} | {:.1} | {} |",
                    best / floor,
                    if same { "yes" } else { "NO" }
                );
            }
        }
    }
    vector::set(was);
    Ok(())
}

/// `strata bench host_experts`: the kernels for experts off the device (layers/experts.rs) on this
/// host, over a model's own experts: a batch of `k` experts (the model's experts a token by default) of
/// each layer in turn, for windows of one token and of `window` (each token taking the same batch), at
/// each of `threads` (all of them where none are named), on the host server's spinning team and on a rayon pool of as many threads, each timed back to back (the best) and after idle gaps of `gap` µs (the median); the floor is the batch's bytes at the host's read rate measured in the same run, and
/// each batch's MoE output is checked against the CPU back-end's own products for the same bits.
pub fn run_experts(
    path: &std::path::Path,
    k: Option<usize>,
    window: usize,
    (ms, gap): (u64, u64),
    threads: &[usize],
    (layers, huge): (Option<usize>, bool),
) -> Result<()> {
    use anyhow::Context;
    use strata_model::layers::experts::{batch_outputs, ExpertRows};
    use strata_model::layers::moe::moe_routed;
    use strata_model::team::{Fork, Pool, Team};
    let model = strata_model::Model::open(path, strata_model::RopeScaling::None)
        .with_context(|| format!("loading {}", path.display()))?;
    let c = &model.config;
    let k = k.unwrap_or(c.n_expert_used);
    let all = rayon::current_num_threads();
    let n_layer = layers.unwrap_or(c.n_layer);
    if k == 0
        || k > c.n_expert
        || window == 0
        || window > 64
        || threads.iter().any(|&n| n == 0 || n > 4 * all)
        || !(1..=c.n_layer).contains(&n_layer)
    {
        anyhow::bail!(
            "host_experts: --experts 1..={} (the model's count), --window 1..=64, --threads 1..={}, --layers 1..={}",
            c.n_expert,
            4 * all,
            c.n_layer
        );
    }
    let counts = if threads.is_empty() { vec![all] } else { threads.to_vec() };
    let rate = read_rate(1 << 30, all);
    println!("host read rate: {:.1} GB/s ({all} threads); vector level {}", rate / 1e9, vector::current().name());
    println!(
        "{k} experts of each of {n_layer} layers in turn, read from {}; best of ≥ {ms} ms each",
        if huge { "a copy in 2 MB pages" } else { "the file's mapping" }
    );
    println!(
        "| pool | threads | tokens | MB a batch | µs a batch | µs after {gap} µs idle (median) | floor µs | × floor | GB/s | same bits |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut rng = SplitMix64::new(11);
    let xs: Vec<Vec<f32>> = (0..window).map(|_| (0..c.n_embd).map(|_| rng.uniform() - 0.5).collect()).collect();
    let windows: &[usize] = if window > 1 { &[1, window] } else { &[1] };
    // Each layer's batch: k distinct experts spread over the ids.
    let batches: Vec<Vec<usize>> =
        (0..n_layer).map(|l| (0..k).map(|i| (l * 7 + i * c.n_expert / k) % c.n_expert).collect()).collect();
    // With --huge, every batch's bytes copied into one anonymous mapping advised for huge pages.
    let copies = if huge { Some(huge_copies(&model, &batches)?) } else { None };
    for &t in windows {
        let x: Vec<&[f32]> = xs[..t].iter().map(Vec::as_slice).collect();
        let rows = |l: usize| -> Vec<(ExpertRows, Vec<&[f32]>)> {
            let w = &model.weights.layers[l].moe;
            let of = |i: usize, e: usize| match &copies {
                Some(m) => m.rows(l * k + i, ExpertRows::of(w, e, c.expert_ff, c.n_embd)),
                None => ExpertRows::of(w, e, c.expert_ff, c.n_embd),
            };
            batches[l].iter().enumerate().map(|(i, &e)| (of(i, e), x.clone())).collect()
        };
        let bytes: usize =
            rows(0).iter().map(|(e, _)| e.gate.bytes.len() + e.up.bytes.len() + e.down.bytes.len()).sum();
        // The same MoE outputs from the back-end's products and from the miss kernels, every layer.
        let same = (0..n_layer).all(|l| {
            let w = &model.weights.layers[l].moe;
            let routes: Vec<(Vec<usize>, Vec<f32>)> =
                (0..t).map(|_| (batches[l].clone(), vec![1.0 / k as f32; k])).collect();
            let bits = |m: Option<&(dyn Fn(usize) -> bool + Sync)>| -> Vec<u32> {
                moe_routed(w, &x, &routes, c.expert_ff, m).iter().flatten().map(|v| v.to_bits()).collect()
            };
            bits(None) == bits(Some(&|_| true))
        });
        let floor = bytes as f64 / rate;
        for &n in &counts {
            // The team the host's server runs (ops/misses.rs), and a rayon pool of as many threads (the
            // server inside it, as it ran before), each timed back to back and after idle gaps.
            let team = Team::new(n, "bench");
            let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build()?;
            let forks: [(&str, &dyn Fork); 2] = [("team", &team), ("rayon", &Pool)];
            for (name, fork) in forks {
                let mut layer = 0;
                let mut batch = || {
                    std::hint::black_box(batch_outputs(&rows(layer), fork));
                    layer = (layer + 1) % n_layer;
                };
                let (best, after_gap) =
                    pool.install(|| (time(Duration::from_millis(ms), &mut batch), gapped(gap, &mut batch)));
                println!(
                    "| {name} | {n} | {t} | {:.2} | {:.1} | {:.1} | {floor_us:.1} | {:.2} | {:.1} | {} |",
                    bytes as f64 / 1e6,
                    best * 1e6,
                    after_gap * 1e6,
                    best / floor,
                    bytes as f64 / best / 1e9,
                    if same { "yes" } else { "NO" },
                    floor_us = floor * 1e6,
                );
            }
        }
    }
    Ok(())
}

/// The batches' expert bytes copied into one anonymous mapping advised for 2 MB pages (`--huge`): each
/// expert's gate, up and down at the offsets `at` names, in batch order.
struct HugeCopies {
    map: memmap2::MmapMut,
    at: Vec<[usize; 3]>,
}

fn huge_copies(model: &strata_model::Model, batches: &[Vec<usize>]) -> Result<HugeCopies> {
    use strata_model::layers::experts::ExpertRows;
    let c = &model.config;
    let experts: Vec<ExpertRows> = batches
        .iter()
        .enumerate()
        .flat_map(|(l, b)| {
            let w = &model.weights.layers[l].moe;
            b.iter().map(move |&e| ExpertRows::of(w, e, c.expert_ff, c.n_embd))
        })
        .collect();
    let mut at = Vec::with_capacity(experts.len());
    let mut len = 0;
    for e in &experts {
        let mut three = [0; 3];
        for (o, b) in three.iter_mut().zip([e.gate.bytes, e.up.bytes, e.down.bytes]) {
            *o = len;
            len += b.len().next_multiple_of(64);
        }
        at.push(three);
    }
    let mut map = memmap2::MmapMut::map_anon(len.max(1))?;
    #[cfg(target_os = "linux")]
    map.advise(memmap2::Advice::HugePage)?;
    for (e, three) in experts.iter().zip(&at) {
        for (&o, b) in three.iter().zip([e.gate.bytes, e.up.bytes, e.down.bytes]) {
            map[o..o + b.len()].copy_from_slice(b);
        }
    }
    Ok(HugeCopies { map, at })
}

impl HugeCopies {
    /// Expert `i` of the copies (the `i`-th of all batches, in order), shaped as `like`.
    fn rows<'a>(
        &'a self,
        i: usize,
        like: strata_model::layers::experts::ExpertRows,
    ) -> strata_model::layers::experts::ExpertRows<'a> {
        use strata_model::ops::matvec::RowBytes;
        let part = |o: usize, r: RowBytes| RowBytes { bytes: &self.map[o..o + r.bytes.len()], ty: r.ty, cols: r.cols };
        let [g, u, d] = self.at[i];
        strata_model::layers::experts::ExpertRows {
            gate: part(g, like.gate),
            up: part(u, like.up),
            down: part(d, like.down),
        }
    }
}
