//! Host side of kernels/sample.cu: a token drawn from a row of logits on the device, the twin of
//! strata_model::ops::sample::sample (the same token for the same settings and uniform number).

use cudarc::driver::LaunchConfig;
use strata_model::ops::sample::{SampleParams, MAX_CANDIDATES};

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The token drawn with `p` from the first `n` values of `v`; only the id is copied back.
pub fn sample(gpu: &Gpu, v: &Buf<f32>, n: usize, p: &SampleParams) -> Result<u32, CudaError> {
    Ok(sample_start(gpu, v, n, p)?.read(gpu, 1)?[0] as u32)
}

/// The launch of [`sample`]: the id it leaves on the device once it has run.
pub fn sample_start(gpu: &Gpu, v: &Buf<f32>, n: usize, p: &SampleParams) -> Result<Buf<i32>, CudaError> {
    let id = Buf::<i32>::zeros(gpu, 1)?;
    sample_into(gpu, v, n, p, &id, 0)?;
    Ok(id)
}

/// The token drawn with `p` from the first `n` values of `v`, written at `ids[at]` on the device.
pub fn sample_into(
    gpu: &Gpu,
    v: &Buf<f32>,
    n: usize,
    p: &SampleParams,
    ids: &Buf<i32>,
    at: usize,
) -> Result<(), CudaError> {
    if n > i32::MAX as usize || at >= ids.len() {
        return Err(CudaError::Shape(format!("sampling from {n} values into id {at} of {}", ids.len())));
    }
    let f = gpu.function(&crate::ops::sources::SAMPLE_FILE, "sample")?;
    // One block (SAMPLE_THREADS in sample.cu); a top-k past the cap means the cap.
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
    let top_k = p.top_k.min(MAX_CANDIDATES) as i32;
    let args = [
        Arg::Ptr(v.ptr(gpu)),
        Arg::I32(n as i32),
        Arg::F32(p.temperature),
        Arg::I32(top_k),
        Arg::F32(p.top_p),
        Arg::F32(p.u),
        Arg::Ptr(ids.ptr(gpu) + (at * 4) as u64),
    ];
    launch(gpu, &f, "sample", cfg, &args)
}
