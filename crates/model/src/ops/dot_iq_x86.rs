//! § matvec's dequantize-then-dot for the lattice types of the experts (IQ2_XS, IQ3_XXS, IQ3_S) on AVX2
//! and FMA, the decode fused into the dot: each group of eight chunks (64 elements) is decoded straight
//! into registers, one a chunk (`db · magnitude`, rounded, then the sign bit flipped, as the codecs and
//! `ops/dequant_x86.rs` make each value), transposed, and dotted with each input of a window as
//! `ops/dot.rs`'s vector dot does (its input made ready once: [`Prepared`]). No row of floats is written
//! and read back. The magnitudes come from the grids as floats and the signs as masks, both tables made
//! once; every value and every fma is the contract's, so the bits are those of dequantizing, then `dot`.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use strata_gguf::quant::{IQ2XS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use strata_gguf::GgmlType;

use super::dequant_x86::{f16, ksigns};
use super::dot::{butterfly_used, transpose8, Prepared, CHUNK, LANES};

/// Inputs whose lanes are kept at once (longer windows are taken in parts, each decoding the row again).
const MAX_WINDOW: usize = 8;

/// The grids' magnitudes as floats, and sign masks (bit 31 of lane j set where bit j of the pattern is).
struct Tables {
    iq2_xs: Vec<[f32; 8]>,
    iq3_xxs: Vec<[f32; 4]>,
    iq3_s: Vec<[f32; 4]>,
    /// By 7-bit sign index (the 8th sign makes the count of negatives even).
    ksigns: Vec<[u32; 8]>,
    /// By the 8-bit pattern itself.
    signs: Vec<[u32; 8]>,
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mask = |p: u32| std::array::from_fn(|j| if (p >> j) & 1 == 1 { 1 << 31 } else { 0 });
        Tables {
            iq2_xs: IQ2XS_GRID.iter().map(|&g| std::array::from_fn(|j| (g >> (8 * j)) as u8 as f32)).collect(),
            iq3_xxs: IQ3XXS_GRID.iter().map(|&g| std::array::from_fn(|j| (g >> (8 * j)) as u8 as f32)).collect(),
            iq3_s: IQ3S_GRID.iter().map(|&g| std::array::from_fn(|j| (g >> (8 * j)) as u8 as f32)).collect(),
            ksigns: (0..128u8).map(|i| mask(ksigns(i) as u32)).collect(),
            signs: (0..256u32).map(mask).collect(),
        }
    })
}

/// Whether [`rows_dots`] takes rows of this type.
pub fn fused(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XS | GgmlType::IQ3_XXS | GgmlType::IQ3_S)
}

/// Appends to `out`, for each row of `bytes` (whole blocks of `ty`, a [`fused`] type, rows of
/// `row_bytes`), its dot with each input: the bits of dequantizing the row, then `dot_prepared`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; each input is as long as a row's elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows_dots(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[Prepared], out: &mut Vec<f32>) {
    match ty {
        GgmlType::IQ2_XS => rows::<IQ2_XS>(bytes, row_bytes, xs, out),
        GgmlType::IQ3_XXS => rows::<IQ3_XXS>(bytes, row_bytes, xs, out),
        GgmlType::IQ3_S => rows::<IQ3_S>(bytes, row_bytes, xs, out),
        _ => unreachable!("{ty} is not a fused type"),
    }
}

// The types' kernels, by number (a constant of each kernel, so no step asks the type again).
const IQ2_XS: u8 = 0;
const IQ3_XXS: u8 = 1;
const IQ3_S: u8 = 2;

#[inline(always)]
unsafe fn rows<const K: u8>(bytes: &[u8], row_bytes: usize, xs: &[Prepared], out: &mut Vec<f32>) {
    let (t, ts) = (tables(), [74, 98, 110][K as usize]);
    let groups = row_bytes / ts * 4;
    let mut lanes = [[_mm256_setzero_ps(); LANES / CHUNK]; MAX_WINDOW];
    let mut m = [_mm256_setzero_ps(); CHUNK];
    for row in bytes.chunks_exact(row_bytes) {
        for xs in xs.chunks(MAX_WINDOW) {
            lanes[..xs.len()].fill([_mm256_setzero_ps(); LANES / CHUNK]);
            for g in 0..groups {
                let (block, gi) = (&row[g / 4 * ts..(g / 4 + 1) * ts], g % 4);
                match K {
                    IQ2_XS => iq2_xs(t, block, gi, &mut m),
                    IQ3_XXS => iq3_xxs(t, block, gi, &mut m),
                    _ => iq3_s(t, block, gi, &mut m),
                }
                let w = transpose8(m);
                for (x, lane) in xs.iter().zip(lanes.iter_mut()) {
                    let xt = x.transposed().as_ptr().add(64 * g);
                    let mut s = _mm256_setzero_ps();
                    for (e, w) in w.iter().enumerate() {
                        s = _mm256_fmadd_ps(*w, _mm256_loadu_ps(xt.add(CHUNK * e)), s);
                    }
                    // Group g's chunks are lanes 8·(g mod 4) + j, as in the vector dot.
                    lane[g % 4] = _mm256_add_ps(lane[g % 4], s);
                }
            }
            for lane in &lanes[..xs.len()] {
                let mut v = [0f32; LANES];
                for (r, a) in lane.iter().enumerate() {
                    _mm256_storeu_ps(v.as_mut_ptr().add(r * CHUNK), *a);
                }
                out.push(butterfly_used(v, groups * CHUNK));
            }
        }
    }
}

/// One chunk's values: `db · magnitude` rounded, then the signs' bits flipped.
#[inline(always)]
unsafe fn chunk(db: f32, mags: __m256, signs: &[u32; 8]) -> __m256 {
    let v = _mm256_mul_ps(_mm256_set1_ps(db), mags);
    _mm256_xor_ps(v, _mm256_loadu_ps(signs.as_ptr() as *const f32))
}

/// Four magnitudes from each of two grid entries: a chunk's eight.
#[inline(always)]
unsafe fn halves(lo: &[f32; 4], hi: &[f32; 4]) -> __m256 {
    _mm256_set_m128(_mm_loadu_ps(hi.as_ptr()), _mm_loadu_ps(lo.as_ptr()))
}

/// IQ2_XS (74 bytes: d, qs[32] u16 = 9-bit grid index | 7-bit sign index << 9, scales[8] a nibble per
/// 16 elements; value = d·(0.5 + s)·0.25 · grid · sign): group g is sub-blocks 2g and 2g + 1.
#[inline(always)]
unsafe fn iq2_xs(t: &Tables, b: &[u8], g: usize, m: &mut [__m256; CHUNK]) {
    let d = f16(b);
    // The group's eight u16 codes at once, and its four scales (a nibble per 16 elements of each of its
    // two sub-blocks), each made once.
    let at = 2 + 16 * g;
    let q: [u16; 8] = std::array::from_fn(|c| u16::from_le_bytes([b[at + 2 * c], b[at + 2 * c + 1]]));
    let (s0, s1) = (b[66 + 2 * g], b[67 + 2 * g]);
    let db = [s0 & 0xf, s0 >> 4, s1 & 0xf, s1 >> 4].map(|n| d * (0.5 + n as f32) * 0.25);
    for (c, m) in m.iter_mut().enumerate() {
        let q = q[c] as usize;
        *m = chunk(db[c / 2], _mm256_loadu_ps(t.iq2_xs[q & 511].as_ptr()), &t.ksigns[q >> 9]);
    }
}

/// IQ3_XXS (98 bytes: d, qs[64] 8-bit grid indices of four magnitudes, then per 32 elements a u32 of four
/// 7-bit sign indices and the scale in its top 4 bits; value = d·(0.5 + s)·0.5 · grid · sign).
#[inline(always)]
unsafe fn iq3_xxs(t: &Tables, b: &[u8], g: usize, m: &mut [__m256; CHUNK]) {
    let d = f16(b);
    for (c, m) in m.iter_mut().enumerate() {
        let (ib, l) = (2 * g + c / 4, c % 4);
        let at = 66 + 4 * ib;
        let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        let mags = halves(&t.iq3_xxs[b[2 + 8 * ib + 2 * l] as usize], &t.iq3_xxs[b[3 + 8 * ib + 2 * l] as usize]);
        *m = chunk(db, mags, &t.ksigns[((aux >> (7 * l)) & 127) as usize]);
    }
}

/// IQ3_S (110 bytes: d, qs[64] low 8 bits of 9-bit grid indices, qh[8] their top bits, signs[32] a bit
/// per element, scales[4] a nibble per 32 elements; value = d·(1 + 2s) · grid · sign).
#[inline(always)]
unsafe fn iq3_s(t: &Tables, b: &[u8], g: usize, m: &mut [__m256; CHUNK]) {
    let d = f16(b);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for (c, m) in m.iter_mut().enumerate() {
        let (ib, h) = (2 * g + c / 4, c % 4);
        let db = d * (1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32) as f32;
        let entry = |k: usize| qs[8 * ib + k] as usize | (((qh[ib] >> k) & 1) as usize) << 8;
        let mags = halves(&t.iq3_s[entry(2 * h)], &t.iq3_s[entry(2 * h + 1)]);
        *m = chunk(db, mags, &t.signs[signs[4 * ib + h] as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::dot::dot_prepared;
    use strata_gguf::{quant, SplitMix64};

    #[test]
    fn fused_rows_are_the_dequantized_rows_dots_for_every_window() {
        let Some(_) =
            crate::ops::vector::Vector::ALL.iter().find(|v| **v != crate::ops::vector::Vector::Scalar && v.available())
        else {
            eprintln!("note: no AVX2 on this CPU; the fused kernels were not checked");
            return;
        };
        let mut rng = SplitMix64::new(29);
        for ty in [GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ3_S] {
            for blocks in [1, 2, 5] {
                let (ts, cols, rows) = (ty.type_size(), blocks * 256, 3);
                let bytes = quant::random_blocks(ty, blocks * rows, &mut rng);
                let xs: Vec<Vec<f32>> = (0..11)
                    .map(|t| {
                        (0..cols)
                            .map(|i| match (t + i) % 97 {
                                0 if t == 3 => f32::NAN,
                                1 if t == 4 => 1e30,
                                _ => rng.uniform() * 4.0 - 2.0,
                            })
                            .collect()
                    })
                    .collect();
                let prepared: Vec<Prepared> = xs.iter().map(|x| Prepared::new(x)).collect();
                let mut w = vec![0f32; cols];
                for t in [1, 2, 8, 11] {
                    let mut got = Vec::new();
                    // SAFETY: checked above that the CPU has AVX2 (with FMA and F16C, ops/vector.rs).
                    unsafe { rows_dots(ty, &bytes, blocks * ts, &prepared[..t], &mut got) };
                    assert_eq!(got.len(), rows * t);
                    for (r, row) in bytes.chunks_exact(blocks * ts).enumerate() {
                        quant::dequantize(ty, row, &mut w).unwrap();
                        for (i, p) in prepared[..t].iter().enumerate() {
                            let (a, b) = (got[r * t + i], dot_prepared(&w, p));
                            assert!(
                                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                                "{ty} × {cols}, row {r}, input {i}: {a} against {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}
