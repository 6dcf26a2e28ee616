//! Integer dot products over int8 activations (docs/ARITHMETIC.md § qdot): the matrix-vector products of
//! the types whose blocks are one scale times small integers (Q8_0, Q4_0, Q2_0, IQ4_NL). The input is
//! quantized once per product, 32 elements to a block with an f32 scale; each 32-element piece of a row
//! is then one exact integer sum and two float products, so a GPU does it with four-way integer dot
//! instructions instead of decoding every weight into a float.

use strata_gguf::{quant, GgmlType};

use super::dot::{butterfly, LANES};

/// Elements of an activation block (one f32 scale each).
pub const QBLOCK: usize = 32;

/// The largest code: an activation block's codes are in −127..=127.
const QMAX: f32 = 127.0;

/// An input vector quantized: block j's elements are `d[j]·q[32j + i]`.
pub struct QInput {
    pub d: Vec<f32>,
    pub q: Vec<i8>,
}

/// Whether products over `ty` follow this contract instead of § matvec's dequantize-then-dot.
pub fn uses_qdot(ty: GgmlType) -> bool {
    quant::int_weights(ty).is_some()
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
    QInput { d, q }
}

/// A scaled element as its code: rounded half to even, clamped to ±127; NaN becomes 0.
#[inline]
fn code(v: f32) -> i8 {
    if v.is_nan() {
        return 0;
    }
    v.round_ties_even().clamp(-QMAX, QMAX) as i8
}

/// One row (`bytes`: whole blocks of `ty`, a uses_qdot type) times the quantized input. Piece j (the row's
/// elements 32j .. 32j + 32, inside one weight block of scale dw) is `v_j = (dw · d[j]) · s_j` with
/// `s_j = Σ w·q` exact in integers; lane `j mod 32` adds its pieces in ascending order from +0.0, and the
/// butterfly adds the 32 lanes (§ dot).
pub fn qdot_row(ty: GgmlType, bytes: &[u8], x: &QInput) -> f32 {
    let ints = quant::int_weights(ty).expect("a qdot type");
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut w = [0i8; 64];
    let w = &mut w[..bs];
    let mut lane = [0f32; LANES];
    for (b, block) in bytes.chunks_exact(ts).enumerate() {
        let dw = ints(block, w);
        for (p, wp) in w.chunks_exact(QBLOCK).enumerate() {
            let j = b * bs / QBLOCK + p;
            let xq = &x.q[j * QBLOCK..(j + 1) * QBLOCK];
            let s: i32 = wp.iter().zip(xq).map(|(&a, &b)| a as i32 * b as i32).sum();
            lane[j % LANES] += (dw * x.d[j]) * s as f32;
        }
    }
    butterfly(lane)
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

    /// The contract written out literally: dequantized integers, pieces in order, lanes, butterfly.
    fn literal(ty: GgmlType, bytes: &[u8], x: &QInput) -> f32 {
        let ints = quant::int_weights(ty).unwrap();
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let mut pieces = Vec::new();
        for block in bytes.chunks_exact(ts) {
            let mut w = vec![0i8; bs];
            let dw = ints(block, &mut w);
            for wp in w.chunks(QBLOCK) {
                let j = pieces.len();
                let xq = &x.q[j * QBLOCK..(j + 1) * QBLOCK];
                let s: i64 = wp.iter().zip(xq).map(|(&a, &b)| a as i64 * b as i64).sum();
                pieces.push((dw * x.d[j]) * s as f32);
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
            for cols in [64, 640, 2560, 6144] {
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
