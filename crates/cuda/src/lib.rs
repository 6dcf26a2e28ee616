//! The CUDA back-end. Kernels live in `kernels/*.cu` (one op family per file, named as the CPU twin in
//! crates/model), embedded in the binary and compiled by NVRTC at first use; each is a twin of a CPU op
//! and equals it bit for bit (docs/ARITHMETIC.md). With no driver or device, [`Gpu::new`] says so.

pub mod argmax;
pub mod attn;
pub mod bench;
pub mod buf;
pub mod capture;
pub mod check;
pub mod compile;
pub mod device;
pub mod error;
pub mod forward;
pub mod gdn;
pub mod graph;
pub mod hc;
pub mod lanes;
pub mod matvec;
pub mod moe;
pub mod parity;
pub mod plan;
pub mod profile;
pub mod qdot;
pub mod qsa;
pub mod sample;
pub mod settings;
pub mod skip;

pub use device::Gpu;
pub use error::CudaError;
pub use settings::Settings;
