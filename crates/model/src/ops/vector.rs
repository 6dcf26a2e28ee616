//! The CPU's vector units: which kernels the host's products use (§ qdot's on x86: `ops/qdot_x86.rs`,
//! chosen in `ops/qdot_window.rs`; § dot's fma chains compiled for FMA in `ops/dot.rs`).
//! Every level gives the same bits (the integer sums are exact, and the float steps are the contract's,
//! element by element); a level changes speed only. Chosen once: the best the CPU has, unless
//! `STRATA_CPU_VECTOR` names a lower one.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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

/// Cleared: Q2_0 at the avx512 level takes the 256-bit kernel (ops/qdot_x86.rs), not the 512-bit one
/// (ops/qdot_avx512.rs): `STRATA_Q2_0_WIDE=0`, an A/B for the benches (the same bits either way).
static Q2_0_WIDE: AtomicBool = AtomicBool::new(true);

/// Whether Q2_0 at the avx512 level takes the 512-bit kernel.
pub fn q2_0_wide() -> bool {
    Q2_0_WIDE.load(Ordering::Relaxed)
}

/// Sets [`q2_0_wide`] (the start-up's reading of `STRATA_Q2_0_WIDE`).
pub fn set_q2_0_wide(on: bool) {
    Q2_0_WIDE.store(on, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for v in Vector::ALL.into_iter().filter(|v| v.available()) {
            assert_eq!(Vector::parse(v.name()), Ok(v));
        }
        assert!(Vector::parse("sse9").unwrap_err().contains("STRATA_CPU_VECTOR=sse9"));
        assert!(Vector::best().available());
    }
}
