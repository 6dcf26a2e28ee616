//! How many drafts a verify window takes when the run chooses (`--spec auto`): from the acceptance
//! measured so far at each draft position and the measured time of a pass of each size, the number of
//! drafts with the most tokens per second (docs/SPECULATION.md, "How many drafts").

/// The most drafts a window takes (a window is the last token and its drafts: T ≤ 8).
pub const MAX_DRAFTS: usize = 7;

/// The measurements and the choice they give.
#[derive(Clone, Debug)]
pub struct Tuner {
    max: usize,
    /// Per draft position: windows that reached it (every draft before it accepted), and accepted there.
    reached: [f64; MAX_DRAFTS],
    accepted: [f64; MAX_DRAFTS],
    /// Seconds of a pass (draft, verify, accept) of n drafts: a running mean, once measured.
    secs: [Option<f64>; MAX_DRAFTS + 1],
    /// Passes of n drafts run so far: the first of each size is not timed (a device captures its
    /// graphs then, which would make that size look dear for as long as it is not chosen again).
    runs: [usize; MAX_DRAFTS + 1],
    /// Passes since the choice last tried more drafts than it keeps.
    idle: usize,
    /// Plain passes between two tries of a draft while none pays: doubled after each try that did not
    /// change the choice, so a run whose drafts are never accepted pays for fewer and fewer tries.
    explore_every: usize,
}

/// A window at n = 0 tries one draft after this many passes at first, so acceptance is measured again;
/// the wait doubles up to `EXPLORE_MAX` while the tries change nothing.
const EXPLORE_EVERY: usize = 32;
const EXPLORE_MAX: usize = 512;
/// Weight of the newest pass time in the running mean.
const NEW: f64 = 0.1;

impl Tuner {
    pub fn new(max: usize) -> Tuner {
        Tuner {
            max: max.min(MAX_DRAFTS),
            reached: [0.0; MAX_DRAFTS],
            accepted: [0.0; MAX_DRAFTS],
            secs: [None; MAX_DRAFTS + 1],
            runs: [0; MAX_DRAFTS + 1],
            idle: 0,
            explore_every: EXPLORE_EVERY,
        }
    }

    /// The acceptance at draft position i given the drafts before it were accepted: measured, pulled
    /// towards the position before's (one half for the first) while few windows reached it, so a
    /// position not reached yet is expected to do as the last one did and gets tried.
    fn acceptance(&self, i: usize) -> f64 {
        let prior = if i == 0 { 0.5 } else { self.acceptance(i - 1) };
        (self.accepted[i] + 2.0 * prior) / (self.reached[i] + 2.0)
    }

    /// Expected tokens of a pass of n drafts: 1 + q0 + q0·q1 + ….
    pub fn tokens(&self, n: usize) -> f64 {
        let (mut sum, mut p) = (1.0, 1.0);
        for i in 0..n {
            p *= self.acceptance(i);
            sum += p;
        }
        sum
    }

    /// The seconds of a pass of n drafts: measured, else a guess from the nearest measured size (each
    /// draft a tenth of a plain step), so that an unmeasured size gets tried.
    fn cost(&self, n: usize) -> Option<f64> {
        self.secs[n].or_else(|| {
            let m = (0..self.secs.len()).filter(|&m| self.secs[m].is_some()).min_by_key(|&m| m.abs_diff(n))?;
            Some(self.secs[m]? * (1.0 + 0.1 * n as f64) / (1.0 + 0.1 * m as f64))
        })
    }

    /// The drafts for the next pass.
    pub fn choose(&mut self) -> usize {
        let Some(best) = (0..=self.max)
            .filter_map(|n| self.cost(n).map(|c| (n, self.tokens(n) / c)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, _)| n)
        else {
            return 0; // nothing measured yet: a plain pass measures the baseline
        };
        // The baseline timed twice before drafts are weighed against it: a device may capture graphs
        // in more than its first plain pass, and a dear baseline that is never run again would keep
        // drafts that are never accepted looking cheap.
        if best > 0 && self.runs[0] < 3 {
            return 0;
        }
        if best == 0 && self.max > 0 {
            self.idle += 1;
            if self.idle >= self.explore_every {
                self.idle = 0;
                self.explore_every = (2 * self.explore_every).min(EXPLORE_MAX);
                return 1;
            }
        } else if best > 0 {
            self.explore_every = EXPLORE_EVERY;
        }
        best
    }

    /// A pass of `n` drafts that accepted `k` of them and took `secs`.
    pub fn record(&mut self, n: usize, k: usize, secs: f64) {
        for i in 0..n.min(k + 1) {
            self.reached[i] += 1.0;
            self.accepted[i] += f64::from(u8::from(i < k));
        }
        let n = n.min(MAX_DRAFTS);
        self.runs[n] += 1;
        if self.runs[n] > 1 {
            // A time under half the mean replaces it: the mean was a capture's (a running mean would
            // take dozens of passes to forget it).
            let s = &mut self.secs[n];
            *s = Some(match *s {
                Some(old) if secs >= 0.5 * old => old + NEW * (secs - old),
                _ => secs,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tuner;

    /// A run where a pass of n drafts costs `step · (1 + n/10)` (a window nearly as cheap as a step, as on
    /// a GPU) or `step · (n + 1)` (a window costing its tokens' steps, as on a CPU), and each draft is
    /// accepted with probability `a` (drawn by a fixed sequence). Returns the choice made most often in
    /// the last 100 passes (the occasional exploration aside).
    fn settle(a: f64, mut cost: impl FnMut(usize) -> f64) -> usize {
        let mut t = Tuner::new(7);
        let mut rng = strata_gguf::SplitMix64::new(5);
        let mut late = [0usize; 8];
        for pass in 0..400 {
            let n = t.choose();
            let k = (0..n).take_while(|_| (rng.uniform() as f64) < a).count();
            t.record(n, k, cost(n));
            if pass >= 300 {
                late[n] += 1;
            }
        }
        (0..8).max_by_key(|&n| late[n]).unwrap()
    }

    #[test]
    fn drafts_follow_acceptance_and_cost() {
        let gpu = |n: usize| 5e-3 * (1.0 + 0.1 * n as f64);
        let cpu = |n: usize| 5e-3 * (n + 1) as f64;
        let high = settle(0.9, gpu);
        let mid = settle(0.6, gpu);
        assert!(high >= 5, "acceptance 0.9 on cheap windows: {high} drafts");
        assert!((1..high).contains(&mid), "acceptance 0.6: {mid} drafts, 0.9: {high}");
        assert_eq!(settle(0.02, gpu), 0, "drafts that are never accepted do not pay");
        assert_eq!(settle(0.7, cpu), 0, "windows that cost their tokens' steps never pay");
    }

    /// A device's first pass of a size captures its graphs and takes many times a pass (here the first
    /// plain pass, after the prompt): were it timed, plain passes would look dear until chosen again,
    /// and drafts that are never accepted would go on being drafted.
    #[test]
    fn a_first_pass_that_captures_does_not_decide() {
        let mut first = true;
        let capturing = |n: usize| {
            let dear = n == 0 && std::mem::replace(&mut first, false);
            5e-3 * (1.0 + 0.6 * n as f64) * if dear { 20.0 } else { 1.0 }
        };
        assert_eq!(settle(0.0, capturing), 0, "drafts never accepted after a dear first plain pass");
    }

    /// The first two plain passes capture graphs (a device's decode step and its second half): a short
    /// run whose drafts are never accepted still drafts in only a few of its passes.
    #[test]
    fn plain_passes_that_capture_do_not_keep_drafts_going() {
        let mut t = Tuner::new(7);
        let (mut plain, mut drafted) = (0, 0);
        for _ in 0..48 {
            let n = t.choose();
            let dear = n == 0 && plain < 2;
            plain += usize::from(n == 0);
            drafted += usize::from(n > 0);
            t.record(n, 0, 5e-3 * (1.0 + 0.6 * n as f64) * if dear { 20.0 } else { 1.0 });
        }
        assert!(drafted <= 4, "{drafted} of 48 passes drafted");
    }

    /// Where drafts are never accepted, the tries grow rarer: a run of 4,000 passes tries a draft in a
    /// handful of them, not one pass in 32.
    #[test]
    fn tries_grow_rarer_while_they_change_nothing() {
        let mut t = Tuner::new(7);
        let mut drafted = 0;
        for _ in 0..4000 {
            let n = t.choose();
            drafted += usize::from(n > 0);
            t.record(n, 0, 5e-3 * (1.0 + 0.6 * n as f64));
        }
        assert!((3..=16).contains(&drafted), "{drafted} passes of 4,000 drafted");
    }

    #[test]
    fn expected_tokens_follow_the_measured_acceptance() {
        let mut t = Tuner::new(3);
        for _ in 0..998 {
            t.record(3, 3, 1.0);
        }
        assert!((t.tokens(3) - 4.0).abs() < 0.01, "{}", t.tokens(3));
        assert_eq!(t.tokens(0), 1.0);
    }
}
