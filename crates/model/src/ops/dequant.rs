//! § matvec's dequantization, by the chosen vector level (`ops/vector.rs`): the codec's bits (gguf's
//! `quant::dequantize`) for every type; the lattice types of the experts that § qdot does not take
//! (IQ2_XS, IQ3_XXS, IQ3_S) have x86 forms (`ops/dequant_x86.rs`), eight elements a few instructions,
//! where the scalar codecs spent about half of a host expert product's time.

use strata_gguf::{quant, GgmlType};

use super::vector::{self, Vector};

/// `bytes` (whole blocks of `ty`) dequantized into `out`, the codec's bits at every level.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
    dequantize_at(ty, bytes, out, vector::current())
}

/// [`dequantize`] at level `v` (one the CPU has: `vector::set` and `Vector::parse` choose only those).
pub fn dequantize_at(ty: GgmlType, bytes: &[u8], out: &mut [f32], v: Vector) -> Result<(), String> {
    match (ty, v) {
        #[cfg(target_arch = "x86_64")]
        (GgmlType::IQ2_XS | GgmlType::IQ3_XXS | GgmlType::IQ3_S, Vector::Avx2 | Vector::Avx512) => {
            let (bs, ts) = (ty.block_size(), ty.type_size());
            if !bytes.len().is_multiple_of(ts) || bytes.len() / ts * bs != out.len() {
                return quant::dequantize(ty, bytes, out); // its error, in its words
            }
            use super::dequant_x86 as x86;
            let f = match ty {
                GgmlType::IQ2_XS => x86::iq2_xs,
                GgmlType::IQ3_XXS => x86::iq3_xxs,
                _ => x86::iq3_s,
            };
            // SAFETY: the level is only ever one the CPU has; the lengths were checked above.
            unsafe { f(bytes, out) };
            Ok(())
        }
        _ => quant::dequantize(ty, bytes, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_gguf::SplitMix64;

    #[test]
    fn every_level_gives_the_codecs_bits() {
        let mut rng = SplitMix64::new(5);
        for ty in [GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q2_0] {
            let blocks = 37;
            let bytes = quant::random_blocks(ty, blocks, &mut rng);
            let mut want = vec![0f32; blocks * ty.block_size()];
            quant::dequantize(ty, &bytes, &mut want).unwrap();
            for v in Vector::ALL.into_iter().filter(|v| v.available()) {
                let mut got = vec![1f32; want.len()];
                dequantize_at(ty, &bytes, &mut got, v).unwrap();
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert!(bits(&got) == bits(&want), "{ty} at {}", v.name());
            }
            // A wrong length is the codec's error at every level.
            for v in Vector::ALL.into_iter().filter(|v| v.available()) {
                assert!(dequantize_at(ty, &bytes[1..], &mut want, v).is_err());
            }
        }
    }
}
