//! Integer dot products over int8 activations (docs/ARITHMETIC.md § qdot): the matrix-vector products of
//! the types whose blocks are scales times small integers (Q8_0, Q4_0, Q2_0, IQ4_NL, Q4_K, Q6_K). The
//! input is quantized once per product, 32 elements to a block with an f32 scale; each 32-element piece
//! of a row is then exact integer sums and a few float products, so a GPU does it with four-way integer
//! dot instructions instead of decoding every weight into a float.

use strata_gguf::{quant, GgmlType};

use super::dot::{butterfly_used, LANES};

/// Elements of an activation block (one f32 scale each).
pub const QBLOCK: usize = 32;

/// The largest code: an activation block's codes are in −127..=127.
const QMAX: f32 = 127.0;

/// An input vector quantized: block j's elements are `d[j]·q[32j + i]`, and `sum[j]` is the sum of its
/// codes (Q4_K's min term needs it in every row; made once here).
pub struct QInput {
    pub d: Vec<f32>,
    pub q: Vec<i8>,
    pub sum: Vec<i32>,
    /// The codes in the order the x86 kernels unpack Q2_0's pieces in (ops/qdot_x86.rs), made on first
    /// use and kept for every product over this input.
    pub planes: std::sync::OnceLock<Vec<i8>>,
    /// The codes in the order the AVX-512 Q2_0 kernel unpacks its groups of four blocks in
    /// (ops/qdot_avx512.rs), made on first use likewise.
    pub wide: std::sync::OnceLock<Vec<i8>>,
}

/// Whether products over `ty` follow this contract instead of § matvec's dequantize-then-dot.
pub fn uses_qdot(ty: GgmlType) -> bool {
    quant::int_weights(ty).is_some() || matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K)
}

/// `x` (a whole number of blocks) quantized by the contract: per block, `amax = max |x|` (NaNs passed
/// over), `d = amax / 127` and `q = round_half_even(x · (127 / amax))` clamped to ±127 (a NaN product
/// gives 0); a block whose amax is 0 is all zero codes with d = 0.
pub fn quantize_input(x: &[f32]) -> QInput {
    debug_assert!(x.len().is_multiple_of(QBLOCK));
    let mut d = Vec::with_capacity(x.len() / QBLOCK);
    let mut q = vec![0i8; x.len()];
    for (xb, qb) in x.chunks_exact(QBLOCK).zip(q.chunks_exact_mut(QBLOCK)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            d.push(0.0);
            continue;
        }
        let id = QMAX / amax;
        for (c, &v) in qb.iter_mut().zip(xb) {
            *c = code(v * id);
        }
        d.push(amax / QMAX);
    }
    let sum = q.chunks_exact(QBLOCK).map(|b| b.iter().map(|&c| c as i32).sum()).collect();
    QInput { d, q, sum, planes: Default::default(), wide: Default::default() }
}

/// A scaled element as its code: rounded half to even, clamped to ±127; NaN becomes 0.
#[inline]
fn code(v: f32) -> i8 {
    if v.is_nan() {
        return 0;
    }
    v.round_ties_even().clamp(-QMAX, QMAX) as i8
}

/// One row (`bytes`: whole blocks of `ty`, a uses_qdot type) times the quantized input: each piece j (the
/// row's elements 32j .. 32j + 32) has a value v_j ([`block_values`]); lane `j mod 32` adds its pieces in
/// ascending order from +0.0, and the butterfly adds the 32 lanes (§ dot).
pub fn qdot_row(ty: GgmlType, bytes: &[u8], x: &QInput) -> f32 {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let pieces = bs / QBLOCK;
    let mut v = [0f32; 8];
    let mut lane = [0f32; LANES];
    for (b, block) in bytes.chunks_exact(ts).enumerate() {
        block_values(ty, block, x, b * pieces, &mut v[..pieces]);
        for (p, &vp) in v[..pieces].iter().enumerate() {
            lane[(b * pieces + p) % LANES] += vp;
        }
    }
    butterfly_used(lane, bytes.len() / ts * pieces)
}

/// The values of one block's pieces j0, j0 + 1, … (out: one per piece):
/// - one scale dw and integer weights w (Q8_0, Q4_0, Q2_0, IQ4_NL): `(dw · d[j]) · Σ w·q`;
/// - Q6_K (a scale sc per 16 weights): `(d · d[j]) · (sc_a·Σ_a w·q + sc_b·Σ_b w·q)` over the piece's two
///   halves, the integer sum exact (at most 16,646,144 in magnitude, below 2^24);
/// - Q4_K (a scale sc and a min m per piece): `fma((d·sc)·d[j], Σ w·q, −(((dmin·m)·d[j])·Σ q))`.
fn block_values(ty: GgmlType, block: &[u8], x: &QInput, j0: usize, out: &mut [f32]) {
    let codes = |j: usize| &x.q[j * QBLOCK..(j + 1) * QBLOCK];
    let isum = |w: &[i8], q: &[i8]| -> i32 { w.iter().zip(q).map(|(&a, &b)| a as i32 * b as i32).sum() };
    match ty {
        GgmlType::Q6_K => {
            let k = quant::ints_q6_k(block);
            for (p, v) in out.iter_mut().enumerate() {
                let (w, q) = (&k.w[QBLOCK * p..QBLOCK * (p + 1)], codes(j0 + p));
                let s = k.scale[2 * p] * isum(&w[..16], &q[..16]) + k.scale[2 * p + 1] * isum(&w[16..], &q[16..]);
                *v = (k.d * x.d[j0 + p]) * s as f32;
            }
        }
        GgmlType::Q4_K => {
            let k = quant::ints_q4_k(block);
            for (p, v) in out.iter_mut().enumerate() {
                let (w, q, da) = (&k.w[QBLOCK * p..QBLOCK * (p + 1)], codes(j0 + p), x.d[j0 + p]);
                let a = (k.d * k.scale[p] as f32) * da;
                let b = (k.dmin * k.min[p] as f32) * da;
                *v = a.mul_add(isum(w, q) as f32, -(b * x.sum[j0 + p] as f32));
            }
        }
        _ => {
            let ints = quant::int_weights(ty).expect("a qdot type");
            let mut w = [0i8; 64];
            let w = &mut w[..ty.block_size()];
            let dw = ints(block, w);
            for (p, v) in out.iter_mut().enumerate() {
                *v = (dw * x.d[j0 + p]) * isum(&w[QBLOCK * p..QBLOCK * (p + 1)], codes(j0 + p)) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_gguf::SplitMix64;

    fn normal(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).map(|_| (0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0).collect()
    }

    #[test]
    fn quantize_input_follows_the_contract() {
        let mut rng = SplitMix64::new(3);
        let mut x = normal(&mut rng, 4 * QBLOCK);
        x[QBLOCK..2 * QBLOCK].fill(0.0); // an all-zero block
        x[2 * QBLOCK + 5] = f32::NAN; // a NaN is passed over by the maximum and coded 0
        x[3 * QBLOCK + 7] = -2.5; // the block's largest magnitude, negative
        let qi = quantize_input(&x);
        assert_eq!((qi.d[1], &qi.q[QBLOCK..2 * QBLOCK]), (0.0, &[0i8; QBLOCK][..]));
        assert_eq!(qi.q[2 * QBLOCK + 5], 0);
        assert_eq!(qi.q[3 * QBLOCK + 7], -127);
        assert_eq!(qi.d[3], 2.5 / 127.0);
        for (j, xb) in x.chunks_exact(QBLOCK).enumerate() {
            for (i, &v) in xb.iter().enumerate().filter(|(_, v)| !v.is_nan()) {
                let back = qi.q[j * QBLOCK + i] as f32 * qi.d[j];
                // Each element back within half a step (plus the two roundings of the scale).
                assert!((back - v).abs() <= 0.5001 * qi.d[j], "block {j} element {i}: {v} → {back}");
            }
        }
    }

    #[test]
    fn rounding_is_half_to_even() {
        // amax 127 makes id = 1, so each element's code is its own rounding.
        let mut x = vec![0f32; QBLOCK];
        x[..5].copy_from_slice(&[127.0, 2.5, 3.5, -2.5, 0.49999997]);
        let q = quantize_input(&x).q;
        assert_eq!(&q[..5], &[127, 2, 4, -2, 0]);
    }

    /// The contract written out literally: integers element by element, pieces in order, lanes, butterfly.
    fn literal(ty: GgmlType, bytes: &[u8], x: &QInput) -> f32 {
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let mut pieces = Vec::new();
        for block in bytes.chunks_exact(ts) {
            let k = match ty {
                GgmlType::Q4_K => Some(quant::ints_q4_k(block)),
                GgmlType::Q6_K => Some(quant::ints_q6_k(block)),
                _ => None,
            };
            let mut w = vec![0i8; bs];
            let dw = match &k {
                Some(k) => {
                    w.copy_from_slice(&k.w);
                    k.d
                }
                None => quant::int_weights(ty).unwrap()(block, &mut w),
            };
            for (p, wp) in w.chunks(QBLOCK).enumerate() {
                let j = pieces.len();
                let xq = &x.q[j * QBLOCK..(j + 1) * QBLOCK];
                let dot = |r: std::ops::Range<usize>| -> i64 { r.map(|i| wp[i] as i64 * xq[i] as i64).sum() };
                let da = x.d[j];
                pieces.push(match (ty, &k) {
                    (GgmlType::Q6_K, Some(k)) => {
                        let s = k.scale[2 * p] as i64 * dot(0..16) + k.scale[2 * p + 1] as i64 * dot(16..32);
                        (dw * da) * s as f32
                    }
                    (GgmlType::Q4_K, Some(k)) => {
                        let qsum: i64 = xq.iter().map(|&c| c as i64).sum();
                        let (a, b) = ((dw * k.scale[p] as f32) * da, (k.dmin * k.min[p] as f32) * da);
                        a.mul_add(dot(0..32) as f32, -(b * qsum as f32))
                    }
                    _ => (dw * da) * dot(0..32) as f32,
                });
            }
        }
        let mut lane = [0f32; LANES];
        for (j, v) in pieces.iter().enumerate() {
            lane[j % LANES] += v;
        }
        let mut v = lane;
        for off in [16, 8, 4, 2, 1] {
            let before = v;
            for l in 0..LANES {
                v[l] = before[l] + before[l ^ off];
            }
        }
        v[0]
    }

    #[test]
    fn qdot_follows_the_literal_contract_and_is_accurate() {
        let mut rng = SplitMix64::new(5);
        for ty in GgmlType::ALL.into_iter().filter(|&t| uses_qdot(t)) {
            for cols in [256, 768, 2560, 6144] {
                let x = normal(&mut rng, cols);
                let mut bytes = Vec::new();
                quant::quantize(ty, &normal(&mut rng, cols), &mut bytes).unwrap();
                let qi = quantize_input(&x);
                let got = qdot_row(ty, &bytes, &qi);
                assert_eq!(got.to_bits(), literal(ty, &bytes, &qi).to_bits(), "{ty} × {cols}");
                // Against the f64 dot of the dequantized row and the unquantized input: the input's
                // rounding (half a step of amax/127 an element) bounds the difference.
                let mut w = vec![0f32; cols];
                quant::dequantize(ty, &bytes, &mut w).unwrap();
                let exact: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                let bound: f64 = w.iter().enumerate().map(|(i, &a)| (a as f64).abs() * qi.d[i / QBLOCK] as f64).sum();
                assert!((got as f64 - exact).abs() <= 0.51 * bound + 1e-6, "{ty} × {cols}: {got} against {exact}");
            }
        }
    }

    #[test]
    fn qdot_is_the_dequantized_row_times_the_dequantized_input() {
        // Only float rounding apart: the contract's sums are the exact ones, rounded a few times.
        let mut rng = SplitMix64::new(21);
        for ty in GgmlType::ALL.into_iter().filter(|&t| uses_qdot(t)) {
            let cols = 2560;
            let x = normal(&mut rng, cols);
            let mut bytes = Vec::new();
            quant::quantize(ty, &normal(&mut rng, cols), &mut bytes).unwrap();
            let qi = quantize_input(&x);
            let got = qdot_row(ty, &bytes, &qi) as f64;
            let mut w = vec![0f32; cols];
            quant::dequantize(ty, &bytes, &mut w).unwrap();
            let terms: Vec<f64> = (0..cols).map(|i| w[i] as f64 * (qi.q[i] as f64 * qi.d[i / QBLOCK] as f64)).collect();
            let exact: f64 = terms.iter().sum();
            let scale: f64 = terms.iter().map(|t| t.abs()).sum();
            assert!((got - exact).abs() <= 1e-5 * scale, "{ty}: {got} against {exact} (scale {scale})");
        }
    }

    #[test]
    fn the_piece_order_is_the_contracts() {
        // Summing the pieces one after another gives other bits for some rows, so the order is seen.
        let mut rng = SplitMix64::new(9);
        let ty = GgmlType::Q8_0;
        let mut differs = 0;
        for _ in 0..20 {
            let x = normal(&mut rng, 2560);
            let mut bytes = Vec::new();
            quant::quantize(ty, &normal(&mut rng, 2560), &mut bytes).unwrap();
            let qi = quantize_input(&x);
            let mut seq = 0f32;
            let mut w = [0i8; 32];
            for (j, block) in bytes.chunks_exact(ty.type_size()).enumerate() {
                let dw = quant::int_weights(ty).unwrap()(block, &mut w);
                let s: i32 = w.iter().zip(&qi.q[32 * j..32 * j + 32]).map(|(&a, &b)| a as i32 * b as i32).sum();
                seq += (dw * qi.d[j]) * s as f32;
            }
            differs += usize::from(seq.to_bits() != qdot_row(ty, &bytes, &qi).to_bits());
        }
        assert!(differs > 0);
    }
}
