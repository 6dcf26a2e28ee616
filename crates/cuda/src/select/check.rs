//! The self-checks the runtime makes before it trusts a kernel variant on a card (plan.rs), and the
//! random inputs and timing they share with the parity tools and benches (which import from here, never the
//! other way round): every variant is run on random and edge-case inputs against the reference kernel or the
//! CPU, bit for bit, then timed by device events.

use cudarc::driver::sys::CUevent_flags;
use strata_gguf::{quant::f32_to_bf16, GgmlType, SplitMix64, TensorBytes};
use strata_model::ops::matvec::Matrix;
use strata_model::weights::HcWeights;

use crate::ops::hc::{hc_read_with, HcGpu, HcScratch, HcVariant, Pending};
use crate::ops::layout::Layout;
use crate::ops::matrix::MAX_T;
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};

pub fn normal(rng: &mut SplitMix64) -> f32 {
    ((0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0) * 3f32.sqrt()
}

pub fn bf16_matrix(rows: usize, cols: usize, std: f32, rng: &mut SplitMix64) -> Matrix {
    let bytes: Vec<u8> = (0..rows * cols).flat_map(|_| f32_to_bf16(normal(rng) * std).to_le_bytes()).collect();
    Matrix { ty: GgmlType::BF16, rows, cols, bytes: TensorBytes::from_vec(bytes) }
}

/// Random weights of one HC read (n per stream, hc streams, rank r), scaled as a model's are, BF16.
pub fn random_hc(n: usize, hc: usize, r: usize, inject: bool, seed: u64) -> HcWeights {
    random_hc_as(GgmlType::BF16, n, hc, r, inject, seed)
}

/// [`random_hc`] with the matrices of type `ty` (BF16, F32 or Q8_0: what the converter writes).
pub fn random_hc_as(ty: GgmlType, n: usize, hc: usize, r: usize, inject: bool, seed: u64) -> HcWeights {
    let mut rng = SplitMix64::new(seed);
    let wide = n * hc;
    let norm = (0..wide).map(|_| 1.0 + 0.05 * normal(&mut rng)).collect();
    let mut m = |rows: usize, cols: usize| {
        let std = 1.0 / (cols as f32).sqrt();
        if ty == GgmlType::BF16 {
            return bf16_matrix(rows, cols, std, &mut rng);
        }
        let x: Vec<f32> = (0..rows * cols).map(|_| normal(&mut rng) * std).collect();
        let mut bytes = Vec::new();
        strata_gguf::quant::quantize(ty, &x, &mut bytes).expect("rows of whole blocks");
        Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) }
    };
    let (down, up) = (m(r, wide), m(wide, r));
    HcWeights { norm, down, up, inject: inject.then(|| m(hc, wide)), kept: None }.keep()
}

/// A GPU read's outputs: R after the pending write, mixed, inj.
pub type ReadOut = (Vec<f32>, Vec<f32>, Vec<f32>);

/// R, y and inj of `t` tokens.
pub struct Inputs {
    pub r: Vec<f32>,
    pub y: Vec<f32>,
    pub inj: Vec<f32>,
}

/// Random R, y and inj for `t` tokens, with a zero, a tiny and a huge stream among them.
pub fn inputs(n: usize, hc: usize, t: usize, seed: u64) -> Inputs {
    let mut rng = SplitMix64::new(seed);
    let mut r: Vec<f32> = (0..t * hc * n).map(|_| normal(&mut rng) * 2.0).collect();
    // Edge cases: a stream of zeros (rms of 0 + eps), a tiny one, a huge one.
    if t * hc >= 3 {
        r[..n].fill(0.0);
        r[n..2 * n].iter_mut().for_each(|v| *v *= 1e-20);
        r[2 * n..3 * n].iter_mut().for_each(|v| *v *= 1e15);
    }
    Inputs {
        r,
        y: (0..t * n).map(|_| normal(&mut rng)).collect(),
        inj: (0..t * hc).map(|_| normal(&mut rng) * 3.0).collect(),
    }
}

/// The GPU read of `t` tokens: (R after the pending write, mixed, inj).
#[allow(clippy::too_many_arguments)]
pub fn gpu_read(
    gpu: &Gpu,
    v: HcVariant,
    w: &HcGpu,
    s: &HcScratch,
    x: &Inputs,
    t: usize,
    pending: bool,
    in_place: bool,
) -> Result<ReadOut, String> {
    let e = |e: crate::CudaError| e.to_string();
    let (n, hc) = (w.n, w.hc);
    let r_in = Buf::from_host(gpu, &x.r).map_err(e)?;
    let r_out: Buf<f32> = Buf::zeros(gpu, x.r.len()).map_err(e)?;
    let y = Buf::from_host(gpu, &x.y).map_err(e)?;
    let inj = Buf::from_host(gpu, &x.inj).map_err(e)?;
    let out = if in_place { r_in.ptr(gpu) } else { r_out.ptr(gpu) };
    let p = pending.then_some(Pending::of(&y, &inj));
    hc_read_with(gpu, v, w, r_in.ptr(gpu), out, p, t, s, None).map_err(e)?;
    let r_after = if in_place { r_in.read(gpu, t * hc * n) } else { r_out.read(gpu, t * hc * n) }.map_err(e)?;
    let inj_len = if w_has_inject(w) { t * hc } else { 0 };
    Ok((r_after, s.mixed.read(gpu, t * n).map_err(e)?, s.inj.read(gpu, inj_len.max(1)).map_err(e)?[..inj_len].to_vec()))
}

fn w_has_inject(w: &HcGpu) -> bool {
    w.has_inject()
}

/// Score patterns for the top-k checks.
#[derive(Clone, Copy, Debug)]
pub enum Pattern {
    Continuous,
    Levels64,
    AllEqual,
    Special,
}

pub fn pattern_scores(p: Pattern, n: usize, rng: &mut SplitMix64) -> Vec<f32> {
    (0..n)
        .map(|_| match p {
            Pattern::Continuous => normal(rng) * 10.0,
            Pattern::Levels64 => (rng.below(64) as f32) * 0.25,
            Pattern::AllEqual => 1.5,
            Pattern::Special => {
                const S: [f32; 7] = [f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1.0, -1.0];
                if rng.below(4) == 0 {
                    S[rng.below(7) as usize]
                } else {
                    normal(rng)
                }
            }
        })
        .collect()
}

const CANARY: u32 = 0xDEAD_BEEF;

/// One top-k call: Q queries with `n_cells[q]` cells each, scores of `capacity / kpool` blocks per query;
/// GPU ids against the CPU's, and the canaries past every query's output untouched.
pub fn topk_case(
    gpu: &Gpu,
    n_cells: &[usize],
    capacity: usize,
    top_k: usize,
    kpool: usize,
    pattern: Pattern,
    seed: u64,
) -> Result<(), String> {
    topk_case_of(gpu, &crate::ops::qsa::TopkVariant::available(gpu), n_cells, capacity, top_k, kpool, pattern, seed)
}

/// [`topk_case`] for the given variants only.
#[allow(clippy::too_many_arguments)]
pub fn topk_case_of(
    gpu: &Gpu,
    variants: &[crate::ops::qsa::TopkVariant],
    n_cells: &[usize],
    capacity: usize,
    top_k: usize,
    kpool: usize,
    pattern: Pattern,
    seed: u64,
) -> Result<(), String> {
    use strata_model::ops::topk::select_blocks;
    let e = |e: crate::CudaError| e.to_string();
    let q = n_cells.len();
    let stride = capacity / kpool;
    let mut rng = SplitMix64::new(seed);
    let scores = pattern_scores(pattern, q * stride, &mut rng);
    let width_max = top_k + kpool - 1;
    let out_stride = width_max + 16;
    let s = Buf::from_host(gpu, &scores).map_err(e)?;
    let nc = Buf::from_host(gpu, &n_cells.iter().map(|&v| v as i32).collect::<Vec<_>>()).map_err(e)?;
    let mut scratch = crate::ops::qsa::TopkScratch::new(gpu, q, stride).map_err(e)?;
    for &v in variants {
        // Fresh canaries and an impossible count for every variant: nothing is inherited from the last.
        let out = Buf::from_host(gpu, &vec![CANARY; q * out_stride]).map_err(e)?;
        let count = Buf::from_host(gpu, &vec![-1i32; q]).map_err(e)?;
        crate::ops::qsa::topk(gpu, v, &s, stride, &nc, top_k, kpool, &out, out_stride, &count, q, &mut scratch)
            .map_err(e)?;
        let ids = out.read(gpu, q * out_stride).map_err(e)?;
        let counts = count.read(gpu, q).map_err(e)?;
        for (k, &cells) in n_cells.iter().enumerate() {
            let want = select_blocks(&scores[k * stride..k * stride + cells / kpool], cells, top_k / kpool, kpool);
            if counts[k] < 0 || counts[k] as usize > out_stride {
                return Err(format!("{} query {k}: count {} not written or out of range", v.name(), counts[k]));
            }
            let got = &ids[k * out_stride..k * out_stride + counts[k] as usize];
            let case = format!("{} {pattern:?} query {k} of {q}, {cells} cells, capacity {capacity}", v.name());
            if got != want.as_slice() {
                let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                return Err(format!("{case}: ids differ at {first} (got {} ids, want {})", got.len(), want.len()));
            }
            if ids[k * out_stride + want.len()..(k + 1) * out_stride].iter().any(|&v| v != CANARY) {
                return Err(format!("{case}: wrote past its selection"));
            }
        }
    }
    Ok(())
}

/// µs per call of `f` over `reps` back-to-back calls (after two warm-ups), by events.
pub fn time_calls(gpu: &Gpu, reps: usize, f: &dyn Fn() -> Result<(), CudaError>) -> Result<f64, CudaError> {
    f()?;
    f()?;
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    start.record(&gpu.stream).check("recording an event")?;
    for _ in 0..reps {
        f()?;
    }
    end.record(&gpu.stream).check("recording an event")?;
    gpu.sync()?;
    Ok(start.elapsed_ms(&end).check("reading an event")? as f64 * 1e3 / reps as f64)
}

/// For the start-up choice: `Some(µs)` of scorer `v` at Q = 4 over 131K cells if its scores equal the
/// butterfly kernel's for every Q = 1..8 (40K cells, random and ±0/large inputs), `None` if they differ.
pub fn scores_check(gpu: &Gpu, v: crate::ops::qsa::ScoresVariant) -> Result<Option<f64>, CudaError> {
    use crate::ops::qsa::{scores, ScoresVariant};
    let (di, hi) = (128, 4);
    let mut rng = strata_gguf::SplitMix64::new(77);
    let mut vals = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|i| {
                if i % 97 == 0 {
                    -0.0
                } else if i % 89 == 0 {
                    1e20
                } else {
                    rng.uniform() - 0.5
                }
            })
            .collect()
    };
    let check_blocks = 40_000 / 4;
    let kb = Buf::from_host(gpu, &vals(check_blocks * di))?;
    for q in 1..=8 {
        let qb = Buf::from_host(gpu, &vals(q * hi * di))?;
        let nb = Buf::from_host(gpu, &vec![check_blocks as i32; q])?;
        let reference: Buf<f32> = Buf::zeros(gpu, q * check_blocks)?;
        let out: Buf<f32> = Buf::zeros(gpu, q * check_blocks)?;
        scores(gpu, ScoresVariant::Butterfly, &kb, &qb, &reference, &nb, check_blocks, di, hi, q, check_blocks)?;
        scores(gpu, v, &kb, &qb, &out, &nb, check_blocks, di, hi, q, check_blocks)?;
        let (a, b) = (reference.read(gpu, q * check_blocks)?, out.read(gpu, q * check_blocks)?);
        if a.iter().zip(&b).any(|(x, y)| x.to_bits() != y.to_bits()) {
            return Ok(None);
        }
    }
    let (q, n_blocks) = (4, 131_072 / 4);
    let kb = Buf::from_host(gpu, &vals(n_blocks * di))?;
    let qb = Buf::from_host(gpu, &vals(q * hi * di))?;
    let nb = Buf::from_host(gpu, &vec![n_blocks as i32; q])?;
    let out: Buf<f32> = Buf::zeros(gpu, q * n_blocks)?;
    Ok(Some(time_calls(gpu, 20, &|| scores(gpu, v, &kb, &qb, &out, &nb, n_blocks, di, hi, q, n_blocks))?))
}

/// For the start-up choice: `Some(µs)` of top-k `v` at Q = 4 over 131K cells if its ids equal the CPU's
/// for Q = 1..8 (40K cells; continuous, 64-level and special scores), `None` otherwise.
pub fn topk_check(gpu: &Gpu, v: crate::ops::qsa::TopkVariant) -> Result<Option<f64>, CudaError> {
    for q in 1..=8 {
        let cells: Vec<usize> = (0..q).map(|k| 40_000 - q + 1 + k).collect();
        for p in [Pattern::Continuous, Pattern::Levels64, Pattern::Special] {
            if topk_case_of(gpu, &[v], &cells, 40_960, 2048, 4, p, 5 + q as u64).is_err() {
                return Ok(None);
            }
        }
    }
    let cells = [131_072 - 3, 131_072 - 2, 131_072 - 1, 131_072];
    let q = 4;
    let stride = 131_072 / 4;
    let mut rng = strata_gguf::SplitMix64::new(5);
    let sb = Buf::from_host(gpu, &(0..q * stride).map(|_| rng.uniform()).collect::<Vec<f32>>())?;
    let cb = Buf::from_host(gpu, &cells)?;
    let ob: Buf<u32> = Buf::zeros(gpu, q * 2051)?;
    let count: Buf<i32> = Buf::zeros(gpu, q)?;
    let scratch = std::cell::RefCell::new(crate::ops::qsa::TopkScratch::new(gpu, q, stride)?);
    let us = time_calls(gpu, 20, &|| {
        crate::ops::qsa::topk(gpu, v, &sb, stride, &cb, 2048, 4, &ob, 2051, &count, q, &mut scratch.borrow_mut())
    })?;
    Ok(Some(us))
}

/// One shape of the start-up choice of a type's matvec layout: random weights of type `ty` made once and
/// uploaded as enough sets to overflow the L2, then each layout checked against the block layout's bits
/// (T = 1..`max_t`) and timed at T = `time_t` as a decode step meets it: calls back to back, each on the
/// next set, so every call reads its weights from memory while the one before still runs. (Each call alone
/// after emptying the L2 ranked the layouts otherwise: `stream` first for Q4_K and `staged` for Q8_0,
/// while a step at 4K ran at 126.5 tok/s with those and 128.9 with `staged` and `warp`, H200 2026-12-01.)
pub struct ShapeCase {
    gather: bool,
    rows: usize,
    cols: usize,
    w: Vec<crate::ops::matvec::MatrixGpu>,
    x: Buf<f32>,
    ids: Buf<i32>,
    y: Buf<f32>,
    max_t: usize,
    time_t: usize,
}

/// The routed slots a gather check takes per token.
const SLOTS: usize = 10;

impl ShapeCase {
    /// (rows of one expert, cols, experts): the experts only count for `gather`.
    pub fn new(
        gpu: &Gpu,
        ty: GgmlType,
        gather: bool,
        (rows, cols, experts): (usize, usize, usize),
        (max_t, time_t): (usize, usize),
    ) -> Result<ShapeCase, CudaError> {
        let mut rng = SplitMix64::new(0x3a7 ^ ty as u64 ^ cols as u64);
        let all_rows = if gather { rows * experts } else { rows };
        let bytes = strata_gguf::quant::random_blocks(ty, all_rows * cols / ty.block_size(), &mut rng);
        let m = Matrix { ty, rows: all_rows, cols, bytes: TensorBytes::from_vec(bytes) };
        let first = crate::ops::matvec::MatrixGpu::upload(gpu, &m, &Default::default())?;
        let mut w = (1..FLUSH_BYTES.div_ceil(m.bytes.len()).clamp(2, 256))
            .map(|_| first.duplicate(gpu))
            .collect::<Result<Vec<_>, _>>()?;
        w.insert(0, first);
        let x: Vec<f32> = (0..MAX_T * cols).map(|_| normal(&mut rng)).collect();
        let ids: Vec<i32> = (0..MAX_T * SLOTS).map(|i| ((i * 7 + i / SLOTS) % experts) as i32).collect();
        let y = Buf::<f32>::zeros(gpu, MAX_T * SLOTS * rows)?;
        let (x, ids) = (Buf::from_host(gpu, &x)?, Buf::from_host(gpu, &ids)?);
        Ok(ShapeCase { gather, rows, cols, w, x, ids, y, max_t, time_t })
    }

    fn run(&self, gpu: &Gpu, layout: Layout, t: usize, set: usize) -> Result<(), CudaError> {
        use crate::ops::matvec::{matvec_gather_with, matvec_with, Gather};
        let (w, x, y) = (&self.w[set % self.w.len()], &self.x, &self.y);
        if self.gather {
            let g = Gather { stride: self.rows, offset: 0, rows: self.rows };
            matvec_gather_with(gpu, layout, w, g, x, (self.cols, 0), y, &self.ids, (t, SLOTS))
        } else {
            matvec_with(gpu, layout, w, x, y, t)
        }
    }

    /// `Some(µs)` of `layout` if it gives the block layout's bits here, `None` if it does not.
    pub fn check(&self, gpu: &Gpu, layout: Layout) -> Result<Option<f64>, CudaError> {
        let outputs = |t: usize| if self.gather { t * SLOTS * self.rows } else { t * self.rows };
        let run = |l: Layout, t: usize, set: usize| self.run(gpu, l, t, set);
        check_then_time(gpu, layout, (&self.y, &outputs), (self.max_t, self.time_t, self.w.len()), &run)
    }
}

/// `Some(µs)` of `layout` if `run(layout, t, 0)` writes into `y` the block layout's bits (its first
/// `outputs(t)` values) for T = 1..=`max_t`, timed at T = `time_t` back to back with each call on the next
/// of `sets` weight sets (so each reads its weights from memory while the one before runs, as in a step);
/// `None` if the bits differ.
pub(crate) fn check_then_time(
    gpu: &Gpu,
    layout: Layout,
    (y, outputs): (&Buf<f32>, &dyn Fn(usize) -> usize),
    (max_t, time_t, sets): (usize, usize, usize),
    run: &dyn Fn(Layout, usize, usize) -> Result<(), CudaError>,
) -> Result<Option<f64>, CudaError> {
    for t in 1..=max_t {
        run(Layout::Block, t, 0)?;
        let reference = y.read(gpu, outputs(t))?;
        run(layout, t, 0)?;
        if y.read(gpu, outputs(t))?.iter().zip(&reference).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Ok(None);
        }
    }
    let set = std::cell::Cell::new(0);
    Ok(Some(time_calls(gpu, sets.max(20), &|| {
        set.set(set.get() + 1);
        run(layout, time_t, set.get() % sets)
    })?))
}

/// The shapes of the start-up choice of a type's layout for one token (`gather`: the experts' products),
/// the time being their sum. Dense: a step's big projections, tall (8192 × 2560, checked for T = 1..8)
/// and with long rows (2560 × 6144), and short rows (2048 × 768). At 2048 × 2560 alone the `stream` layout
/// won for Q4_K on the H200 and then lost by 4.5 µs at the model's 10240 × 2560, and Q8_0 took `staged`,
/// 1.6 µs slower than `warp` at its 2560 × 6144 (2026-12-01). Experts: 10 of 16 experts' 640 × 2560
/// rows (T = 1..8), and 10 of 4 experts' 2048 × 768.
pub fn matvec_layout_cases(gpu: &Gpu, ty: GgmlType, gather: bool) -> Result<Vec<ShapeCase>, CudaError> {
    /// (rows, cols, experts) and (checked up to T, timed at T).
    type Shape = ((usize, usize, usize), (usize, usize));
    let shapes: &[Shape] = if gather {
        &[((640, 2560, 16), (MAX_T, 1)), ((2048, 768, 4), (1, 1))]
    } else {
        &[((8192, 2560, 1), (MAX_T, 1)), ((2560, 6144, 1), (1, 1)), ((2048, 768, 1), (1, 1))]
    };
    shapes.iter().map(|&(shape, ts)| ShapeCase::new(gpu, ty, gather, shape, ts)).collect()
}

/// For the start-up choice of a type's layout for a prompt window's dense products: a 2048 × 2560 product
/// of 8 tokens, checked for T = 1..8.
pub fn matvec_window_case(gpu: &Gpu, ty: GgmlType) -> Result<ShapeCase, CudaError> {
    ShapeCase::new(gpu, ty, false, (2048, 2560, 1), (MAX_T, MAX_T))
}

/// More than any card's L2 (the H200's is 60 MB).
pub(crate) const FLUSH_BYTES: usize = 256 << 20;

/// µs per call of `f`, each call timed alone with the L2 emptied first (a write over `flush`).
pub(crate) fn time_cold(
    gpu: &Gpu,
    reps: usize,
    flush: &mut Buf<u8>,
    f: &dyn Fn() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    f()?;
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
    let mut ms = 0.0;
    for _ in 0..reps {
        flush.zero(gpu)?;
        start.record(&gpu.stream).check("recording an event")?;
        f()?;
        end.record(&gpu.stream).check("recording an event")?;
        gpu.sync()?;
        ms += start.elapsed_ms(&end).check("reading an event")? as f64;
    }
    Ok(ms * 1e3 / reps as f64)
}
