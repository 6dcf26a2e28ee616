//! Random codes written directly, for tensors too large to quantize in reasonable time (the full preset's
//! routed experts and PLE table): every code byte random, the block scale set so the values have the wanted
//! standard deviation and mean near zero. Only types whose values are the block scale times a function of
//! the codes qualify.

use strata_gguf::quant::{dequantize, f32_to_f16};
use strata_gguf::{GgmlType, SplitMix64};

/// Tensors of at least this many bytes are written as random codes when their type allows.
pub const CODED_MIN_BYTES: u64 = 64 << 20;

/// Whether `ty`'s values are d·f(codes) with d the fp16 at byte 0 of each block.
pub fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q2_0
            | GgmlType::IQ2_XS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ4_NL
            | GgmlType::Q4_0
            | GgmlType::Q8_0
    )
}

/// Random code bytes for one block; the scale field is written later. Q2_0 draws codes 0..=2 only
/// (values −d, 0, d: mean zero); the other types' code tables are symmetric or nearly so.
fn random_block(ty: GgmlType, b: &mut [u8], rng: &mut SplitMix64) {
    match ty {
        GgmlType::Q2_0 => {
            for byte in b[2..].iter_mut() {
                *byte = (0..4).fold(0u8, |acc, k| acc | ((rng.below(3) as u8) << (2 * k)));
            }
        }
        _ => b[2..].iter_mut().for_each(|x| *x = rng.next_u64() as u8),
    }
}

/// The standard deviation of `ty`'s values for random codes at d = 1 (measured on a fixed sample).
fn unit_std(ty: GgmlType) -> f32 {
    let blocks = 512;
    let mut rng = SplitMix64::new(0x5717);
    let mut data = vec![0u8; blocks * ty.type_size()];
    for b in data.chunks_exact_mut(ty.type_size()) {
        random_block(ty, b, &mut rng);
        b[..2].copy_from_slice(&f32_to_f16(1.0).to_le_bytes());
    }
    let mut y = vec![0f32; blocks * ty.block_size()];
    dequantize(ty, &data, &mut y).expect("whole blocks");
    let mean = y.iter().map(|&v| v as f64).sum::<f64>() / y.len() as f64;
    (y.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / y.len() as f64).sqrt() as f32
}

/// The block scale (fp16 bits) that gives `ty`'s random codes a standard deviation of about `std`.
pub fn scale_for(ty: GgmlType, std: f32) -> u16 {
    f32_to_f16(std / unit_std(ty))
}

/// `n_blocks` blocks of `ty` with random codes and the block scale `d` (from [`scale_for`]).
pub fn coded_blocks(ty: GgmlType, n_blocks: usize, d: u16, rng: &mut SplitMix64) -> Vec<u8> {
    debug_assert!(supports(ty));
    let d = d.to_le_bytes();
    let mut out = vec![0u8; n_blocks * ty.type_size()];
    for b in out.chunks_exact_mut(ty.type_size()) {
        random_block(ty, b, rng);
        b[..2].copy_from_slice(&d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coded_values_have_the_wanted_spread() {
        for ty in [
            GgmlType::Q2_0,
            GgmlType::IQ2_XS,
            GgmlType::IQ3_XXS,
            GgmlType::IQ3_S,
            GgmlType::IQ4_NL,
            GgmlType::Q4_0,
            GgmlType::Q8_0,
        ] {
            assert!(supports(ty));
            let d = scale_for(ty, 0.02);
            let data = coded_blocks(ty, 4096, d, &mut SplitMix64::new(9));
            assert_eq!(data, coded_blocks(ty, 4096, d, &mut SplitMix64::new(9)), "{ty}: deterministic");
            let mut y = vec![0f32; 4096 * ty.block_size()];
            dequantize(ty, &data, &mut y).unwrap();
            let mean = y.iter().map(|&v| v as f64).sum::<f64>() / y.len() as f64;
            let std = (y.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / y.len() as f64).sqrt();
            assert!((std - 0.02).abs() < 0.001, "{ty}: std {std}");
            assert!(mean.abs() < 0.15 * 0.02, "{ty}: mean {mean}");
        }
        assert!(!supports(GgmlType::Q4_K));
    }
}
