//! Generation on top of the model: the tokenizer and chat template from GGUF metadata, sampling, and the
//! decode loop.

pub mod chat;
pub mod detok;
pub mod generate;
pub mod sampler;
pub mod tokenizer;
