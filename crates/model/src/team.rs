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

/// The tasks a job has, at most, in one claim word (a larger job runs as several).
const MAX_TASKS: usize = (1 << 20) - 1;

/// A job's tag (the low 24 bits of its epoch), its task count and the next task to hand out, packed in
/// one word, so that a thread claims a task of the job it saw or none: a thread that comes late to a
/// job, or after it, finds its tasks all claimed or another tag, and never reads the job.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Claim {
    tag: u64,
    tasks: usize,
    next: usize,
}

impl Claim {
    fn pack(self) -> u64 {
        ((self.tag & 0xff_ffff) << 40) | ((self.tasks as u64) << 20) | self.next as u64
    }

    fn unpack(w: u64) -> Claim {
        Claim { tag: w >> 40, tasks: ((w >> 20) & MAX_TASKS as u64) as usize, next: (w & MAX_TASKS as u64) as usize }
    }
}

/// Hands out the tasks of one job at a time.
struct Claims(AtomicU64);

impl Claims {
    /// The job of epoch `tag` with `tasks` tasks, none handed out yet.
    fn publish(&self, tag: u64, tasks: usize) {
        debug_assert!(tasks <= MAX_TASKS);
        self.0.store(Claim { tag: tag & 0xff_ffff, tasks, next: 0 }.pack(), SeqCst);
    }

    /// The job now published.
    fn now(&self) -> Claim {
        Claim::unpack(self.0.load(SeqCst))
    }

    /// The next task of job `tag`, or None once they are all handed out or another job is published.
    fn take(&self, tag: u64) -> Option<usize> {
        let mut w = self.0.load(SeqCst);
        loop {
            let c = Claim::unpack(w);
            if c.tag != tag & 0xff_ffff || c.next >= c.tasks {
                return None;
            }
            match self.0.compare_exchange_weak(w, w + 1, SeqCst, SeqCst) {
                Ok(_) => return Some(c.next),
                Err(now) => w = now,
            }
        }
    }
}

/// What the calling thread and its workers share.
struct Shared {
    /// Bumped once a job (the caller's alone).
    epoch: AtomicU64,
    /// The tasks of the current job.
    claims: Claims,
    /// The job of the current epoch: written only while no task of a job is claimed and unfinished
    /// (before its epoch is published, and after its last task is done), read only by a thread that
    /// has claimed a task and not yet counted it done.
    job: UnsafeCell<Option<Job>>,
    /// Tasks of the current job finished.
    done: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    bell: Condvar,
}

// SAFETY: `job` is the only field neither Send nor Sync by itself: it points at a `Sync` closure, and
// the claims above keep its writes and reads apart (a write happens before the job's epoch is
// published or after its last task is done; a read only between claiming a task and counting it done).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl Shared {
    fn new() -> Shared {
        Shared {
            epoch: AtomicU64::new(0),
            claims: Claims(AtomicU64::new(Claim { tag: 0, tasks: 0, next: 0 }.pack())),
            job: UnsafeCell::new(None),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            bell: Condvar::new(),
        }
    }

    /// Tasks of job `tag` until none is left to claim (`own`: the caller's closure; a worker reads the
    /// job's); a panic is noted, not raised.
    fn work(&self, tag: u64, own: Option<&(dyn Fn(usize) + Sync)>) {
        while let Some(i) = self.claims.take(tag) {
            // SAFETY: read after claiming a task of this job, before counting it done (see `job`).
            let job = own.or_else(|| unsafe { (*self.job.get()).map(|j| &*j) });
            if let Some(job) = job {
                if catch_unwind(AssertUnwindSafe(|| job(i))).is_err() {
                    self.panicked.store(true, SeqCst);
                }
            }
            self.done.fetch_add(1, SeqCst);
        }
    }

    /// A worker's life: wait for a job (spinning while hot, then asleep), take its tasks while any are
    /// left. A job never waits for a worker: one pushed off its core, or asleep, when a job comes finds
    /// its tasks taken by the others when it runs again (a worker the caller waited for held a job up
    /// by a scheduler tick, milliseconds, where a request takes hundreds of microseconds).
    fn serve(&self) {
        let mut seen = self.claims.now().tag;
        let (mut last, mut spins) = (Instant::now(), 0u32);
        loop {
            if self.stop.load(SeqCst) {
                return;
            }
            let tag = self.claims.now().tag;
            if tag != seen {
                self.work(tag, None);
                (seen, last, spins) = (tag, Instant::now(), 0);
                continue;
            }
            if last.elapsed() >= HOT {
                self.sleep(seen);
            } else {
                pause(&mut spins);
            }
        }
    }

    /// Sleeps until a job other than `seen` is published (or a millisecond passes, or the team stops).
    fn sleep(&self, seen: u64) {
        self.sleepers.fetch_add(1, SeqCst);
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.claims.now().tag == seen && !self.stop.load(SeqCst) {
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

    /// One job of at most [`MAX_TASKS`] tasks: published, worked on by the caller too, and over once
    /// every task is done, whichever threads took them.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        // SAFETY: the lifetime is erased only while the job runs: this call returns (or unwinds) only
        // after every task of it is done, and no thread reads the job outside a task it claimed.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(task) };
        unsafe { *self.job.get() = Some(job) };
        self.done.store(0, SeqCst);
        let tag = self.epoch.fetch_add(1, SeqCst) + 1;
        self.claims.publish(tag, tasks);
        self.ring();
        self.work(tag, Some(task));
        let mut spins = 0;
        while self.done.load(SeqCst) < tasks {
            pause(&mut spins);
        }
        unsafe { *self.job.get() = None };
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
        let shared = Arc::new(Shared::new());
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
        if self.workers.is_empty() || tasks <= 1 {
            (0..tasks).for_each(task);
            return;
        }
        for first in (0..tasks).step_by(MAX_TASKS) {
            let n = MAX_TASKS.min(tasks - first);
            s.run(n, &|i| task(first + i));
        }
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
    fn a_job_never_waits_for_a_worker_that_does_not_come() {
        // A team whose one "worker" never serves (a thread pushed off its core for the whole job): the
        // caller takes every task and the job ends.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let absent = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let team = Arc::new(Team { shared: Arc::new(Shared::new()), workers: vec![absent] });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let t = team.clone();
        // Detached: where the job waited, the test fails rather than hangs.
        std::thread::spawn(move || {
            let _ = done_tx.send(squares(&*t, 100));
        });
        let got = done_rx.recv_timeout(Duration::from_secs(20));
        assert_eq!(got.ok(), Some((0..100u64).map(|i| i * i).collect::<Vec<_>>()), "the job waited");
        drop(tx); // the absent worker leaves, so that the team drops
    }

    #[test]
    fn a_late_thread_claims_no_task_of_a_job_it_did_not_see() {
        let c = Claims(AtomicU64::new(0));
        c.publish(1, 3);
        assert_eq!((c.take(1), c.take(1)), (Some(0), Some(1)));
        c.publish(2, 5);
        assert_eq!(c.take(1), None, "job 1's tasks are gone with it");
        assert_eq!(
            (0..6).map(|_| c.take(2)).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4].map(Some).into_iter().chain([None]).collect::<Vec<_>>()
        );
        c.publish(3 + (1 << 24), MAX_TASKS);
        assert_eq!(c.now(), Claim { tag: 3, tasks: MAX_TASKS, next: 0 });
        assert_eq!(c.take(3), Some(0));
    }

    #[test]
    fn a_job_longer_than_a_claim_word_runs_whole() {
        let team = Team::new(2, "test");
        let runs = AtomicUsize::new(0);
        team.each(MAX_TASKS + 5, &|_| {
            runs.fetch_add(1, SeqCst);
        });
        assert_eq!(runs.load(SeqCst), MAX_TASKS + 5);
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
