//! `STRATA_HOST_PROFILE=1`: where the host's time goes while it records steps (graph.rs). Each op's
//! share is the time from the op recorded before it (or the step's start) to its own record: the host
//! code that prepared it (its buffers, its arguments, its inputs staged). Steps still run as graphs, so
//! the figures are those of a normal run, plus the cost of reading the clock at each op.

use std::collections::HashMap;
use std::time::Instant;

use crate::runtime::op::Op;

#[derive(Default)]
pub(crate) struct HostProfile {
    last: Option<Instant>,
    /// Per op name: nanoseconds and ops.
    by_name: HashMap<String, (u64, u64)>,
    recordings: u64,
    ops: u64,
}

/// The name an op's time is kept under.
fn label(op: &Op) -> &str {
    match op {
        Op::Kernel { name, .. } => name,
        Op::Zero { .. } => "(zeroing)",
        Op::Copy { .. } => "(device copy)",
        Op::Fork | Op::Back | Op::Join => "(side lane mark)",
    }
}

impl HostProfile {
    /// A step's recording begins.
    pub(crate) fn begin(&mut self) {
        self.recordings += 1;
        self.last = Some(Instant::now());
    }

    /// `op` recorded now: the time since the op before is its.
    pub(crate) fn op(&mut self, op: &Op) {
        if self.last.is_some() {
            self.add(label(op));
            self.ops += 1;
        }
    }

    /// The step's recording ends: the time since its last op is the host code after it.
    pub(crate) fn end(&mut self) {
        self.add("(after the last op)");
        self.last = None;
    }

    fn add(&mut self, name: &str) {
        let now = Instant::now();
        let Some(last) = self.last.replace(now) else { return };
        let ns = now.duration_since(last).as_nanos() as u64;
        match self.by_name.get_mut(name) {
            Some(e) => *e = (e.0 + ns, e.1 + 1),
            None => {
                self.by_name.insert(name.to_string(), (ns, 1));
            }
        }
    }

    /// The report: the mean host time a recording, then the `top` names that took most of it.
    pub(crate) fn lines(&self, top: usize) -> Vec<String> {
        if self.recordings == 0 {
            return Vec::new();
        }
        let n = self.recordings as f64;
        let total: u64 = self.by_name.values().map(|e| e.0).sum();
        let mut rows: Vec<(&String, &(u64, u64))> = self.by_name.iter().collect();
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        let mut out = vec![format!(
            "host profile: {} steps recorded, {:.0} µs and {:.0} ops each ({:.2} µs an op); the host code before each op, by name:",
            self.recordings,
            total as f64 / n / 1e3,
            self.ops as f64 / n,
            total as f64 / self.ops.max(1) as f64 / 1e3
        )];
        for (name, (ns, count)) in rows.into_iter().take(top) {
            out.push(format!(
                "  {name:<34} {:8.1} µs a step  {:5.1}%  {:7.1} ops a step  {:6.2} µs an op",
                *ns as f64 / n / 1e3,
                100.0 * *ns as f64 / total.max(1) as f64,
                *count as f64 / n,
                *ns as f64 / *count as f64 / 1e3
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::HostProfile;
    use crate::runtime::op::Op;

    #[test]
    fn each_op_gets_the_time_since_the_one_before() {
        let mut p = HostProfile::default();
        assert!(p.lines(5).is_empty(), "nothing recorded");
        p.op(&Op::Fork); // outside a recording: no time to give
        assert!(p.by_name.is_empty());
        for _ in 0..2 {
            p.begin();
            std::thread::sleep(std::time::Duration::from_millis(3));
            p.op(&Op::Zero { ptr: 0, bytes: 4 });
            p.op(&Op::Copy { dst: 0, src: 8, bytes: 4 });
            p.end();
        }
        let (zero, copy) = (p.by_name["(zeroing)"], p.by_name["(device copy)"]);
        assert_eq!((zero.1, copy.1, p.by_name["(after the last op)"].1), (2, 2, 2));
        assert!(zero.0 >= 6_000_000 && copy.0 < zero.0, "{zero:?} {copy:?}");
        let lines = p.lines(1);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("host profile: 2 steps recorded") && lines[0].contains(" 2 ops each"), "{lines:?}");
        assert!(lines[1].trim_start().starts_with("(zeroing)"), "{lines:?}");
    }
}
