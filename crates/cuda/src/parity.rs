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

pub struct Inputs {
    r: Vec<f32>,
    y: Vec<f32>,
    inj: Vec<f32>,
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
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>), String> {
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
                let (r1, m1, i1) = gpu_read(gpu, HcVariant::Plain, &wg, &s, &one, 1, true, in_place)?;
                let case = format!("{} T {t} token {k} in_place {in_place}", v.name());
                same(&format!("{case}: R"), &r_all[k * hc * n..(k + 1) * hc * n], &r1)?;
                same(&format!("{case}: mixed"), &m_all[k * n..(k + 1) * n], &m1)?;
                same(&format!("{case}: inj"), &i_all[k * hc..(k + 1) * hc], &i1)?;
            }
            cases += 1;
        }
    }
    Ok(cases)
}
