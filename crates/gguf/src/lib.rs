//! GGUF files for strata: a checked reader over a memory map (versions 2 and 3, shard sets), a streaming
//! writer, and the block codecs of every ggml type the qwen4exp model uses. No model knowledge lives here.
//!
//! Hostile input is expected: every count, length, offset and shape in a file is checked before it is
//! used, and every problem is a typed [`Error`] naming the file and the offset or tensor.

mod error;
mod file;
mod hash;
pub mod quant;
mod read;
mod rng;
mod types;
mod value;
mod write;

pub use error::{Error, ErrorKind, Result};
pub use file::{read_pages, shard_name, shard_paths, GgufFile, GgufSet, TensorBytes, TensorView};
pub use hash::fnv1a;
pub use read::{align_up, parse, parse_head, Header, TensorInfo, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_NESTING};
pub use rng::SplitMix64;
pub use types::{GgmlType, QK_K};
pub use value::{Array, Value, ValueType};
pub use write::{dequantized_copy, retyped_copy, with_metadata, GgufBuilder, GgufWriter};
