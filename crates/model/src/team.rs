//! Fork-join over the host's threads for the expert kernels (layers/experts.rs): the global pool
//! ([`Pool`], rayon) where the CPU back-end runs them, and a [`Team`] of threads that spin between jobs
//! where a GPU asks for misses (ops/misses.rs in crates/cuda). A placed pass asks once a MoE layer, about
//! every hundred microseconds, and a request runs two jobs (gate and up, then down); a pool whose threads
//! fall asleep between them pays their wake-ups in each job, tens of microseconds on many cores. A team's
//! threads spin while jobs keep coming and sleep only after [`HOT`] without one.
//! Which thread runs which task changes no bit: the tasks are independent.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// Runs `tasks` independent tasks over some threads.
pub trait Fork: Sync {
    /// `task(i)` for each i in 0..tasks, in any order on any thread; returns once all have run. A task's
    /// panic is raised again here, after every task has finished.
    fn each(&self, tasks: usize, task: &(dyn Fn(usize) + Sync));
    /// How many threads share the tasks (to cut work into enough of them).
    fn threads(&self) -> usize;
}

/// The global rayon pool (or the one installed around the call).
pub struct Pool;

impl Fork for Pool {
    fn each(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).into_par_iter().for_each(task);
    }

    fn threads(&self) -> usize {
        rayon::current_num_threads()
    }
}

/// How long a team's thread spins after its last job before it sleeps.
pub const HOT: Duration = Duration::from_millis(20);

type Job = *const (dyn Fn(usize) + Sync + 'static);

/// One turn of a wait: a spin, or after a few hundred of them a yield, so that on a machine with more
/// threads than cores (tests side by side) a waiting thread gives its core to the ones it waits for.
fn pause(spins: &mut u32) {
    if *spins < 256 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// What the calling thread and its workers share.
struct Shared {
    /// Bumped once a job; a worker runs each epoch's job once.
    epoch: AtomicU64,
    /// The job of the current epoch: written only while no worker reads it (between a job's end and the
    /// next epoch), read only between seeing an epoch and counting itself done.
    job: UnsafeCell<Option<Job>>,
    tasks: AtomicUsize,
    next: AtomicUsize,
    /// Workers still in the current job.
    left: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    bell: Condvar,
}

// SAFETY: `job` is the only field neither Send nor Sync by itself: it points at a `Sync` closure, and
// the epoch protocol above keeps its writes and reads apart (a write happens before the epoch's bump,
// reads after seeing it, and the next write only after every worker has counted itself out of the job).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl Shared {
    /// Tasks of the current job until none is left; a panic is noted, not raised.
    fn work(&self, job: &(dyn Fn(usize) + Sync)) {
        let tasks = self.tasks.load(SeqCst);
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= tasks {
                return;
            }
            if catch_unwind(AssertUnwindSafe(|| job(i))).is_err() {
                self.panicked.store(true, SeqCst);
            }
        }
    }

    /// A worker's life: wait for an epoch (spinning while hot, then asleep), run its job, count out.
    fn serve(&self) {
        // From the team's first epoch, not the one at this thread's start: a job may come before it.
        let mut seen = 0;
        let (mut last, mut spins) = (Instant::now(), 0u32);
        loop {
            let epoch = self.epoch.load(SeqCst);
            if self.stop.load(SeqCst) {
                return;
            }
            if epoch == seen {
                if last.elapsed() >= HOT {
                    self.sleep(seen);
                } else {
                    pause(&mut spins);
                }
                continue;
            }
            (seen, spins) = (epoch, 0);
            // SAFETY: read after seeing the epoch, before counting out (see `Shared::job`).
            if let Some(job) = unsafe { *self.job.get() } {
                self.work(unsafe { &*job });
            }
            self.left.fetch_sub(1, SeqCst);
            last = Instant::now();
        }
    }

    /// Sleeps until the epoch moves past `seen` (or a millisecond passes, or the team stops).
    fn sleep(&self, seen: u64) {
        self.sleepers.fetch_add(1, SeqCst);
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(SeqCst) == seen && !self.stop.load(SeqCst) {
            let _ = self.bell.wait_timeout(guard, Duration::from_millis(1));
        }
        self.sleepers.fetch_sub(1, SeqCst);
    }

    fn ring(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.bell.notify_all();
        }
    }
}

/// The calling thread and `threads − 1` workers of its own, spinning between jobs while they come.
pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Team {
    /// A team of `threads` (at least one: the caller), its workers named `name-i`.
    pub fn new(threads: usize, name: &str) -> Team {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            left: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            bell: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || s.serve())
                    .expect("spawning a team's thread")
            })
            .collect();
        Team { shared, workers }
    }
}

impl Fork for Team {
    fn each(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let s = &*self.shared;
        if tasks == 0 {
            return;
        }
        if self.workers.is_empty() || tasks == 1 {
            (0..tasks).for_each(task);
            return;
        }
        // SAFETY: the lifetime is erased only while the job runs: this call returns (or unwinds) only
        // after every worker has counted itself out of it, and no worker reads it after that.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(task) };
        unsafe { *s.job.get() = Some(job) };
        s.tasks.store(tasks, SeqCst);
        s.next.store(0, SeqCst);
        s.left.store(self.workers.len(), SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        s.ring();
        s.work(task);
        let mut spins = 0;
        while s.left.load(SeqCst) > 0 {
            pause(&mut spins);
        }
        unsafe { *s.job.get() = None };
        if s.panicked.swap(false, SeqCst) {
            resume_unwind(Box::new("a task of the host's team panicked"));
        }
    }

    fn threads(&self) -> usize {
        self.workers.len() + 1
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.bell.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn squares(fork: &dyn Fork, n: usize) -> Vec<u64> {
        let out: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(u64::MAX)).collect();
        fork.each(n, &|i| out[i].store((i * i) as u64, SeqCst));
        out.into_iter().map(|v| v.into_inner()).collect()
    }

    #[test]
    fn every_task_runs_once_on_a_team_and_on_the_pool() {
        let team = Team::new(4, "test");
        let want: Vec<u64> = (0..1000u64).map(|i| i * i).collect();
        for _ in 0..50 {
            assert_eq!(squares(&team, 1000), want);
        }
        assert_eq!(squares(&Pool, 1000), want);
        let runs = AtomicUsize::new(0);
        team.each(37, &|_| {
            runs.fetch_add(1, SeqCst);
        });
        assert_eq!(runs.load(SeqCst), 37);
        assert_eq!(team.threads(), 4);
    }

    #[test]
    fn a_team_wakes_from_sleep_for_the_next_job() {
        let team = Team::new(3, "test");
        squares(&team, 10);
        std::thread::sleep(HOT + Duration::from_millis(10));
        let seen: Vec<AtomicBool> = (0..64).map(|_| AtomicBool::new(false)).collect();
        team.each(64, &|i| {
            std::thread::sleep(Duration::from_micros(200));
            seen[i].store(true, SeqCst)
        });
        assert!(seen.iter().all(|s| s.load(SeqCst)));
    }

    #[test]
    fn a_panicking_task_is_raised_after_the_job_and_the_team_goes_on() {
        let team = Team::new(4, "test");
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.each(100, &|i| {
                if i == 57 {
                    panic!("task 57");
                }
                done.fetch_add(1, SeqCst);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(SeqCst), 99, "every other task ran before the panic was raised");
        assert_eq!(squares(&team, 20), (0..20u64).map(|i| i * i).collect::<Vec<_>>());
    }
}
