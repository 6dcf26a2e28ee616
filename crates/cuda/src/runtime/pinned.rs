//! Host memory locked where it lies: the routed experts' pages of the model's mapped file registered with
//! the driver (read-only), so that they stay in RAM, are never faulted in while the card waits for the
//! host's answer, and can be copied to the card directly (docs/PLACEMENT.md, "Memory in numbers").
//! Where the driver cannot register them, the pages are read once instead (faulted in, not locked).

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};
use rayon::prelude::*;

use crate::runtime::error::{Check, CudaError};

const PAGE: usize = 4096;

/// Byte ranges registered with the driver, unregistered when dropped.
pub struct PinnedRanges {
    ctx: Arc<CudaContext>,
    starts: Vec<usize>,
    /// Bytes registered.
    pub bytes: u64,
}

// SAFETY: the registrations are addresses the driver keeps; nothing here is touched but through it.
unsafe impl Send for PinnedRanges {}
unsafe impl Sync for PinnedRanges {}

/// The whole pages inside the ranges (address, length), sorted and merged where they touch: a page that
/// holds any byte of something else is left out, since the driver refuses a copy from memory that is
/// partly registered and partly not (a dense weight beside an expert, uploaded from the same mapping).
pub fn page_ranges(ranges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut r: Vec<(usize, usize)> =
        ranges.iter().map(|&(a, len)| whole_pages(a, len)).filter(|&(a, b)| a < b).collect();
    r.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(r.len());
    for (a, b) in r {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out.into_iter().map(|(a, b)| (a, b - a)).collect()
}

impl PinnedRanges {
    /// Registers `ranges` (read-only memory: the file's mapping) for `ctx`'s device. All or nothing:
    /// on an error those registered are unregistered again.
    /// `mapped`: also mapped into the card's address space, for kernels that read them (stream slots).
    pub fn register(
        ctx: &Arc<CudaContext>,
        ranges: &[(usize, usize)],
        mapped: bool,
    ) -> Result<PinnedRanges, CudaError> {
        ctx.bind_to_thread().check("binding the context")?;
        let mut pinned = PinnedRanges { ctx: ctx.clone(), starts: Vec::new(), bytes: 0 };
        let mut flags = sys::CU_MEMHOSTREGISTER_READ_ONLY | sys::CU_MEMHOSTREGISTER_PORTABLE;
        if mapped {
            flags |= sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        }
        for (a, len) in page_ranges(ranges) {
            // SAFETY: whole pages of a live mapping the caller keeps for as long as this value; the
            // driver only reads them.
            unsafe { sys::cuMemHostRegister_v2(a as *mut std::ffi::c_void, len, flags) }
                .result()
                .check("locking the experts' pages in host memory")?;
            pinned.starts.push(a);
            pinned.bytes += len as u64;
        }
        Ok(pinned)
    }
}

impl PinnedRanges {
    /// The card's address of `host`, a byte inside a registered page.
    pub fn device_address(&self, host: usize) -> Result<u64, CudaError> {
        self.ctx.bind_to_thread().check("binding the context")?;
        let mut dev = 0;
        // SAFETY: asks the driver only; an address outside a registration is refused, not read.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut std::ffi::c_void, 0) }
            .result()
            .check("the card's address of the experts' locked pages")?;
        Ok(dev)
    }
}

/// The whole pages inside `len` bytes at `a`: their first byte and the one past them (equal: none).
pub fn whole_pages(a: usize, len: usize) -> (usize, usize) {
    let (first, end) = (a.div_ceil(PAGE) * PAGE, (a + len) / PAGE * PAGE);
    (first, end.max(first))
}

impl Drop for PinnedRanges {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            for &a in &self.starts {
                // SAFETY: registered above, unregistered once.
                let _ = unsafe { sys::cuMemHostUnregister(a as *mut std::ffi::c_void) };
            }
        }
    }
}

/// Reads one byte a page of each range over the host's threads (`strata_gguf::read_pages`), so the pages
/// are in memory and mapped before the first pass needs them. Returns the bytes covered.
pub fn fault_in(ranges: &[&[u8]]) -> u64 {
    ranges.par_iter().flat_map(|r| r.par_chunks(1 << 20)).for_each(strata_gguf::read_pages);
    ranges.iter().map(|r| r.len() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_keep_only_their_whole_pages_merged_where_they_touch() {
        let got = page_ranges(&[(10_000, 100), (4096, 8192), (12_288, 5000), (40_960, 0), (20_000, 8192)]);
        // 4096..12,288 is pages 1–2 and 12,288..17,288 holds page 3 whole (12,288..16,384): one run of
        // three. 20,000..28,192 holds pages 5–6 (20,480..28,672 is past its end: 20,480..24,576 only).
        // 10,000..10,100 and the empty range hold no whole page.
        assert_eq!(got, vec![(4096, 12_288), (20_480, 4096)]);
    }
}
