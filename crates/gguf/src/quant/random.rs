//! Random blocks of any type with valid scales: every fp16 scale field holds a finite value (subnormals
//! included) and every other byte is random. Used by tests and by writers of synthetic models.

use super::f32_to_f16;
use crate::rng::SplitMix64;
use crate::types::GgmlType;

/// Byte offsets of the fp16 scale fields inside one block of `ty`.
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        // NVFP4's scales are E4M3 bytes, all finite; IQ1_M's fp16 is spread over nibbles (below).
        GgmlType::NVFP4 | GgmlType::IQ1_M => &[],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
        _ => &[0],
    }
}

/// A finite value of either sign whose magnitude spans 2⁻²⁰ .. 1 (so fp16 subnormals appear too).
fn random_scale(rng: &mut SplitMix64) -> f32 {
    let mag = (-20.0 * rng.uniform()).exp2();
    if rng.next_u64() & 1 == 1 {
        -mag
    } else {
        mag
    }
}

/// `n_blocks` random blocks of `ty`. Float types get random finite bit patterns.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let ts = ty.type_size();
    let mut out = vec![0u8; n_blocks * ts];
    for b in out.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F32 => b.copy_from_slice(&finite_bits(rng, 32, 8).to_le_bytes()[..4]),
            GgmlType::F16 => b.copy_from_slice(&finite_bits(rng, 16, 5).to_le_bytes()[..2]),
            GgmlType::BF16 => b.copy_from_slice(&finite_bits(rng, 16, 8).to_le_bytes()[..2]),
            _ => {
                b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
                for &at in scale_fields(ty) {
                    b[at..at + 2].copy_from_slice(&f32_to_f16(random_scale(rng)).to_le_bytes());
                }
                if ty == GgmlType::IQ1_M {
                    // d's four nibbles are the top nibbles of the four scale words at bytes 48..56.
                    let d = f32_to_f16(random_scale(rng));
                    for i in 0..4 {
                        b[49 + 2 * i] = (b[49 + 2 * i] & 0x0f) | ((((d >> (4 * i)) & 0xf) as u8) << 4);
                    }
                }
            }
        }
    }
    out
}

/// Random bits of a `width`-bit float with `exp_bits` exponent bits, redrawn until finite.
fn finite_bits(rng: &mut SplitMix64, width: u32, exp_bits: u32) -> u64 {
    let mantissa = width - 1 - exp_bits;
    let exp_mask = ((1u64 << exp_bits) - 1) << mantissa;
    loop {
        let v = rng.next_u64() & ((1u64 << width) - 1);
        if v & exp_mask != exp_mask {
            return v;
        }
    }
}
