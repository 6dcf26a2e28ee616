//! A start on a card: every kernel file compiled (or read from the cache) and loaded on all but one of
//! the machine's cores while the plan is made (or read) on the last. The plan's checks ask for their
//! kernels as they go and wait for those parts only (runtime/device.rs), so the files they use come
//! first: qsa.cu and hc.cu (one part each, the longest to compile), then matvec.cu a type at a time; then
//! the long single-part files, so that none of them starts last and holds up the end.

use std::time::Instant;

use crate::ops::sources::{ALL, ATTN_FILE, GDN_FILE, HC_FILE, MATVEC_FILE, QSA_FILE};
use crate::runtime::compile::KernelFile;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use crate::select::plan::{is_kept, plan, Plan};

/// The kernels loaded and the plan this process runs.
pub struct Started {
    pub plan: &'static Plan,
    /// Whether the plan was made now (no plan was kept for this card, driver and binary).
    pub first: bool,
    /// Where the time went.
    pub note: String,
}

/// Loads every kernel and makes or reads the plan, side by side.
pub fn start(gpu: &Gpu) -> Result<Started, CudaError> {
    let first = !is_kept(gpu);
    let t0 = Instant::now();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = cores.saturating_sub(1).max(1);
    let files = in_order();
    let (loaded, plan, plan_secs) = std::thread::scope(|s| {
        let all = s.spawn(|| gpu.load_all(&files, threads));
        let t = Instant::now();
        let plan = plan(gpu);
        let plan_secs = t.elapsed().as_secs_f64();
        let loaded = all.join().unwrap_or_else(|_| Err(CudaError::Shape("loading the kernels panicked".into())));
        (loaded, plan, plan_secs)
    });
    let note = format!(
        "kernels ready and variants {} in {:.1} s ({}; the plan {plan_secs:.1} s of it, alongside)",
        if first { "chosen" } else { "read" },
        t0.elapsed().as_secs_f64(),
        loaded?
    );
    Ok(Started { plan, first, note })
}

/// Every kernel file, the plan's first (see the top of this file).
fn in_order() -> Vec<&'static KernelFile> {
    let mut files: Vec<&'static KernelFile> = vec![&QSA_FILE, &HC_FILE, &MATVEC_FILE, &GDN_FILE, &ATTN_FILE];
    for kf in ALL {
        if !files.iter().any(|f| f.name == kf.name) {
            files.push(kf);
        }
    }
    files
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_file_is_loaded_once_the_plans_first() {
        let files = super::in_order();
        let mut names: Vec<&str> = files.iter().map(|f| f.name).collect();
        assert_eq!(&names[..3], ["qsa.cu", "hc.cu", "matvec.cu"]);
        names.sort_unstable();
        let mut all: Vec<&str> = super::ALL.iter().map(|f| f.name).collect();
        all.sort_unstable();
        assert_eq!(names, all);
    }
}
