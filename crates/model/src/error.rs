//! Errors loading a model: each names the key or tensor and what is wrong.

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] strata_gguf::Error),
    #[error("metadata {key}: {what}")]
    Metadata { key: String, what: String },
    #[error("tensor {tensor}: missing from the model")]
    MissingTensor { tensor: String },
    #[error("tensor {tensor}: shape {found:?}, expected {expected:?}")]
    Shape { tensor: String, expected: Vec<u64>, found: Vec<u64> },
    #[error("tensor {tensor}: type {ty} is not allowed here ({what})")]
    Type { tensor: String, ty: String, what: String },
}
