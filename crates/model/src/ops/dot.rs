//! The reduction contract (docs/ARITHMETIC.md § dot): how every dot product and every sum of a vector
//! is cut up and in what order it is added, so a GPU warp reproduces the CPU's bits.
//!
//! A vector of length K is cut into chunks of 8 consecutive elements (the last may be shorter). Chunk c
//! belongs to lane c mod 32 of 32 lanes. Each lane, for its chunks in ascending order, sums the chunk
//! into a fresh +0.0 in element order (`fma(w, x, s)` for a dot, `s + x` for a sum) and adds that chunk
//! sum to its running lane total (from +0.0). The 32 lane totals are then added by the butterfly: for
//! offsets 16, 8, 4, 2, 1, lane l takes `v[l] + v[l ^ offset]`; every lane ends with the same bits.

pub const LANES: usize = 32;
pub const CHUNK: usize = 8;

/// The butterfly over 32 lane totals. Every lane ends with the same bits, so only lane 0's additions are
/// done: at offset o it adds lanes l and l + o for l < o, which are exactly the pairs the butterfly adds
/// for the lanes lane 0 depends on (31 additions instead of 160).
#[inline]
pub fn butterfly(mut v: [f32; LANES]) -> f32 {
    for off in [16, 8, 4, 2, 1] {
        for l in 0..off {
            v[l] += v[l + off];
        }
    }
    v[0]
}

/// [`butterfly`] where only lanes `0..used` can be other than +0.0 (a short vector: fewer chunks than
/// lanes): the additions of a zero lane are left out. The same bits: a lane total is never −0.0 (it
/// starts at +0.0, and a sum is −0.0 only when both its terms are), so adding +0.0 gives it back exactly;
/// its NaNs are arithmetic results, quiet, which an addition returns as they are.
#[inline]
pub fn butterfly_used(mut v: [f32; LANES], mut used: usize) -> f32 {
    for off in [16, 8, 4, 2, 1] {
        for l in 0..off.min(used.saturating_sub(off)) {
            v[l] += v[l + off];
        }
        used = used.min(off);
    }
    v[0]
}

/// `w · x` by the contract.
pub fn dot(w: &[f32], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::vector::current() != super::vector::Vector::Scalar {
        // SAFETY: a level above scalar is only chosen where the CPU has AVX2 and FMA (ops/vector.rs).
        return unsafe { dot_fma(w, x) };
    }
    dot_body(w, x)
}

/// [`dot`] on AVX2 and FMA: each group of eight chunks is loaded as eight registers (a chunk each) and
/// transposed, so that one register holds element e of all eight chunks; the eight chunk sums are then
/// eight fused multiply-adds side by side, each chunk's chain in its element order, and the group's sums
/// go to their lanes (four registers of lane totals) in group order, as the contract adds them. The same
/// bits: every fma and every addition is the contract's, rounded where it is. (Compiled from the scalar
/// body instead, the chunks' elements were read with strides: 1,920 BF16 rows of 2,560 on one thread of
/// the build machine took 4.5 ms against 3.1 ms this way, and 2.4 ms with the input made ready once,
/// bench/results/2026-12-06-cpu-host-experts/.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_fma(w: &[f32], x: &[f32]) -> f32 {
    dot_fma_xt(w, x, None)
}

/// [`dot_fma`], with the input's groups already transposed where `xt` is given ([`Prepared`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_fma_xt(w: &[f32], x: &[f32], xt: Option<&[f32]>) -> f32 {
    use std::arch::x86_64::*;
    debug_assert_eq!(w.len(), x.len());
    let groups = w.len() / GROUP;
    let mut acc = [_mm256_setzero_ps(); LANES / CHUNK];
    for g in 0..groups {
        let wp = w.as_ptr().add(g * GROUP);
        let wt = transpose8(std::array::from_fn(|j| _mm256_loadu_ps(wp.add(j * CHUNK))));
        let xt: [__m256; 8] = match xt {
            Some(xt) => std::array::from_fn(|e| _mm256_loadu_ps(xt.as_ptr().add(g * GROUP + e * CHUNK))),
            None => {
                let xp = x.as_ptr().add(g * GROUP);
                transpose8(std::array::from_fn(|j| _mm256_loadu_ps(xp.add(j * CHUNK))))
            }
        };
        let mut s = _mm256_setzero_ps();
        for e in 0..CHUNK {
            s = _mm256_fmadd_ps(wt[e], xt[e], s);
        }
        // Group g's chunks are lanes 8·(g mod 4) + j.
        acc[g % 4] = _mm256_add_ps(acc[g % 4], s);
    }
    let mut lane = [0f32; LANES];
    for (r, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(lane.as_mut_ptr().add(r * CHUNK), *a);
    }
    let whole = groups * GROUP;
    finish(lane, w, x, whole)
}

/// Eight dots with one vector `x` (at most 32 chunks) side by side, one a SIMD lane: `rows[e][i]` is
/// element e of the i-th vector. Each lane is the contract's dot: chunk c's fma chain in element order,
/// `+0 +` the chunk sum as lane c's total, then [`butterfly_used`]'s additions, register by register.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dots8(rows: &[[f32; 8]], x: &[f32]) -> [f32; 8] {
    use std::arch::x86_64::*;
    let mut v = [_mm256_setzero_ps(); LANES];
    let used = x.len().div_ceil(CHUNK);
    for (c, v) in v.iter_mut().enumerate().take(used) {
        let mut s = _mm256_setzero_ps();
        for e in CHUNK * c..(CHUNK * c + CHUNK).min(x.len()) {
            s = _mm256_fmadd_ps(_mm256_loadu_ps(rows[e].as_ptr()), _mm256_set1_ps(x[e]), s);
        }
        *v = _mm256_add_ps(_mm256_setzero_ps(), s); // the lane total: +0 + the chunk's sum
    }
    // butterfly_used, lane by lane.
    let mut used = used;
    for off in [16, 8, 4, 2, 1] {
        for l in 0..off.min(used.saturating_sub(off)) {
            v[l] = _mm256_add_ps(v[l], v[l + off]);
        }
        used = used.min(off);
    }
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), v[0]);
    out
}

/// Elements of a group: eight chunks, side by side in the vector dot.
const GROUP: usize = CHUNK * CHUNK;

/// A dot's input made ready once for many rows: each whole group of eight chunks transposed (element e
/// of chunk j at 8e + j), as the vector dot reads it, so a row's dot transposes only its own group.
pub struct Prepared<'a> {
    x: &'a [f32],
    xt: Vec<f32>,
}

impl<'a> Prepared<'a> {
    /// Each whole group transposed (element e of chunk j at 8e + j).
    pub(super) fn transposed(&self) -> &[f32] {
        &self.xt
    }

    pub fn new(x: &'a [f32]) -> Prepared<'a> {
        let mut xt = vec![0f32; x.len() / GROUP * GROUP];
        for (g, t) in x.chunks_exact(GROUP).zip(xt.chunks_exact_mut(GROUP)) {
            for (i, &v) in g.iter().enumerate() {
                t[(i % CHUNK) * CHUNK + i / CHUNK] = v;
            }
        }
        Prepared { x, xt }
    }
}

/// [`dot`] of `w` with a prepared input: the same bits.
pub fn dot_prepared(w: &[f32], p: &Prepared) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::vector::current() != super::vector::Vector::Scalar {
        // SAFETY: as in [`dot`].
        return unsafe { dot_fma_xt(w, p.x, Some(&p.xt)) };
    }
    dot_body(w, p.x)
}

/// Eight registers of eight as an 8×8 matrix, transposed: out[e] lane j = rows[j] lane e.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // t0 = unpacklo(r0, r1), t1 = unpackhi(r0, r1), t2/t3 of r2, r3, t4..t7 of r4..r7.
    let u = [
        _mm256_shuffle_ps::<0x44>(t[0], t[2]),
        _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm256_shuffle_ps::<0x44>(t[1], t[3]),
        _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm256_shuffle_ps::<0x44>(t[4], t[6]),
        _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm256_shuffle_ps::<0x44>(t[5], t[7]),
        _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    [
        _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
        _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
        _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
        _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
        _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
        _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
        _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
        _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
    ]
}

#[inline(always)]
fn dot_body(w: &[f32], x: &[f32]) -> f32 {
    debug_assert_eq!(w.len(), x.len());
    let mut lane = [0f32; LANES];
    // Whole groups of 8 chunks: the 8 chunk sums side by side (one SIMD register), each still the fma
    // chain over its own elements in order.
    let whole = w.len() / GROUP * GROUP;
    for (g, (wg, xg)) in w[..whole].chunks_exact(GROUP).zip(x[..whole].chunks_exact(GROUP)).enumerate() {
        let mut s = [0f32; CHUNK];
        for e in 0..CHUNK {
            for j in 0..CHUNK {
                s[j] = wg[j * CHUNK + e].mul_add(xg[j * CHUNK + e], s[j]);
            }
        }
        let base = (g * CHUNK) % LANES;
        for j in 0..CHUNK {
            lane[base + j] += s[j];
        }
    }
    finish(lane, w, x, whole)
}

/// The chunks after the whole groups (from element `whole`), each its fma chain into its lane, then the
/// butterfly over the lanes in use.
#[inline(always)]
fn finish(mut lane: [f32; LANES], w: &[f32], x: &[f32], whole: usize) -> f32 {
    for (c, (wc, xc)) in w[whole..].chunks(CHUNK).zip(x[whole..].chunks(CHUNK)).enumerate() {
        let c = c + whole / CHUNK;
        let mut s = 0f32;
        for (a, b) in wc.iter().zip(xc) {
            s = a.mul_add(*b, s);
        }
        lane[c % LANES] += s;
    }
    butterfly_used(lane, w.len().div_ceil(CHUNK))
}

/// Rows dotted side by side by [`dot_rows8`].
pub const ROWS8: usize = 8;

/// Eight rows interleaved (element i of row k at `8i + k`; `w` holds row k's elements at `k·cols`): the
/// layout [`dot_rows8`] reads.
pub fn interleave_rows8(w: &[f32], cols: usize, out: &mut [f32]) {
    for (k, row) in w.chunks_exact(cols).take(ROWS8).enumerate() {
        for (i, &v) in row.iter().enumerate() {
            out[i * ROWS8 + k] = v;
        }
    }
}

/// [`dot`] of eight rows (laid out by [`interleave_rows8`]) with `x`: each row's chunk sums, lanes and
/// butterfly as the contract's, the eight rows side by side (one register), so the same bits as eight
/// calls of [`dot`], and a short row costs no more than its elements.
pub fn dot_rows8(wi: &[f32], x: &[f32]) -> [f32; ROWS8] {
    #[cfg(target_arch = "x86_64")]
    if super::vector::current() != super::vector::Vector::Scalar {
        // SAFETY: as in [`dot`].
        return unsafe { dot_rows8_fma(wi, x) };
    }
    dot_rows8_body(wi, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows8_fma(wi: &[f32], x: &[f32]) -> [f32; ROWS8] {
    dot_rows8_body(wi, x)
}

#[inline(always)]
fn dot_rows8_body(wi: &[f32], x: &[f32]) -> [f32; ROWS8] {
    debug_assert_eq!(wi.len(), x.len() * ROWS8);
    let mut lane = [[0f32; ROWS8]; LANES];
    for (c, (xc, wc)) in x.chunks(CHUNK).zip(wi.chunks(CHUNK * ROWS8)).enumerate() {
        let mut s = [0f32; ROWS8];
        for (&xv, w) in xc.iter().zip(wc.chunks_exact(ROWS8)) {
            for r in 0..ROWS8 {
                s[r] = w[r].mul_add(xv, s[r]);
            }
        }
        for r in 0..ROWS8 {
            lane[c % LANES][r] += s[r];
        }
    }
    // butterfly_used for each row, the rows side by side.
    let mut used = x.len().div_ceil(CHUNK);
    for off in [16, 8, 4, 2, 1] {
        for l in 0..off.min(used.saturating_sub(off)) {
            let partner = lane[l + off];
            for (v, p) in lane[l].iter_mut().zip(partner) {
                *v += p;
            }
        }
        used = used.min(off);
    }
    lane[0]
}

/// `Σ x` by the contract.
pub fn sum(x: &[f32]) -> f32 {
    let mut lane = [0f32; LANES];
    for (c, xc) in x.chunks(CHUNK).enumerate() {
        let mut s = 0f32;
        for v in xc {
            s += v;
        }
        lane[c % LANES] += s;
    }
    butterfly_used(lane, x.len().div_ceil(CHUNK))
}

/// `Σ x²` by the contract (a dot of x with itself).
pub fn sum_squares(x: &[f32]) -> f32 {
    dot(x, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0) - 0.5)
            .collect()
    }

    /// The contract written the slow, literal way: per lane a list of chunk sums.
    #[allow(clippy::needless_range_loop)] // written as the contract reads: lane by lane
    fn dot_literal(w: &[f32], x: &[f32]) -> f32 {
        let n_chunks = w.len().div_ceil(CHUNK);
        let mut lane = [0f32; LANES];
        for l in 0..LANES {
            let mut c = l;
            while c < n_chunks {
                let mut s = 0f32;
                for e in c * CHUNK..((c + 1) * CHUNK).min(w.len()) {
                    s = w[e].mul_add(x[e], s);
                }
                lane[l] += s;
                c += LANES;
            }
        }
        // The butterfly as a warp does it: each lane adds its partner's value, every lane at once.
        for off in [16, 8, 4, 2, 1] {
            let prev = lane;
            for l in 0..LANES {
                lane[l] = prev[l ^ off] + prev[l]; // the partner first: the same bits
            }
        }
        assert!(lane.iter().all(|v| v.to_bits() == lane[0].to_bits()), "every lane holds the sum");
        lane[0]
    }

    #[test]
    fn dot_follows_the_literal_contract() {
        for n in [1, 7, 8, 9, 255, 256, 257, 1000, 10240] {
            let (w, x) = (data(n, 1), data(n, 2));
            assert_eq!(dot(&w, &x).to_bits(), dot_literal(&w, &x).to_bits(), "n = {n}");
            let ones = vec![1f32; n];
            assert_eq!(sum(&x).to_bits(), dot_literal(&ones, &x).to_bits(), "sum, n = {n}");
        }
    }

    #[test]
    fn every_vector_level_gives_the_same_dot() {
        for n in [1, 7, 63, 64, 65, 1000, 10240] {
            let (w, x) = (data(n, 5), data(n, 6));
            assert_eq!(dot_body(&w, &x).to_bits(), dot_literal(&w, &x).to_bits(), "n = {n}");
            #[cfg(target_arch = "x86_64")]
            if super::super::vector::Vector::Avx2.available() {
                // SAFETY: checked just above.
                let fma = unsafe { dot_fma(&w, &x) };
                assert_eq!(fma.to_bits(), dot_literal(&w, &x).to_bits(), "FMA build, n = {n}");
                let prepared = dot_prepared(&w, &Prepared::new(&x));
                assert_eq!(prepared.to_bits(), dot_literal(&w, &x).to_bits(), "prepared input, n = {n}");
            }
        }
    }

    #[test]
    fn eight_rows_side_by_side_are_eight_dots() {
        for cols in [1, 7, 32, 64, 100, 1024, 2561] {
            let w = data(cols * ROWS8, 11);
            let x = data(cols, 12);
            let mut wi = vec![0f32; cols * ROWS8];
            interleave_rows8(&w, cols, &mut wi);
            let want: Vec<u32> = w.chunks(cols).map(|r| dot_literal(r, &x).to_bits()).collect();
            let got: Vec<u32> = dot_rows8_body(&wi, &x).iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "cols {cols}");
            #[cfg(target_arch = "x86_64")]
            if super::super::vector::Vector::Avx2.available() {
                // SAFETY: checked just above.
                let fma: Vec<u32> = unsafe { dot_rows8_fma(&wi, &x) }.iter().map(|v| v.to_bits()).collect();
                assert_eq!(fma, want, "FMA build, cols {cols}");
            }
        }
    }

    #[test]
    fn dot_is_accurate() {
        let (w, x) = (data(10240, 3), data(10240, 4));
        let exact: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
        let got = dot(&w, &x) as f64;
        assert!((got - exact).abs() < 1e-4 * exact.abs().max(1.0), "{got} vs {exact}");
    }

    #[test]
    fn order_matters_and_is_the_contract_s() {
        // A sequential sum of these values gives other bits than the contract: the test would see a
        // reduction written in another order.
        let x: Vec<f32> = (0..512).map(|i| if i % 3 == 0 { 1e8 } else { 1.0 + i as f32 * 1e-3 }).collect();
        let seq: f32 = x.iter().sum();
        assert_ne!(seq.to_bits(), sum(&x).to_bits());
    }
}
