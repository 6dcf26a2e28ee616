//! The CUDA back-end, in floors (each imports only the floors below it):
//! - `runtime`: the device, buffers, compilation, step graphs and their capture, the profile, the
//!   settings. It knows no op.
//! - `ops`: one host wrapper per kernel family (`kernels/<family>.cu`, named as the CPU twin in
//!   crates/model), each taking its variant and the settings as values.
//! - `select`: the plan, which picks each family's variant on this card after checking it bit for bit.
//! - `backend`: the model on the device: weights, state, the forward pass, the decoder, the memory budget.
//! - `tools`: the parity tools and benches, driven by the CLI and by cargo tests; not on the run path.
//!
//! Kernels are embedded in the binary and compiled by NVRTC at first use; each is a twin of a CPU op and
//! equals it bit for bit (docs/ARITHMETIC.md). With no driver or device, [`Gpu::new`] says so.

pub mod backend;
pub mod ops;
pub mod runtime;
pub mod select;
pub mod tools;

pub use runtime::device::Gpu;
pub use runtime::error::CudaError;
pub use runtime::settings::Settings;
