//! IQ4_NL and IQ4_XS: 4-bit codes into a fixed non-linear table of 16 values.

use super::{f16_at, put_f16, signed_absmax};

/// The 16 values of the IQ4 formats (a constant of the format).
pub const IQ4_NL_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// IQ4_NL: d, then 16 bytes as Q4_0's nibble layout; value = d·table[q].
pub fn dequant_iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = d * IQ4_NL_VALUES[(q & 0xf) as usize] as f32;
        y[j + 16] = d * IQ4_NL_VALUES[(q >> 4) as usize] as f32;
    }
}

/// IQ4_NL as d and integer weights table[q].
pub fn ints_iq4_nl(b: &[u8], w: &mut [i8]) -> f32 {
    for j in 0..16 {
        let q = b[2 + j];
        w[j] = IQ4_NL_VALUES[(q & 0xf) as usize];
        w[j + 16] = IQ4_NL_VALUES[(q >> 4) as usize];
    }
    f16_at(b, 0)
}

/// IQ4_XS: d, 8 six-bit scales (low 4 bits in `scales_l`, high 2 in the u16 `scales_h`), then 8 runs of
/// 16 bytes in IQ4_NL's nibble layout, each run 32 elements at d·(scale − 32).
pub fn dequant_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for ib in 0..8 {
        let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * ((lo | (hi << 4)) as i32 - 32) as f32;
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        let y = &mut y[32 * ib..32 * ib + 32];
        for j in 0..16 {
            y[j] = dl * IQ4_NL_VALUES[(qs[j] & 0xf) as usize] as f32;
            y[j + 16] = dl * IQ4_NL_VALUES[(qs[j] >> 4) as usize] as f32;
        }
    }
}

/// IQ4_NL by a search over a few scales, each element to its nearest table value.
pub fn quant_iq4_nl(x: &[f32], b: &mut [u8]) {
    let base = signed_absmax(x) / IQ4_NL_VALUES[0] as f32;
    let mut best = (f32::INFINITY, 0f32);
    for k in -4..=4 {
        let d = base * (1.0 + 0.03 * k as f32);
        let err: f32 = x.iter().map(|&v| (v - d * IQ4_NL_VALUES[nearest(v, d)] as f32).powi(2)).sum();
        if err < best.0 {
            best = (err, d);
        }
    }
    let d = put_f16(b, 0, best.1);
    for j in 0..16 {
        b[2 + j] = nearest(x[j], d) as u8 | (nearest(x[j + 16], d) as u8) << 4;
    }
}

/// Index of the table value nearest to v/d.
fn nearest(v: f32, d: f32) -> usize {
    if d == 0.0 {
        return 8; // the value nearest zero
    }
    let t = v / d;
    (0..16)
        .min_by(|&a, &c| (t - IQ4_NL_VALUES[a] as f32).abs().total_cmp(&(t - IQ4_NL_VALUES[c] as f32).abs()))
        .unwrap_or(8)
}
