//! `STRATA_HOST_PROFILE=1`: where the host's time goes while it records steps (graph.rs). Each op's
//! share is the time from the op recorded before it (or the step's start) to its own record: the host
//! code that prepared it (its buffers, its arguments, its inputs staged). Steps still run as graphs, so
//! the figures are those of a normal run, plus the cost of reading the clock at each op. Recordings are
//! kept apart by kind (a decode step, a verify window, a draft chain: what the decoder says it records),
//! and the decoder starts afresh once the prompt is read, so one-time costs (kernels loaded, graphs
//! captured) stay out of the decode figures.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::runtime::op::Op;

/// One kind of recording's figures: per op name, nanoseconds and ops.
#[derive(Default)]
struct Table {
    by_name: HashMap<String, (u64, u64)>,
    recordings: u64,
    ops: u64,
    /// Matching the recorded ops with a kept graph and updating it (or capturing one): nanoseconds, and
    /// the kernels updated by name.
    graph_ns: u64,
    updated: HashMap<&'static str, u64>,
    /// Graphs captured anew (a shape not kept), and their share of `graph_ns`.
    captures: u64,
    capture_ns: u64,
}

#[derive(Default)]
pub(crate) struct HostProfile {
    last: Option<Instant>,
    /// The kind the next recording is kept under (then back to "other steps").
    next: Option<&'static str>,
    current: &'static str,
    tables: BTreeMap<&'static str, Table>,
}

/// The name an op's time is kept under.
fn label(op: &Op) -> &str {
    match op {
        Op::Kernel { name, .. } => name,
        Op::Zero { .. } => "(zeroing)",
        Op::Copy { .. } => "(device copy)",
        Op::Fork(_) | Op::Back(_) | Op::Join(_) => "(side lane mark)",
    }
}

impl HostProfile {
    /// The next recording is a `kind`.
    pub(crate) fn kind(&mut self, kind: &'static str) {
        self.next = Some(kind);
    }

    /// Every figure so far dropped (the prompt read: what follows is decoding).
    pub(crate) fn reset(&mut self) {
        self.tables.clear();
    }

    /// A step's recording begins.
    pub(crate) fn begin(&mut self) {
        self.current = self.next.take().unwrap_or("other steps");
        self.tables.entry(self.current).or_default().recordings += 1;
        self.last = Some(Instant::now());
    }

    /// `op` recorded now: the time since the op before is its.
    pub(crate) fn op(&mut self, op: &Op) {
        if self.last.is_some() {
            self.add(label(op));
            self.tables.entry(self.current).or_default().ops += 1;
        }
    }

    /// The step's recording ends: the time since its last op is the host code after it.
    pub(crate) fn end(&mut self) {
        self.add("(after the last op)");
        self.last = None;
    }

    /// The step's graph matched and updated, or (`captured`) captured anew, in `d`.
    pub(crate) fn graph_time(&mut self, d: std::time::Duration, captured: bool) {
        let t = self.tables.entry(self.current).or_default();
        t.graph_ns += d.as_nanos() as u64;
        if captured {
            t.captures += 1;
            t.capture_ns += d.as_nanos() as u64;
        }
    }

    /// A kernel of the step's graph whose launch was set anew.
    pub(crate) fn updated(&mut self, name: &'static str) {
        *self.tables.entry(self.current).or_default().updated.entry(name).or_default() += 1;
    }

    fn add(&mut self, name: &str) {
        let now = Instant::now();
        let Some(last) = self.last.replace(now) else { return };
        let ns = now.duration_since(last).as_nanos() as u64;
        let t = self.tables.entry(self.current).or_default();
        match t.by_name.get_mut(name) {
            Some(e) => *e = (e.0 + ns, e.1 + 1),
            None => {
                t.by_name.insert(name.to_string(), (ns, 1));
            }
        }
    }

    /// The report: for each kind, the mean host time a recording, then the `top` names that took most.
    pub(crate) fn lines(&self, top: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, t) in self.tables.iter().filter(|(_, t)| t.recordings > 0) {
            let n = t.recordings as f64;
            let total: u64 = t.by_name.values().map(|e| e.0).sum();
            out.push(format!(
                "host profile, {kind}: {} recorded, {:.0} µs and {:.0} ops each ({:.2} µs an op); the host code before each op:",
                t.recordings,
                total as f64 / n / 1e3,
                t.ops as f64 / n,
                total as f64 / t.ops.max(1) as f64 / 1e3
            ));
            let mut up: Vec<(&&str, &u64)> = t.updated.iter().collect();
            up.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let listed: Vec<String> = up.iter().map(|(k, v)| format!("{k} {:.1}", **v as f64 / n)).collect();
            out.push(format!(
                "  then {:.0} µs each matching a kept graph and updating it ({} captured anew, {:.0} µs each of \
                 that); kernels updated each: {:.1} ({})",
                t.graph_ns as f64 / n / 1e3,
                t.captures,
                t.capture_ns as f64 / n / 1e3,
                t.updated.values().sum::<u64>() as f64 / n,
                listed.join(", ")
            ));
            let mut rows: Vec<(&String, &(u64, u64))> = t.by_name.iter().collect();
            rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
            for (name, (ns, count)) in rows.into_iter().take(top) {
                out.push(format!(
                    "  {name:<34} {:8.1} µs each  {:5.1}%  {:7.1} ops each  {:6.2} µs an op",
                    *ns as f64 / n / 1e3,
                    100.0 * *ns as f64 / total.max(1) as f64,
                    *count as f64 / n,
                    *ns as f64 / *count as f64 / 1e3
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::HostProfile;
    use crate::runtime::op::Op;

    #[test]
    fn each_op_gets_the_time_since_the_one_before_by_kind() {
        let mut p = HostProfile::default();
        assert!(p.lines(5).is_empty(), "nothing recorded");
        p.op(&Op::Fork(crate::runtime::op::Lane::SIDE)); // outside a recording: no time to give
        assert!(p.tables.is_empty());
        for _ in 0..2 {
            p.kind("verify window");
            p.begin();
            std::thread::sleep(std::time::Duration::from_millis(3));
            p.op(&Op::Zero { ptr: 0, bytes: 4 });
            p.op(&Op::Copy { dst: 0, src: 8, bytes: 4 });
            p.end();
        }
        for name in ["attend", "attend", "rope"] {
            p.updated(name);
        }
        p.graph_time(std::time::Duration::from_micros(100), false);
        p.graph_time(std::time::Duration::from_micros(200), true);
        p.begin(); // no kind said: kept apart
        p.op(&Op::Fork(crate::runtime::op::Lane::SIDE));
        p.end();
        let t = &p.tables["verify window"];
        let (zero, copy) = (t.by_name["(zeroing)"], t.by_name["(device copy)"]);
        assert_eq!((zero.1, copy.1, t.by_name["(after the last op)"].1), (2, 2, 2));
        assert!(zero.0 >= 6_000_000 && copy.0 < zero.0, "{zero:?} {copy:?}");
        assert_eq!((p.tables["other steps"].recordings, p.tables["other steps"].ops), (1, 1));
        let lines = p.lines(1);
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert!(lines[0].starts_with("host profile, other steps: 1 recorded"), "{lines:?}");
        assert!(lines[3].starts_with("host profile, verify window: 2 recorded") && lines[3].contains(" 2 ops each"));
        assert_eq!(
            lines[4],
            "  then 150 µs each matching a kept graph and updating it (1 captured anew, 100 µs each of that); \
             kernels updated each: 1.5 (attend 1.0, rope 0.5)"
        );
        assert!(lines[5].trim_start().starts_with("(zeroing)"), "{lines:?}");
        p.reset();
        assert!(p.lines(5).is_empty());
    }
}
