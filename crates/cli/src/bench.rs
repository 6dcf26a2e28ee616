//! `strata bench dequant`: single-thread dequantization throughput per type on this CPU.

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Subcommand;
use strata_gguf::{quant, GgmlType, SplitMix64};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Dequantize random blocks of every type; GB/s of quant data read and Gelem/s written, one thread.
    Dequant {
        /// Elements per type (the f32 output is 4 bytes each).
        #[arg(long, default_value_t = 1 << 25)]
        elements: usize,
        /// Minimum measuring time per type, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        ms: u64,
    },
    /// The hyper-connection read on the GPU at the full model's geometry: µs per read for T = TMIN..TMAX,
    /// cold (SETS weight sets rotated), with the floor (bytes / 4.49 TB/s) and a hash of the outputs.
    #[command(name = "fused_gr_bench")]
    FusedGr { iters: usize, tmin: usize, tmax: usize, sets: usize },
    /// QSA selection on the GPU as a decode call: scores and top-k µs for Q = 1..QMAX at CTX cells.
    #[command(name = "qsa_select_bench")]
    QsaSelect { ctx: usize, qmax: usize, reps: usize, capacity: usize },
    /// Each matrix-vector product of the full model's decode step on the GPU (T = 1, or a verify window's
    /// T with --window; weights cold), in every layout, against the floor of its bytes at the card's copy
    /// rate measured in the same run.
    #[command(name = "matvec_bench")]
    Matvec {
        #[arg(default_value_t = 50)]
        reps: usize,
        /// Tokens a call (1..8): a verify window's products; a gather's tokens each take their own experts.
        #[arg(long, default_value_t = 1)]
        window: usize,
    },
    /// The bytes one GPU decode step of MODEL reads at a depth of CELLS (every weight it reads, the routed
    /// experts at their share, the KV cells attended and the block keys scored, the GDN states), and
    /// with --bandwidth (TB/s) the floor they give; no GPU needed (bench/engine.sh prints it beside
    /// each rate).
    #[command(name = "step_bytes")]
    StepBytes {
        model: std::path::PathBuf,
        cells: usize,
        #[arg(long, default_value = "fp16")]
        kv: strata_model::KvMode,
        #[arg(long)]
        bandwidth: Option<f64>,
    },
    /// The host's time for one token's PLE table rows (hashed from the token and those before it, read
    /// from the memory-mapped file and dequantized): µs a token over TOKENS random tokens, ROUNDS rounds,
    /// the first from the file as the page cache holds it; with --warm the table read ahead first, as
    /// `strata run` does. No GPU needed.
    #[command(name = "ple_rows")]
    PleRows {
        model: std::path::PathBuf,
        #[arg(long, default_value_t = 256)]
        tokens: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long)]
        warm: bool,
    },
    /// The host's § qdot products (the CPU's and the host-memory experts' kernels) for each type at every
    /// vector level this CPU has, one thread and all, one input and a window, against the floor of the
    /// weight bytes at the host's read rate measured in the same run; each level checked for the same bits.
    #[command(name = "host_qdot")]
    HostQdot {
        #[arg(long, default_value_t = 2048)]
        rows: usize,
        #[arg(long, default_value_t = 2560)]
        cols: usize,
        #[arg(long, default_value_t = 8)]
        window: usize,
        /// Minimum measuring time per figure, in milliseconds.
        #[arg(long, default_value_t = 300)]
        ms: u64,
        /// Only these types, comma separated (e.g. Q2_0,IQ2_XS); default all of them.
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    /// The kernels for experts off the device (docs/PLACEMENT.md) on this host, over MODEL's own experts:
    /// a batch of a token's experts (or --experts K) of each layer in turn, one token and a window, at all
    /// threads, against the floor of the batch's bytes at the host's read rate measured in the same run;
    /// each layer's MoE output checked against the CPU back-end's products for the same bits.
    #[command(name = "host_experts")]
    HostExperts {
        model: std::path::PathBuf,
        #[arg(long)]
        experts: Option<usize>,
        #[arg(long, default_value_t = 4)]
        window: usize,
        /// Minimum measuring time per figure, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        ms: u64,
        /// Thread counts to time each batch at, comma separated (each its own pool); default all.
        #[arg(long, value_delimiter = ',')]
        threads: Vec<usize>,
        /// Idle microseconds before each batch of the second timing (the card's work between two
        /// requests of a placed pass).
        #[arg(long, default_value_t = 100)]
        gap_us: u64,
        /// Cycle over the first N layers only (1: the same batch each time, its bytes in the caches).
        #[arg(long)]
        layers: Option<usize>,
        /// Read the batches' bytes from a copy in anonymous memory advised for 2 MB pages (fewer page
        /// walks than the file's 4 KB pages), not from the file's mapping.
        #[arg(long)]
        huge: bool,
    },
    /// How well a VRAM cache of experts would hold MODEL's routing (docs/PLACEMENT.md), on the CPU: a
    /// prompt of random tokens, then greedy decoding, every routing given to caches of 5–50 % of the
    /// experts run by the engine's policy (re-ranked every EVERY passes, SWAPS a re-rank: an eighth of the
    /// cache by default); each cache's hit rate while decoding, and what the hottest experts took.
    Routing {
        model: std::path::PathBuf,
        #[arg(long, default_value_t = 64)]
        prompt: usize,
        #[arg(long, default_value_t = 256)]
        tokens: usize,
        #[arg(long, default_value_t = 8)]
        every: usize,
        #[arg(long)]
        swaps: Option<usize>,
    },
    /// Verify windows on the GPU (docs/SPECULATION.md): after a prompt of DEPTH random tokens, the plain
    /// step, a verify pass of T = 1..8 tokens (kept whole and cut to one) with each window's byte floor
    /// at BANDWIDTH TB/s, drafts of 1..7 tokens and over draft vocabularies, and the effective decode at
    /// per-draft acceptance 0.6..0.9, computed and checked by runs whose acceptance is forced to it.
    Spec {
        #[command(flatten)]
        engine: crate::load::EngineArgs,
        #[arg(long, default_value_t = 4096)]
        depth: usize,
        #[arg(long, default_value_t = 32)]
        reps: usize,
        #[arg(long)]
        bandwidth: f64,
        /// The plain step and the verify windows only (no drafts, no effective decode): for timing many
        /// settings, e.g. kernel families left out (bench/window_knockout.sh).
        #[arg(long)]
        windows_only: bool,
    },
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Dequant { elements, ms } => dequant(elements, Duration::from_millis(ms)),
        BenchCommand::FusedGr { iters, tmin, tmax, sets } => fused_gr(iters, tmin, tmax, sets),
        BenchCommand::QsaSelect { ctx, qmax, reps, capacity } => qsa_select(ctx, qmax, reps, capacity),
        BenchCommand::Matvec { reps, window } => matvec(reps, window),
        BenchCommand::StepBytes { model, cells, kv, bandwidth } => step_bytes(&model, cells, kv, bandwidth),
        BenchCommand::PleRows { model, tokens, rounds, warm } => ple_rows(&model, tokens, rounds, warm),
        BenchCommand::HostQdot { rows, cols, window, ms, types } => {
            crate::bench_host::run(rows, cols, window, ms, &types)
        }
        BenchCommand::HostExperts { model, experts, window, ms, threads, gap_us, layers, huge } => {
            crate::bench_host::run_experts(&model, experts, window, (ms, gap_us), &threads, (layers, huge))
        }
        BenchCommand::Routing { model, prompt, tokens, every, swaps } => {
            crate::bench_routing::run(&model, prompt, tokens, every, swaps)
        }
        BenchCommand::Spec { engine, depth, reps, bandwidth, windows_only } => {
            crate::bench_spec::run(&engine, depth, reps, bandwidth, windows_only)
        }
    }
}

fn ple_rows(path: &std::path::Path, tokens: usize, rounds: usize, warm: bool) -> Result<()> {
    use anyhow::Context;
    use strata_model::layers::ple::{table_rows, warm_table};
    let model = strata_model::Model::open(path, strata_model::RopeScaling::None)
        .with_context(|| format!("loading {}", path.display()))?;
    let (Some(p), Some(w)) = (&model.config.ple, &model.weights.ple) else {
        anyhow::bail!("{}: the model has no PLE table", path.display());
    };
    if warm {
        if let Some(t) = warm_table(w) {
            t.join().map_err(|_| anyhow::anyhow!("the read-ahead thread failed"))?;
        }
    }
    let mut rng = SplitMix64::new(7);
    let mut prev = vec![p.eos_token_id; p.ngram_size];
    let mut emb = vec![0f32; p.embd_dim()];
    for round in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..tokens {
            let t = (rng.next_u64() % model.config.vocab as u64) as u32;
            table_rows(p, w, t, &mut prev, &mut emb);
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / tokens.max(1) as f64;
        println!("round {round}: {us:.1} µs a token ({} rows of {} values)", p.heads(), p.row_dim);
    }
    Ok(())
}

fn step_bytes(path: &std::path::Path, cells: usize, kv: strata_model::KvMode, bw: Option<f64>) -> Result<()> {
    use anyhow::Context;
    let model = strata_model::Model::open(path, strata_model::RopeScaling::None)
        .with_context(|| format!("loading {}", path.display()))?;
    let bytes = strata_cuda::backend::budget::decode_bytes(&model, kv, cells);
    let gb = bytes as f64 / 1e9;
    match bw {
        Some(tb) if tb > 0.0 && tb.is_finite() => println!(
            "a decode step at depth {cells} reads {gb:.3} GB ({bytes} bytes); floor {:.3} ms at {tb:.2} TB/s",
            bytes as f64 / (tb * 1e12) * 1e3
        ),
        Some(tb) => anyhow::bail!("--bandwidth {tb}: a rate in TB/s above 0"),
        None => println!("a decode step at depth {cells} reads {gb:.3} GB ({bytes} bytes)"),
    }
    Ok(())
}

fn matvec(reps: usize, window: usize) -> Result<()> {
    if reps == 0 || !(1..=8).contains(&window) {
        anyhow::bail!("matvec_bench REPS [--window T]: REPS ≥ 1, 1 ≤ T ≤ 8");
    }
    let gpu = strata_cuda::Gpu::new(0, crate::env::settings().clone())?;
    let bw = strata_cuda::tools::bench::copy_bandwidth(&gpu, 1024)?;
    println!(
        "device: {} ({}); copy rate {:.2} TB/s (read + write), {reps} calls each, windows of {window}",
        gpu.name,
        gpu.arch_name(),
        bw / 1e12
    );
    let layouts = strata_cuda::ops::layout::Layout::ALL;
    let heads: String = layouts.iter().map(|l| format!(" {} µs |", l.name())).collect();
    println!("| product | type | rows × cols | MB |{heads} floor µs | best × floor | best GB/s | same bits |");
    println!("|---|---|---:|---:|{}---:|---:|---:|---|", "---:|".repeat(layouts.len()));
    for r in strata_cuda::tools::bench::matvec_bench(&gpu, reps, window)? {
        let best = r.us.iter().copied().fold(f64::INFINITY, f64::min);
        let floor = r.bytes as f64 / bw * 1e6;
        let shape = if r.slots > 0 {
            format!("{} × {}, {} experts", r.rows, r.cols, r.slots * window)
        } else {
            format!("{} × {}", r.rows, r.cols)
        };
        let times: String =
            r.us.iter().map(|us| if us.is_nan() { " — |".to_string() } else { format!(" {us:.2} |") }).collect();
        println!(
            "| {} | {} | {shape} | {:.2} |{times} {floor:.2} | {:.1} | {:.0} | {} |",
            r.what,
            r.ty,
            r.bytes as f64 / 1e6,
            best / floor,
            r.bytes as f64 / best / 1e3,
            if r.same { "yes" } else { "NO" }
        );
    }
    Ok(())
}

fn qsa_select(ctx: usize, qmax: usize, reps: usize, capacity: usize) -> Result<()> {
    if qmax == 0 || qmax > 8 || reps == 0 || ctx + qmax > capacity + 1 || !capacity.is_multiple_of(4) || ctx < 2 {
        anyhow::bail!(
            "qsa_select_bench CTX QMAX REPS CAPACITY: 1 ≤ QMAX ≤ 8, CTX + QMAX − 1 ≤ CAPACITY (a multiple of 4)"
        );
    }
    let gpu = strata_cuda::Gpu::new(0, crate::env::settings().clone())?;
    println!("device: {} ({}); {ctx} cells, capacity {capacity}, {reps} calls", gpu.name, gpu.arch_name());
    let names: Vec<&str> = strata_cuda::ops::qsa::ScoresVariant::ALL.iter().map(|v| v.name()).collect();
    println!(
        "| cells | Q | scores µs: {} | floor µs | × floor (best) | top-k µs: wide / split / cluster | hash |",
        names.join(" / ")
    );
    println!("|---:|---:|---|---:|---:|---|---|");
    for r in strata_cuda::tools::bench::qsa_select_bench(&gpu, ctx, qmax, reps, capacity)? {
        let best = r.scores_us.iter().copied().fold(f64::INFINITY, f64::min);
        let scores: Vec<String> = r.scores_us.iter().map(|v| format!("{v:.2}")).collect();
        println!(
            "| {ctx} | {} | {} | {:.2} | {:.1} | {:.2} / {:.2} / {:.2} | {:016x} |",
            r.q,
            scores.join(" / "),
            r.floor_us,
            best / r.floor_us,
            r.topk_us[0],
            r.topk_us[1],
            r.topk_us[2],
            r.hash
        );
    }
    Ok(())
}

fn fused_gr(iters: usize, tmin: usize, tmax: usize, sets: usize) -> Result<()> {
    if iters == 0 || sets == 0 || tmin == 0 || tmin > tmax || tmax > strata_cuda::ops::hc::MAX_T {
        anyhow::bail!("fused_gr_bench ITERS TMIN TMAX SETS: ITERS, SETS ≥ 1 and 1 ≤ TMIN ≤ TMAX ≤ 8");
    }
    let gpu = strata_cuda::Gpu::new(0, crate::env::settings().clone())?;
    println!(
        "device: {} ({}), driver {}; {iters} iterations, {sets} weight sets",
        gpu.name,
        gpu.arch_name(),
        gpu.driver_version
    );
    println!("| T | variant | read µs (graph) | × floor | read µs (launches) | norm | down | up | floor µs | hash |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in strata_cuda::tools::bench::fused_gr_bench(&gpu, iters, tmin, tmax, sets)? {
        let [all, norm, down, up] = r.us;
        println!(
            "| {} | {} | {:.2} | {:.1} | {all:.2} | {norm:.2} | {down:.2} | {up:.2} | {:.2} | {:016x} |",
            r.t,
            r.variant.name(),
            r.graph_us,
            r.graph_us / r.floor_us,
            r.floor_us,
            r.hash
        );
    }
    Ok(())
}

fn dequant(elements: usize, min_time: Duration) -> Result<()> {
    println!("| type | bits/weight | quant MB | GB/s quant data | Gelem/s | reps |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut rng = SplitMix64::new(1);
    for ty in GgmlType::ALL {
        let n_blocks = elements.div_ceil(ty.block_size());
        let data = quant::random_blocks(ty, n_blocks, &mut rng);
        let mut out = vec![0f32; n_blocks * ty.block_size()];
        quant::dequantize(ty, &data, &mut out).map_err(anyhow::Error::msg)?; // warm-up, page faults
        let (mut reps, start) = (0u32, Instant::now());
        while reps < 3 || start.elapsed() < min_time {
            quant::dequantize(ty, &data, &mut out).map_err(anyhow::Error::msg)?;
            std::hint::black_box(&out);
            reps += 1;
        }
        let per = start.elapsed().as_secs_f64() / reps as f64;
        let bits = ty.type_size() as f64 * 8.0 / ty.block_size() as f64;
        println!(
            "| {ty} | {bits:.4} | {:.1} | {:.2} | {:.3} | {reps} |",
            data.len() as f64 / 1e6,
            data.len() as f64 / per / 1e9,
            out.len() as f64 / per / 1e9
        );
    }
    Ok(())
}
