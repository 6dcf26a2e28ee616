//! § matvec's dequantization on x86's AVX2 (`ops/dequant.rs` chooses it): IQ2_XS eight elements at a time,
//! each `signed(db · magnitude, sign)` as the codec makes it (gguf's `quant::iqgrid`): one f32 product
//! rounded, then the sign bit flipped, so the bits are the codec's.

use std::arch::x86_64::*;

use strata_gguf::quant::{f16_to_f32, IQ2XS_GRID};

/// The 8-bit sign pattern of a 7-bit sign index: the 8th sign makes the count of negatives even.
fn ksigns(i: u8) -> u8 {
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// IQ2_XS blocks (74 bytes: d, qs[32] u16 = 9-bit grid index | 7-bit sign index << 9, scales[8] a nibble
/// per 16 elements) into 256 values each; `out` holds exactly the blocks' values.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn iq2_xs(bytes: &[u8], out: &mut [f32]) {
    // Lane j moves sign bit j to bit 31.
    let shifts = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
    let top = _mm256_set1_epi32(i32::MIN);
    for (b, y) in bytes.chunks_exact(74).zip(out.chunks_exact_mut(256)) {
        let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        for ib in 0..8 {
            let s = b[66 + ib];
            let db = [d * (0.5 + (s & 0xf) as f32) * 0.25, d * (0.5 + (s >> 4) as f32) * 0.25];
            for l in 0..4 {
                let at = 2 + 2 * (4 * ib + l);
                let q = u16::from_le_bytes([b[at], b[at + 1]]);
                let grid = IQ2XS_GRID[(q & 511) as usize];
                let signs = _mm256_set1_epi32(ksigns((q >> 9) as u8) as i32);
                let mags = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(grid as i64)));
                let v = _mm256_mul_ps(_mm256_set1_ps(db[l / 2]), mags);
                let sign = _mm256_castsi256_ps(_mm256_and_si256(_mm256_sllv_epi32(signs, shifts), top));
                let dst = y[32 * ib + 8 * l..32 * ib + 8 * l + 8].as_mut_ptr();
                _mm256_storeu_ps(dst, _mm256_xor_ps(v, sign));
            }
        }
    }
}
