//! Host side of kernels/argmax.cu: the greedy token of a row of logits on the device, the twin of
//! strata_model::ops::topk::argmax (the same id: highest key, lowest id among equals).

use cudarc::driver::LaunchConfig;

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The greedy id among the first `n` values of `v` (0 for none); only the id is copied back.
pub fn argmax(gpu: &Gpu, v: &Buf<f32>, n: usize) -> Result<u32, CudaError> {
    argmax_id(gpu, &argmax_start(gpu, v, n)?)
}

/// The launch of [`argmax`]: the word [`argmax_id`] reads once it has run.
pub fn argmax_start(gpu: &Gpu, v: &Buf<f32>, n: usize) -> Result<Buf<u64>, CudaError> {
    if n > i32::MAX as usize {
        return Err(CudaError::Shape(format!("argmax over {n} values")));
    }
    // A block per 4,096 values (4 a thread), at most 2 per multiprocessor: one pass over the row.
    let blocks = n.div_ceil(4096).clamp(1, 2 * gpu.sm_count as usize);
    let best = Buf::<u64>::zeros(gpu, 1)?;
    let f = gpu.function(&crate::ops::sources::ARGMAX_FILE, "argmax")?;
    let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
    launch(gpu, &f, "argmax", cfg, &[Arg::Ptr(v.ptr(gpu)), Arg::I32(n as i32), Arg::Ptr(best.ptr(gpu))])?;
    Ok(best)
}

/// The greedy id among the first `n` values of `v` written at `ids[at]` on the device (nothing read back).
pub fn argmax_into(gpu: &Gpu, v: &Buf<f32>, n: usize, ids: &Buf<i32>, at: usize) -> Result<(), CudaError> {
    if at >= ids.len() {
        return Err(CudaError::Shape(format!("an id at {at} of {}", ids.len())));
    }
    let best = argmax_start(gpu, v, n)?;
    let f = gpu.function(&crate::ops::sources::ARGMAX_FILE, "argmax_put")?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    launch(gpu, &f, "argmax_put", cfg, &[Arg::Ptr(best.ptr(gpu)), Arg::Ptr(ids.ptr(gpu)), Arg::I32(at as i32)])
}

/// The id in the word an argmax wrote.
pub fn argmax_id(gpu: &Gpu, best: &Buf<u64>) -> Result<u32, CudaError> {
    // The id is the low word, complemented; the word stays 0 only when n is 0.
    let b = best.read(gpu, 1)?[0];
    Ok(if b == 0 { 0 } else { !(b as u32) })
}
