//! Host side of kernels/misses.cu: the card's half of a pass with experts in host memory
//! (docs/PLACEMENT.md, "On the GPU"). `ask` names the slots the card does not hold and hands the host
//! their inputs through the mailbox (backend/misses.rs, whose `serve_one` answers); `take` waits for the
//! answer and copies the outputs into the slots' rows beside the card's own.

use cudarc::driver::LaunchConfig;

use std::sync::Arc;

use strata_model::weights::MoeWeights;

use crate::backend::misses::{Mailbox, MissServer, MAX_K, MAX_T};
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use crate::runtime::mapped::MappedWords;

/// The mailbox on the card's side: mapped words for k slots a token and inputs of n values.
pub struct MissBox {
    words: Arc<MappedWords>,
    k: usize,
    n: usize,
}

impl MissBox {
    pub fn new(gpu: &Gpu, k: usize, n: usize) -> Result<MissBox, CudaError> {
        if k == 0 || k > MAX_K {
            return Err(CudaError::Shape(format!("host experts: {k} slots a token (1..={MAX_K})")));
        }
        Ok(MissBox { words: Arc::new(MappedWords::new(&gpu.ctx, Mailbox::words(k, n))?), k, n })
    }

    /// A thread answering this mailbox's requests from `layers` (expert width f) while it lives.
    pub fn serve(&self, layers: Vec<MoeWeights>, f: usize) -> MissServer {
        MissServer::spawn(self.words.clone(), (self.k, self.n, f), layers)
    }

    /// The host's view, for `Mailbox::serve_one`.
    pub fn mailbox(&self) -> Mailbox<'_> {
        Mailbox::new(self.words.words(), self.k, self.n)
    }

    fn check(&self, t: usize, bufs: &[(&str, usize, usize)]) -> Result<(), CudaError> {
        if !(1..=MAX_T).contains(&t) {
            return Err(CudaError::Shape(format!("host experts: a window of {t} tokens (1..={MAX_T})")));
        }
        for &(what, len, need) in bufs {
            if len < need {
                return Err(CudaError::Shape(format!("host experts: {what} of {len} values, {need} needed")));
            }
        }
        Ok(())
    }

    /// The request for `layer`: the window's T·k chosen experts `ids`, the layer's residency table
    /// `slot_of` (a cache slot or −1 for each expert) and the MoE input x (T rows of n). Writes each
    /// slot's cache slot to `cache_ids` for the card's gathers (0 for a slot the host computes: `take`
    /// overwrites its output).
    pub fn ask(
        &self,
        gpu: &Gpu,
        layer: usize,
        t: usize,
        (ids, slot_of, x): (&Buf<i32>, &Buf<i32>, &Buf<f32>),
        cache_ids: &Buf<i32>,
    ) -> Result<(), CudaError> {
        let (k, n) = (self.k, self.n);
        self.check(t, &[("ids", ids.len(), t * k), ("inputs", x.len(), t * n), ("cache ids", cache_ids.len(), t * k)])?;
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_ask")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let i = |v: usize| Arg::I32(v as i32);
        let ptrs = [ids.ptr(gpu), slot_of.ptr(gpu), x.ptr(gpu), cache_ids.ptr(gpu)].map(Arg::Ptr);
        let args = [&[Arg::Ptr(self.words.device_ptr()), i(layer), i(t), i(k), i(n)][..], &ptrs].concat();
        launch(gpu, &f, "miss_ask", cfg, &args)
    }

    /// Once the host has answered, the slots it computed copied into eo (T·k rows of n), over what the
    /// card's gathers wrote there; the card's own rows are left as they are. Runs after those gathers.
    pub fn take(&self, gpu: &Gpu, t: usize, eo: &Buf<f32>) -> Result<(), CudaError> {
        let (k, n) = (self.k, self.n);
        self.check(t, &[("outputs", eo.len(), t * k * n)])?;
        let f = gpu.function(&crate::ops::sources::MISSES_FILE, "miss_take")?;
        let cfg = LaunchConfig { grid_dim: ((t * k) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let i = |v: usize| Arg::I32(v as i32);
        let args = [Arg::Ptr(self.words.device_ptr()), i(t), i(k), i(n), Arg::Ptr(eo.ptr(gpu))];
        launch(gpu, &f, "miss_take", cfg, &args)
    }
}
