//! `STRATA_PROFILE`: where a decode step's device time goes, and apart a prompt window's, a verify
//! window's and a draft chain's. `1` times each
//! op family (embed, HC read, GDN, MoE, …), each synchronised before and after, so a profiled run is slower
//! than a plain one and the shares are what it is for. `kernels` times each kernel launch by name on the
//! device (an event either side, no synchronisation), so the sum is the card's busy time in a step and the
//! rest of a plain step's time is the card waiting for the host.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::driver::CudaEvent;

use crate::runtime::error::{Check, CudaError};

pub use crate::runtime::settings::ProfileMode;
/// Seconds and calls per name over some forward calls.
#[derive(Default)]
struct Table {
    times: Vec<(String, f64, usize)>,
    calls: usize,
}

impl Table {
    fn record(&mut self, name: &str, secs: f64) {
        match self.times.iter_mut().find(|e| e.0 == name) {
            Some(e) => {
                e.1 += secs;
                e.2 += 1;
            }
            None => self.times.push((name.to_string(), secs, 1)),
        }
    }

    /// A heading, then one line per name, the largest first: total ms, share, calls and µs per call.
    fn report(&self, what: &str, per: &str) -> String {
        let mut v = self.times.clone();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = v.iter().map(|e| e.1).sum();
        let n = self.calls.max(1) as f64;
        let mut out = format!("profile of {} {what}: {:.2} ms per {per}\n", self.calls, total * 1e3 / n);
        for (name, secs, calls) in &v {
            out += &format!(
                "  {name:<24} {:>9.2} ms {:>5.1}%  {:>7.1} calls/{per}  {:>8.1} µs/call\n",
                secs * 1e3,
                100.0 * secs / total.max(1e-12),
                *calls as f64 / n,
                secs * 1e6 / *calls as f64
            );
        }
        out
    }
}

/// What a forward call is, for the table its times go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A decode step of one token.
    Step,
    /// A window of a prompt.
    Prompt,
    /// A verify window (a token and its drafts).
    Verify,
    /// A chain of drafts.
    Drafts,
}

/// Each table's heading and what one of its calls is called.
const TABLES: [(&str, &str); 4] =
    [("decode steps", "step"), ("prompt windows", "window"), ("verify windows", "window"), ("draft chains", "chain")];

/// The times of the decode steps (one token), the prompt's windows, verify windows and draft chains, apart.
pub struct Profile {
    pub mode: ProfileMode,
    /// One a [`Call`], in its order.
    tables: Mutex<[Table; 4]>,
    /// Which table the calls in flight count to (0 before the first forward call: nothing counts).
    current: AtomicUsize,
    /// Kernels launched and not yet read back: name, start and end events.
    pending: Mutex<Vec<(String, CudaEvent, CudaEvent)>>,
    active: AtomicBool,
}

impl Profile {
    pub fn new(mode: ProfileMode) -> Profile {
        Profile {
            mode,
            tables: Mutex::new(Default::default()),
            current: AtomicUsize::new(0),
            pending: Mutex::new(Vec::new()),
            active: AtomicBool::new(false),
        }
    }

    /// Starts a forward call of the kind `call`. Reads back the last call's kernel times first.
    pub fn begin(&self, call: Call) -> Result<(), CudaError> {
        self.settle()?;
        let table = call as usize;
        self.current.store(table, Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
        self.tables.lock().expect("profile lock")[table].calls += 1;
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

    /// Whether a forward call has begun (the model's upload and the plan's checks are not timed).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub fn add(&self, name: &str, secs: f64) {
        if self.active() {
            self.record(name, secs);
        }
    }

    fn record(&self, name: &str, secs: f64) {
        let table = self.current.load(Ordering::Relaxed);
        self.tables.lock().expect("profile lock")[table].record(name, secs);
    }

    /// The decode steps' breakdown (with `note` under it: the plan's matvec layouts), then each other
    /// kind of call's that ran.
    pub fn report(&self, note: Option<&str>) -> Result<String, CudaError> {
        self.settle()?;
        let tables = self.tables.lock().expect("profile lock");
        let how = match self.mode {
            ProfileMode::Families => "each op family synchronised",
            ProfileMode::Kernels => "each kernel's time on the device, none synchronised",
        };
        let mut out = String::new();
        for (i, (table, (what, per))) in tables.iter().zip(TABLES).enumerate() {
            if i == 0 || table.calls > 0 {
                out += &table.report(&format!("{what} ({how})"), per);
            }
            if let (0, Some(note)) = (i, note) {
                out += &format!("  ({note})\n");
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_steps_and_prompt_windows_apart_and_the_largest_first() {
        let p = Profile::new(ProfileMode::Kernels);
        p.add("before any call", 5.0);
        p.begin(Call::Prompt).unwrap();
        p.add("prefill", 9.0);
        p.begin(Call::Step).unwrap();
        p.add("small", 0.001);
        p.add("big", 0.003);
        p.begin(Call::Step).unwrap();
        p.add("big", 0.003);
        let r = p.report(None).unwrap();
        assert!(r.starts_with("profile of 2 decode steps (each kernel's time on the device"), "{r}");
        assert!(r.contains("): 3.50 ms per step"), "{r}");
        let windows = r.find("profile of 1 prompt windows").expect("a prompt section");
        assert!(r[windows..].contains("): 9000.00 ms per window"), "{r}");
        assert!(r.find("prefill").unwrap() > windows && r.find("big").unwrap() < windows, "{r}");
        assert!(!r.contains("before any call"), "{r}");
        let (big, small) = (r.find("big").unwrap(), r.find("small").unwrap());
        assert!(big < small, "{r}");
        assert!(r.contains("1.0 calls/step"), "{r}");
        assert!(!r.contains("verify windows"), "a kind of call that did not run has no table: {r}");
        p.begin(Call::Verify).unwrap();
        p.add("verify_kernel", 0.002);
        let r = p.report(None).unwrap();
        let verify = r.find("profile of 1 verify windows").expect("a verify section");
        assert!(r.find("verify_kernel").unwrap() > verify && r[verify..].contains("2.00 ms per window"), "{r}");
    }
}
