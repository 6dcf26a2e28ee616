//! `STRATA_SKIP`: kernels left out of each step's graph, to learn what they cost on the step's critical
//! path. For timing only: the output is garbage. Kernel timings by events count each kernel alone (and,
//! in an ungraphed step, the host's launch gaps), while a step's graph overlaps them (programmatic
//! launches, the side lane); a step without a family, against the same binary with it, says what that
//! family takes from the step as it runs (`bench/knockout.sh`).
//!
//! `STRATA_SKIP=NAME,PREFIX*,…`: a kernel whose name equals an entry, or starts with an entry's text
//! before `*`, is not recorded into a step's graph (decode steps and prompt windows with graphs on; the
//! start-up checks and an ungraphed run launch everything). The kernels whose outputs are used as indices
//! (the routing, the selection's top-k, argmax, sampling) are never left out: garbage ids would read
//! outside the weights or the caches. Garbage floats stay inside every buffer.

/// Kernels that write ids or counts something else indexes with: never skipped.
const KEPT: [&str; 4] = ["moe_route", "qsa_topk", "argmax", "sample"];

/// The entries of a `STRATA_SKIP` value that may be used, and those refused (named in a note).
fn parse(value: &str) -> (Vec<String>, Vec<String>) {
    let mut use_ = Vec::new();
    let mut refused = Vec::new();
    for e in value.split([',', ' ']).map(str::trim).filter(|e| !e.is_empty()) {
        let stem = e.trim_end_matches('*');
        // Refused when the entry could match a kept kernel: a kept name starts with the stem (or, for a
        // plain name, the name starts with a kept one: `qsa_topk_cluster`).
        let risky =
            KEPT.iter().any(|k| k.starts_with(stem) || (!e.ends_with('*') && e.starts_with(k)) || stem.is_empty());
        if risky {
            refused.push(e.to_string());
        } else {
            use_.push(e.to_string());
        }
    }
    (use_, refused)
}

/// Whether `name` matches one of `entries` (equal, or prefixed by an entry ending in `*`).
fn matches(entries: &[String], name: &str) -> bool {
    entries.iter().any(|e| match e.strip_suffix('*') {
        Some(stem) => name.starts_with(stem),
        None => name == e,
    })
}

/// The entries of a `STRATA_SKIP` value to leave out, the refused ones and the others said in notes.
pub(crate) fn entries(value: &str) -> Vec<String> {
    let (use_, refused) = parse(value);
    if !refused.is_empty() {
        eprintln!("note: STRATA_SKIP: {} not left out (their outputs are indices)", refused.join(", "));
    }
    if !use_.is_empty() {
        eprintln!(
            "note: STRATA_SKIP={}: left out of every step's graph, for timing only: the output is garbage",
            use_.join(",")
        );
    }
    use_
}

/// Whether a kernel named `name`, launched while a step is recorded, is to be left out.
pub(crate) fn skipped(entries: &[String], name: &str) -> bool {
    !entries.is_empty() && matches(entries, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_match() {
        let (e, refused) = parse("gr_norm_split, matvec_q8_0*");
        assert!(refused.is_empty());
        assert!(matches(&e, "gr_norm_split"));
        assert!(!matches(&e, "gr_norm"));
        assert!(matches(&e, "matvec_q8_0_one_staged"));
        assert!(!matches(&e, "matvec_q4_k_one_staged"));
    }

    #[test]
    fn index_writers_are_never_skipped() {
        let (e, refused) = parse("moe_*,qsa_topk_cluster,argmax,*,sample_top,gdn_delta_128,moe_combine");
        assert_eq!(refused, ["moe_*", "qsa_topk_cluster", "argmax", "*", "sample_top"]);
        assert_eq!(e, ["gdn_delta_128", "moe_combine"]);
        assert!(!matches(&e, "moe_route"));
    }
}
