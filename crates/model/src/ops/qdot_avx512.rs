//! § qdot's Q2_0 rows on AVX-512's 512-bit registers (the `avx512` level; ops/qdot_x86.rs holds the
//! 256-bit kernels of every other type and level). A group of four blocks (eight pieces) is unpacked into
//! four registers, one a 2-bit plane of all four blocks, and dotted with the input's codes put once in
//! the same order ([`ORDER`]) by four `vpdpbusd`: half the 256-bit kernel's dot and unpack instructions
//! a group. The integer sums are the same integers, and the float steps after them are qdot_x86's for
//! Q2_0 (its weights are the codes less 1: `Σ w·q = Σ u·q − Σ q`), element by element in the same
//! order, so the bits are the scalar path's.

use std::arch::x86_64::*;

use super::dot::{butterfly_used, LANES};
use super::qdot::QInput;
use super::qdot_x86::{add_lanes, load_f32, load_i32};

/// A Q2_0 block's bytes (an fp16 scale, then 16 bytes of 2-bit codes for 64 elements).
const TS: usize = 18;
/// Blocks a group: one 128-bit lane of a register each.
const BLOCKS: usize = 4;
/// Inputs whose lanes are kept at once (longer windows are taken in parts, each reading the row again).
const MAX_WINDOW: usize = 8;

/// The element of a group of four blocks (256 codes) at each byte of its four plane registers: register
/// k's byte 16·L + i is block L's element 4i + k (bits 2k.. of the block's code byte i).
const ORDER: [usize; 4 * 64] = {
    let mut o = [0; 4 * 64];
    let mut pos = 0;
    while pos < 4 * 64 {
        let (k, l, i) = (pos / 64, (pos % 64) / 16, pos % 16);
        o[pos] = 64 * l + 4 * i + k;
        pos += 1;
    }
    o
};

/// An input's codes with each group of four blocks' in [`ORDER`], padded with zeros to whole groups
/// (a short last group's missing blocks: their codes are zero, and so are their unpacked weights).
pub fn in_order(q: &[i8]) -> Vec<i8> {
    let mut padded = q.to_vec();
    padded.resize(q.len().next_multiple_of(ORDER.len()), 0);
    padded.chunks_exact(ORDER.len()).flat_map(|group| ORDER.map(|e| group[e])).collect()
}

/// `out[r·T + t]` = Q2_0 row r of `bytes` (rows of `row_bytes`, whole blocks) times `xs[t]`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C; each input holds the rows' columns.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows_q2_0(bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32]) {
    let blocks = row_bytes / TS;
    let codes: Vec<&[i8]> = xs.iter().map(|x| x.wide.get_or_init(|| in_order(&x.q)).as_slice()).collect();
    if let ([x], [q]) = (xs, codes.as_slice()) {
        return rows_one(bytes, row_bytes, x, q, out);
    }
    let mut lanes = [[0f32; LANES]; MAX_WINDOW];
    for (row, out) in bytes.chunks_exact(row_bytes).zip(out.chunks_exact_mut(xs.len())) {
        for ((xs, qs), out) in xs.chunks(MAX_WINDOW).zip(codes.chunks(MAX_WINDOW)).zip(out.chunks_mut(MAX_WINDOW)) {
            lanes[..xs.len()].fill([0f32; LANES]);
            for b0 in (0..blocks).step_by(BLOCKS) {
                let nb = BLOCKS.min(blocks - b0);
                // The row's bytes 2 KB ahead asked for, as the 256-bit kernel does.
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(b0 * TS + 2048) as *const i8);
                let (u, c) = unpack(&row[b0 * TS..(b0 + nb) * TS], nb);
                let (n, j0) = (2 * nb, 2 * b0);
                let base = j0 % LANES; // a multiple of 8: the group's eight lanes lie in one run
                for ((x, q), lane) in xs.iter().zip(qs).zip(lanes.iter_mut()) {
                    let v = values(&u, c, x, q.as_ptr().add(64 * b0), (j0, n));
                    add_lanes(&mut lane[base..base + 8], v, n);
                }
            }
            for (o, lane) in out.iter_mut().zip(&lanes) {
                *o = butterfly_used(*lane, 2 * blocks);
            }
        }
    }
}

/// [`rows_q2_0`] for one input, its 32 lanes kept in four registers: group g's eight pieces go to
/// lanes 8·(g mod 4) .., so four groups in turn fill them, each register its own additions in piece
/// order. A short last group adds +0.0 past its pieces, which changes no lane (a lane total is never
/// −0.0: `butterfly_used`).
#[inline(always)]
unsafe fn rows_one(bytes: &[u8], row_bytes: usize, x: &QInput, q: &[i8], out: &mut [f32]) {
    let blocks = row_bytes / TS;
    let groups = blocks.div_ceil(BLOCKS);
    for (row, out) in bytes.chunks_exact(row_bytes).zip(out.iter_mut()) {
        let value = |g: usize| {
            let b0 = BLOCKS * g;
            let nb = BLOCKS.min(blocks - b0);
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(b0 * TS + 2048) as *const i8);
            let (u, c) = unpack(&row[b0 * TS..(b0 + nb) * TS], nb);
            values(&u, c, x, q.as_ptr().add(64 * b0), (2 * b0, 2 * nb))
        };
        let mut l = [_mm256_setzero_ps(); 4];
        for g0 in (0..groups).step_by(4) {
            for (k, l) in l.iter_mut().enumerate() {
                if g0 + k < groups {
                    *l = _mm256_add_ps(*l, value(g0 + k));
                }
            }
        }
        let mut lanes = [0f32; LANES];
        for (k, l) in l.iter().enumerate() {
            _mm256_storeu_ps(lanes[8 * k..].as_mut_ptr(), *l);
        }
        *out = butterfly_used(lanes, 2 * blocks);
    }
}

/// `nb` ≤ 4 blocks: their four plane registers (block L in lane L; missing blocks zero) and their
/// pieces' scales, each block's fp16 scale twice, as f32 (exactly).
#[inline(always)]
unsafe fn unpack(b: &[u8], nb: usize) -> ([__m512i; 4], __m256) {
    let codes = |l: usize| {
        if l < nb {
            _mm_loadu_si128(b.as_ptr().add(l * TS + 2) as *const __m128i)
        } else {
            _mm_setzero_si128()
        }
    };
    let v = _mm512_castsi128_si512(codes(0));
    let v = _mm512_inserti32x4::<3>(_mm512_inserti32x4::<2>(_mm512_inserti32x4::<1>(v, codes(1)), codes(2)), codes(3));
    let m = _mm512_set1_epi8(3);
    let plane = |k: u32| _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(2 * k as i32)), m);
    // The scales lie at bytes 0, 18, 36 and 54 of the group, inside its first 64 (those of the blocks
    // present read, the rest zero): one load and one move of 16-bit lanes put each twice in order,
    // with no pass through memory.
    let z = _mm512_maskz_loadu_epi8(u64::MAX >> 64usize.saturating_sub(nb * TS), b.as_ptr() as *const i8);
    let at = _mm512_set_epi16(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 18, 18, 9, 9, 0, 0,
    );
    let h = _mm512_castsi512_si128(_mm512_permutexvar_epi16(at, z));
    ([plane(0), plane(1), plane(2), plane(3)], _mm256_cvtph_ps(h))
}

/// The group's `n` piece values (pieces j0 ..) for input `x`, its codes in [`ORDER`] at `q`: after the
/// four plane dots, lane 4L + m holds part of piece 2L + m / 2; adjacent lanes added and the even ones
/// gathered give the eight pieces' sums in order. Then qdot_x86's steps for Q2_0: `s − Σq`, converted,
/// times `c · d[j]`.
#[inline(always)]
unsafe fn values(u: &[__m512i; 4], c: __m256, x: &QInput, q: *const i8, (j0, n): (usize, usize)) -> __m256 {
    // Two chains of two dots (integers: any order is exact), so they run side by side.
    let z = _mm512_setzero_si512();
    let dot = |k: usize, acc| _mm512_dpbusd_epi32(acc, u[k], _mm512_loadu_si512(q.add(64 * k) as *const __m512i));
    let acc = _mm512_add_epi32(dot(1, dot(0, z)), dot(3, dot(2, z)));
    let pairs = _mm512_add_epi32(acc, _mm512_shuffle_epi32::<0b10_11_00_01>(acc));
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    let s = _mm512_castsi512_si256(_mm512_permutexvar_epi32(even, pairs));
    let (d, sums) = if n == 8 {
        (_mm256_loadu_ps(x.d.as_ptr().add(j0)), _mm256_loadu_si256(x.sum.as_ptr().add(j0) as *const __m256i))
    } else {
        (load_f32(&x.d[j0..], n), load_i32(&x.sum[j0..], n))
    };
    let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(s, sums)); // exact: below 2^24
    _mm256_mul_ps(_mm256_mul_ps(c, d), s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_is_a_permutation_of_each_group() {
        let mut seen = [false; 256];
        ORDER.iter().for_each(|&e| seen[e] = true);
        assert!(seen.iter().all(|&s| s));
        // Block 1's element 4·3 + 2 = 14 is plane 2's byte 16 + 3.
        assert_eq!(ORDER[2 * 64 + 16 + 3], 64 + 14);
    }
}
