//! Parity checks: GPU kernels against the CPU contract (and against themselves across window sizes),
//! compared byte for byte. Each returns the number of cases checked, or the first difference.

use strata_gguf::{quant::f32_to_bf16, GgmlType, SplitMix64, TensorBytes};
use strata_model::layers::hc::{hc_read as cpu_read, hc_write as cpu_write};
use strata_model::ops::matvec::Matrix;
use strata_model::weights::HcWeights;

use crate::buf::Buf;
use crate::device::Gpu;
use crate::hc::{hc_read_with, HcGpu, HcScratch, HcVariant, Pending, MAX_T};

pub type Outcome = Result<usize, String>;

fn normal(rng: &mut SplitMix64) -> f32 {
    ((0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0) * 3f32.sqrt()
}

fn bf16_matrix(rows: usize, cols: usize, std: f32, rng: &mut SplitMix64) -> Matrix {
    let bytes: Vec<u8> = (0..rows * cols).flat_map(|_| f32_to_bf16(normal(rng) * std).to_le_bytes()).collect();
    Matrix { ty: GgmlType::BF16, rows, cols, bytes: TensorBytes::from_vec(bytes) }
}

/// Random weights of one HC read (n per stream, hc streams, rank r), scaled as a model's are.
pub fn random_hc(n: usize, hc: usize, r: usize, inject: bool, seed: u64) -> HcWeights {
    let mut rng = SplitMix64::new(seed);
    let wide = n * hc;
    HcWeights {
        norm: (0..wide).map(|_| 1.0 + 0.05 * normal(&mut rng)).collect(),
        down: bf16_matrix(r, wide, 1.0 / (wide as f32).sqrt(), &mut rng),
        up: bf16_matrix(wide, r, 1.0 / (r as f32).sqrt(), &mut rng),
        inject: inject.then(|| bf16_matrix(hc, wide, 1.0 / (wide as f32).sqrt(), &mut rng)),
    }
}

fn same(what: &str, a: &[f32], b: &[f32]) -> Result<(), String> {
    match a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()) {
        None if a.len() == b.len() => Ok(()),
        None => Err(format!("{what}: lengths {} and {}", a.len(), b.len())),
        Some(i) => Err(format!(
            "{what}: element {i} differs: {:e} ({:#010x}) vs {:e} ({:#010x})",
            a[i],
            a[i].to_bits(),
            b[i],
            b[i].to_bits()
        )),
    }
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
    let p = pending.then_some(Pending { y: &y, inj: &inj });
    hc_read_with(gpu, v, w, r_in.ptr(gpu), out, p, t, s, None).map_err(e)?;
    let r_after = if in_place { r_in.read(gpu, t * hc * n) } else { r_out.read(gpu, t * hc * n) }.map_err(e)?;
    let inj_len = if w_has_inject(w) { t * hc } else { 0 };
    Ok((r_after, s.mixed.read(gpu, t * n).map_err(e)?, s.inj.read(gpu, inj_len.max(1)).map_err(e)?[..inj_len].to_vec()))
}

fn w_has_inject(w: &HcGpu) -> bool {
    w.has_inject()
}

/// `gr_parity`: the GPU read against the CPU reference, T = 1..8, with and without the pending write and
/// the inject rows, at the given geometries.
pub fn gr_parity(gpu: &Gpu, dims: &[(usize, usize, usize)], seed: u64) -> Outcome {
    let mut cases = 0;
    for &(n, hc, r) in dims {
        for inject in [true, false] {
            let w = random_hc(n, hc, r, inject, seed ^ (n as u64) ^ (inject as u64));
            let wg = HcGpu::upload(gpu, &w, hc).map_err(|e| e.to_string())?;
            let s = HcScratch::new(gpu, n, hc, r).map_err(|e| e.to_string())?;
            for (v, t) in HcVariant::ALL.into_iter().flat_map(|v| (1..=MAX_T).map(move |t| (v, t))) {
                for pending in [false, true] {
                    let x = inputs(n, hc, t, seed.wrapping_add((t * 31 + pending as usize) as u64));
                    let (r_gpu, mixed_gpu, inj_gpu) = gpu_read(gpu, v, &wg, &s, &x, t, pending, false)?;
                    let (mut r_cpu, mut mixed_cpu, mut inj_cpu) = (x.r.clone(), Vec::new(), Vec::new());
                    for k in 0..t {
                        let rk = &mut r_cpu[k * hc * n..(k + 1) * hc * n];
                        if pending {
                            cpu_write(rk, &x.y[k * n..(k + 1) * n], &x.inj[k * hc..(k + 1) * hc]);
                        }
                        let read = cpu_read(rk, &w, hc);
                        mixed_cpu.extend(read.mixed);
                        inj_cpu.extend(read.inject);
                    }
                    let case = format!("{} n {n} r {r} T {t} pending {pending} inject {inject}", v.name());
                    same(&format!("{case}: R"), &r_gpu, &r_cpu)?;
                    same(&format!("{case}: mixed"), &mixed_gpu, &mixed_cpu)?;
                    same(&format!("{case}: inj"), &inj_gpu, &inj_cpu)?;
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

/// `gr_multi_parity`: a window of T tokens against T single-token calls, in place and out of place.
pub fn gr_multi_parity(gpu: &Gpu, n: usize, hc: usize, r: usize, seed: u64) -> Outcome {
    let w = random_hc(n, hc, r, true, seed);
    let wg = HcGpu::upload(gpu, &w, hc).map_err(|e| e.to_string())?;
    let s = HcScratch::new(gpu, n, hc, r).map_err(|e| e.to_string())?;
    let mut cases = 0;
    for (v, t) in HcVariant::ALL.into_iter().flat_map(|v| (1..=MAX_T).map(move |t| (v, t))) {
        for in_place in [false, true] {
            let x = inputs(n, hc, t, seed.wrapping_add(t as u64));
            let (r_all, m_all, i_all) = gpu_read(gpu, v, &wg, &s, &x, t, true, in_place)?;
            for k in 0..t {
                let one = Inputs {
                    r: x.r[k * hc * n..(k + 1) * hc * n].to_vec(),
                    y: x.y[k * n..(k + 1) * n].to_vec(),
                    inj: x.inj[k * hc..(k + 1) * hc].to_vec(),
                };
                // Single-token calls of the plain variant: a window of any variant must equal them.
                let (r1, m1, i1) = gpu_read(gpu, HcVariant::PLAIN, &wg, &s, &one, 1, true, in_place)?;
                let case = format!("{} T {t} token {k} in_place {in_place}", v.name());
                same(&format!("{case}: R"), &r_all[k * hc * n..(k + 1) * hc * n], &r1)?;
                same(&format!("{case}: mixed"), &m_all[k * n..(k + 1) * n], &m1)?;
                same(&format!("{case}: inj"), &i_all[k * hc..(k + 1) * hc], &i1)?;
                // And the CPU reference for the token.
                let mut r_cpu = one.r.clone();
                cpu_write(&mut r_cpu, &one.y, &one.inj);
                let read = cpu_read(&r_cpu, &w, hc);
                same(&format!("{case}: R vs CPU"), &r1, &r_cpu)?;
                same(&format!("{case}: mixed vs CPU"), &m1, &read.mixed)?;
                same(&format!("{case}: inj vs CPU"), &i1, &read.inject)?;
            }
            cases += 1;
        }
    }
    Ok(cases)
}

// ---------------------------------------------------------------- QSA

/// Score patterns for the top-k parity.
#[derive(Clone, Copy, Debug)]
pub enum Pattern {
    Continuous,
    Levels64,
    AllEqual,
    Special,
}

fn pattern_scores(p: Pattern, n: usize, rng: &mut SplitMix64) -> Vec<f32> {
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
    topk_case_of(gpu, &crate::qsa::TopkVariant::available(gpu), n_cells, capacity, top_k, kpool, pattern, seed)
}

/// [`topk_case`] for the given variants only.
#[allow(clippy::too_many_arguments)]
pub fn topk_case_of(
    gpu: &Gpu,
    variants: &[crate::qsa::TopkVariant],
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
    let mut scratch = crate::qsa::TopkScratch::new(gpu, q, stride).map_err(e)?;
    for &v in variants {
        // Fresh canaries and an impossible count for every variant: nothing is inherited from the last.
        let out = Buf::from_host(gpu, &vec![CANARY; q * out_stride]).map_err(e)?;
        let count = Buf::from_host(gpu, &vec![-1i32; q]).map_err(e)?;
        crate::qsa::topk(gpu, v, &s, stride, &nc, top_k, kpool, &out, out_stride, &count, q, &mut scratch)
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

/// `qsa_topk_parity --selftest`: every pattern; 2K–524K cells under 9K–524K capacities; decode calls
/// (consecutive cells) and prompt calls (scattered), Q = 1..8.
pub fn qsa_topk_selftest(gpu: &Gpu, seed: u64) -> Outcome {
    let (top_k, kpool) = (2048, 4);
    let mut cases = 0;
    let sizes = [
        (2_000, 9_216),
        (2_100, 9_216),
        (9_000, 9_216),
        (33_000, 131_072),
        (131_072, 131_072),
        (420_000, 524_288),
        (524_288, 524_288),
    ];
    for pattern in [Pattern::Continuous, Pattern::Levels64, Pattern::AllEqual, Pattern::Special] {
        for &(ctx, cap) in &sizes {
            for q in [1, 3, 8] {
                let decode: Vec<usize> = (0..q).map(|i| (ctx + i).min(cap)).collect();
                topk_case(gpu, &decode, cap, top_k, kpool, pattern, seed ^ cases as u64)?;
                let mut rng = SplitMix64::new(seed + cases as u64);
                let prompt: Vec<usize> = (0..q).map(|_| 1 + rng.below(ctx as u64) as usize).collect();
                topk_case(gpu, &prompt, cap, top_k, kpool, pattern, seed ^ (cases as u64 + 1))?;
                cases += 2;
            }
        }
    }
    Ok(cases)
}

/// `qsa_parity`: GPU block scores against the CPU's (`block_score`), then the GPU selection of those
/// scores against the CPU's, for Q = 1..8 at the full indexer geometry (4 heads of 128).
pub fn qsa_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_model::layers::qsa::block_score;
    use strata_model::ops::topk::select_blocks;
    let e = |e: crate::CudaError| e.to_string();
    let (di, hi, kpool, top_k) = (128, 4, 4, 2048);
    let mut cases = 0;
    for &ctx in &[3_000usize, 40_000, 131_072] {
        let n_blocks = ctx / kpool;
        let mut rng = SplitMix64::new(seed ^ ctx as u64);
        let keys: Vec<f32> = (0..n_blocks * di).map(|_| normal(&mut rng)).collect();
        let kb = Buf::from_host(gpu, &keys).map_err(e)?;
        for q in 1..=8 {
            let queries: Vec<f32> = (0..q * hi * di).map(|_| normal(&mut rng)).collect();
            let cells: Vec<usize> = (0..q).map(|i| ctx - q + 1 + i).collect();
            let scored: Vec<i32> = cells.iter().map(|&c| (c / kpool) as i32).collect();
            let qb = Buf::from_host(gpu, &queries).map_err(e)?;
            let sb: Buf<f32> = Buf::zeros(gpu, q * n_blocks).map_err(e)?;
            let nb = Buf::from_host(gpu, &scored).map_err(e)?;
            let want: Vec<Vec<f32>> = (0..q)
                .map(|k| {
                    (0..scored[k] as usize)
                        .map(|b| block_score(&queries[k * hi * di..(k + 1) * hi * di], &keys[b * di..(b + 1) * di]))
                        .collect()
                })
                .collect();
            for v in crate::qsa::ScoresVariant::ALL {
                crate::qsa::scores(gpu, v, &kb, &qb, &sb, &nb, n_blocks, di, hi, q, n_blocks).map_err(e)?;
                let got = sb.read(gpu, q * n_blocks).map_err(e)?;
                for (k, w) in want.iter().enumerate() {
                    same(
                        &format!("{} scores, {ctx} cells, query {k} of {q}", v.name()),
                        &got[k * n_blocks..k * n_blocks + w.len()],
                        w,
                    )?;
                }
                cases += 1;
            }
            // The selection of the GPU scores, by every top-k kernel, against the CPU's of the CPU scores
            // (the scores are equal, checked above).
            let mut scratch = crate::qsa::TopkScratch::new(gpu, q, n_blocks).map_err(e)?;
            let out_stride = top_k + kpool - 1;
            let nc = Buf::from_host(gpu, &cells.iter().map(|&c| c as i32).collect::<Vec<_>>()).map_err(e)?;
            for v in crate::qsa::TopkVariant::available(gpu) {
                let out: Buf<u32> = Buf::zeros(gpu, q * out_stride).map_err(e)?;
                let count = Buf::from_host(gpu, &vec![-1i32; q]).map_err(e)?;
                crate::qsa::topk(gpu, v, &sb, n_blocks, &nc, top_k, kpool, &out, out_stride, &count, q, &mut scratch)
                    .map_err(e)?;
                let ids = out.read(gpu, q * out_stride).map_err(e)?;
                let counts = count.read(gpu, q).map_err(e)?;
                for (k, w) in want.iter().enumerate() {
                    let cpu = select_blocks(w, cells[k], top_k / kpool, kpool);
                    let n = counts[k].max(0) as usize;
                    if n > out_stride || ids[k * out_stride..k * out_stride + n] != cpu[..] {
                        return Err(format!(
                            "{} top-k of the scores, {ctx} cells, query {k} of {q}: ids differ from the CPU's",
                            v.name()
                        ));
                    }
                }
                cases += 1;
            }
        }
    }
    Ok(cases)
}
