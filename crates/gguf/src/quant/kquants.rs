//! The K-quants: 256-element super-blocks with 6-bit (Q3_K: 6-bit, Q6_K: 8-bit) sub-block scales.

use super::{f16_at, put_f16};

/// Q3_K: hmask[32], qs[64], 12 bytes of 16 six-bit scales, d (fp16, last).
/// Element n·128 + j·32 + l: low bits from qs[n·32 + l] at shift 2j, high bit from hmask[l] bit n·4 + j
/// (a clear bit subtracts 4), scale n·8 + 2j + l/16.
pub fn dequant_q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs, sc) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    for n in 0..2 {
        for j in 0..4 {
            let bit = n * 4 + j;
            for half in 0..2 {
                let is = n * 8 + 2 * j + half;
                let lo = (sc[is % 8] >> (4 * (is / 8))) & 0xf;
                let hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
                let dl = d * ((lo | (hi << 4)) as i32 - 32) as f32;
                for l in half * 16..half * 16 + 16 {
                    let q = ((qs[n * 32 + l] >> (2 * j)) & 3) as i32;
                    let sub = 4 - 4 * ((hmask[l] >> bit) & 1) as i32; // a clear bit subtracts 4
                    y[n * 128 + j * 32 + l] = dl * (q - sub) as f32;
                }
            }
        }
    }
}

/// The 6-bit scale and min of sub-block j from the 12 packed bytes of Q4_K / Q5_K.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Packs 8 six-bit scales and mins in Q4_K's layout (the inverse of `scale_min_k4`).
fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8], q: &mut [u8]) {
    for j in 0..4 {
        q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4);
    }
}

/// Q4_K: d, dmin, 12 bytes of scales/mins, qs[128]; value = d·sc·q − dmin·m, sub-blocks of 32:
/// sub-block 2k takes the low nibbles of qs[32k..32k+32], 2k+1 the high ones.
pub fn dequant_q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, qs) = (&b[4..16], &b[16..144]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        let (d1, m1) = (d * s as f32, dmin * m as f32);
        let q = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for l in 0..32 {
            let v = (q[l] >> (4 * (j % 2))) & 0xf;
            y[32 * j + l] = d1 * v as f32 - m1;
        }
    }
}

/// A Q4_K or Q6_K block as integers: element i is `(d·scale[i / sub])·w[i] − (dmin·min[i / sub])`,
/// sub = 32 for Q4_K (8 scales and mins; w the 4-bit code) and 16 for Q6_K (16 scales, no min, dmin 0;
/// w the 6-bit code − 32), with the dequantizers' bits.
pub struct KInts {
    pub d: f32,
    pub dmin: f32,
    pub scale: [i32; 16],
    pub min: [i32; 8],
    pub w: [i8; 256],
}

/// Q4_K's block as [`KInts`].
pub fn ints_q4_k(b: &[u8]) -> KInts {
    let mut k = KInts { d: f16_at(b, 0), dmin: f16_at(b, 2), scale: [0; 16], min: [0; 8], w: [0; 256] };
    let (sc, qs) = (&b[4..16], &b[16..144]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        (k.scale[j], k.min[j]) = (s as i32, m as i32);
        for l in 0..32 {
            k.w[32 * j + l] = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xf) as i8;
        }
    }
    k
}

/// Q6_K's block as [`KInts`].
pub fn ints_q6_k(b: &[u8]) -> KInts {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let mut k = KInts { d: f16_at(b, 208), dmin: 0.0, scale: [0; 16], min: [0; 8], w: [0; 256] };
    for (s, &v) in k.scale.iter_mut().zip(sc) {
        *s = v as i8 as i32;
    }
    for n in 0..2 {
        for j in 0..4 {
            for l in 0..32 {
                let lo = (ql[n * 64 + (j % 2) * 32 + l] >> (4 * (j / 2))) & 0xf;
                let hi = (qh[n * 32 + l] >> (2 * j)) & 3;
                k.w[n * 128 + j * 32 + l] = (lo | (hi << 4)) as i8 - 32;
            }
        }
    }
    k
}

/// Q5_K: Q4_K plus qh[32]: element 32j + l takes bit j of qh[l] as its fifth bit.
pub fn dequant_q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        let (d1, m1) = (d * s as f32, dmin * m as f32);
        let q = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for l in 0..32 {
            let v = ((q[l] >> (4 * (j % 2))) & 0xf) | (((qh[l] >> j) & 1) << 4);
            y[32 * j + l] = d1 * v as f32 - m1;
        }
    }
}

/// Q6_K: ql[128], qh[64], 16 int8 scales, d (last); value = d·sc·(q − 32), q of 6 bits.
/// Element n·128 + k·32 + l: low nibble of ql[n·64 + (k%2)·32 + l] (high nibble for k ≥ 2), top two bits
/// from qh[n·32 + l] at shift 2k, scale n·8 + 2k + l/16.
pub fn dequant_q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for n in 0..2 {
        for k in 0..4 {
            for l in 0..32 {
                let lo = (ql[n * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xf;
                let hi = (qh[n * 32 + l] >> (2 * k)) & 3;
                let q = (lo | (hi << 4)) as i32 - 32;
                let s = sc[n * 8 + 2 * k + l / 16] as i8;
                y[n * 128 + k * 32 + l] = d * s as f32 * q as f32;
            }
        }
    }
}

/// Q4_K: per sub-block of 32 a scale (max − min)/15 and a min ≤ 0, both quantized to 6 bits against the
/// super-block's d and dmin; each element to the nearest of its 16 levels.
pub fn quant_q4_k(x: &[f32], b: &mut [u8]) {
    let mut scale = [0f32; 8];
    let mut minv = [0f32; 8];
    for j in 0..8 {
        let s = &x[32 * j..32 * j + 32];
        let lo = s.iter().fold(0f32, |m, &v| m.min(v));
        let hi = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        scale[j] = (hi - lo) / 15.0;
        minv[j] = -lo;
    }
    let d = put_f16(b, 0, scale.iter().fold(0f32, |m, &v| m.max(v)) / 63.0);
    let dmin = put_f16(b, 2, minv.iter().fold(0f32, |m, &v| m.max(v)) / 63.0);
    let six = |v: f32, unit: f32| if unit > 0.0 { (v / unit).round().clamp(0.0, 63.0) as u8 } else { 0 };
    let sc: [u8; 8] = std::array::from_fn(|j| six(scale[j], d));
    let m: [u8; 8] = std::array::from_fn(|j| six(minv[j], dmin));
    pack_scale_min_k4(&sc, &m, &mut b[4..16]);
    b[16..144].fill(0);
    for j in 0..8 {
        let (d1, m1) = (d * sc[j] as f32, dmin * m[j] as f32);
        for l in 0..32 {
            let q = if d1 > 0.0 { ((x[32 * j + l] + m1) / d1).round().clamp(0.0, 15.0) as u8 } else { 0 };
            b[16 + 32 * (j / 2) + l] |= q << (4 * (j % 2));
        }
    }
}

/// Q6_K: per sub-block of 16 a signed scale amax/31 quantized to int8 against d = max|scale|/127;
/// each element to the nearest of its 64 levels.
pub fn quant_q6_k(x: &[f32], b: &mut [u8]) {
    let scale: [f32; 16] =
        std::array::from_fn(|s| x[16 * s..16 * s + 16].iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0);
    let d = put_f16(b, 208, scale.iter().fold(0f32, |m, &v| m.max(v)) / 127.0);
    b[0..192].fill(0);
    for s in 0..16 {
        let sc = if d > 0.0 { (scale[s] / d).round().clamp(-128.0, 127.0) as i8 } else { 0 };
        b[192 + s] = sc as u8;
        let dl = d * sc as f32;
        for (i, &v) in x.iter().enumerate().skip(16 * s).take(16) {
            let q = if dl != 0.0 { (v / dl).round().clamp(-32.0, 31.0) as i32 + 32 } else { 32 } as u8;
            let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
            b[n * 64 + (k % 2) * 32 + l] |= (q & 0xf) << (4 * (k / 2));
            b[128 + n * 32 + l] |= (q >> 4) << (2 * k);
        }
    }
}

/// Q2_K: scales[16] (low nibble: scale, high: min, per 16 elements), qs[64] (2 bits each), d, dmin.
/// Element 128·j + 32·s + l is bits 2s.. of qs[32·j + l]; value = (d·sc)·q − dmin·m.
pub fn dequant_q2_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    let (scales, qs) = (&b[..16], &b[16..80]);
    for j in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                let i = 128 * j + 32 * s + l;
                let sc = scales[i / 16];
                let q = (qs[32 * j + l] >> (2 * s)) & 3;
                y[i] = (d * (sc & 0xf) as f32) * q as f32 - dmin * (sc >> 4) as f32;
            }
        }
    }
}
