//! Kernel benches (device only): time with CUDA events over many iterations, rotate weight sets so the
//! L2 cannot hold them (cold), and hash every output so variants can be compared bit for bit.

use cudarc::driver::sys::CUevent_flags;

use crate::ops::hc::{hc_read_with, HcGpu, HcScratch, HcVariant, Pending, Stage};
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};
use crate::select::check::{random_hc, time_calls};

/// The H200 plain-read bandwidth ceiling used for floors (bytes / this).
pub const HBM_BYTES_PER_S: f64 = 4.49e12;

pub struct GrRow {
    pub t: usize,
    pub variant: HcVariant,
    /// Whole read, then norm, down and up alone (back-to-back launches).
    pub us: [f64; 4],
    /// Whole read, replayed from a CUDA graph of 16 reads.
    pub graph_us: f64,
    pub floor_us: f64,
    pub hash: u64,
}

/// `fused_gr_bench ITERS TMIN TMAX SETS` at the full model's HC geometry (n 2560, hc 4, r 320, inject
/// rows), with the previous half's pending write folded in. Microseconds per read (norm + down + up).
pub fn fused_gr_bench(gpu: &Gpu, iters: usize, tmin: usize, tmax: usize, sets: usize) -> Result<Vec<GrRow>, CudaError> {
    let (n, hc, r) = (2560, 4, 320);
    let weights: Vec<HcGpu> = (0..sets)
        .map(|i| HcGpu::upload(gpu, &random_hc(n, hc, r, true, 100 + i as u64), hc, 1e-6, HcVariant::PLAIN))
        .collect::<Result<_, _>>()?;
    let s = HcScratch::new(gpu, n, hc, r)?;
    let mut rows = Vec::new();
    for t in tmin..=tmax {
        let mut rng = strata_gguf::SplitMix64::new(t as u64);
        let x: Vec<f32> = (0..t * hc * n).map(|_| rng.uniform() - 0.5).collect();
        let r_buf = Buf::from_host(gpu, &x)?;
        let y = Buf::from_host(gpu, &(0..t * n).map(|_| rng.uniform() - 0.5).collect::<Vec<f32>>())?;
        let inj = Buf::from_host(gpu, &(0..t * hc).map(|_| rng.uniform() - 0.5).collect::<Vec<f32>>())?;
        let out: Buf<f32> = Buf::zeros(gpu, t * hc * n)?;
        for v in HcVariant::ALL {
            let run = |i: usize, only| {
                hc_read_with(
                    gpu,
                    v,
                    &weights[i % sets],
                    r_buf.ptr(gpu),
                    out.ptr(gpu),
                    Some(Pending::of(&y, &inj)),
                    t,
                    &s,
                    only,
                )
            };
            let mut us = [0f64; 4];
            for (k, only) in [None, Some(Stage::Norm), Some(Stage::Down), Some(Stage::Up)].into_iter().enumerate() {
                for i in 0..sets.max(10) {
                    run(i, only)?;
                }
                let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
                let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
                start.record(&gpu.stream).check("recording an event")?;
                for i in 0..iters {
                    run(i, only)?;
                }
                end.record(&gpu.stream).check("recording an event")?;
                gpu.sync()?;
                us[k] = start.elapsed_ms(&end).check("reading an event")? as f64 * 1e3 / iters as f64;
            }
            let graph_us = time_graph(gpu, iters, &|i| run(i, None))?;
            // The hash of the last set's outputs: the same for every variant.
            run(sets - 1, None)?;
            let mixed = s.mixed.read(gpu, t * n)?;
            let bytes = (2 * hc * n * r + hc * hc * n) as f64 * 2.0;
            rows.push(GrRow {
                t,
                variant: v,
                us,
                graph_us,
                floor_us: bytes / HBM_BYTES_PER_S * 1e6,
                hash: strata_gguf::fnv1a(mixed.iter().flat_map(|v| v.to_le_bytes())),
            });
        }
    }
    Ok(rows)
}

/// Reads per captured graph (rotating the weight sets).
const GRAPH_READS: usize = 16;

/// µs per call of `f`, from a graph of GRAPH_READS calls replayed ⌈iters/GRAPH_READS⌉ times.
fn time_graph(gpu: &Gpu, iters: usize, f: &dyn Fn(usize) -> Result<(), CudaError>) -> Result<f64, CudaError> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    gpu.stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).check("beginning a capture")?;
    for i in 0..GRAPH_READS {
        f(i)?;
    }
    let graph = gpu
        .stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .check("ending a capture")?
        .ok_or_else(|| CudaError::Shape("empty graph".into()))?;
    let replays = iters.div_ceil(GRAPH_READS).max(2);
    graph.launch().check("launching a graph")?;
    gpu.sync()?;
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    start.record(&gpu.stream).check("recording an event")?;
    for _ in 0..replays {
        graph.launch().check("launching a graph")?;
    }
    end.record(&gpu.stream).check("recording an event")?;
    gpu.sync()?;
    Ok(start.elapsed_ms(&end).check("reading an event")? as f64 * 1e3 / (replays * GRAPH_READS) as f64)
}

pub struct QsaRow {
    pub q: usize,
    /// Butterfly, halving, stream.
    pub scores_us: [f64; 3],
    /// Wide, split, cluster (NaN where the card cannot run it).
    pub topk_us: [f64; 3],
    pub floor_us: f64,
    pub hash: u64,
}

/// `qsa_select_bench CTX Q REPS CAPACITY` as a decode call: Q = 1..q_max queries at CTX cells, the full
/// indexer geometry (4 heads of 128, kpool 4, top_k 2048). Scores and top-k timed apart; the floor of the
/// scores is reading the block keys once (CTX/4 · 128 f32).
pub fn qsa_select_bench(
    gpu: &Gpu,
    ctx: usize,
    q_max: usize,
    reps: usize,
    capacity: usize,
) -> Result<Vec<QsaRow>, CudaError> {
    let (di, hi, kpool, top_k) = (128, 4, 4, 2048);
    let n_blocks = capacity / kpool;
    let mut rng = strata_gguf::SplitMix64::new(ctx as u64);
    let keys: Vec<f32> = (0..n_blocks * di).map(|_| rng.uniform() - 0.5).collect();
    let kb = Buf::from_host(gpu, &keys)?;
    let mut rows = Vec::new();
    for q in 1..=q_max {
        let queries: Vec<f32> = (0..q * hi * di).map(|_| rng.uniform() - 0.5).collect();
        let cells: Vec<i32> = (0..q).map(|k| (ctx + k) as i32).collect();
        let scored: Vec<i32> = cells.iter().map(|&c| (c as usize / kpool) as i32).collect();
        let qb = Buf::from_host(gpu, &queries)?;
        let sb: Buf<f32> = Buf::zeros(gpu, q * n_blocks)?;
        let nb = Buf::from_host(gpu, &scored)?;
        let cb = Buf::from_host(gpu, &cells)?;
        let out_stride = top_k + kpool - 1;
        let ob: Buf<u32> = Buf::zeros(gpu, q * out_stride)?;
        let count: Buf<i32> = Buf::zeros(gpu, q)?;
        let n_scored_max = scored.iter().copied().max().unwrap_or(0) as usize;
        let mut scores_us = [0f64; 3];
        let mut hashes = Vec::new();
        for (i, v) in crate::ops::qsa::ScoresVariant::ALL.into_iter().enumerate() {
            scores_us[i] = time_calls(gpu, reps, &|| {
                crate::ops::qsa::scores(gpu, v, &kb, &qb, &sb, &nb, n_scored_max, di, hi, q, n_blocks)
            })?;
            hashes.push(strata_gguf::fnv1a(sb.read(gpu, q * n_blocks)?.iter().flat_map(|v| v.to_le_bytes())));
        }
        if hashes.iter().any(|&h| h != hashes[0]) {
            return Err(CudaError::Shape(format!("scores variants differ at Q = {q}: {hashes:016x?}")));
        }
        let scratch = std::cell::RefCell::new(crate::ops::qsa::TopkScratch::new(gpu, q, n_blocks)?);
        let mut topk_us = [f64::NAN; 3];
        let mut id_hashes = Vec::new();
        for (i, v) in crate::ops::qsa::TopkVariant::available(gpu).into_iter().enumerate() {
            topk_us[i] = time_calls(gpu, reps, &|| {
                crate::ops::qsa::topk(
                    gpu,
                    v,
                    &sb,
                    n_blocks,
                    &cb,
                    top_k,
                    kpool,
                    &ob,
                    out_stride,
                    &count,
                    q,
                    &mut scratch.borrow_mut(),
                )
            })?;
            id_hashes.push(strata_gguf::fnv1a(ob.read(gpu, q * out_stride)?.iter().flat_map(|v| v.to_le_bytes())));
        }
        if id_hashes.iter().any(|&h| h != id_hashes[0]) {
            return Err(CudaError::Shape(format!("top-k variants differ at Q = {q}")));
        }
        let s = sb.read(gpu, q * n_blocks)?;
        let hash = strata_gguf::fnv1a(s.iter().flat_map(|v| v.to_le_bytes())) ^ id_hashes[0];
        rows.push(QsaRow {
            q,
            scores_us,
            topk_us,
            floor_us: (ctx / kpool * di * 4) as f64 / HBM_BYTES_PER_S * 1e6,
            hash,
        });
    }
    Ok(rows)
}

/// One product of the full model's decode step in `matvec_bench`.
pub struct MatvecRow {
    pub what: &'static str,
    pub ty: strata_gguf::GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Experts gathered per call (0 for a dense product).
    pub slots: usize,
    /// Weight bytes one call reads.
    pub bytes: usize,
    /// µs per call at the window's T in each layout of `Layout::ALL` (cold: weight sets rotated); NaN for a layout
    /// not timed (the § qdot types have one kernel, timed in the first column).
    pub us: [f64; crate::ops::layout::Layout::ALL.len()],
    /// Whether every layout wrote the block layout's bits.
    pub same: bool,
}

/// The full model's products (synthetic preset types), with the routed experts at 10 of 512.
const PRODUCTS: [(&str, strata_gguf::GgmlType, usize, usize, usize); 12] = {
    use strata_gguf::GgmlType::*;
    [
        ("GDN qkv", Q4_K, 10240, 2560, 0),
        ("GDN gate", Q6_K, 6144, 2560, 0),
        ("GDN out", Q8_0, 2560, 6144, 0),
        ("GDN alpha/beta", BF16, 48, 2560, 0),
        ("attention q", Q4_K, 12288, 2560, 0),
        ("attention out", IQ4_NL, 2560, 6144, 0),
        ("router", F32, 512, 2560, 0),
        ("experts gate/up", Q2_0, 640, 2560, 10),
        ("experts down", Q2_0, 2560, 640, 10),
        ("shared gate/up", Q8_0, 640, 2560, 0),
        ("shared down", Q4_0, 2560, 640, 0),
        ("head", Q6_K, 248_320, 2560, 0),
    ]
};

/// `matvec_bench REPS [--window T]`: each product of a decode step for a window of `t` tokens (1: the
/// step) in every layout, with enough weight sets (at least 256 MB in all) that every call reads its
/// weights from memory, not the L2. A gather's tokens each take `slots` experts of their own, all
/// distinct (the synthetic router's spread: a window's worst case), so it reads `t` times a token's.
pub fn matvec_bench(gpu: &Gpu, reps: usize, t: usize) -> Result<Vec<MatvecRow>, CudaError> {
    use crate::ops::layout::Layout;
    use crate::ops::matvec::{matvec_gather_with, matvec_with, Gather, MatrixGpu};
    use strata_model::ops::matvec::Matrix;
    let mut rng = strata_gguf::SplitMix64::new(11);
    let mut out = Vec::new();
    for (what, ty, rows, cols, slots) in PRODUCTS {
        let experts = if slots > 0 { 4 * slots * t } else { 1 };
        let bytes = rows * cols / ty.block_size() * ty.type_size() * (slots * t).max(1);
        let set_bytes = rows * cols / ty.block_size() * ty.type_size() * experts;
        // `STRATA_BENCH_WARM=1`: one weight set, read again by each call (from the L2 where it fits).
        let warm = gpu.settings.bench_warm;
        let sets = if warm { 1 } else { (256usize << 20).div_ceil(set_bytes).clamp(2, 64) };
        let weights: Vec<MatrixGpu> = (0..sets)
            .map(|_| {
                let raw = strata_gguf::quant::random_blocks(ty, experts * rows * cols / ty.block_size(), &mut rng);
                let m = Matrix { ty, rows: experts * rows, cols, bytes: strata_gguf::TensorBytes::from_vec(raw) };
                MatrixGpu::upload(gpu, &m, &Default::default())
            })
            .collect::<Result<_, _>>()?;
        let x = Buf::from_host(gpu, &(0..t * cols).map(|_| rng.uniform() - 0.5).collect::<Vec<f32>>())?;
        // Each call's experts: a quarter of the set's, a different quarter each time round.
        let per = (slots * t).max(1);
        let ids: Vec<Buf<i32>> = (0..4)
            .map(|g| Buf::from_host(gpu, &(0..per).map(|s| (g * per + s) as i32).collect::<Vec<_>>()))
            .collect::<Result<_, _>>()?;
        let ys: Vec<Buf<f32>> =
            (0..Layout::ALL.len()).map(|_| Buf::zeros(gpu, rows * per)).collect::<Result<_, _>>()?;
        let call = |layout: Layout, y: &Buf<f32>, i: usize| {
            let w = &weights[i % sets];
            if slots > 0 {
                let g = Gather { stride: rows, offset: 0, rows };
                matvec_gather_with(gpu, layout, w, g, &x, (cols, 0), y, &ids[i / sets % 4], (t, slots))
            } else {
                matvec_with(gpu, layout, w, &x, y, t)
            }
        };
        // The § qdot types take one kernel whatever the layout asked for: timed once, the other columns
        // NaN (printed as a dash).
        let timed = if crate::ops::qdot::uses(ty) { 1 } else { Layout::ALL.len() };
        let mut us = [f64::NAN; Layout::ALL.len()];
        for (k, layout) in Layout::ALL.into_iter().enumerate().take(timed) {
            let i = std::cell::Cell::new(0usize);
            us[k] = time_calls(gpu, reps, &|| {
                i.set(i.get() + 1);
                call(layout, &ys[k], i.get())
            })?;
            call(layout, &ys[k], 0)?;
        }
        let n = rows * per;
        let bits =
            |y: &Buf<f32>| -> Result<Vec<u32>, CudaError> { Ok(y.read(gpu, n)?.iter().map(|v| v.to_bits()).collect()) };
        let reference = bits(&ys[0])?;
        let same = ys[1..timed].iter().map(bits).collect::<Result<Vec<_>, _>>()?.iter().all(|b| *b == reference);
        out.push(MatvecRow { what, ty, rows, cols, slots, bytes, us, same });
    }
    Ok(out)
}

/// The card's device-to-device copy rate (read + write bytes per second) over `mib` MiB, for floors.
pub fn copy_bandwidth(gpu: &Gpu, mib: usize) -> Result<f64, CudaError> {
    let n = mib << 18; // f32 elements
    let (a, mut b) = (Buf::<f32>::zeros(gpu, n)?, Buf::<f32>::zeros(gpu, n)?);
    let copy = |b: &mut Buf<f32>| b.copy_from(gpu, 0, &a, n);
    copy(&mut b)?;
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    start.record(&gpu.stream).check("recording an event")?;
    for _ in 0..10 {
        copy(&mut b)?;
    }
    end.record(&gpu.stream).check("recording an event")?;
    gpu.sync()?;
    let secs = start.elapsed_ms(&end).check("reading an event")? as f64 / 1e3;
    Ok(10.0 * 2.0 * (n * 4) as f64 / secs)
}
