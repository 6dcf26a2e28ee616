//! Parity checks: GPU kernels against the CPU contract (and against themselves across window sizes),
//! compared byte for byte. Each returns the number of cases checked, or the first difference.

use strata_gguf::SplitMix64;
use strata_model::layers::hc::{hc_read as cpu_read, hc_write as cpu_write};
use strata_model::weights::MoeWeights;

use crate::ops::hc::{HcGpu, HcScratch, HcVariant, MAX_T};
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::select::check::normal;
pub use crate::select::check::{
    gpu_read, inputs, random_hc, random_hc_as, topk_case, topk_case_of, Inputs, Pattern, ReadOut,
};

pub type Outcome = Result<usize, String>;

/// Bit equality of two outputs. A NaN made by arithmetic (∞ − ∞, 0·∞) has the hardware's own payload —
/// an x86 CPU's default NaN is 0xffc00000, an NVIDIA GPU's 0x7fffffff — so two NaNs count as equal; every
/// other value must match bit for bit.
fn same(what: &str, a: &[f32], b: &[f32]) -> Result<(), String> {
    match a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan())) {
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

/// The norms' epsilons the parity tools take in turn: the released model's, and another a file may give
/// (attention.layer_norm_rms_epsilon reaches every rms norm, on the device as a kernel argument).
pub const EPSILONS: [f32; 2] = [1e-6, 1e-5];

/// `gr_parity`: the GPU read against the CPU reference, T = 1..8, with and without the pending write and
/// the inject rows, at the given geometries, with each of [`EPSILONS`].
/// The variants the engine runs on this card (the plan's): the tools that check the engine's own path
/// (GDN, MoE, attention, the whole pass) upload their weights with them.
fn plan_variants(gpu: &Gpu) -> crate::ops::variants::Variants {
    crate::select::plan::plan(gpu).variants()
}

pub fn gr_parity(gpu: &Gpu, dims: &[(usize, usize, usize)], seed: u64) -> Outcome {
    let mut cases = 0;
    use strata_gguf::GgmlType::{BF16, F32, Q8_0};
    // BF16 weights in every variant; F32 and Q8_0 (the `_f32` kernels) with and without inject.
    let kinds = [(BF16, true), (BF16, false), (F32, true), (Q8_0, false)];
    for &(n, hc, r) in dims {
        for ((ty, inject), eps) in kinds.into_iter().zip(EPSILONS.into_iter().cycle()) {
            let w = random_hc_as(ty, n, hc, r, inject, seed ^ (n as u64) ^ (inject as u64));
            let wg = HcGpu::upload(gpu, &w, hc, eps, HcVariant::PLAIN).map_err(|e| e.to_string())?;
            let s = HcScratch::new(gpu, n, hc, r).map_err(|e| e.to_string())?;
            for (v, t) in HcVariant::ALL.into_iter().flat_map(|v| (1..=MAX_T).map(move |t| (v, t))) {
                for pending in [false, true] {
                    let x = inputs(n, hc, t, seed.wrapping_add((t * 31 + pending as usize) as u64));
                    let (r_gpu, mixed_gpu, inj_gpu) = gpu_read(gpu, v, &wg, &s, &x, t, pending, false)?;
                    let (r_cpu, mixed_cpu, inj_cpu) = cpu_reads(&w, (hc, eps), &x, t, pending);
                    let case =
                        format!("{} {ty} n {n} r {r} T {t} pending {pending} inject {inject} eps {eps:e}", v.name());
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

/// The CPU's reads of `t` tokens' streams `x` (after the pending write where `pending`): R, mixed, inj.
fn cpu_reads(
    w: &strata_model::weights::HcWeights,
    (hc, eps): (usize, f32),
    x: &Inputs,
    t: usize,
    pending: bool,
) -> ReadOut {
    let n = x.y.len() / t;
    let (mut r, mut mixed, mut inj) = (x.r.clone(), Vec::new(), Vec::new());
    for k in 0..t {
        let rk = &mut r[k * hc * n..(k + 1) * hc * n];
        if pending {
            cpu_write(rk, &x.y[k * n..(k + 1) * n], &x.inj[k * hc..(k + 1) * hc]);
        }
        let read = cpu_read(rk, w, hc, eps);
        mixed.extend(read.mixed);
        inj.extend(read.inject);
    }
    (r, mixed, inj)
}

/// `gr_long_parity`: the read of a long prompt window by hc.cu's long-window kernels (ops/hc.rs
/// `hc_read_long`, `STRATA_HC_LONG`) against the CPU token by token: windows of 9, 40 and 100 tokens (a
/// partial group of 32 in each), with and without the pending write, BF16 weights with inject rows and
/// F32 ones without, in place.
pub fn gr_long_parity(gpu: &Gpu, dims: &[(usize, usize, usize)], seed: u64) -> Outcome {
    use crate::ops::hc::{hc_read_long, Pending};
    use strata_gguf::GgmlType::{BF16, F32};
    let e = |e: crate::CudaError| e.to_string();
    let mut cases = 0;
    for &(n, hc, r) in dims {
        for ((ty, inject), eps) in [(BF16, true), (F32, false)].into_iter().zip(EPSILONS) {
            let w = random_hc_as(ty, n, hc, r, inject, seed ^ (n as u64) ^ 0x10e6);
            let wg = HcGpu::upload(gpu, &w, hc, eps, HcVariant::SPLIT).map_err(e)?;
            for (t, pending) in [9, 40, 100].into_iter().flat_map(|t| [(t, false), (t, true)]) {
                let x = inputs(n, hc, t, seed.wrapping_add((t * 7 + pending as usize) as u64));
                let (rb, y, inj) = (Buf::from_host(gpu, &x.r), Buf::from_host(gpu, &x.y), Buf::from_host(gpu, &x.inj));
                let (rb, y, inj) = (rb.map_err(e)?, y.map_err(e)?, inj.map_err(e)?);
                let s = HcScratch::window(gpu, (n, hc, r), t).map_err(e)?;
                let p = pending.then_some(Pending::of(&y, &inj));
                hc_read_long(gpu, &wg, (rb.ptr(gpu), rb.ptr(gpu)), p, t, &s).map_err(e)?;
                let (r_cpu, mixed_cpu, inj_cpu) = cpu_reads(&w, (hc, eps), &x, t, pending);
                let case = format!("long {ty} n {n} r {r} T {t} pending {pending} inject {inject}");
                same(&format!("{case}: R"), &rb.read(gpu, t * hc * n).map_err(e)?, &r_cpu)?;
                same(&format!("{case}: mixed"), &s.mixed.read(gpu, t * n).map_err(e)?, &mixed_cpu)?;
                if inject {
                    same(&format!("{case}: inj"), &s.inj.read(gpu, t * hc).map_err(e)?, &inj_cpu)?;
                }
                cases += 1;
            }
        }
    }
    Ok(cases)
}

/// `gr_multi_parity`: a window of T tokens against T single-token calls, in place and out of place.
pub fn gr_multi_parity(gpu: &Gpu, n: usize, hc: usize, r: usize, seed: u64) -> Outcome {
    let w = random_hc(n, hc, r, true, seed);
    let eps = EPSILONS[1];
    let wg = HcGpu::upload(gpu, &w, hc, eps, HcVariant::PLAIN).map_err(|e| e.to_string())?;
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
                let read = cpu_read(&r_cpu, &w, hc, eps);
                same(&format!("{case}: R vs CPU"), &r1, &r_cpu)?;
                same(&format!("{case}: mixed vs CPU"), &m1, &read.mixed)?;
                same(&format!("{case}: inj vs CPU"), &i1, &read.inject)?;
            }
            cases += 1;
        }
    }
    Ok(cases)
}

/// The device's argmax against ops/topk.rs's on rows built to find order mistakes: ties at the top (the
/// lowest id wins), NaN (ranked as 0), ±0, ±∞, the best first or last, every value equal.
fn argmax_cases(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_model::ops::topk::argmax;
    let mut rng = SplitMix64::new(seed ^ 0xa9a9);
    let mut cases = 0;
    for n in [1usize, 31, 1000, 1024, 1025, 4099, 248_320] {
        let normal_row: Vec<f32> = (0..n).map(|_| normal(&mut rng)).collect();
        let mut rows = vec![normal_row.clone(), vec![1.5; n], vec![f32::NAN; n]];
        let mut tie = normal_row.clone();
        let top = tie.iter().cloned().fold(f32::MIN, f32::max);
        for k in [n / 2, n - 1, n / 3] {
            tie[k] = top; // equal to the best: the lowest of these ids wins
        }
        rows.push(tie);
        let mut last = vec![-1.0f32; n];
        last[n - 1] = 0.0;
        rows.push(last);
        let mut special: Vec<f32> = (0..n).map(|i| -((i % 97) as f32) - 1.0).collect();
        for (i, v) in [f32::NAN, -0.0, 0.0, f32::NEG_INFINITY].into_iter().enumerate() {
            special[(i * 7919) % n] = v; // NaN ranks as 0, equal to ±0: the lowest of their ids wins
        }
        rows.push(special.clone());
        special[(11 * 7919) % n] = f32::INFINITY;
        rows.push(special);
        for (r, row) in rows.iter().enumerate() {
            let v = Buf::from_host(gpu, row).map_err(|e| e.to_string())?;
            let (got, want) = (crate::ops::argmax::argmax(gpu, &v, n).map_err(|e| e.to_string())?, argmax(row));
            if got != want {
                return Err(format!("argmax of {n} values, row kind {r}: device {got}, CPU {want}"));
            }
            cases += 1;
        }
    }
    Ok(cases)
}

/// `sample_parity`: the device's draw (sample.cu) against ops/sample.rs's, token for token, on rows built
/// to find mistakes in each step: ties across the K-th key (the lowest ids are taken), non-finite logits
/// (never drawn; all of them: greedy), every value equal, a vocabulary's worth of logits; top-k 0, 1, 40
/// and past the 4,096 cap; top-p 1, 0.9, 1e-6; temperatures from 0.05 to 100 and 0 (greedy); uniform
/// numbers at 0, the middle and just below 1.
pub fn sample_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_model::ops::sample::{sample, uniform_f32, SampleParams};
    let mut rng = SplitMix64::new(seed ^ 0x5a3e);
    let mut cases = 0;
    for n in [1usize, 7, 1000, 5000, 248_320] {
        let normal_row: Vec<f32> = (0..n).map(|_| 3.0 * normal(&mut rng)).collect();
        // Values on a coarse grid: many equal keys, so the K-th key is shared by several ids.
        let coarse: Vec<f32> = normal_row.iter().map(|v| (v * 2.0).round() / 2.0).collect();
        let mut odd = normal_row.clone();
        for (i, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0].into_iter().enumerate() {
            odd[(i * 7919) % n] = v;
        }
        let rows = [normal_row, coarse, odd, vec![0.25; n], vec![f32::NAN; n]];
        for (r, row) in rows.iter().enumerate() {
            let v = Buf::from_host(gpu, row).map_err(|e| e.to_string())?;
            for (temperature, top_k, top_p) in [
                (1.0, 0, 1.0),
                (0.7, 40, 0.9),
                (0.05, 0, 0.9),
                (100.0, 5000, 1.0),
                (1.0, 1, 1.0),
                (1.3, 0, 1e-6),
                (0.0, 40, 0.9),
            ] {
                for u in [0.0f32, 0.5, 0.999_999_94, uniform_f32(rng.next_u64())] {
                    let p = SampleParams { temperature, top_k, top_p, u };
                    let got = crate::ops::sample::sample(gpu, &v, n, &p).map_err(|e| e.to_string())?;
                    let want = sample(row, &p);
                    if got != want {
                        return Err(format!("draw from {n} values, row kind {r}, {p:?}: device {got}, CPU {want}"));
                    }
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

// ---------------------------------------------------------------- QSA

/// `qsa_topk_parity --selftest`: every pattern; 2K–524K cells under 9K–524K capacities; decode calls
/// (consecutive cells) and prompt calls (scattered), Q = 1..8; then the greedy token's argmax (top-1 of
/// the same order) on rows of up to a vocabulary's length.
pub fn qsa_topk_selftest(gpu: &Gpu, seed: u64) -> Outcome {
    let (top_k, kpool) = (2048, 4);
    let mut cases = argmax_cases(gpu, seed)?;
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
            for v in crate::ops::qsa::ScoresVariant::ALL {
                crate::ops::qsa::scores(gpu, v, &kb, &qb, &sb, &nb, n_blocks, di, hi, q, n_blocks).map_err(e)?;
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
            let mut scratch = crate::ops::qsa::TopkScratch::new(gpu, q, n_blocks).map_err(e)?;
            let out_stride = top_k + kpool - 1;
            let nc = Buf::from_host(gpu, &cells.iter().map(|&c| c as i32).collect::<Vec<_>>()).map_err(e)?;
            for v in crate::ops::qsa::TopkVariant::available(gpu) {
                let out: Buf<u32> = Buf::zeros(gpu, q * out_stride).map_err(e)?;
                let count = Buf::from_host(gpu, &vec![-1i32; q]).map_err(e)?;
                crate::ops::qsa::topk(
                    gpu,
                    v,
                    &sb,
                    n_blocks,
                    &nc,
                    top_k,
                    kpool,
                    &out,
                    out_stride,
                    &count,
                    q,
                    &mut scratch,
                )
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

/// `matvec_parity`: `W·x` on the GPU against `Matrix::matvec` on the CPU, bit for bit, for every weight
/// type with a GPU kernel, T = 1..8 tokens, random blocks with valid scales and inputs with zeros, −0 and
/// huge values, at a few shapes.
pub fn matvec_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_gguf::{quant::random_blocks, GgmlType, TensorBytes};
    use strata_model::ops::matvec::Matrix;
    let e = |e: crate::CudaError| e.to_string();
    let mut rng = SplitMix64::new(seed);
    let mut cases = 0;
    for ty in GgmlType::ALL.into_iter().filter(|&t| crate::ops::layout::supported(t)) {
        // The last two: enough rows for the window kernels taking 2 and 4 rows a warp on a card of up to
        // 132 multiprocessors (qdot.rs `share`), each with a last warp of one row.
        for (rows, cols) in [(37usize, 64usize), (300, 256), (257, 2560), (4301, 256), (8501, 256)] {
            if !cols.is_multiple_of(ty.block_size()) {
                continue;
            }
            let bytes = random_blocks(ty, rows * cols / ty.block_size(), &mut rng);
            let m = Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) };
            let wg = crate::ops::matvec::MatrixGpu::upload(gpu, &m, &Default::default()).map_err(e)?;
            let bytes = random_blocks(ty, rows * cols / ty.block_size(), &mut rng);
            let other_m = Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) };
            let other = crate::ops::matvec::MatrixGpu::upload(gpu, &other_m, &Default::default()).map_err(e)?;
            for t in 1..=crate::ops::matvec::MAX_T {
                let mut x: Vec<f32> = (0..t * cols).map(|_| normal(&mut rng)).collect();
                x[0] = 0.0;
                x[1] = -0.0;
                x[cols / 2] = 1e30;
                let xb = Buf::from_host(gpu, &x).map_err(e)?;
                let want: Vec<Vec<f32>> = (0..t).map(|k| m.matvec(&x[k * cols..(k + 1) * cols])).collect();
                // The § qdot types take one kernel whatever the layout asked for: checked once.
                let layouts = &crate::ops::layout::Layout::ALL
                    [..if crate::ops::qdot::uses(ty) { 1 } else { crate::ops::layout::Layout::ALL.len() }];
                for &layout in layouts {
                    let yb: Buf<f32> = Buf::zeros(gpu, t * rows).map_err(e)?;
                    crate::ops::matvec::matvec_with(gpu, layout, &wg, &xb, &yb, t).map_err(e)?;
                    let got = yb.read(gpu, t * rows).map_err(e)?;
                    for (k, want) in want.iter().enumerate() {
                        let case = format!("{ty} {rows}×{cols} {} layout, token {k} of {t}", layout.name());
                        same(&case, &got[k * rows..(k + 1) * rows], want)?;
                    }
                    // The same product as the second of a pair in one launch (the first: the other matrix).
                    let (ya, yb2): (Buf<f32>, Buf<f32>) =
                        (Buf::zeros(gpu, t * rows).map_err(e)?, Buf::zeros(gpu, t * rows).map_err(e)?);
                    crate::ops::matvec::matvec_two_with(gpu, layout, (&other, &ya), (&wg, &yb2), &xb, t).map_err(e)?;
                    let (got_a, got_b) = (ya.read(gpu, t * rows).map_err(e)?, yb2.read(gpu, t * rows).map_err(e)?);
                    for (k, want) in want.iter().enumerate() {
                        let case = format!("{ty} {rows}×{cols} {} layout, pair, token {k} of {t}", layout.name());
                        same(&case, &got_b[k * rows..(k + 1) * rows], want)?;
                        let want_a = other_m.matvec(&x[k * cols..(k + 1) * cols]);
                        same(&format!("{case} (first)"), &got_a[k * rows..(k + 1) * rows], &want_a)?;
                    }
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

/// A draft head over a draft vocabulary (ops/draft.rs) against the CPU decoder's: the rows of a list of
/// tokens gathered on the card give the products the CPU gives over the rows it copies
/// (`Matrix::gather_rows`), and the draft's token read through the list is the CPU's argmax over them
/// mapped the same way. Head types (Q6_K, Q8_0 and the float ones), lists spread over the rows, the
/// first and last rows among them, and rows the argmax ties on.
pub fn draft_head_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_gguf::{quant::random_blocks, GgmlType, TensorBytes};
    use strata_model::ops::matvec::Matrix;
    use strata_model::ops::topk::argmax;
    let e = |e: crate::CudaError| e.to_string();
    let mut rng = SplitMix64::new(seed);
    let mut cases = 0;
    for ty in [GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
        let (rows, cols) = (3001usize, 256usize);
        let mut bytes = random_blocks(ty, rows * cols / ty.block_size(), &mut rng);
        // Row 2999 a copy of row 7, so two rows of a list may tie.
        let rb = bytes.len() / rows;
        bytes.copy_within(7 * rb..8 * rb, 2999 * rb);
        let m = Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) };
        let head = crate::ops::matvec::MatrixGpu::upload(gpu, &m, &Default::default()).map_err(e)?;
        for stride in [1u32, 3, 7] {
            let ids: Vec<u32> = (0..rows as u32).filter(|i| i % stride == 0 || *i == 2999 || *i == 3000).collect();
            let vocab = crate::ops::draft::DraftHead::gather(gpu, &head, &ids).map_err(e)?;
            let rows_cpu = m.gather_rows(&ids).ok_or("the CPU's gather")?;
            let x: Vec<f32> = (0..cols).map(|_| normal(&mut rng)).collect();
            let mut want = vec![0f32; ids.len()];
            rows_cpu.matvec_rows(&x, 0, &mut want);
            let (xb, yb) = (Buf::from_host(gpu, &x).map_err(e)?, Buf::<f32>::zeros(gpu, ids.len()).map_err(e)?);
            crate::ops::matvec::matvec(gpu, &vocab.rows, &xb, &yb, 1).map_err(e)?;
            same(&format!("{ty} draft head of every {stride}"), &yb.read(gpu, ids.len()).map_err(e)?, &want)?;
            let tokens = Buf::<i32>::zeros(gpu, 3).map_err(e)?;
            let best = crate::ops::argmax::argmax_start(gpu, &yb, ids.len()).map_err(e)?;
            vocab.put(gpu, &best, &tokens, 2).map_err(e)?;
            let (got, want) = (tokens.read(gpu, 3).map_err(e)?[2], ids[argmax(&want) as usize]);
            if got as u32 != want {
                return Err(format!("{ty} draft head of every {stride}: the card drafts {got}, the CPU {want}"));
            }
            cases += 1;
        }
    }
    Ok(cases)
}

/// Random weights of a GDN layer: Q8_0 and BF16 projections scaled to keep activations near unit size,
/// gates and conv taps as a model's are.
fn random_gdn(
    n: usize,
    (s, hk, hv): (usize, usize, usize),
    k: usize,
    rng: &mut SplitMix64,
) -> strata_model::weights::GdnWeights {
    use strata_gguf::{quant::quantize, GgmlType, TensorBytes};
    use strata_model::ops::matvec::Matrix;
    let channels = 2 * hk * s + hv * s;
    let q8 = |rows: usize, cols: usize, rng: &mut SplitMix64| {
        let x: Vec<f32> = (0..rows * cols).map(|_| normal(rng) / (cols as f32).sqrt()).collect();
        let mut bytes = Vec::new();
        quantize(GgmlType::Q8_0, &x, &mut bytes).expect("whole blocks");
        Matrix { ty: GgmlType::Q8_0, rows, cols, bytes: TensorBytes::from_vec(bytes) }
    };
    let uniform = |lo: f32, hi: f32, n: usize, rng: &mut SplitMix64| -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect()
    };
    strata_model::weights::GdnWeights {
        qkv: q8(channels, n, rng),
        gate: crate::select::check::bf16_matrix(hv * s, n, 1.0 / (n as f32).sqrt(), rng),
        conv: uniform(-0.6, 0.6, k * channels, rng),
        alpha: crate::select::check::bf16_matrix(hv, n, 1.0 / (n as f32).sqrt(), rng),
        beta: crate::select::check::bf16_matrix(hv, n, 1.0 / (n as f32).sqrt(), rng),
        a: uniform(-4.0, -0.5, hv, rng),
        dt_bias: uniform(-2.0, 0.0, hv, rng),
        norm: (0..s).map(|_| 1.0 + 0.05 * normal(rng)).collect(),
        out: q8(n, hv * s, rng),
    }
}

/// A matrix's values re-encoded as `ty` (F32 keeps them exactly; a quantized type rounds them).
fn retype(m: &strata_model::ops::matvec::Matrix, ty: strata_gguf::GgmlType) -> strata_model::ops::matvec::Matrix {
    if m.ty == ty {
        return m.clone();
    }
    let mut values = vec![0f32; m.rows * m.cols];
    for (r, row) in values.chunks_mut(m.cols).enumerate() {
        m.row(r, row);
    }
    let mut bytes = Vec::new();
    strata_gguf::quant::quantize(ty, &values, &mut bytes).expect("whole blocks");
    strata_model::ops::matvec::Matrix {
        ty,
        rows: m.rows,
        cols: m.cols,
        bytes: strata_gguf::TensorBytes::from_vec(bytes),
    }
}

/// `gdn_parity`: a GDN layer on the GPU over a 13-token sequence in windows of T = 1..8 against the CPU's
/// `gdn` token by token: every output row and the final conv tail and state matrices, bit for bit, at a
/// small geometry and the full model's (n 2560, S 128, Hk 16, Hv 48, K 4).
pub fn gdn_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_model::layers::gdn::gdn_dims;
    use strata_model::state::GdnState;
    let e = |e: crate::CudaError| e.to_string();
    let mut rng = SplitMix64::new(seed);
    let mut cases = 0;
    // α and β rows as BF16 and F32 (their logits made inside the gates' warps) and as Q8_0 (by the products).
    use strata_gguf::GgmlType::{BF16, F32, Q8_0};
    let cases_of = [
        (64usize, (16usize, 2usize, 4usize), 4usize, BF16),
        (2560, (128, 16, 48), 4, BF16),
        (64, (16, 2, 4), 4, Q8_0),
        (256, (32, 2, 8), 4, F32),
    ];
    for ((n, dims, k, ab), eps) in cases_of.into_iter().zip(EPSILONS.into_iter().cycle()) {
        let (s, hk, hv) = dims;
        let mut w = random_gdn(n, dims, k, &mut rng);
        w.alpha = retype(&w.alpha, ab);
        w.beta = retype(&w.beta, ab);
        let wg = crate::ops::gdn::GdnGpu::upload(gpu, &w, dims, eps, &plan_variants(gpu)).map_err(e)?;
        let len = 13;
        let xs: Vec<f32> = (0..len * n).map(|_| normal(&mut rng)).collect();
        let channels = 2 * hk * s + hv * s;
        let mut cpu = GdnState { conv: vec![0.0; (k - 1) * channels], m: vec![0.0; hv * s * s] };
        // Each token's output and the state after it (a verify window's rewind slots are checked on it).
        let (mut want, mut after) = (Vec::new(), Vec::new());
        for i in 0..len {
            want.push(gdn_dims(&xs[i * n..(i + 1) * n], &w, dims, eps, &mut cpu));
            after.push(cpu.clone());
        }
        for t in 1..=MAX_T {
            let mut st = wg.new_state(gpu).map_err(e)?;
            // Every second window size keeps its rewind slots (a verify window's): the outputs are the
            // same, and slot j holds the state after the window's token j.
            let keep = t % 2 == 0;
            if keep {
                st.keep_slots(gpu).map_err(e)?;
            }
            for (wi, window) in xs.chunks(t * n).enumerate() {
                let tt = window.len() / n;
                let xb = Buf::from_host(gpu, window).map_err(e)?;
                let y = crate::ops::gdn::gdn(gpu, &wg, &mut st, &xb, tt, keep).map_err(e)?;
                let y = y.read(gpu, tt * n).map_err(e)?;
                for j in 0..tt {
                    let i = wi * t + j;
                    same(&format!("GDN n {n}, window of {t}, token {i}"), &y[j * n..(j + 1) * n], &want[i])?;
                }
                let Some(slots) = st.slots.as_ref().filter(|_| keep) else { continue };
                for j in 0..tt - 1 {
                    let (a, ml, tl) = (&after[wi * t + j], cpu.m.len(), cpu.conv.len());
                    let what = format!("GDN n {n}, window of {t}, rewind slot {j}");
                    same(&format!("{what}: state"), &slots.m.read_at(gpu, j * ml, ml).map_err(e)?, &a.m)?;
                    same(&format!("{what}: conv tail"), &slots.tail.read_at(gpu, j * tl, tl).map_err(e)?, &a.conv)?;
                }
            }
            same(
                &format!("GDN n {n}, window of {t}: conv tail"),
                &st.tail.read(gpu, cpu.conv.len()).map_err(e)?,
                &cpu.conv,
            )?;
            same(&format!("GDN n {n}, window of {t}: state"), &st.m.read(gpu, cpu.m.len()).map_err(e)?, &cpu.m)?;
            cases += 1;
        }
    }
    Ok(cases)
}

/// Random MoE weights: F32 router, experts of type `ty` (random blocks, valid scales) stacked, a Q8_0
/// shared expert of its own width, a BF16 shared gate.
fn random_moe(n: usize, e: usize, f: usize, fs: usize, ty: strata_gguf::GgmlType, rng: &mut SplitMix64) -> MoeWeights {
    use strata_gguf::{
        quant::{quantize, random_blocks},
        GgmlType, TensorBytes,
    };
    use strata_model::ops::matvec::Matrix;
    use strata_model::weights::Stacked;
    let q = |ty: GgmlType, rows: usize, cols: usize, rng: &mut SplitMix64| {
        let x: Vec<f32> = (0..rows * cols).map(|_| 2.0 * normal(rng) / (cols as f32).sqrt()).collect();
        let mut bytes = Vec::new();
        quantize(ty, &x, &mut bytes).expect("whole blocks");
        Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) }
    };
    let experts = |rows: usize, cols: usize, rng: &mut SplitMix64| Stacked {
        m: Matrix {
            ty,
            rows: rows * e,
            cols,
            bytes: TensorBytes::from_vec(random_blocks(ty, rows * e * cols / ty.block_size(), rng)),
        },
        stride: rows,
        offset: 0,
    };
    MoeWeights {
        router: q(GgmlType::F32, e, n, rng),
        gate_exps: experts(f, n, rng),
        up_exps: experts(f, n, rng),
        down_exps: experts(n, f, rng),
        gate_shexp: q(GgmlType::Q8_0, fs, n, rng),
        up_shexp: q(GgmlType::Q8_0, fs, n, rng),
        down_shexp: q(GgmlType::Q8_0, n, fs, rng),
        shexp_gate: crate::select::check::bf16_matrix(1, n, 1.0 / (n as f32).sqrt(), rng),
    }
}

/// `moe_parity`: the MoE on the GPU for T = 1..8 tokens (and prompt windows of 9 to 300 tokens, placed,
/// `window_cases`, and grouped by expert, `grouped_cases`) against the CPU's `moe` token by token (the routed
/// experts and every output value, bit for bit), with the experts in each type the full model uses.
pub fn moe_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use strata_gguf::GgmlType;
    let e = |e: crate::CudaError| e.to_string();
    let mut rng = SplitMix64::new(seed);
    let mut cases = 0;
    // The third has 100 experts, a last chunk of 4 (the router holds whole chunks of 8 a lane); its expert
    // width stays 256, a whole block of the 256-element types. The last
    // geometry routes 10 of 512 (the full model's), with the router's rows repeated in pairs so that every
    // probability ties with its neighbour's: the lower index must come first. The one before has the full
    // model's widths (2,560 and 640: rows of 80 and 20 pieces of 32, which leave a warp's lanes idle in the
    // last round), in Q2_0 alone (640 is no whole number of the others' 256-element blocks).
    let all = [GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q4_K];
    for (n, ne, k, f, fs, ties) in [
        (256usize, 16usize, 4usize, 256usize, 512usize, false),
        (1024, 64, 6, 256, 768, false),
        (256, 100, 7, 256, 64, false),
    ]
    .into_iter()
    .chain([(2560, 8, 4, 640, 640, false), (256, 512, 10, 64, 64, true)])
    {
        let q2_0_only = ties || f % 256 != 0;
        for ty in if q2_0_only { &all[..1] } else { &all[..] }.iter().copied() {
            let mut w = random_moe(n, ne, f, fs, ty, &mut rng);
            // The shared expert's gate row as F32 for the second geometry (BF16 elsewhere): the routing
            // warp makes its logit for both.
            if n == 1024 {
                w.shexp_gate = retype(&w.shexp_gate, GgmlType::F32);
            }
            if ties {
                let mut b = w.router.bytes.to_vec();
                let row = 4 * n;
                for r in (0..ne).step_by(2) {
                    b.copy_within(r * row..(r + 1) * row, (r + 1) * row);
                }
                w.router.bytes = strata_gguf::TensorBytes::from_vec(b);
            }
            let wg = crate::ops::moe::MoeGpu::upload(gpu, &w, (k, f), &plan_variants(gpu), None).map_err(e)?;
            // The same block placed (docs/PLACEMENT.md): a third of its experts held on the card, the rest
            // computed by the host's thread, answering through a mailbox; the same bits.
            let mailbox = std::sync::Arc::new(crate::ops::misses::MissBox::new(gpu, k, n).map_err(e)?);
            let server = mailbox.serve(vec![w.clone()], f, None);
            let held: Vec<usize> = (0..ne).filter(|x| x % 3 == 1).collect();
            let place = crate::ops::moe::Placement { held, index: 0, mailbox, stream: None };
            let placed =
                crate::ops::moe::MoeGpu::upload(gpu, &w, (k, f), &plan_variants(gpu), Some(place)).map_err(e)?;
            for (t, wg) in (1..=MAX_T).flat_map(|t| [(t, &wg), (t, &placed)]) {
                let x: Vec<f32> = (0..t * n).map(|_| normal(&mut rng)).collect();
                let xb = Buf::from_host(gpu, &x).map_err(e)?;
                let out = crate::ops::moe::moe(gpu, wg, &xb, t).map_err(e)?;
                let how = if std::ptr::eq(wg, &placed) { "placed" } else { "on the card" };
                each_token_is_the_cpus(gpu, &w, (k, f), &x, out, &format!("MoE {ty} n {n} ({how}), {t} tokens"))?;
                cases += 1;
            }
            if let Some(err) = server.error() {
                return Err(format!("MoE {ty} n {n}: the host's experts: {err}"));
            }
            cases += window_cases(gpu, &w, (k, f), &mut rng).map_err(|m| format!("MoE {ty} n {n}: {m}"))?;
            cases += guess_cases(gpu, &w, (k, f), &mut rng).map_err(|m| format!("MoE {ty} n {n}: {m}"))?;
            cases += grouped_cases(gpu, &w, &wg, (k, f), &mut rng).map_err(|m| format!("MoE {ty} n {n}: {m}"))?;
        }
    }
    Ok(cases)
}

/// The block's output `y` and chosen experts `ids` for the tokens `x` (read back from the card) against the
/// CPU's `moe` token by token: the same experts, and every output value bit for bit.
fn each_token_is_the_cpus(
    gpu: &Gpu,
    w: &MoeWeights,
    (k, f): (usize, usize),
    x: &[f32],
    (y, ids): (Buf<f32>, Buf<i32>),
    what: &str,
) -> Result<(), String> {
    use strata_model::layers::moe::{moe, route};
    let e = |e: crate::CudaError| e.to_string();
    let n = w.router.cols;
    let t = x.len() / n;
    let (y, ids) = (y.read(gpu, t * n).map_err(e)?, ids.read(gpu, t * k).map_err(e)?);
    for j in 0..t {
        let xj = &x[j * n..(j + 1) * n];
        let (want, _) = route(w, xj, k);
        let got: Vec<usize> = ids[j * k..(j + 1) * k].iter().map(|&i| i as usize).collect();
        if got != want {
            return Err(format!("{what}, token {j}: experts {got:?}, CPU {want:?}"));
        }
        same(&format!("{what}, token {j}"), &y[j * n..(j + 1) * n], &moe(w, xj, k, f))?;
    }
    Ok(())
}

/// The block on the card, its prompt windows past a tile run with the slots grouped by expert
/// (ops/moe/grouped.rs), against the CPU token by token: windows of 9, 40 and 300 tokens (300 puts many
/// groups on each of a few experts, and one or two on each of 512). None where the settings or the
/// experts' type turn the grouping off.
fn grouped_cases(
    gpu: &Gpu,
    w: &MoeWeights,
    wg: &crate::ops::moe::MoeGpu,
    (k, f): (usize, usize),
    rng: &mut SplitMix64,
) -> Outcome {
    use crate::ops::moe::{grouped_can, moe_grouped};
    let e = |e: crate::CudaError| e.to_string();
    let n = w.router.cols;
    let mut cases = 0;
    for t in [9, 40, 300] {
        if !grouped_can(gpu, wg, t) {
            continue;
        }
        let x: Vec<f32> = (0..t * n).map(|_| normal(rng)).collect();
        let out = moe_grouped(gpu, wg, &Buf::from_host(gpu, &x).map_err(e)?, t).map_err(e)?;
        each_token_is_the_cpus(gpu, w, (k, f), &x, out, &format!("window of {t}, grouped by expert"))?;
        cases += 1;
    }
    Ok(cases)
}

/// The block placed with its experts' pages locked for the bus, its prompt windows past a tile bringing
/// each expert they need once (ops/moe/window.rs), against the CPU token by token: windows of 13, 40 and
/// 300 tokens (300 puts more than a chunk's slots on some experts: the host's, as are the experts outside
/// the locked pages). None where the settings turn the windows off.
fn window_cases(gpu: &Gpu, w: &MoeWeights, (k, f): (usize, usize), rng: &mut SplitMix64) -> Outcome {
    use crate::ops::moe::{moe_window, window_fits, Staging};
    let e = |e: crate::CudaError| e.to_string();
    let n = w.router.cols;
    let Locked { pinned, stream, placed, server, .. } = locked(gpu, w, (k, f), (1, 0, 0))?;
    let stagings = [Staging::new(gpu, &placed, 1).map_err(e)?, Staging::new(gpu, &placed, 2).map_err(e)?];
    let mut cases = 0;
    // One staging area, and two (a chunk's copies beside the chunk before's gathers).
    for (t, staging) in
        [(13, &stagings[0]), (40, &stagings[0]), (300, &stagings[0]), (40, &stagings[1]), (300, &stagings[1])]
    {
        if !window_fits(gpu, &placed, staging, t) {
            continue;
        }
        let x: Vec<f32> = (0..t * n).map(|_| normal(rng)).collect();
        let out = moe_window(gpu, &placed, staging, &Buf::from_host(gpu, &x).map_err(e)?, t).map_err(e)?;
        let what = format!("window of {t} (experts {}..{} streamed)", stream.lo, stream.hi);
        each_token_is_the_cpus(gpu, w, (k, f), &x, out, &what)?;
        cases += 1;
    }
    if let Some(err) = server.error() {
        return Err(format!("the host's experts in windows: {err}"));
    }
    drop(pinned);
    Ok(cases)
}

/// A block placed with its experts' pages locked for the card (a third of its experts held, the host's
/// thread answering through a mailbox), with `slots` stream and `guesses` guess slots over them.
struct Locked {
    pinned: crate::runtime::pinned::PinnedRanges,
    stream: crate::ops::moe::StreamFrom,
    placed: crate::ops::moe::MoeGpu,
    server: crate::ops::misses::MissServer,
    held: Vec<usize>,
}

fn locked(
    gpu: &Gpu,
    w: &MoeWeights,
    (k, f): (usize, usize),
    (slots, guesses, second): (usize, usize, usize),
) -> Result<Locked, String> {
    let e = |e: crate::CudaError| e.to_string();
    let ranges: Vec<(usize, usize)> = [&w.gate_exps, &w.up_exps, &w.down_exps]
        .iter()
        .map(|s| (s.m.bytes.as_ptr() as usize, s.m.bytes.len()))
        .collect();
    let pinned = crate::runtime::pinned::PinnedRanges::register(&gpu.ctx, &ranges, true).map_err(e)?;
    let Some(stream) = crate::backend::weights::stream_from(&pinned, w, (slots, guesses, second)) else {
        return Err("no expert lies whole in the locked pages".into());
    };
    let mailbox = std::sync::Arc::new(crate::ops::misses::MissBox::new(gpu, k, w.router.cols).map_err(e)?);
    let server = mailbox.serve(vec![w.clone()], f, None);
    let held: Vec<usize> = (0..w.router.rows).filter(|x| x % 3 == 1).collect();
    let place = crate::ops::moe::Placement { held: held.clone(), index: 0, mailbox, stream: Some(stream) };
    let placed = crate::ops::moe::MoeGpu::upload(gpu, w, (k, f), &plan_variants(gpu), Some(place)).map_err(e)?;
    Ok(Locked { pinned, stream, placed, server, held })
}

/// The block placed with its experts' pages locked, two stream slots and six guess slots, the last two a
/// second guess's (ops/moe/guess.rs): the experts guessed on inputs of t tokens, then the block run on
/// one of them, against the CPU token by token: both guesses on the block's own input, the first on
/// an unrelated one and the second on the block's, both elsewhere, and not guessed again (the last
/// guesses' slots still named). The table holds the first four experts of the first guess's routing, in
/// slot order, that the card does not hold and can stream, then the first two of the second's that are
/// not among them.
fn guess_cases(gpu: &Gpu, w: &MoeWeights, (k, f): (usize, usize), rng: &mut SplitMix64) -> Outcome {
    use crate::ops::moe::{guess, guess_second, moe};
    use strata_model::layers::moe::route;
    let e = |e: crate::CudaError| e.to_string();
    let n = w.router.cols;
    let Locked { pinned, stream, placed, server, held } = locked(gpu, w, (k, f), (2, 6, 2))?;
    // The first `m` streamable experts of `x`'s routing (t tokens, slot order) not in `taken`, then −1s.
    let named = |x: &[f32], t: usize, taken: &[i32], m: usize| -> Vec<i32> {
        let mut want: Vec<i32> = Vec::new();
        for j in 0..t {
            for ex in route(w, &x[j * n..(j + 1) * n], k).0 {
                let ok = (stream.lo..stream.hi).contains(&ex) && !held.contains(&ex);
                let ex = ex as i32;
                if ok && !want.contains(&ex) && !taken.contains(&ex) && want.len() < m {
                    want.push(ex);
                }
            }
        }
        want.resize(m, -1);
        want
    };
    let mut cases = 0;
    for t in [1, 3, 8] {
        let x: Vec<f32> = (0..t * n).map(|_| normal(rng)).collect();
        let other: Vec<f32> = (0..t * n).map(|_| normal(rng)).collect();
        let xb = Buf::from_host(gpu, &x).map_err(e)?;
        for on in [Some((&x, &x)), Some((&other, &x)), Some((&other, &other)), None] {
            if let Some((g1, g2)) = on {
                guess(gpu, &placed, &Buf::from_host(gpu, g1).map_err(e)?, t).map_err(e)?;
                guess_second(gpu, &placed, &Buf::from_host(gpu, g2).map_err(e)?, t).map_err(e)?;
                let mut want = named(g1, t, &[], 4);
                want.extend(named(g2, t, &want.clone(), 2));
                let got = placed.guessed(gpu).map_err(e)?;
                if got.as_ref() != Some(&want) {
                    return Err(format!("guesses of {t}: table {got:?}, expected {want:?}"));
                }
            }
            let out = moe(gpu, &placed, &xb, t).map_err(e)?;
            let how = match on {
                Some((g1, g2)) => format!("first {}, second {}", own(g1, &x), own(g2, &x)),
                None => "stale".into(),
            };
            each_token_is_the_cpus(gpu, w, (k, f), &x, out, &format!("guessed {how}, {t} tokens"))?;
            cases += 1;
        }
    }
    if let Some(err) = server.error() {
        return Err(format!("the host's experts beside guesses: {err}"));
    }
    drop(pinned);
    Ok(cases)
}

/// Where a guess was made, said of its input against the block's.
fn own(g: &[f32], x: &[f32]) -> &'static str {
    if std::ptr::eq(g, x) {
        "on its input"
    } else {
        "elsewhere"
    }
}

/// A config with the attention geometry (the other fields as the tiny preset's; `qsa` reads only these).
fn attn_config(d: crate::ops::attn::AttnDims, n: usize) -> strata_model::Config {
    strata_model::Config {
        n_layer: 1,
        kinds: vec![],
        n_embd: n,
        vocab: 16,
        hc: 4,
        hc_rank: 8,
        n_head: d.hq,
        n_head_kv: d.hkv,
        head_dim: d.dh,
        eps: d.eps,
        rope_dim: d.rot,
        rope_base: 1e7,
        context_length: 4096,
        rope_scaling: None,
        idx_heads: d.hi,
        idx_dim: d.di,
        idx_top_k: d.top_k,
        ssm_state: 8,
        ssm_groups: 1,
        ssm_heads: 1,
        conv_kernel: 4,
        n_expert: 1,
        n_expert_used: 1,
        expert_ff: 8,
        shexp_ff: 8,
        ple: None,
        nextn_layers: 0,
        notes: vec![],
    }
}

fn random_attn(n: usize, d: crate::ops::attn::AttnDims, rng: &mut SplitMix64) -> strata_model::weights::AttnWeights {
    use strata_gguf::{quant::quantize, GgmlType, TensorBytes};
    use strata_model::ops::matvec::Matrix;
    use strata_model::weights::{AttnWeights, IndexerWeights};
    // The full model's types (synth's tensors.rs): q Q4_K, k Q8_0, v Q4_0, o IQ4_NL, so the products'
    // shared and published inputs (STRATA_QKV_ONCE) meet both orders of the codes.
    let matrix = |ty: GgmlType, rows: usize, cols: usize, rng: &mut SplitMix64| {
        let x: Vec<f32> = (0..rows * cols).map(|_| normal(rng) / (cols as f32).sqrt()).collect();
        let mut bytes = Vec::new();
        quantize(ty, &x, &mut bytes).expect("whole blocks");
        Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) }
    };
    let gamma = |len: usize, rng: &mut SplitMix64| (0..len).map(|_| 1.0 + 0.1 * normal(rng)).collect::<Vec<f32>>();
    AttnWeights {
        q: matrix(GgmlType::Q4_K, d.hq * 2 * d.dh, n, rng),
        k: matrix(GgmlType::Q8_0, d.hkv * d.dh, n, rng),
        v: matrix(GgmlType::Q4_0, d.hkv * d.dh, n, rng),
        q_norm: gamma(d.dh, rng),
        k_norm: gamma(d.dh, rng),
        o: matrix(GgmlType::IQ4_NL, n, d.hq * d.dh, rng),
        indexer: Some(IndexerWeights {
            q: crate::select::check::bf16_matrix(d.hi * d.di, n, 1.0 / (n as f32).sqrt(), rng),
            k: crate::select::check::bf16_matrix(d.di, n, 1.0 / (n as f32).sqrt(), rng),
            q_norm: gamma(d.di, rng),
            k_norm: gamma(d.di, rng),
        }),
    }
}

/// `attn_parity`: an attention layer on the GPU over a token sequence in windows of T = 1, 3, 8 against the
/// CPU's `qsa` token by token, every output row bit for bit: QSA (blocks of 4, selection sparse after the
/// first 20 cells) and dense, with fp16, int8 and f32 KV, at a small geometry and the full model's head
/// geometry (dh 256, rope 64, indexer 4 × 128).
pub fn attn_parity(gpu: &Gpu, seed: u64) -> Outcome {
    use crate::ops::attn::{attention, rope_rows, AttnDims, AttnGpu, Cells};
    use strata_model::kv::KvMode;
    use strata_model::layers::qsa::qsa;
    use strata_model::ops::rope::{Rope, RopeScaling};
    use strata_model::state::QsaState;
    let e = |e: crate::CudaError| e.to_string();
    let mut rng = SplitMix64::new(seed);
    let mut cases = 0;
    let [eps0, eps1] = EPSILONS;
    let small = AttnDims { hq: 4, hkv: 2, dh: 64, rot: 16, hi: 4, di: 32, top_k: 16, eps: eps1 };
    let full = AttnDims { hq: 8, hkv: 2, dh: 256, rot: 64, hi: 4, di: 128, top_k: 16, eps: eps0 };
    for (n, d, len) in [(256usize, small, 60usize), (2560, full, 44)] {
        let w = random_attn(n, d, &mut rng);
        let wg = AttnGpu::upload(gpu, &w, d, &plan_variants(gpu)).map_err(e)?;
        let c = attn_config(d, n);
        let rope = Rope::new(d.rot, 1e7, RopeScaling::None);
        let xs: Vec<f32> = (0..len * n).map(|_| normal(&mut rng)).collect();
        for kv in [KvMode::F16, KvMode::Int8, KvMode::F32] {
            for (ratio, cells) in [(4usize, Cells::Qsa(4)), (0, Cells::Dense(usize::MAX))] {
                let mut st = QsaState::new(&c, kv);
                let want: Vec<Vec<f32>> =
                    (0..len).map(|p| qsa(&xs[p * n..(p + 1) * n], &w, &c, &mut st, p, ratio, &rope)).collect();
                for t in [1usize, 3, 8] {
                    let mut gs = wg.new_state(gpu, kv, len).map_err(e)?;
                    for (wi, window) in xs.chunks(t * n).enumerate() {
                        let tt = window.len() / n;
                        let xb = Buf::from_host(gpu, window).map_err(e)?;
                        let y = attention(
                            gpu,
                            &wg,
                            &mut gs,
                            &xb,
                            tt,
                            cells,
                            (&rope, &rope_rows(gpu, &rope, wi * t..wi * t + tt).map_err(e)?),
                        )
                        .map_err(e)?;
                        let y = y.read(gpu, tt * n).map_err(e)?;
                        for j in 0..tt {
                            let p = wi * t + j;
                            same(
                                &format!("attention n {n}, {kv:?}, {cells:?}, window {t}, token {p}"),
                                &y[j * n..(j + 1) * n],
                                &want[p],
                            )?;
                        }
                    }
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

/// `forward_parity`: the whole forward pass (the one layer loop over the CUDA back-end) against the CPU's,
/// logits bit for bit, for `len` tokens in windows of every T = 1..8 with the given KV mode; and, when the
/// model has an MTP layer, its draft from every token's streams (the same windows, its own cache).
pub fn forward_parity(
    gpu: &std::sync::Arc<Gpu>,
    model: &strata_model::Model,
    len: usize,
    kv: strata_model::KvMode,
) -> Outcome {
    use strata_model::backend::{mtp_step, trunk, Backend};
    let e = |e: crate::CudaError| e.to_string();
    let vocab = model.config.vocab as u32;
    // One token more than the trunk runs: the next token of the last draft.
    let tokens: Vec<u32> = (0..=len as u32).map(|i| (i * 7919 + 13) % (vocab - 3) + 3).collect();
    let has_mtp = model.weights.mtp.is_some();
    let mut cpu = model.new_state(kv).map_err(|e| e.to_string())?;
    let mut cpu_mtp = model.mtp_cache(kv);
    let (mut want, mut want_mtp) = (Vec::new(), Vec::new());
    for p in 0..len {
        let (logits, r) = model.forward_hidden(&mut cpu, tokens[p]);
        want.push(logits);
        if let Some((draft, _)) = model.mtp_draft(&mut cpu_mtp, &r, tokens[p + 1], p) {
            want_mtp.push(draft);
        }
    }
    let mut cuda = crate::backend::forward::CudaForward::upload(gpu.clone(), model, plan_variants(gpu)).map_err(e)?;
    if has_mtp {
        cuda.upload_mtp().map_err(e)?;
    }
    let mut cases = 0;
    // Every window the kernels take, then two longer (a prompt's, STRATA_PROMPT_WINDOW): each op over tiles
    // of 8, the last one short.
    for t in (1..=crate::ops::matvec::MAX_T).chain([13, 40]) {
        let mut st = cuda.new_state(kv, len).map_err(e)?;
        let mut mtp = if has_mtp { Some(cuda.mtp_cache(kv, len).map_err(e)?) } else { None };
        for (wi, window) in tokens[..len].chunks(t).enumerate() {
            // The trunk as one step on the card (a graph unless STRATA_GRAPH=0), the head after it.
            let (fin, r) = cuda.step(|| trunk(&cuda, &model.config, &mut st, window, wi * t)).map_err(e)?;
            let logits = cuda.logits(&fin).map_err(e)?;
            for (j, row) in logits.iter().enumerate() {
                let p = wi * t + j;
                same(&format!("forward, {kv:?}, windows of {t}, token {p}"), row, &want[p])?;
            }
            // The MTP layer's draft from each token's streams, its next token given (spec §9).
            if let Some(cache) = &mut mtp {
                let next = &tokens[wi * t + 1..wi * t + 1 + window.len()];
                let (drafts, _) = mtp_step(&cuda, cache, &r, next, wi * t).map_err(e)?;
                for (j, row) in drafts.iter().enumerate() {
                    let p = wi * t + j;
                    same(&format!("MTP draft, {kv:?}, windows of {t}, token {p}"), row, &want_mtp[p])?;
                }
            }
            // Placed (STRATA_HOST_EXPERTS): the expert cache re-ranks and swaps between passes.
            cuda.end_pass().map_err(e)?;
        }
        cases += 1 + usize::from(has_mtp);
    }
    // A placed pass whose cache never changed would check nothing of the swaps.
    if let Some((hits, misses, swaps)) = cuda.cache_counts() {
        eprintln!("expert cache: {hits} routings held, {misses} computed by the host, {swaps} experts copied in");
        if swaps == 0 || hits == 0 || misses == 0 {
            return Err(format!("placed, yet the cache held {hits}, missed {misses} and swapped {swaps}"));
        }
    }
    Ok(cases)
}
