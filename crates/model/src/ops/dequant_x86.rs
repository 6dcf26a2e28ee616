//! § matvec's dequantization on x86's AVX2 (`ops/dequant.rs` chooses it): the lattice types of the
//! experts (IQ2_XS, IQ3_XXS, IQ3_S), eight elements at a time, each `signed(db · magnitude, sign)` as the
//! codecs make it (gguf's `quant::iqgrid`): one f32 product rounded, then the sign bit flipped, so the
//! bits are the codecs'.

use std::arch::x86_64::*;

use strata_gguf::quant::{f16_to_f32, IQ2XS_GRID, IQ3S_GRID, IQ3XXS_GRID};

/// The 8-bit sign pattern of a 7-bit sign index: the 8th sign makes the count of negatives even.
pub(super) fn ksigns(i: u8) -> u8 {
    i | (((i.count_ones() & 1) as u8) << 7)
}

pub(super) fn f16(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// Eight values from eight magnitude bytes: `db · magnitude j`, its sign bit flipped where bit j of
/// `signs` is set.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn grid8(dst: &mut [f32], grid: u64, db: f32, signs: u8) {
    // Lane j moves sign bit j to bit 31.
    let shifts = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
    let mags = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(grid as i64)));
    let v = _mm256_mul_ps(_mm256_set1_ps(db), mags);
    let bits =
        _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(signs as i32), shifts), _mm256_set1_epi32(i32::MIN));
    _mm256_storeu_ps(dst[..8].as_mut_ptr(), _mm256_xor_ps(v, _mm256_castsi256_ps(bits)));
}

/// IQ2_XS blocks (74 bytes: d, qs[32] u16 = 9-bit grid index | 7-bit sign index << 9, scales[8] a nibble
/// per 16 elements; value = d·(0.5 + s)·0.25 · grid · sign) into 256 values each.
///
/// # Safety
/// The CPU must have AVX2; `out` holds exactly the blocks' values.
#[target_feature(enable = "avx2")]
pub unsafe fn iq2_xs(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(74).zip(out.chunks_exact_mut(256)) {
        let d = f16(b);
        for ib in 0..8 {
            let s = b[66 + ib];
            let db = [d * (0.5 + (s & 0xf) as f32) * 0.25, d * (0.5 + (s >> 4) as f32) * 0.25];
            for l in 0..4 {
                let at = 2 + 2 * (4 * ib + l);
                let q = u16::from_le_bytes([b[at], b[at + 1]]);
                let grid = IQ2XS_GRID[(q & 511) as usize];
                grid8(&mut y[32 * ib + 8 * l..], grid, db[l / 2], ksigns((q >> 9) as u8));
            }
        }
    }
}

/// IQ3_XXS blocks (98 bytes: d, qs[64] 8-bit grid indices of four magnitudes, then per 32 elements a u32
/// of four 7-bit sign indices and the scale in its top 4 bits; value = d·(0.5 + s)·0.5 · grid · sign).
///
/// # Safety
/// As [`iq2_xs`].
#[target_feature(enable = "avx2")]
pub unsafe fn iq3_xxs(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(98).zip(out.chunks_exact_mut(256)) {
        let d = f16(b);
        for ib in 0..8 {
            let at = 66 + 4 * ib;
            let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let lo = IQ3XXS_GRID[b[2 + 8 * ib + 2 * l] as usize] as u64;
                let hi = IQ3XXS_GRID[b[3 + 8 * ib + 2 * l] as usize] as u64;
                grid8(&mut y[32 * ib + 8 * l..], lo | hi << 32, db, ksigns(((aux >> (7 * l)) & 127) as u8));
            }
        }
    }
}

/// IQ3_S blocks (110 bytes: d, qs[64] low 8 bits of 9-bit grid indices, qh[8] their top bits, signs[32] a
/// bit per element, scales[4] a nibble per 32 elements; value = d·(1 + 2s) · grid · sign).
///
/// # Safety
/// As [`iq2_xs`].
#[target_feature(enable = "avx2")]
pub unsafe fn iq3_s(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(110).zip(out.chunks_exact_mut(256)) {
        let d = f16(b);
        let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
        for ib in 0..8 {
            let db = d * (1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32) as f32;
            let entry = |g: usize| IQ3S_GRID[qs[8 * ib + g] as usize | (((qh[ib] >> g) & 1) as usize) << 8] as u64;
            for h in 0..4 {
                grid8(&mut y[32 * ib + 8 * h..], entry(2 * h) | entry(2 * h + 1) << 32, db, signs[4 * ib + h]);
            }
        }
    }
}
