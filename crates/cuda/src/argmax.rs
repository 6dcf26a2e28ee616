//! Host side of kernels/argmax.cu: the greedy token of a row of logits on the device, the twin of
//! strata_model::ops::topk::argmax (the same id: highest key, lowest id among equals).

use cudarc::driver::LaunchConfig;

use crate::buf::{launch, Arg, Buf};
use crate::device::Gpu;
use crate::error::CudaError;

/// The greedy id among the first `n` values of `v` (0 for none); only the id is copied back.
pub fn argmax(gpu: &Gpu, v: &Buf<f32>, n: usize) -> Result<u32, CudaError> {
    if n > i32::MAX as usize {
        return Err(CudaError::Shape(format!("argmax over {n} values")));
    }
    let id = Buf::<i32>::zeros(gpu, 1)?;
    let f = gpu.function("argmax.cu", crate::compile::ARGMAX, "argmax")?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
    launch(gpu, &f, "argmax", cfg, &[Arg::Ptr(v.ptr(gpu)), Arg::I32(n as i32), Arg::Ptr(id.ptr(gpu))])?;
    Ok(id.read(gpu, 1)?[0] as u32)
}
