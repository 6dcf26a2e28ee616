//! What a run on the card did, said at its end (the decoder's report): the profile when one was asked
//! for, what a decode step reads, the CUDA graphs' figures with the host's time per decode step, and the
//! card's idle time between steps. The decode steps' own figures are those after the prompt was read
//! ([`Decoder::prompt_read`](strata_model::decoder::Decoder::prompt_read) marks it).

use strata_model::KvMode;

use crate::backend::budget::decode_bytes;
use crate::backend::forward::CudaForward;
use crate::runtime::recorder::GraphStats;

/// The report's lines (none when there is nothing to say) for a conversation of `pos` tokens in `kv`.
pub fn lines(fwd: &CudaForward, kv: KvMode, pos: usize, at_prompt_end: Option<GraphStats>) -> Vec<String> {
    let gpu = &fwd.gpu;
    let mut out = Vec::new();
    if let Some(p) = gpu.profile.as_ref() {
        let layouts = format!("matvec layouts: {}", fwd.variants.layouts.summary());
        let profile = p.report(Some(&layouts)).unwrap_or_else(|e| format!("profile: {e}"));
        let bytes = decode_bytes(fwd.model, kv, pos);
        out.push(format!("{profile}  a decode step at depth {pos} reads {:.3} GB", bytes as f64 / 1e9));
    }
    if let Some(s) = gpu.graph_stats().filter(|s| s.steps > 0) {
        out.push(graphs(&s, at_prompt_end));
    }
    if let Some((hits, misses, swaps)) = fwd.cache_counts() {
        let all = (hits + misses).max(1) as f64;
        let [one, windows, gaps] = fwd.host_answers().unwrap_or_default();
        let each = |(n, busy): (u64, std::time::Duration)| busy.as_secs_f64() * 1e6 / n.max(1) as f64;
        let p = fwd.host_parts().unwrap_or_default();
        let part = |d| each((one.0, d));
        out.push(format!(
            "expert cache: {:.1} % of {} routings held on the card, the host computed the rest ({} requests of \
             one token, {:.0} µs each (reading {:.0}, computing {:.0}, writing {:.0}), and {} of windows, {:.0} µs \
             each, from seeing one to answering it; {:.0} µs from answering a one-token request to seeing the next, \
             over {} such pairs); {swaps} experts copied in",
            100.0 * hits as f64 / all,
            hits + misses,
            one.0,
            each(one),
            part(p.read),
            part(p.computed),
            part(p.written),
            windows.0,
            each(windows),
            each(gaps),
            gaps.0
        ));
    }
    out.extend(gpu.host_profile());
    match gpu.gap_summary() {
        Ok(Some((busy, idle, n))) => out.push(format!(
            "gaps: {n} steps (decode steps; while drafting also verify windows and draft chains): {busy:.1} µs each \
             on the card (inputs copied up, then the graph), the card \
             idle {idle:.1} µs between one and the next"
        )),
        Ok(None) => {}
        Err(e) => out.push(format!("gaps: not timed: {e}")),
    }
    out
}

/// The graphs' line: how many steps ran as graphs and what the last captured one held, then the host's
/// time per decode step.
fn graphs(s: &GraphStats, at_prompt_end: Option<GraphStats>) -> String {
    format!(
        "graphs: {} steps ran as CUDA graphs, {} of them as two ({} captured, the last of {} ops: {} kernels, {} \
         zeroings, {} copies; {} kernel updates; {} MiB of arena, {} MiB of staging){}",
        s.steps,
        s.split,
        s.built,
        s.nodes,
        s.kernels,
        s.zeroings,
        s.copies,
        s.updated_kernels,
        s.arena_bytes >> 20,
        s.staging_bytes >> 20,
        decode_host(at_prompt_end, s)
    )
}

/// The host's time a decode step before its graph's launch (the steps after the prompt's): the card
/// waits that long for each step's graph, with nothing queued.
fn decode_host(at_prompt_end: Option<GraphStats>, end: &GraphStats) -> String {
    let Some(p) = at_prompt_end.filter(|p| end.steps > p.steps) else { return String::new() };
    let steps = (end.steps - p.steps) as f64;
    let per_step = |ns: u64| ns as f64 / steps / 1e3;
    let ahead = match end.ahead - p.ahead {
        0 => String::new(),
        n => format!(", and {:.0} µs recording each ahead", (end.ahead_ns - p.ahead_ns) as f64 / n as f64 / 1e3),
    };
    format!(
        "; the host {:.0} µs a decode step before its launch ({:.0} µs of it launching, {:.0} copying {:.0} bytes \
         up; {:.0} µs before it from the token's return, {:.0} of it writing the token's inputs, {:.1} of that \
         reading its PLE rows){ahead}; {:.0} µs a step matching and updating its graph",
        per_step(end.host_ns - p.host_ns),
        per_step(end.launch_ns - p.launch_ns),
        per_step(end.copy_ns - p.copy_ns),
        (end.staged - p.staged) as f64 / steps,
        per_step(end.between_ns - p.between_ns),
        per_step(end.late_ns - p.late_ns),
        per_step(end.ple_ns - p.ple_ns),
        per_step(end.graph_ns - p.graph_ns)
    )
}

/// The host's time in the draft calls: recording and launching each draft chain, then recording the
/// verify window that will check it while the chain runs, then waiting for the drafts. Where the wait is
/// near nothing, the drafts' time is the host's, not the card's.
#[derive(Clone, Copy, Debug, Default)]
pub struct DraftTimes {
    calls: u64,
    drafts: u64,
    ns: [u128; 3],
}

impl DraftTimes {
    /// One draft call of `n` drafts: its three spans (chain, window recorded, wait).
    pub fn add(&mut self, n: usize, spans: [std::time::Duration; 3]) {
        self.calls += 1;
        self.drafts += n as u64;
        for (a, d) in self.ns.iter_mut().zip(spans) {
            *a += d.as_nanos();
        }
    }

    /// The report's line, none before any draft.
    pub fn line(&self) -> Option<String> {
        let us = |i: usize| self.ns[i] as f64 / self.calls as f64 / 1e3;
        (self.calls > 0).then(|| {
            format!(
                "drafting: {} draft calls ({:.1} drafts each); the host {:.0} µs recording and launching each chain, \
                 {:.0} µs recording its verify window while the chain runs, then {:.0} µs waiting for the drafts",
                self.calls,
                self.drafts as f64 / self.calls as f64,
                us(0),
                us(1),
                us(2)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_host, DraftTimes};
    use crate::runtime::recorder::GraphStats;
    use std::time::Duration;

    #[test]
    fn the_drafting_line_is_the_mean_of_the_calls() {
        let mut t = DraftTimes::default();
        assert_eq!(t.line(), None);
        let us = Duration::from_micros;
        t.add(3, [us(100), us(900), us(10)]);
        t.add(1, [us(300), us(1100), us(30)]);
        let line = t.line().expect("two calls");
        assert!(line.starts_with("drafting: 2 draft calls (2.0 drafts each); the host 200 µs"), "{line}");
        assert!(
            line.contains("1000 µs recording its verify window") && line.ends_with("20 µs waiting for the drafts"),
            "{line}"
        );
    }

    #[test]
    fn the_host_time_is_the_decode_steps_own() {
        let p = GraphStats { steps: 1, host_ns: 9_000_000, ..Default::default() };
        let end = GraphStats { steps: 5, host_ns: 9_000_000 + 4 * 30_000, ahead: 4, ahead_ns: 4_000_000, ..p };
        let s = decode_host(Some(p), &end);
        assert!(s.starts_with("; the host 30 µs a decode step"), "{s}");
        assert!(s.contains("1000 µs recording each ahead"), "{s}");
        assert_eq!(decode_host(None, &end), "");
        assert_eq!(decode_host(Some(end), &end), "", "no decode step after the prompt");
    }
}
