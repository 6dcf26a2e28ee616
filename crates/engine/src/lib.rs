//! Generation on top of the model: the tokenizer and chat template from GGUF metadata, sampling, the
//! decode loop, and the session every command opens.

pub mod chat;
pub mod detok;
pub mod draft_vocab;
pub mod generate;
pub mod grammar;
pub mod sampler;
pub mod session;
pub mod tokenizer;
pub mod tuner;
