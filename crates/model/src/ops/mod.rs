//! The arithmetic contract: every op family the forward pass uses, each defined once here and followed
//! bit for bit by every other back-end (docs/ARITHMETIC.md has a section per file).

pub mod act;
pub mod dequant;
#[cfg(target_arch = "x86_64")]
mod dequant_x86;
pub mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_iq_x86;
pub mod logprob;
pub mod matvec;
pub mod norm;
pub mod qdot;
#[cfg(target_arch = "x86_64")]
mod qdot_avx512;
pub mod qdot_window;
#[cfg(target_arch = "x86_64")]
mod qdot_x86;
pub mod rope;
pub mod sample;
pub mod softmax;
pub mod topk;
pub mod vector;
