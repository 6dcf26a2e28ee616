//! The qwen4exp model (docs: ../../shared/spec/qwen4exp.md): its config and weights, the arithmetic
//! contract every back-end follows (`ops`), and the CPU reference forward pass (`layers`, `model`).

pub mod backend;
pub mod checkpoint;
pub mod config;
pub mod cpu;
pub mod decoder;
pub mod error;
pub mod kv;
pub mod layers;
pub mod model;
pub mod ops;
pub mod placement;
pub mod rewind;
pub mod routing;
pub mod routing_file;
pub mod state;
pub mod team;
pub mod weights;

pub use config::Config;
pub use error::ModelError;
pub use kv::KvMode;
pub use model::Model;
pub use ops::rope::RopeScaling;
pub use state::State;
