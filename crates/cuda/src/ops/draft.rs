//! Host side of kernels/draft.cu: a draft head over a draft vocabulary (docs/SPECULATION.md, "A draft
//! vocabulary"). The twin of the CPU decoder's draft head: the head's rows of the vocabulary's tokens,
//! gathered on the card from the whole head, and each draft's token read through the vocabulary's list.

use cudarc::driver::LaunchConfig;

use crate::ops::matrix::MatrixGpu;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The head's rows of a draft vocabulary's tokens, and the tokens (row i is token `ids[i]`).
pub struct DraftHead {
    pub rows: MatrixGpu,
    ids: Buf<i32>,
}

impl DraftHead {
    /// The rows of `ids` (checked by the caller: ascending, inside the head) copied out of `head`.
    pub fn gather(gpu: &Gpu, head: &MatrixGpu, ids: &[u32]) -> Result<DraftHead, CudaError> {
        if ids.is_empty() || ids.iter().any(|&i| i as usize >= head.rows) || ids.len() > i32::MAX as usize {
            return Err(CudaError::Shape(format!(
                "a draft vocabulary of {} tokens in a head of {}",
                ids.len(),
                head.rows
            )));
        }
        let list: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let ids = Buf::from_host(gpu, &list)?;
        let rows = head.shaped_like(gpu, list.len())?;
        let f = gpu.function(&crate::ops::sources::DRAFT_FILE, "draft_rows")?;
        let cfg = LaunchConfig { grid_dim: (list.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let args = [
            Arg::Ptr(head.ptr(gpu)),
            Arg::Ptr(ids.ptr(gpu)),
            Arg::Ptr(rows.ptr(gpu)),
            Arg::I32(head.row_bytes() as i32),
        ];
        launch(gpu, &f, "draft_rows", cfg, &args)?;
        Ok(DraftHead { rows, ids })
    }

    /// The token of the row that `best` (an argmax over these rows) chose, written at `tokens[at]`.
    pub fn put(&self, gpu: &Gpu, best: &Buf<u64>, tokens: &Buf<i32>, at: usize) -> Result<(), CudaError> {
        if at >= tokens.len() {
            return Err(CudaError::Shape(format!("a token at {at} of {}", tokens.len())));
        }
        let f = gpu.function(&crate::ops::sources::DRAFT_FILE, "draft_put")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let args =
            [Arg::Ptr(best.ptr(gpu)), Arg::Ptr(self.ids.ptr(gpu)), Arg::Ptr(tokens.ptr(gpu)), Arg::I32(at as i32)];
        launch(gpu, &f, "draft_put", cfg, &args)
    }
}
