//! The lattice formats: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S. Groups of 8 (or 4) magnitudes are an index into a fixed
//! grid (grids.rs), signs come from a 7-bit index with even parity (IQ2_XS, IQ3_XXS) or one bit each
//! (IQ3_S), and a 4-bit scale per 16 or 32 elements multiplies the block's fp16 d.
//!
//! The quantizers are a plain nearest-grid-point search: good enough for synthetic weights.

use super::grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::{f16_at, put_f16};

/// Sign pattern of a 7-bit sign index: the 8th sign makes the count of negatives even.
fn ksigns(i: u8) -> u8 {
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// Magnitude j of grid entry `e` (one byte per element).
fn grid_u64(e: u64, j: usize) -> f32 {
    ((e >> (8 * j)) & 0xff) as f32
}

fn grid_u32(e: u32, j: usize) -> f32 {
    ((e >> (8 * j)) & 0xff) as f32
}

/// Eight elements from a grid entry of eight magnitude bytes: `signed(db · magnitude j, sign bit j)`,
/// written as one run so that the compiler makes it a few vector instructions.
#[inline(always)]
fn grid8(out: &mut [f32], grid: u64, db: f32, signs: u8) {
    let mags = grid.to_le_bytes();
    for (j, o) in out.iter_mut().enumerate().take(8) {
        *o = signed(db * mags[j] as f32, signs & (1 << j) != 0);
    }
}

/// `v · (negative ? −1 : 1)`, the same bits for every non-NaN v, without a branch: signs are random,
/// and a mispredicted branch per element costs more than the rest of the decoding.
#[inline]
fn signed(v: f32, negative: bool) -> f32 {
    f32::from_bits(v.to_bits() ^ ((negative as u32) << 31))
}

/// IQ2_XS: d, qs[32] u16 (9-bit grid index | 7-bit sign index << 9), scales[8] (a nibble per 16
/// elements); value = d·(0.5 + s)·0.25 · grid · sign.
pub fn dequant_iq2_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let s = b[66 + ib];
        let db = [d * (0.5 + (s & 0xf) as f32) * 0.25, d * (0.5 + (s >> 4) as f32) * 0.25];
        for (l, out) in y[32 * ib..32 * ib + 32].chunks_exact_mut(8).enumerate() {
            let at = 2 + 2 * (4 * ib + l);
            let q = u16::from_le_bytes([b[at], b[at + 1]]);
            grid8(out, IQ2XS_GRID[(q & 511) as usize], db[l / 2], ksigns((q >> 9) as u8));
        }
    }
}

/// IQ2_XXS: d, then per 32 elements two u32: four 8-bit grid indices, then four 7-bit sign indices and
/// the scale in the top 4 bits; value = d·(0.5 + s)·0.25 · grid · sign.
pub fn dequant_iq2_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let at = 2 + 8 * ib;
        let aux = u32::from_le_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for l in 0..4 {
            let grid = IQ2XXS_GRID[b[at + l] as usize];
            let signs = ksigns(((aux >> (7 * l)) & 127) as u8);
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = signed(db * grid_u64(grid, j), signs & (1 << j) != 0);
            }
        }
    }
}

/// IQ2_S: d, qs[32] (low 8 bits of 10-bit grid indices), signs[32] (a bit per element), qh[8] (2 index
/// bits per group of 8), scales[8] (a nibble per 16 elements); value = d·(0.5 + s)·0.25 · grid · sign.
pub fn dequant_iq2_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for g in 0..32 {
        let s = (scales[g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
        let db = d * (0.5 + s as f32) * 0.25;
        let grid = IQ2S_GRID[qs[g] as usize | (((qh[g / 4] >> (2 * (g % 4))) & 3) as usize) << 8];
        for j in 0..8 {
            y[8 * g + j] = signed(db * grid_u64(grid, j), signs[g] & (1 << j) != 0);
        }
    }
}

/// IQ3_XXS: d, qs[64] grid indices (4 elements each), then per 32 elements a u32: four 7-bit sign indices
/// and the scale in the top 4 bits; value = d·(0.5 + s)·0.5 · grid · sign.
pub fn dequant_iq3_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let at = 66 + 4 * ib;
        let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for (l, out) in y[32 * ib..32 * ib + 32].chunks_exact_mut(8).enumerate() {
            let signs = ksigns(((aux >> (7 * l)) & 127) as u8);
            let lo = IQ3XXS_GRID[b[2 + 8 * ib + 2 * l] as usize] as u64;
            let hi = IQ3XXS_GRID[b[3 + 8 * ib + 2 * l] as usize] as u64;
            grid8(out, lo | hi << 32, db, signs);
        }
    }
}

/// IQ3_S: d, qs[64] (low 8 bits of 9-bit grid indices), qh[8] (their top bits, a byte per 32 elements),
/// signs[32] (a bit per element), scales[4] (a nibble per 32 elements); value = d·(1 + 2s) · grid · sign.
pub fn dequant_iq3_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for ib in 0..8 {
        let db = d * (1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32) as f32;
        // Eight elements at a time: two grid entries, one byte of sign bits.
        for (h, out) in y[32 * ib..32 * ib + 32].chunks_exact_mut(8).enumerate() {
            let entry = |g: usize| IQ3S_GRID[qs[8 * ib + g] as usize | (((qh[ib] >> g) & 1) as usize) << 8] as u64;
            grid8(out, entry(2 * h) | entry(2 * h + 1) << 32, db, signs[4 * ib + h]);
        }
    }
}

/// The index of the grid entry nearest (least squared error) to the magnitudes `a`.
fn nearest<T: Copy>(grid: &[T], a: &[f32], mag: fn(T, usize) -> f32) -> usize {
    let mut best = (f32::INFINITY, 0);
    for (i, &e) in grid.iter().enumerate() {
        let err: f32 = a.iter().enumerate().map(|(j, &v)| (v - mag(e, j)).powi(2)).sum();
        if err < best.0 {
            best = (err, i);
        }
    }
    best.1
}

/// Sign bits of 8 values, with even parity forced by flipping the sign of the smallest magnitude.
fn even_signs(x: &[f32]) -> u8 {
    let mut s = x.iter().enumerate().fold(0u8, |s, (j, &v)| s | ((v < 0.0) as u8) << j);
    if s.count_ones() % 2 == 1 {
        let j = (0..8).min_by(|&a, &c| x[a].abs().total_cmp(&x[c].abs())).unwrap_or(0);
        s ^= 1 << j;
    }
    s
}

/// A 4-bit scale per group and the block's d: d·unit(15) is the largest group's wanted step.
/// `unit(s)` is the multiplier the format applies for scale s; `want[g]` the wanted step of group g.
fn group_scales<const G: usize>(want: &[f32; G], unit: fn(f32) -> f32, b: &mut [u8]) -> (f32, [u8; G]) {
    let top = want.iter().fold(0f32, |m, &v| m.max(v));
    let d = put_f16(b, 0, top / unit(15.0));
    let s = std::array::from_fn(|g| {
        if d == 0.0 {
            return 0;
        }
        (0..16u8)
            .min_by(|&a, &c| (d * unit(a as f32) - want[g]).abs().total_cmp(&(d * unit(c as f32) - want[g]).abs()))
            .unwrap_or(0)
    });
    (d, s)
}

fn magnitudes(x: &[f32], step: f32) -> Vec<f32> {
    x.iter().map(|v| if step > 0.0 { v.abs() / step } else { 0.0 }).collect()
}

pub fn quant_iq2_xs(x: &[f32], b: &mut [u8]) {
    let unit = |s: f32| (0.5 + s) * 0.25;
    let want: [f32; 16] =
        std::array::from_fn(|g| x[16 * g..16 * g + 16].iter().fold(0f32, |m, v| m.max(v.abs())) / 43.0);
    let (d, s) = group_scales(&want, unit, b);
    for ib in 0..8 {
        b[66 + ib] = s[2 * ib] | (s[2 * ib + 1] << 4);
    }
    for c in 0..32 {
        let xs = &x[8 * c..8 * c + 8];
        let step = d * unit(s[c / 2] as f32);
        let idx = nearest(&IQ2XS_GRID, &magnitudes(xs, step), grid_u64) as u16;
        let sign = (even_signs(xs) & 127) as u16;
        b[2 + 2 * c..4 + 2 * c].copy_from_slice(&(idx | sign << 9).to_le_bytes());
    }
}

pub fn quant_iq3_xxs(x: &[f32], b: &mut [u8]) {
    let unit = |s: f32| (0.5 + s) * 0.5;
    let want: [f32; 8] =
        std::array::from_fn(|g| x[32 * g..32 * g + 32].iter().fold(0f32, |m, v| m.max(v.abs())) / 62.0);
    let (d, s) = group_scales(&want, unit, b);
    for ib in 0..8 {
        let step = d * unit(s[ib] as f32);
        let mut aux = (s[ib] as u32) << 28;
        for l in 0..4 {
            let xs = &x[32 * ib + 8 * l..32 * ib + 8 * l + 8];
            aux |= ((even_signs(xs) & 127) as u32) << (7 * l);
            for half in 0..2 {
                let m = magnitudes(&xs[4 * half..4 * half + 4], step);
                b[2 + 8 * ib + 2 * l + half] = nearest(&IQ3XXS_GRID, &m, grid_u32) as u8;
            }
        }
        b[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&aux.to_le_bytes());
    }
}

pub fn quant_iq3_s(x: &[f32], b: &mut [u8]) {
    let unit = |s: f32| 1.0 + 2.0 * s;
    let want: [f32; 8] =
        std::array::from_fn(|g| x[32 * g..32 * g + 32].iter().fold(0f32, |m, v| m.max(v.abs())) / 15.0);
    let (d, s) = group_scales(&want, unit, b);
    b[66..110].fill(0);
    for ib in 0..8 {
        b[106 + ib / 2] |= s[ib] << (4 * (ib % 2));
        let step = d * unit(s[ib] as f32);
        for g in 0..8 {
            let xs = &x[32 * ib + 4 * g..32 * ib + 4 * g + 4];
            let idx = nearest(&IQ3S_GRID, &magnitudes(xs, step), grid_u32);
            b[2 + 8 * ib + g] = idx as u8;
            b[66 + ib] |= ((idx >> 8) as u8) << g;
        }
    }
    for (e, &v) in x.iter().enumerate() {
        b[74 + e / 8] |= ((v < 0.0) as u8) << (e % 8);
    }
}
