//! Typed errors: every one names the file and, where there is one, the offset or the tensor.

use std::path::PathBuf;

/// An error reading or writing a GGUF file: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", file.display())]
pub struct Error {
    pub file: PathBuf,
    pub kind: ErrorKind,
}

/// What is wrong. Offsets are byte offsets from the start of the file.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a GGUF file (magic {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    #[error("GGUF version {0} is not supported (2 and 3 are)")]
    UnsupportedVersion(u32),
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("offset {offset}: truncated: {what} needs {need} bytes, {left} left")]
    Truncated { offset: u64, what: String, need: u64, left: u64 },
    #[error("offset {offset}: {what} count {count} is more than the rest of the file could hold")]
    CountTooLarge { offset: u64, what: String, count: u64 },
    #[error("offset {offset}: {what} is not valid UTF-8")]
    InvalidUtf8 { offset: u64, what: String },
    #[error("offset {offset}: unknown metadata value type {id} in {what}")]
    UnknownValueType { offset: u64, id: u32, what: String },
    #[error("offset {offset}: arrays nested deeper than {max} levels in {what}")]
    NestingTooDeep { offset: u64, max: usize, what: String },
    #[error("metadata key {0:?} appears twice")]
    DuplicateKey(String),
    #[error("metadata key {key:?}: {what}")]
    BadMetadata { key: String, what: String },
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    #[error("tensor {tensor:?}: unknown ggml type id {id}")]
    UnknownTensorType { tensor: String, id: u32 },
    #[error("tensor {tensor:?}: {n_dims} dimensions (at most 4)")]
    TooManyDims { tensor: String, n_dims: u32 },
    #[error("tensor {tensor:?}: shape {shape:?} has more elements than fit in 63 bits")]
    ShapeOverflow { tensor: String, shape: Vec<u64> },
    #[error("tensor {tensor:?}: first dimension {ne0} is not a whole number of {ty} blocks of {block}")]
    NotWholeBlocks { tensor: String, ty: String, ne0: u64, block: usize },
    #[error("tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned { tensor: String, offset: u64, alignment: u64 },
    #[error("tensor {tensor:?}: data [{start}, {end}) runs past the end of the file ({file_len} bytes)")]
    DataPastEnd { tensor: String, start: u64, end: u64, file_len: u64 },
    #[error("tensors {a:?} and {b:?} overlap in the data section")]
    Overlap { a: String, b: String },
    #[error("tensor {0:?} not found")]
    TensorNotFound(String),
    #[error("shard set: {0}")]
    Shards(String),
    #[error("{0}")]
    Write(String),
    #[error("tensor {tensor:?}: {what}")]
    Codec { tensor: String, what: String },
}

impl Error {
    pub fn new(file: impl Into<PathBuf>, kind: ErrorKind) -> Error {
        Error { file: file.into(), kind }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
