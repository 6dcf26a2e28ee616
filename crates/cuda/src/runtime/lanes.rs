//! The lane structure of a recorded step (`STRATA_GRAPH=lanes`): for each place where a side lane forks
//! and joins again, the kernels on each branch, so that a reader sees which branch holds the longer chain
//! (only the longer one bounds the step) before timing a change that shortens one of them.

use std::collections::BTreeMap;

/// What the summary needs of a recorded op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark<'a> {
    Kernel(&'a str),
    Fork,
    Back,
    Join,
    /// A zeroing or a copy: a node of the graph, no kernel.
    Other,
}

/// One fork-to-join of a step: the side lane's kernels (from the fork to its end) and the main lane's
/// (from the fork to the join), each in order.
pub type Branches<'a> = (Vec<&'a str>, Vec<&'a str>);

/// Each distinct fork-to-join of `marks` with how often it occurs, and the kernels outside any of them.
pub fn branches<'a>(marks: &[Mark<'a>]) -> (BTreeMap<Branches<'a>, usize>, usize) {
    let (mut seen, mut serial) = (BTreeMap::new(), 0);
    let (mut side, mut main) = (Vec::new(), Vec::new());
    let (mut open, mut on_side) = (false, false);
    for m in marks {
        match *m {
            Mark::Fork => (open, on_side) = (true, true),
            Mark::Back => on_side = false,
            Mark::Join if open => {
                *seen.entry((std::mem::take(&mut side), std::mem::take(&mut main))).or_insert(0) += 1;
                (open, on_side) = (false, false);
            }
            Mark::Kernel(k) if on_side => side.push(k),
            Mark::Kernel(k) if open => main.push(k),
            Mark::Kernel(_) => serial += 1,
            Mark::Join | Mark::Other => {}
        }
    }
    if open {
        *seen.entry((side, main)).or_insert(0) += 1; // joined at the step's end
    }
    (seen, serial)
}

/// The summary as lines: each fork-to-join with its count and both branches' lengths and kernels.
pub fn report(marks: &[Mark]) -> String {
    let (seen, serial) = branches(marks);
    let kernels = marks.iter().filter(|m| matches!(m, Mark::Kernel(_))).count();
    let mut out = format!("lanes: a step of {kernels} kernels, {serial} of them outside any side lane's span\n");
    for ((side, main), n) in &seen {
        out +=
            &format!("  ×{n}: side {} [{}] | main {} [{}]\n", side.len(), side.join(", "), main.len(), main.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_are_counted_by_lane() {
        use Mark::*;
        let layer = [
            Kernel("read"),
            Fork,
            Kernel("sel_a"),
            Kernel("sel_b"),
            Back,
            Kernel("q"),
            Other,
            Kernel("kv"),
            Kernel("store"),
            Join,
            Kernel("scores"),
        ];
        let step: Vec<Mark> = layer.iter().chain(layer.iter()).copied().chain([Fork, Kernel("late"), Back]).collect();
        let (seen, serial) = branches(&step);
        assert_eq!(serial, 4);
        assert_eq!(seen[&(vec!["sel_a", "sel_b"], vec!["q", "kv", "store"])], 2);
        assert_eq!(seen[&(vec!["late"], vec![])], 1);
        let text = report(&step);
        assert!(text.contains("×2: side 2 [sel_a, sel_b] | main 3 [q, kv, store]"), "{text}");
        assert!(text.starts_with("lanes: a step of 15 kernels, 4 of them"), "{text}");
    }
}
