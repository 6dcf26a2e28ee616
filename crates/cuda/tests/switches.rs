//! docs/DETAILS.md's switch table lists exactly the switches of strata_cuda::runtime::settings::SWITCHES, each with
//! its default, and no code outside the start-up readers reads the environment.

use std::path::Path;

use strata_cuda::runtime::settings::SWITCHES;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The `STRATA_…` names that open a row of the switch table (the first table after "## GPU kernel switches").
fn documented() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/DETAILS.md")).expect("docs/DETAILS.md");
    let section = text.split("## GPU kernel switches").nth(1).expect("a switch section");
    let table = section.split("\n\n").find(|b| b.trim_start().starts_with('|')).expect("a switch table");
    table
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            name.starts_with("STRATA_").then(|| (name.to_string(), cells.get(3).unwrap_or(&"").to_string()))
        })
        .collect()
}

#[test]
fn the_switch_table_lists_every_switch_and_no_other() {
    let rows = documented();
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    for s in SWITCHES {
        assert!(names.contains(&s.name), "{} is a setting but has no row in docs/DETAILS.md's switch table", s.name);
    }
    for (name, default) in &rows {
        assert!(SWITCHES.iter().any(|s| s.name == name), "docs/DETAILS.md documents {name}, which no setting reads");
        assert!(!default.is_empty(), "docs/DETAILS.md: {name} has no default");
    }
    assert_eq!(rows.len(), SWITCHES.len(), "a switch documented twice");
}

/// `env::var` (or `var_os`, `vars`) only in crates/cli/src/env.rs: every other crate gets the value.
#[test]
fn only_the_start_up_reader_reads_the_environment() {
    let mut offenders = Vec::new();
    for krate in ["cli", "cuda", "engine", "gguf", "model", "server", "synth"] {
        let mut stack = vec![repo().join("crates").join(krate).join("src")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("a source folder") {
                let p = e.expect("an entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("cli/src/env.rs") {
                    let text = std::fs::read_to_string(&p).expect("a source file");
                    let code = text.split("#[cfg(test)]").next().unwrap_or("");
                    if ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("].iter().any(|c| code.contains(c)) {
                        offenders.push(p.display().to_string());
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "the environment read below start-up in {offenders:?}");
}
