//! `STRATA_PROFILE`: where a decode step's device time goes. `1` times each op family (embed, HC read,
//! GDN, MoE, …), each synchronised before and after, so a profiled run is slower than a plain one and the
//! shares are what it is for. `kernels` times each kernel launch by name on the device (an event either
//! side, no synchronisation), so the sum is the card's busy time in a step and the rest of a plain step's
//! time is the card waiting for the host.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::driver::CudaEvent;

use crate::error::{Check, CudaError};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProfileMode {
    Families,
    Kernels,
}

impl ProfileMode {
    /// From `STRATA_PROFILE`: `1` families, `kernels` kernels, anything else none.
    pub fn from_env() -> Option<ProfileMode> {
        match std::env::var("STRATA_PROFILE").ok()?.as_str() {
            "1" => Some(ProfileMode::Families),
            "kernels" => Some(ProfileMode::Kernels),
            _ => None,
        }
    }
}

/// Seconds and calls per name, of the calls made while `active` (the decode steps).
pub struct Profile {
    pub mode: ProfileMode,
    times: Mutex<Vec<(String, f64, usize)>>,
    /// Kernels launched and not yet read back: name, start and end events.
    pending: Mutex<Vec<(String, CudaEvent, CudaEvent)>>,
    active: AtomicBool,
    steps: AtomicUsize,
}

impl Profile {
    pub fn new(mode: ProfileMode) -> Profile {
        Profile {
            mode,
            times: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            active: AtomicBool::new(false),
            steps: AtomicUsize::new(0),
        }
    }

    /// Starts a forward call: timed when it is a decode step. Reads back the last step's kernel times.
    pub fn begin(&self, decode_step: bool) -> Result<(), CudaError> {
        self.settle()?;
        self.active.store(decode_step, Ordering::Relaxed);
        if decode_step {
            self.steps.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A kernel launched between `start` and `end` (recorded on the stream, not yet complete).
    pub fn launched(&self, name: &str, start: CudaEvent, end: CudaEvent) {
        self.pending.lock().expect("profile lock").push((name.to_string(), start, end));
    }

    /// Waits for the pending kernels and adds their device times.
    fn settle(&self) -> Result<(), CudaError> {
        let pending = std::mem::take(&mut *self.pending.lock().expect("profile lock"));
        for (name, start, end) in pending {
            end.synchronize().check("waiting for a timed kernel")?;
            let ms = start.elapsed_ms(&end).check("reading a kernel's time")?;
            self.record(&name, ms as f64 / 1e3);
        }
        Ok(())
    }

    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub fn add(&self, name: &str, secs: f64) {
        if self.active() {
            self.record(name, secs);
        }
    }

    fn record(&self, name: &str, secs: f64) {
        let mut v = self.times.lock().expect("profile lock");
        match v.iter_mut().find(|e| e.0 == name) {
            Some(e) => {
                e.1 += secs;
                e.2 += 1;
            }
            None => v.push((name.to_string(), secs, 1)),
        }
    }

    /// One line per name, the largest first: total ms, share, calls, µs per call.
    pub fn report(&self) -> Result<String, CudaError> {
        self.settle()?;
        let mut v = self.times.lock().expect("profile lock").clone();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = v.iter().map(|e| e.1).sum();
        let steps = self.steps.load(Ordering::Relaxed);
        let what = match self.mode {
            ProfileMode::Families => "each op family synchronised",
            ProfileMode::Kernels => "each kernel's time on the device, none synchronised",
        };
        let mut out =
            format!("profile of {steps} decode steps ({what}): {:.2} ms per step\n", total * 1e3 / steps.max(1) as f64);
        for (name, secs, calls) in &v {
            out += &format!(
                "  {name:<24} {:>9.2} ms {:>5.1}%  {:>7.1} calls/step  {:>8.1} µs/call\n",
                secs * 1e3,
                100.0 * secs / total.max(1e-12),
                *calls as f64 / steps.max(1) as f64,
                secs * 1e6 / *calls as f64
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_decode_steps_count_and_the_largest_comes_first() {
        let p = Profile::new(ProfileMode::Kernels);
        p.begin(false).unwrap();
        p.add("prefill", 9.0);
        p.begin(true).unwrap();
        p.add("small", 0.001);
        p.add("big", 0.003);
        p.begin(true).unwrap();
        p.add("big", 0.003);
        let r = p.report().unwrap();
        assert!(r.starts_with("profile of 2 decode steps (each kernel's time on the device"), "{r}");
        assert!(r.contains("): 3.50 ms per step"), "{r}");
        assert!(!r.contains("prefill"), "{r}");
        let (big, small) = (r.find("big").unwrap(), r.find("small").unwrap());
        assert!(big < small, "{r}");
        assert!(r.contains("1.0 calls/step"), "{r}");
    }
}
