//! F32, F16 and BF16: element-wise conversions.

use half::f16;

pub fn f16_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
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

pub fn dequant_f16(b: &[u8], y: &mut [f32]) {
    for (c, v) in b.chunks_exact(2).zip(y) {
        *v = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
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
