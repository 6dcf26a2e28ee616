//! Pinned host memory mapped into the card's address space: words both the host and the kernels read and
//! write while a graph runs (ops/misses.rs's mailbox). Cached, not write-combined: the host reads it.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use crate::runtime::error::{Check, CudaError};

pub struct MappedWords {
    ctx: Arc<CudaContext>,
    ptr: *mut AtomicU32,
    len: usize,
    device: u64,
}

// SAFETY: the memory is owned and reached only as atomics (by the host) and by kernels.
unsafe impl Send for MappedWords {}
unsafe impl Sync for MappedWords {}

impl MappedWords {
    /// `len` zeroed words, mapped for `ctx`'s device.
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<MappedWords, CudaError> {
        ctx.bind_to_thread().check("binding the context")?;
        let bytes = len.max(1) * 4;
        // SAFETY: an allocation of pinned host memory mapped into the device's address space.
        let ptr = unsafe { cudarc::driver::result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .check("allocating mapped pinned memory")?;
        let mut device = 0;
        // SAFETY: ptr is the allocation above, made with DEVICEMAP.
        let got = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, ptr, 0) }.result();
        let words = MappedWords { ctx: ctx.clone(), ptr: ptr as *mut AtomicU32, len, device };
        got.check("mapping pinned memory for the card")?;
        // SAFETY: bytes of the allocation, written before any kernel or reader has the pointer.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Ok(words)
    }

    /// The words, as the host reads and writes them.
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: len words of the allocation, alive as long as self; AtomicU32 has u32's layout.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The words' address for the card's kernels.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl Drop for MappedWords {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by malloc_host above and freed once; no kernel runs on it after its owner's
            // last synchronisation.
            let _ = unsafe { cudarc::driver::result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

impl AsRef<[AtomicU32]> for MappedWords {
    fn as_ref(&self) -> &[AtomicU32] {
        self.words()
    }
}
