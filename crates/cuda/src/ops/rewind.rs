//! Host side of kernels/rewind.cu: a verify window's rewind on the device (docs/SPECULATION.md), the
//! twin of strata_model::rewind. The window's kernels keep the state after each token in slots; a
//! rewind copies one slot over each state, every state in one launch.

use cudarc::driver::LaunchConfig;

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The states a rewind restores and their slots: one launch copies slot t of each over it.
pub struct RewindTable {
    /// (state, slots, floats a slot) for each state.
    table: Buf<u64>,
    entries: usize,
}

impl RewindTable {
    /// The table of `(state, slots)` pairs: each state's slots hold at least `slots` copies of it.
    pub fn new(gpu: &Gpu, pairs: &[(&Buf<f32>, &Buf<f32>)], slots: usize) -> Result<RewindTable, CudaError> {
        let mut words = Vec::with_capacity(3 * pairs.len());
        for (state, kept) in pairs {
            let len = state.len();
            // The kernel copies four floats at a time.
            if !len.is_multiple_of(4) || kept.len() < slots * len {
                return Err(CudaError::Shape(format!("rewind slots of {} floats for a state of {len}", kept.len())));
            }
            words.extend([state.ptr(gpu), kept.ptr(gpu), len as u64]);
        }
        Ok(RewindTable { table: Buf::from_host(gpu, &words)?, entries: pairs.len() })
    }

    /// Every state set to its slot `t`: the point after the window's token t.
    pub fn rewind(&self, gpu: &Gpu, t: usize) -> Result<(), CudaError> {
        if self.entries == 0 {
            return Ok(());
        }
        let f = gpu.function(&crate::ops::sources::REWIND_FILE, "rewind_slots")?;
        let cfg = LaunchConfig {
            grid_dim: ((gpu.sm_count / 2).max(1), self.entries as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(gpu, &f, "rewind_slots", cfg, &[Arg::Ptr(self.table.ptr(gpu)), Arg::I32(t as i32)])
    }
}
