//! The CPU's vector units: which kernels the host's products use (§ qdot's on x86: `ops/qdot_x86.rs`).
//! Every level gives the same bits (the integer sums are exact, and the float steps are the contract's,
//! element by element); a level changes speed only. Chosen once: the best the CPU has, unless
//! `STRATA_CPU_VECTOR` names a lower one.

use std::sync::atomic::{AtomicU8, Ordering};

use strata_gguf::GgmlType;

use super::qdot::{qdot_row, QInput, QBLOCK};

/// A level of vector instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vector {
    /// Plain Rust: the reference every other level is checked against.
    Scalar,
    /// x86's AVX2 with FMA and F16C: byte products by `vpmaddubsw`, whose 16-bit pair sums cannot saturate here
    /// (|weight| ≤ 128 and |code| ≤ 127 make at most 32,512).
    Avx2,
    /// AVX-512 VNNI (with VL): byte products summed straight into 32 bits by `vpdpbusd`.
    Avx512,
}

impl Vector {
    pub const ALL: [Vector; 3] = [Vector::Scalar, Vector::Avx2, Vector::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Vector::Scalar => "scalar",
            Vector::Avx2 => "avx2",
            Vector::Avx512 => "avx512",
        }
    }

    /// Whether this CPU has the level's instructions.
    pub fn available(self) -> bool {
        match self {
            Vector::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Vector::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Vector::Avx512 => {
                Vector::Avx2.available()
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best level this CPU has.
    pub fn best() -> Vector {
        *Vector::ALL.iter().rev().find(|v| v.available()).unwrap_or(&Vector::Scalar)
    }

    /// A level by name (`STRATA_CPU_VECTOR`), refused when unknown or beyond this CPU.
    pub fn parse(name: &str) -> Result<Vector, String> {
        let v = Vector::ALL
            .into_iter()
            .find(|v| v.name() == name)
            .ok_or_else(|| format!("STRATA_CPU_VECTOR={name}: not one of scalar, avx2, avx512"))?;
        if !v.available() {
            return Err(format!(
                "STRATA_CPU_VECTOR={name}: this CPU lacks its instructions (best: {})",
                Vector::best().name()
            ));
        }
        Ok(v)
    }
}

/// 0: not chosen yet; else 1 + the index in [`Vector::ALL`].
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The level the host's products use.
pub fn current() -> Vector {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            let v = Vector::best();
            set(v);
            v
        }
        i => Vector::ALL[i as usize - 1],
    }
}

/// Use `v` from now on (checked by [`Vector::parse`] or [`Vector::available`] first).
pub fn set(v: Vector) {
    assert!(v.available(), "{} is not available on this CPU", v.name());
    let i = Vector::ALL.iter().position(|&a| a == v).expect("a level") as u8;
    CHOSEN.store(i + 1, Ordering::Relaxed);
}

/// `out[t]` = the row times `xs[t]`, for each input of a window, by the vector level `v`: every level
/// gives [`qdot_row`](super::qdot::qdot_row)'s bits; the vector ones unpack each block once for the whole window.
pub fn qdot_row_window(ty: GgmlType, bytes: &[u8], xs: &[&QInput], out: &mut [f32], v: Vector) {
    debug_assert_eq!(xs.len(), out.len());
    match v {
        #[cfg(target_arch = "x86_64")]
        Vector::Avx2 | Vector::Avx512 => {
            // The kernels read the inputs' codes by pointer: a short input would be read past its end.
            let cols = bytes.len() / ty.type_size() * ty.block_size();
            assert!(xs.iter().all(|x| x.q.len() >= cols && x.d.len() * QBLOCK >= cols && x.sum.len() * QBLOCK >= cols));
            // SAFETY: the level is only ever chosen where the CPU has it (vector::set, Vector::parse).
            unsafe { super::qdot_x86::row_window(ty, bytes, xs, out, v == Vector::Avx512) }
        }
        _ => {
            for (o, x) in out.iter_mut().zip(xs) {
                *o = qdot_row(ty, bytes, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::qdot::{quantize_input, uses_qdot};
    use strata_gguf::{quant, SplitMix64};

    fn normal(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).map(|_| (0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0).collect()
    }

    #[test]
    fn every_vector_level_gives_the_scalar_bits_for_every_window() {
        // Random bit patterns (every weight code, Q8_0's −128, Q6_K's negative scales), rows with a
        // partial last group of pieces, windows longer than a kernel's stack, inputs at ±127 and NaN.
        let mut rng = SplitMix64::new(17);
        let levels: Vec<Vector> = Vector::ALL.into_iter().filter(|v| v.available()).collect();
        for ty in GgmlType::ALL.into_iter().filter(|&t| uses_qdot(t)) {
            let bs = ty.block_size();
            for blocks in [1, 3, 5, 8, 13] {
                let cols = blocks * bs;
                let bytes = quant::random_blocks(ty, blocks, &mut rng);
                let inputs: Vec<QInput> = (0..19)
                    .map(|t| {
                        let mut x = normal(&mut rng, cols);
                        if t % 4 == 1 {
                            x[rng.next_u64() as usize % cols] = f32::NAN;
                        }
                        if t % 4 == 2 {
                            x.iter_mut().step_by(3).for_each(|v| *v = v.signum() * 1e3);
                        }
                        quantize_input(&x)
                    })
                    .collect();
                let xs: Vec<&QInput> = inputs.iter().collect();
                let want: Vec<u32> = xs.iter().map(|x| qdot_row(ty, &bytes, x).to_bits()).collect();
                for &v in &levels {
                    for t in [1, 2, 8, 19] {
                        let mut out = vec![0f32; t];
                        qdot_row_window(ty, &bytes, &xs[..t], &mut out, v);
                        let got: Vec<u32> = out.iter().map(|o| o.to_bits()).collect();
                        assert_eq!(got, want[..t], "{ty} × {cols}, {} with a window of {t}", v.name());
                    }
                }
            }
        }
        // Where this CPU has no vector level the test has checked the scalar path only; say so.
        if levels.len() == 1 {
            eprintln!("note: no vector level on this CPU; only the scalar path was checked");
        }
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for v in Vector::ALL.into_iter().filter(|v| v.available()) {
            assert_eq!(Vector::parse(v.name()), Ok(v));
        }
        assert!(Vector::parse("sse9").unwrap_err().contains("STRATA_CPU_VECTOR=sse9"));
        assert!(Vector::best().available());
    }
}
