//! The 32- and 64-element blocks with one fp16 scale (Q8_0, Q4_0, Q5_0, Q2_0) or a scale and a minimum
//! (Q4_1, Q5_1).

use super::{f16_at, put_f16, signed_absmax};

/// Q8_0: d, then 32 int8 codes; value = q·d.
pub fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (v, &q) in y.iter_mut().zip(&b[2..34]) {
        *v = q as i8 as f32 * d;
    }
}

/// Q8_0 as d and integer weights (value = d·w, the dequantizer's bits).
pub fn ints_q8_0(b: &[u8], w: &mut [i8]) -> f32 {
    for (v, &q) in w.iter_mut().zip(&b[2..34]) {
        *v = q as i8;
    }
    f16_at(b, 0)
}

/// Q8_0 as ggml's reference quantizer: d = amax/127, q = round-half-away(x/d).
pub fn quant_q8_0(x: &[f32], b: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(b, 0, d);
    for (c, v) in b[2..34].iter_mut().zip(x) {
        *c = (v * id).round() as i8 as u8;
    }
}

/// Q4_0: d, then 16 bytes; byte j holds element j (low nibble) and j+16 (high); value = (q − 8)·d.
pub fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = ((q & 0xf) as i32 - 8) as f32 * d;
        y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// Q4_0 as d and integer weights q − 8.
pub fn ints_q4_0(b: &[u8], w: &mut [i8]) -> f32 {
    for j in 0..16 {
        let q = b[2 + j];
        w[j] = (q & 0xf) as i8 - 8;
        w[j + 16] = (q >> 4) as i8 - 8;
    }
    f16_at(b, 0)
}

/// Q4_0 as ggml's reference quantizer: the largest-magnitude element maps to −8.
pub fn quant_q4_0(x: &[f32], b: &mut [u8]) {
    let d = signed_absmax(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(b, 0, d);
    let code = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
    for j in 0..16 {
        b[2 + j] = code(x[j]) | (code(x[j + 16]) << 4);
    }
}

/// Q5_0: d, 32 high bits (u32, bit j for element j), 16 bytes of low nibbles as Q4_0; value = (q − 16)·d.
pub fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let q = b[6 + j];
        let lo = (q & 0xf) as u32 | ((qh >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        y[j] = (lo as i32 - 16) as f32 * d;
        y[j + 16] = (hi as i32 - 16) as f32 * d;
    }
}

/// Q2_0 (type 42): d, then 16 bytes of 2-bit codes; weight i is bits 2·(i%4).. of byte i/4;
/// value = (code − 1)·d, so a block holds {−d, 0, d, 2d}.
pub fn dequant_q2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (y4, &byte) in y.chunks_exact_mut(4).zip(&b[2..18]) {
        for (k, v) in y4.iter_mut().enumerate() {
            *v = (((byte >> (2 * k)) & 3) as i32 - 1) as f32 * d;
        }
    }
}

/// Q2_0 as d and integer weights code − 1.
pub fn ints_q2_0(b: &[u8], w: &mut [i8]) -> f32 {
    for (w4, &byte) in w.chunks_exact_mut(4).zip(&b[2..18]) {
        for (k, v) in w4.iter_mut().enumerate() {
            *v = ((byte >> (2 * k)) & 3) as i8 - 1;
        }
    }
    f16_at(b, 0)
}

/// Q2_0 by a small search over scales: the largest-magnitude element goes to the code of 2 (d of its
/// sign), and of a few scales around that the one with the least squared error is kept.
pub fn quant_q2_0(x: &[f32], b: &mut [u8]) {
    let m = signed_absmax(x);
    let mut best = (f32::INFINITY, 0f32);
    for k in 0..8 {
        let d = m / (1.0 + 0.15 * k as f32);
        let err: f32 = x.iter().map(|&v| (v - (q2_code(v, d) as f32 - 1.0) * d).powi(2)).sum();
        if err < best.0 {
            best = (err, d);
        }
    }
    let d = put_f16(b, 0, best.1);
    b[2..18].fill(0);
    for (i, &v) in x.iter().enumerate() {
        b[2 + i / 4] |= q2_code(v, d) << (2 * (i % 4));
    }
}

fn q2_code(v: f32, d: f32) -> u8 {
    if d == 0.0 {
        return 1;
    }
    ((v / d).round() + 1.0).clamp(0.0, 3.0) as u8
}

/// Q4_1: d, m, then 16 bytes as Q4_0 (element j low nibble, j+16 high); value = (q·d) + m.
pub fn dequant_q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for j in 0..16 {
        let q = b[4 + j];
        y[j] = d * (q & 0xf) as f32 + m;
        y[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// Q5_1: d, m, 32 high bits (u32), 16 bytes of low nibbles; value = (q·d) + m.
pub fn dequant_q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for j in 0..16 {
        let q = b[8 + j];
        let lo = (q & 0xf) as u32 | ((qh >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * lo as f32 + m;
        y[j + 16] = d * hi as f32 + m;
    }
}
