//! § qdot on x86's vector units (AVX2, or AVX-512 VNNI's `vpdpbusd`): the contract of `ops/qdot.rs`
//! with the same bits. A row is taken eight pieces (32-element runs) at a time: the pieces' weights are
//! unpacked into int8 registers once and reused for every input of a window; each piece's integer sum
//! is exact whatever the order it is added in; the eight sums go into one register of i32, and the float
//! steps (the scale products, Q4_K's fma with its minimum) are the contract's, element by element, so
//! they round as the scalar ones do. Lane `j mod 32` of the contract is element `j mod 8` of the
//! register for group `(j / 8) mod 4`, and each lane still takes its pieces in ascending order.

use std::arch::x86_64::*;

use strata_gguf::{quant, GgmlType};

use super::dot::{butterfly_used, LANES};
use super::qdot::{QInput, QBLOCK};

/// Pieces handled together: their integer sums fill one register of eight i32.
const GROUP: usize = 8;

/// How a group's byte products are summed into i32: four adjacent products a lane.
trait Dot {
    /// `acc + Σ u·s` over each lane's four bytes, `u` unsigned, `s` signed; never saturating here.
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;

    /// `acc + Σ u0·s0 + Σ u1·s1` over each lane's four bytes, for codes u0, u1 of at most 3 (Q2_0's).
    #[inline(always)]
    unsafe fn dot2(acc: __m256i, u0: __m256i, s0: __m256i, u1: __m256i, s1: __m256i) -> __m256i {
        Self::dot(Self::dot(acc, u0, s0), u1, s1)
    }

    /// Σ u·s over each lane's four bytes with each pair of products times its 16-bit scale (Q6_K's
    /// scales, one a 16 elements): the pair sums are at most 2·32·127, their scaled sums far from 2^31.
    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, scale: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale)
    }
}

struct Avx2;
struct Vnni;

impl Dot for Avx2 {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // Pair sums of products of |w| ≤ 128 and |q| ≤ 127 stay within ±32,512: maddubs cannot saturate.
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[inline(always)]
    unsafe fn dot2(acc: __m256i, u0: __m256i, s0: __m256i, u1: __m256i, s1: __m256i) -> __m256i {
        // Codes of at most 3: each register's pair sums lie within ±2·3·127, so the two are added as
        // 16 bits before one widening (two operations fewer a block, the same integers).
        let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

impl Dot for Vnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }
}

/// How a type's pieces become values (the contract's float steps, `ops/qdot.rs` block_values).
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// Signed weights, one scale a piece: `(c · d[j]) · Σ w·q`.
    Scaled,
    /// Q6_K: signed weights, a scale per 16 (`halves`), `(c · d[j]) · (sa·Σ_a + sb·Σ_b)`.
    Halves,
    /// Q4_K: unsigned weights, `fma((c · d[j]), Σ w·q, −((m · d[j]) · Σ q))`.
    WithMin,
    /// Q2_0 and Q4_0: weights w = u − o with unsigned codes u, so `Σ w·q = Σ u·q − o·Σ q` (the same
    /// integer, exactly: no sign or magnitude steps a piece), then `(c · d[j]) · Σ w·q` as Scaled.
    Offset,
    /// Q2_0: Offset's arithmetic over the codes as they lie in the file, four registers a pair of
    /// blocks (`u[4p + k]` plane k of both), each holding the pair's four pieces' codes ([`plane_sums`]).
    Planes,
}

/// Up to eight pieces of one row, unpacked.
struct Group {
    form: Form,
    n: usize,
    /// The weights' magnitudes (the weights themselves for Q4_K's unsigned ones) and, for signed
    /// weights, the weights, whose signs go onto the input's codes.
    u: [__m256i; GROUP],
    w: [__m256i; GROUP],
    /// Q6_K's integer scales, one a 16-bit lane, for each piece's pairs of products.
    halves: [__m256i; GROUP],
    /// Offset's o, as a left shift (1 for Q2_0, 8 for Q4_0).
    off_shift: i32,
    c: __m256,
    m: __m256,
}

impl Group {
    #[inline(always)]
    unsafe fn new() -> Group {
        let zero = _mm256_setzero_si256();
        let f = _mm256_setzero_ps();
        let halves = [zero; GROUP];
        Group { form: Form::Scaled, n: 0, u: [zero; GROUP], w: [zero; GROUP], halves, off_shift: 0, c: f, m: f }
    }
}

/// `out[r·T + t]` = row r of `bytes` (rows of `row_bytes`, whole blocks of `ty`) times `xs[t]`, for every
/// row and every input of the window (T of them).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C (and AVX-512 VNNI with VL and BW when `vnni`).
pub unsafe fn rows_window(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32], vnni: bool) {
    if vnni {
        rows_window_vnni(ty, bytes, row_bytes, xs, out)
    } else {
        rows_window_avx2(ty, bytes, row_bytes, xs, out)
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_window_avx2(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32]) {
    by_type::<Avx2>(ty, bytes, row_bytes, xs, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_window_vnni(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32]) {
    by_type::<Vnni>(ty, bytes, row_bytes, xs, out)
}

/// The type as a constant of its own kernel, so that no step of a row asks the type again.
#[inline(always)]
unsafe fn by_type<D: Dot>(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32]) {
    let args = (bytes, row_bytes, xs, out);
    match ty {
        GgmlType::Q8_0 => rows::<D, Q8_0>(args),
        GgmlType::Q4_0 => rows::<D, Q4_0>(args),
        GgmlType::Q2_0 => rows::<D, Q2_0>(args),
        GgmlType::IQ4_NL => rows::<D, IQ4_NL>(args),
        GgmlType::Q4_K => rows::<D, Q4_K>(args),
        GgmlType::Q6_K => rows::<D, Q6_K>(args),
        _ => unreachable!("{ty} is not a § qdot type"),
    }
}

// The types' kernels, by number.
const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q2_0: u8 = 2;
const IQ4_NL: u8 = 3;
const Q4_K: u8 = 4;
const Q6_K: u8 = 5;

/// A kernel's type: its block's bytes and elements.
const fn geometry(k: u8) -> (usize, usize) {
    match k {
        Q8_0 => (34, 32),
        Q4_0 | IQ4_NL => (18, 32),
        Q2_0 => (18, 64),
        Q4_K => (144, 256),
        _ => (210, 256),
    }
}

/// Inputs whose lanes are kept at once (longer windows are taken in parts, each reading the row again).
const MAX_WINDOW: usize = 8;

#[inline(always)]
unsafe fn rows<D: Dot, const K: u8>((bytes, row_bytes, xs, out): (&[u8], usize, &[&QInput], &mut [f32])) {
    let (ts, bs) = geometry(K);
    let per_block = bs / QBLOCK;
    let blocks = row_bytes / ts;
    let group_blocks = GROUP / per_block;
    // Made once for every row: the unpacked group and the lanes of up to MAX_WINDOW inputs.
    let mut g = Group::new();
    let mut lanes = [[0f32; LANES]; MAX_WINDOW];
    let all_codes: Vec<&[i8]> = xs.iter().map(|x| codes::<K>(x)).collect();
    for (row, out) in bytes.chunks_exact(row_bytes).zip(out.chunks_exact_mut(xs.len())) {
        for ((xs, qs), out) in xs.chunks(MAX_WINDOW).zip(all_codes.chunks(MAX_WINDOW)).zip(out.chunks_mut(MAX_WINDOW)) {
            lanes[..xs.len()].fill([0f32; LANES]);
            for b0 in (0..blocks).step_by(group_blocks) {
                let nb = group_blocks.min(blocks - b0);
                // The row's bytes 2 KB ahead asked for: a batch of experts streams from RAM, and one
                // thread alone waits on it (10 experts on one thread: 2.5–2.7 → 2.3 ms; no change seen
                // with two threads; bench/results/2026-12-06-cpu-q2_0-planes/).
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(b0 * ts + 2048) as *const i8);
                unpack::<K>(&mut g, &row[b0 * ts..(b0 + nb) * ts], nb);
                let j0 = b0 * per_block;
                let base = j0 % LANES;
                for ((x, q), lane) in xs.iter().zip(qs).zip(lanes.iter_mut()) {
                    let v = values::<D>(&g, x, q, j0);
                    add_lanes(&mut lane[base..base + GROUP], v, g.n);
                }
            }
            for (o, lane) in out.iter_mut().zip(&lanes) {
                *o = butterfly_used(*lane, blocks * per_block);
            }
        }
    }
}

/// An input's codes as the kernel of type K pairs them with its unpacked pieces: Q2_0's pieces are
/// unpacked in the order their codes lie in the file (`Q2_0_ORDER`), so its inputs' codes are put in that
/// order too, once an input: the same products, the same exact integer sums.
#[inline(always)]
fn codes<const K: u8>(x: &QInput) -> &[i8] {
    if K == Q2_0 {
        x.planes.get_or_init(|| in_q2_0_order(&x.q))
    } else {
        &x.q
    }
}

/// The group's piece values for one input (pieces j0 ..), its codes `q` as [`codes`] gives them.
#[inline(always)]
unsafe fn values<D: Dot>(g: &Group, x: &QInput, q: &[i8], j0: usize) -> __m256 {
    // A full group's loop has a known length, so it is unrolled and its registers kept.
    let (s, d) = if g.n == GROUP {
        (sums::<D>(g, q, j0, GROUP), _mm256_loadu_ps(x.d.as_ptr().add(j0)))
    } else {
        (sums::<D>(g, q, j0, g.n), load_f32(&x.d[j0..], g.n))
    };
    let s = if matches!(g.form, Form::Offset | Form::Planes) {
        _mm256_sub_epi32(s, _mm256_sllv_epi32(code_sums(g, x, j0), _mm256_set1_epi32(g.off_shift)))
    } else {
        s
    };
    let s = _mm256_cvtepi32_ps(s); // exact: the contract keeps each sum below 2^24
    let cd = _mm256_mul_ps(g.c, d);
    match g.form {
        Form::WithMin => {
            let qs = _mm256_cvtepi32_ps(code_sums(g, x, j0));
            let b = _mm256_mul_ps(_mm256_mul_ps(g.m, d), qs);
            _mm256_fmadd_ps(cd, s, _mm256_xor_ps(b, _mm256_set1_ps(-0.0)))
        }
        _ => _mm256_mul_ps(cd, s),
    }
}

/// The input's code sums of the group's pieces (j0 ..), one a lane.
#[inline(always)]
unsafe fn code_sums(g: &Group, x: &QInput, j0: usize) -> __m256i {
    if g.n == GROUP {
        _mm256_loadu_si256(x.sum.as_ptr().add(j0) as *const __m256i)
    } else {
        load_i32(&x.sum[j0..], g.n)
    }
}

/// The integer sums of the group's first `n` pieces with the input's codes `codes`, one a lane.
#[inline(always)]
unsafe fn sums<D: Dot>(g: &Group, codes: &[i8], j0: usize, n: usize) -> __m256i {
    debug_assert!((j0 + n) * QBLOCK <= codes.len());
    if g.form == Form::Planes {
        return plane_sums::<D>(g, codes, j0, n);
    }
    let zero = _mm256_setzero_si256();
    let mut p = [zero; GROUP];
    for (i, p) in p.iter_mut().enumerate().take(n) {
        let q = _mm256_loadu_si256(codes.as_ptr().add((j0 + i) * QBLOCK) as *const __m256i);
        *p = match g.form {
            Form::WithMin | Form::Offset | Form::Planes => D::dot(zero, g.u[i], q),
            Form::Scaled => D::dot(zero, g.u[i], _mm256_sign_epi8(q, g.w[i])),
            Form::Halves => D::dot_scaled(g.u[i], _mm256_sign_epi8(q, g.w[i]), g.halves[i]),
        };
    }
    reduce(&p)
}

/// Eight registers of lane sums to one register of their totals (integers: any order is exact).
#[inline(always)]
unsafe fn reduce(p: &[__m256i; GROUP]) -> __m256i {
    let h01 = _mm256_hadd_epi32(p[0], p[1]);
    let h23 = _mm256_hadd_epi32(p[2], p[3]);
    let h45 = _mm256_hadd_epi32(p[4], p[5]);
    let h67 = _mm256_hadd_epi32(p[6], p[7]);
    let a = _mm256_hadd_epi32(h01, h23); // pieces 0..3: low halves' sums, then high halves'
    let b = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256(a, b, 0x20);
    let hi = _mm256_permute2x128_si256(a, b, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Q2_0's integer sums of the group's first `n` pieces (whole blocks: n even), one a lane. A pair of
/// blocks' four plane registers dotted with its 128 codes in `Q2_0_ORDER` leave, in one register, each
/// of its four pieces' partial sums in two adjacent lanes (the first block's pieces in the low half):
/// one pairwise addition of the two pairs' registers and one move of 64-bit lanes put the eight pieces'
/// sums in order.
#[inline(always)]
unsafe fn plane_sums<D: Dot>(g: &Group, codes: &[i8], j0: usize, n: usize) -> __m256i {
    let zero = _mm256_setzero_si256();
    let mut r = [zero; 2];
    for (p, r) in r.iter_mut().enumerate().take(n.div_ceil(4)) {
        let q = codes.as_ptr().add((j0 + 4 * p) * QBLOCK);
        let q = |k: usize| _mm256_loadu_si256(q.add(k * QBLOCK) as *const __m256i);
        let u = &g.u[4 * p..4 * p + 4];
        *r = D::dot2(D::dot2(zero, u[0], q(0), u[1], q(1)), u[2], q(2), u[3], q(3));
    }
    // Pieces 0, 1, 4, 5 | 2, 3, 6, 7, then in order.
    _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(r[0], r[1]))
}

/// The first `n` values added to their lanes (each lane its own addition, as the contract's).
#[inline(always)]
pub(super) unsafe fn add_lanes(lane: &mut [f32], v: __m256, n: usize) {
    if n == GROUP {
        let l = _mm256_loadu_ps(lane.as_ptr());
        _mm256_storeu_ps(lane.as_mut_ptr(), _mm256_add_ps(l, v));
    } else {
        // The first n lanes only, by masked moves (the others neither read nor written).
        let m = first(n);
        let l = _mm256_maskload_ps(lane.as_ptr(), m);
        _mm256_maskstore_ps(lane.as_mut_ptr(), m, _mm256_add_ps(l, v));
    }
}

/// A mask of the first n of eight 32-bit lanes.
#[inline(always)]
unsafe fn first(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// The first n values of v (n ≤ 8, all inside v), the rest zero.
#[inline(always)]
pub(super) unsafe fn load_f32(v: &[f32], n: usize) -> __m256 {
    assert!(n <= v.len().min(GROUP));
    _mm256_maskload_ps(v.as_ptr(), first(n))
}

#[inline(always)]
pub(super) unsafe fn load_i32(v: &[i32], n: usize) -> __m256i {
    assert!(n <= v.len().min(GROUP));
    _mm256_maskload_epi32(v.as_ptr(), first(n))
}

/// Eight fp16 scales as f32, exactly (as `f16_to_f32`).
#[inline(always)]
unsafe fn f16x8(h: &[u16; GROUP]) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
}

fn f16(b: &[u8], at: usize) -> f32 {
    quant::f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// `nb` blocks of the kernel's type (8 pieces at most) unpacked into `g`.
#[inline(always)]
unsafe fn unpack<const K: u8>(g: &mut Group, bytes: &[u8], nb: usize) {
    let mut c = [0f32; GROUP];
    let ts = geometry(K).0;
    match K {
        Q4_K => {
            let mut m = [0f32; GROUP];
            let b = bytes;
            let (d, dmin) = (f16(b, 0), f16(b, 2));
            for j in 0..8 {
                let (s, mn) = quant::scale_min_k4(j, &b[4..16]);
                (c[j], m[j]) = (d * s as i32 as f32, dmin * mn as i32 as f32);
                let qs = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * (j / 2)) as *const __m256i);
                let qs = if j % 2 == 0 { qs } else { _mm256_srli_epi16(qs, 4) };
                g.u[j] = _mm256_and_si256(qs, _mm256_set1_epi8(0x0f));
            }
            (g.form, g.n, g.m) = (Form::WithMin, 8, _mm256_loadu_ps(m.as_ptr()));
        }
        Q6_K => {
            let b = bytes;
            let d = f16(b, 208);
            for n in 0..2 {
                let qh = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * n) as *const __m256i);
                for j in 0..4 {
                    let p = 4 * n + j;
                    let ql = _mm256_loadu_si256(b.as_ptr().add(64 * n + 32 * (j % 2)) as *const __m256i);
                    let lo = _mm256_and_si256(srli16(ql, 4 * (j / 2)), _mm256_set1_epi8(0x0f));
                    let hi = _mm256_and_si256(srli16(qh, 2 * j), _mm256_set1_epi8(3));
                    let w = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)); // hi < 4: no carry past the byte
                    g.w[p] = _mm256_sub_epi8(w, _mm256_set1_epi8(32));
                    let (sa, sb) = (b[192 + 2 * p] as i8 as i16, b[193 + 2 * p] as i8 as i16);
                    g.halves[p] = _mm256_set_m128i(_mm_set1_epi16(sb), _mm_set1_epi16(sa));
                    c[p] = d;
                }
            }
            (g.form, g.n) = (Form::Halves, 8);
        }
        Q2_0 => {
            let mut h = [0u16; GROUP];
            // Element 4i + k of a block is bits 2k.. of byte i: four planes of codes (k = 0..3). Two
            // blocks' 16 code bytes side by side in one register (the first block's low), shifted right
            // by 2k and masked, are plane k of both: register 4p + k for the pair p of the group, its
            // bytes 0..8 the first block's first piece, 8..16 its second, then the second block's two
            // (`Q2_0_ORDER`, the order `in_q2_0_order` puts the inputs in). The codes 0..3 themselves:
            // the weight is the code − 1 (Form::Offset's arithmetic). A lone last block leaves the high
            // half zero.
            let m = _mm256_set1_epi8(3);
            for p in 0..nb.div_ceil(2) {
                let a = _mm_loadu_si128(bytes.as_ptr().add(2 * p * ts + 2) as *const __m128i);
                let b = if 2 * p + 1 < nb {
                    _mm_loadu_si128(bytes.as_ptr().add((2 * p + 1) * ts + 2) as *const __m128i)
                } else {
                    _mm_setzero_si128()
                };
                let v = _mm256_set_m128i(b, a);
                g.u[4 * p] = _mm256_and_si256(v, m);
                g.u[4 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m);
                g.u[4 * p + 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
                g.u[4 * p + 3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m);
            }
            for k in 0..nb {
                let d = u16::from_le_bytes([bytes[k * ts], bytes[k * ts + 1]]);
                (h[2 * k], h[2 * k + 1]) = (d, d);
            }
            (g.form, g.n, g.off_shift) = (Form::Planes, 2 * nb, 0);
            g.c = f16x8(&h);
            return;
        }
        Q4_0 => {
            let mut h = [0u16; GROUP];
            for k in 0..nb {
                let b = &bytes[k * ts..];
                h[k] = u16::from_le_bytes([b[0], b[1]]);
                g.u[k] = nibbles(b); // the weight is the nibble − 8: Form::Offset
            }
            (g.form, g.n, g.off_shift) = (Form::Offset, nb, 3);
            g.c = f16x8(&h);
            return;
        }
        Q8_0 | IQ4_NL => {
            let mut h = [0u16; GROUP];
            for k in 0..nb {
                let b = &bytes[k * ts..];
                h[k] = u16::from_le_bytes([b[0], b[1]]);
                g.w[k] = match K {
                    Q8_0 => _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i),
                    _ => {
                        let t = _mm_loadu_si128(quant::IQ4_NL_VALUES.as_ptr() as *const __m128i);
                        _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), nibbles(b))
                    }
                };
            }
            (g.form, g.n) = (Form::Scaled, nb);
            g.c = f16x8(&h);
            return magnitudes(g);
        }
        _ => unreachable!("kernel {K} is not a § qdot type"),
    }
    g.c = _mm256_loadu_ps(c.as_ptr());
    if g.form != Form::WithMin {
        magnitudes(g)
    }
}

/// The element of a pair of Q2_0 blocks (four pieces) at each byte of its four unpacked registers:
/// register k's byte i is the first block's element 4i + k, its byte 16 + i the second block's.
const Q2_0_ORDER: [usize; 4 * QBLOCK] = {
    let mut o = [0; 4 * QBLOCK];
    let mut pos = 0;
    while pos < 4 * QBLOCK {
        let (k, half, i) = (pos / 32, (pos % 32) / 16, pos % 16);
        o[pos] = 2 * QBLOCK * half + 4 * i + k;
        pos += 1;
    }
    o
};

/// Codes with each pair of blocks' in `Q2_0_ORDER`, padded with zeros to whole pairs (a lone last
/// block's partner: its weights are zero too).
fn in_q2_0_order(q: &[i8]) -> Vec<i8> {
    let mut padded = q.to_vec();
    padded.resize(q.len().next_multiple_of(4 * QBLOCK), 0);
    padded.chunks_exact(4 * QBLOCK).flat_map(|pair| Q2_0_ORDER.map(|e| pair[e])).collect()
}

/// Signed weights' magnitudes, made once for every input: |−128| reads as 128 unsigned.
#[inline(always)]
unsafe fn magnitudes(g: &mut Group) {
    for i in 0..g.n {
        g.u[i] = _mm256_abs_epi8(g.w[i]);
    }
}

/// A 32-element block of 16 nibble bytes (after its 2-byte scale): low nibbles are elements 0..16, high
/// ones 16..32.
#[inline(always)]
unsafe fn nibbles(b: &[u8]) -> __m256i {
    let v = _mm_loadu_si128(b.as_ptr().add(2) as *const __m128i);
    let lo = _mm_and_si128(v, _mm_set1_epi8(0x0f));
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f));
    _mm256_set_m128i(hi, lo)
}

/// A right shift of 16-bit lanes by a count known only at run time (0, 2, 4 or 6 here).
#[inline(always)]
unsafe fn srli16(v: __m256i, n: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
}
