//! No import circles between a crate's source files: a file's `crate::…` and `super::…` paths are its
//! imports, each resolved to the file of the longest module path it names; any strongly connected set of
//! more than one file fails, named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file (`layers/hc.rs` → ["layers", "hc"]; `lib.rs` → []).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().to_string()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The paths a file names from the crate root, `use crate::{a::B, c}` groups expanded one level; comments
/// and strings are not told apart from code, which only adds edges.
fn imports(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (prefix, base) in [("crate::", Vec::new()), ("super::", here[..here.len().saturating_sub(1)].to_vec())] {
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            let before_ok = i == 0 || !rest[..i].ends_with(|c: char| word(c) || c == ':');
            rest = &rest[i + prefix.len()..];
            if !before_ok {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for item in inner.split(',') {
                    let path: Vec<String> =
                        item.trim().split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                    out.push([base.clone(), path].concat());
                }
                continue;
            }
            let end = rest.find(|c: char| !(word(c) || c == ':')).unwrap_or(rest.len());
            let path: Vec<String> = rest[..end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            out.push([base.clone(), path].concat());
        }
    }
    out
}

/// The sets of files (more than one) that import one another round a circle.
fn circles(crate_dir: &str) -> Vec<Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeMap<Vec<String>, usize> =
        files.iter().enumerate().map(|(i, f)| (module_of(&src, f), i)).collect();
    let edges: Vec<Vec<usize>> = files
        .iter()
        .map(|f| {
            let here = module_of(&src, f);
            let mut to: Vec<usize> = imports(&std::fs::read_to_string(f).unwrap(), &here)
                .into_iter()
                .filter_map(|p| (1..=p.len()).rev().find_map(|n| modules.get(&p[..n]).copied()))
                .filter(|&j| j != modules[&here] && !module_of(&src, &files[j]).is_empty())
                .collect();
            to.sort_unstable();
            to.dedup();
            to
        })
        .collect();
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|i| files[i].strip_prefix(&src).unwrap().display().to_string()).collect())
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.edges[v] {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            t.out.push(c);
        }
    }
    let n = edges.len();
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_checker_finds_a_circle() {
    assert_eq!(strongly_connected(&[vec![1], vec![2], vec![0], vec![]]).iter().filter(|c| c.len() > 1).count(), 1);
    let here = vec!["ops".to_string(), "norm".to_string()];
    let got = imports("use super::act::rsqrt;\nuse crate::{model::Model, state::State};", &here);
    assert_eq!(got, [vec!["model", "Model"], vec!["state", "State"], vec!["ops", "act", "rsqrt"]]);
}

#[test]
fn crates_model_has_no_import_circle() {
    let c = circles("model");
    assert!(c.is_empty(), "import circles in crates/model: {c:?}");
}

#[test]
fn crates_cuda_has_no_import_circle() {
    let c = circles("cuda");
    assert!(c.is_empty(), "import circles in crates/cuda: {c:?}");
}

#[test]
fn the_other_crates_have_no_import_circle() {
    for krate in ["gguf", "engine", "server", "synth", "cli"] {
        let c = circles(krate);
        assert!(c.is_empty(), "import circles in crates/{krate}: {c:?}");
    }
}

/// crates/cuda's floors, lowest first: a file imports only from its own floor and those below.
const CUDA_FLOORS: [&str; 5] = ["runtime", "ops", "select", "backend", "tools"];

/// Every import in crates/cuda that reaches up a floor: (file, the floor it names).
fn upward_imports() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let floor = |m: &[String]| m.first().and_then(|f| CUDA_FLOORS.iter().position(|x| x == f));
    let mut out = Vec::new();
    for f in &files {
        let here = module_of(&src, f);
        let Some(mine) = floor(&here) else { continue };
        for p in imports(&std::fs::read_to_string(f).unwrap(), &here) {
            if let Some(theirs) = floor(&p).filter(|&t| t > mine) {
                out.push((f.strip_prefix(&src).unwrap().display().to_string(), CUDA_FLOORS[theirs].to_string()));
            }
        }
    }
    out
}

#[test]
fn crates_cuda_floors_import_only_below() {
    let up = upward_imports();
    assert!(up.is_empty(), "imports up a floor in crates/cuda (runtime < ops < select < backend < tools): {up:?}");
    // The check sees the floors at all: every floor holds files.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/src");
    for f in CUDA_FLOORS {
        assert!(src.join(f).join("mod.rs").exists(), "crates/cuda/src/{f}/mod.rs");
    }
}
