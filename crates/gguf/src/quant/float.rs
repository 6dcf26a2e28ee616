//! F32, F16 and BF16: element-wise conversions.

use half::f16;

/// Exact fp16 → f32 (a NaN keeps its payload, shifted). Written out so that it inlines into the codecs'
/// loops; a call through a run-time CPU-feature dispatch per element costs more than the conversion.
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    if em >= 0x7c00 {
        f32::from_bits(sign | 0x7f80_0000 | ((em & 0x3ff) << 13)) // inf, NaN
    } else if em >= 0x0400 {
        f32::from_bits(sign | ((em << 13) + ((127 - 15) << 23))) // normal: rebias the exponent
    } else {
        f32::from_bits(sign | (em as f32 * (-24f32).exp2()).to_bits()) // zero, subnormal: exact
    }
}

/// Round to nearest even, as IEEE conversion does.
pub fn f32_to_f16(v: f32) -> u16 {
    f16::from_f32(v).to_bits()
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Round to nearest even; a NaN stays a (quiet) NaN rather than rounding into infinity.
pub fn f32_to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u as u64 + 0x7fff + ((u >> 16) & 1) as u64) >> 16) as u16
}

pub fn dequant_f32(b: &[u8], y: &mut [f32]) {
    for (c, v) in b.chunks_exact(4).zip(y) {
        *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Every fp16 value as f32 (256 KB): one load per element beats the branches of the conversion.
fn f16_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(f16_to_f32).collect())
}

pub fn dequant_f16(b: &[u8], y: &mut [f32]) {
    let table = f16_table();
    for (c, v) in b.chunks_exact(2).zip(y) {
        *v = table[u16::from_le_bytes([c[0], c[1]]) as usize];
    }
}

pub fn dequant_bf16(b: &[u8], y: &mut [f32]) {
    for (c, v) in b.chunks_exact(2).zip(y) {
        *v = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

pub fn quant_f32(x: &[f32], b: &mut [u8]) {
    for (v, c) in x.iter().zip(b.chunks_exact_mut(4)) {
        c.copy_from_slice(&v.to_le_bytes());
    }
}

pub fn quant_f16(x: &[f32], b: &mut [u8]) {
    for (v, c) in x.iter().zip(b.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_f16(*v).to_le_bytes());
    }
}

pub fn quant_bf16(x: &[f32], b: &mut [u8]) {
    for (v, c) in x.iter().zip(b.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_is_exact_for_every_value() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }
}
