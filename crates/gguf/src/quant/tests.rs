use super::*;
use crate::types::GgmlType;

use crate::SplitMix64 as Rng;

fn normal(rng: &mut Rng) -> f32 {
    (0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0 // roughly normal
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut q = Vec::new();
    quantize(ty, x, &mut q).unwrap();
    assert_eq!(q.len(), x.len() / ty.block_size() * ty.type_size());
    let mut y = vec![0f32; x.len()];
    dequantize(ty, &q, &mut y).unwrap();
    y
}

fn relative_rms_error(x: &[f32], y: &[f32]) -> f32 {
    let e: f32 = x.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum();
    let n: f32 = x.iter().map(|a| a * a).sum();
    (e / n).sqrt()
}

#[test]
fn quantizers_round_trip_within_their_precision() {
    // Bounds sit above what each format reaches on normal data (measured: see the printed figures) and
    // far below the error of a wrong layout, which scrambles values (relative error near 1.4).
    let cases = [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 0.0005),
        (GgmlType::BF16, 0.003),
        (GgmlType::Q8_0, 0.008),
        (GgmlType::Q6_K, 0.03),
        (GgmlType::Q4_0, 0.11),
        (GgmlType::Q4_K, 0.11),
        (GgmlType::IQ4_NL, 0.1),
        (GgmlType::IQ3_S, 0.18),
        (GgmlType::IQ3_XXS, 0.26),
        (GgmlType::IQ2_XS, 0.4),
        (GgmlType::Q2_0, 0.45),
    ];
    let mut rng = Rng::new(7);
    let x: Vec<f32> = (0..4096).map(|_| normal(&mut rng)).collect();
    for (ty, bound) in cases {
        assert!(can_quantize(ty));
        let err = relative_rms_error(&x, &round_trip(ty, &x));
        println!("{ty}: relative rms error {err:.4}");
        assert!(err <= bound, "{ty}: relative rms error {err} above {bound}");
    }
}

#[test]
fn quantizers_keep_zero_blocks_zero() {
    for ty in GgmlType::ALL.into_iter().filter(|&t| can_quantize(t)) {
        let x = vec![0f32; 256];
        assert!(round_trip(ty, &x).iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn q2_0_follows_the_spec_layout() {
    // d = 0.5; weight i has code i % 4 except weight 5, code 0: bits 2·(i%4) of byte i/4.
    let mut b = vec![0u8; 18];
    b[0..2].copy_from_slice(&f32_to_f16(0.5).to_le_bytes());
    for i in 0..64 {
        let code = if i == 5 { 0 } else { i % 4 } as u8;
        b[2 + i / 4] |= code << (2 * (i % 4));
    }
    let mut y = vec![0f32; 64];
    dequantize(GgmlType::Q2_0, &b, &mut y).unwrap();
    for (i, v) in y.iter().enumerate() {
        let code = if i == 5 { 0 } else { i % 4 } as f32;
        assert_eq!(*v, (code - 1.0) * 0.5, "weight {i}");
    }
}

#[test]
fn bf16_rounds_to_nearest_even_and_keeps_nan() {
    assert_eq!(f32_to_bf16(1.0), 0x3f80);
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even stays
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd rounds up
    assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
}

#[test]
fn iq_sign_index_has_even_parity() {
    // Every 8-bit pattern a 7-bit index expands to has an even number of set bits.
    for i in 0..128u8 {
        let s = iqgrid_ksigns(i);
        assert_eq!(s & 127, i);
        assert_eq!(s.count_ones() % 2, 0);
    }
}

fn iqgrid_ksigns(i: u8) -> u8 {
    // Decode the pattern through the codec: an IQ2_XS block with d = 1, scale 0 and grid entry 0
    // (all magnitudes 8) gives −1 × 8 × 0.125 per set sign bit.
    let mut b = vec![0u8; 74];
    b[0..2].copy_from_slice(&f32_to_f16(1.0).to_le_bytes());
    b[2..4].copy_from_slice(&((i as u16) << 9).to_le_bytes());
    let mut y = vec![0f32; 256];
    dequantize(GgmlType::IQ2_XS, &b, &mut y).unwrap();
    (0..8).fold(0u8, |s, j| s | ((y[j] < 0.0) as u8) << j)
}

#[test]
fn wrong_sizes_are_errors() {
    let mut y = vec![0f32; 32];
    assert!(dequantize(GgmlType::Q8_0, &[0u8; 33], &mut y).is_err());
    assert!(dequantize(GgmlType::Q8_0, &[0u8; 68], &mut y).is_err());
    let mut q = Vec::new();
    assert!(quantize(GgmlType::Q4_K, &[0f32; 100], &mut q).is_err());
    assert!(quantize(GgmlType::Q5_K, &[0f32; 256], &mut q).is_err());
}

#[test]
fn random_blocks_are_valid_and_deterministic() {
    for ty in GgmlType::ALL {
        let a = random_blocks(ty, 64, &mut Rng::new(3));
        assert_eq!(a, random_blocks(ty, 64, &mut Rng::new(3)));
        assert_ne!(a, random_blocks(ty, 64, &mut Rng::new(4)), "{ty}");
        let mut y = vec![0f32; 64 * ty.block_size()];
        dequantize(ty, &a, &mut y).unwrap();
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        assert!(y.iter().any(|&v| v != 0.0), "{ty}");
    }
}

#[test]
fn int_weights_times_d_are_the_dequantizers_values() {
    let mut rng = Rng::new(11);
    for ty in GgmlType::ALL {
        let Some(ints) = int_weights(ty) else { continue };
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let bytes = random_blocks(ty, 64, &mut rng);
        let mut want = vec![0f32; 64 * bs];
        dequantize(ty, &bytes, &mut want).unwrap();
        let mut w = vec![0i8; bs];
        for (b, y) in bytes.chunks_exact(ts).zip(want.chunks_exact(bs)) {
            let d = ints(b, &mut w);
            for (i, (&wi, &yi)) in w.iter().zip(y).enumerate() {
                let got = wi as f32 * d;
                assert!(
                    got.to_bits() == yi.to_bits() || (got.is_nan() && yi.is_nan()),
                    "{ty} element {i}: {got} against {yi}"
                );
            }
        }
    }
    let with = GgmlType::ALL.into_iter().filter(|&t| int_weights(t).is_some()).count();
    assert_eq!(with, 4);
}

#[test]
fn k_ints_give_the_dequantizers_values() {
    let mut rng = Rng::new(13);
    for (ty, ints, sub) in [(GgmlType::Q4_K, ints_q4_k as fn(&[u8]) -> KInts, 32), (GgmlType::Q6_K, ints_q6_k, 16)] {
        let bytes = random_blocks(ty, 32, &mut rng);
        let mut want = vec![0f32; 32 * 256];
        dequantize(ty, &bytes, &mut want).unwrap();
        for (b, y) in bytes.chunks_exact(ty.type_size()).zip(want.chunks_exact(256)) {
            let k = ints(b);
            for (i, &yi) in y.iter().enumerate() {
                let scaled = (k.d * k.scale[i / sub] as f32) * k.w[i] as f32;
                let got = if sub == 32 { scaled - k.dmin * k.min[i / 32] as f32 } else { scaled };
                assert!(
                    got.to_bits() == yi.to_bits() || (got.is_nan() && yi.is_nan()),
                    "{ty} element {i}: {got} against {yi}"
                );
            }
        }
    }
}
