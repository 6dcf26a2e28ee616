//! A guard against a key that is read and then ignored: every `qwen4exp.*` key the config reads
//! (`Config::keys_read`, which notes each key it looks up, so a key added to the reader is in this test
//! the day it is added) is rewritten in a converter-written file, one at a time, to plausible values of its
//! own type, and `strata run` must show an effect: the logits change, the context limit changes (fewer
//! tokens), or the file is refused in one line naming the key or a tensor whose shape the key sets. Keys
//! read only in some layouts are rewritten in a setup that has that layout (a file without
//! `attention.recurrent_layers`, one without the shared width's own key, one with YaRN in the file).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use strata_gguf::{with_metadata, Array, GgufFile, GgufSet, Value};

/// Keys read with no effect this test can see on these fixtures, and why.
const EXEMPT: &[(&str, &str)] = &[];

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// The first 40 tokens of the fixture's own prompt (its `expected.json` beside it): past the indexer's
/// top_k plus a block on both fixtures (16 + 4, 32 + 8), so the selection is sparse and every indexer key
/// matters.
fn prompt(rel: &str) -> String {
    let path = fixture(rel).parent().unwrap().join("expected.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids: Vec<String> = json["prompt"].as_array().unwrap()[..40].iter().map(|v| v.to_string()).collect();
    ids.join(",")
}

/// What a run showed: the error line, or the ids and the logit rows.
#[derive(PartialEq, Debug)]
enum Outcome {
    Refused(String),
    Ran(Vec<String>, Vec<u8>),
}

/// `strata run` on a file given by its bytes.
fn run(bytes: &[u8], dir: &Path, prompt: &str) -> Outcome {
    let (model, dump) = (dir.join("variant.gguf"), dir.join("variant.f32"));
    std::fs::write(&model, bytes).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["run", "-m", model.to_str().unwrap(), "--prompt-tokens", prompt, "-n", "4", "--ignore-eos"])
        .args(["--device", "cpu", "--dump-logits", dump.to_str().unwrap()])
        .output()
        .expect("strata runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:") && !l.starts_with("model:")).collect();
        assert_eq!(lines.len(), 1, "a refusal is one line: {stderr}");
        return Outcome::Refused(lines[0].to_string());
    }
    let ids = String::from_utf8_lossy(&o.stdout).trim().split(',').map(|s| s.trim().to_string()).collect();
    Outcome::Ran(ids, std::fs::read(&dump).unwrap())
}

/// Values of the key's own type near its value (or, for a key the file lacks, plausible ones).
fn variants(key: &str, v: Option<&Value>, vocab: u64) -> Vec<Value> {
    let ints = |x: u64| {
        let mut out = vec![x + 1, x * 2, x.saturating_sub(1), x / 2, 1, 0];
        out.dedup();
        out.into_iter().filter(|&y| y != x).collect::<Vec<_>>()
    };
    if key.ends_with(".context_length") {
        // Two cells past the 40-token prompt: the run stops after two tokens of the four asked for.
        return vec![Value::U32(42)];
    }
    match v {
        None => match key.rsplit('.').next().unwrap() {
            "type" => vec![Value::String("linear".into()), Value::String("yarn".into())],
            "factor" => vec![Value::F32(2.0), Value::F32(4.0)],
            "vocab_size" => vec![Value::U32(vocab as u32 + 1), Value::U32(vocab as u32 - 1)],
            _ => [1u32, 2, 4, 64, 4096].into_iter().map(Value::U32).collect(),
        },
        Some(Value::String(s)) => {
            ["none", "linear", "yarn"].into_iter().filter(|t| t != s).map(|t| Value::String(t.into())).collect()
        }
        Some(Value::F32(f)) => vec![Value::F32(f * 10.0), Value::F32(f / 10.0), Value::F32(f * 2.0)],
        Some(Value::F64(f)) => vec![Value::F64(f * 10.0), Value::F64(f / 10.0), Value::F64(f * 2.0)],
        Some(Value::Array(a)) => array_variants(a),
        Some(other) => match other.as_u64() {
            Some(x) => ints(x).into_iter().map(|y| retyped(other, y)).collect(),
            None => panic!("{key}: a value of a type this test cannot vary: {other:?}"),
        },
    }
}

/// `y` in the integer type of `like`.
fn retyped(like: &Value, y: u64) -> Value {
    match like {
        Value::U8(_) => Value::U8(y as u8),
        Value::U16(_) => Value::U16(y as u16),
        Value::U32(_) => Value::U32(y as u32),
        Value::I32(_) => Value::I32(y as i32),
        Value::I64(_) => Value::I64(y as i64),
        _ => Value::U64(y),
    }
}

/// One entry changed at a time (the first, the middle, the last): flipped for booleans, moved up, down,
/// doubled or zeroed for integers.
fn array_variants(a: &Array) -> Vec<Value> {
    let n = a.len();
    let mut out = Vec::new();
    for at in [0, n / 2, n.saturating_sub(1)] {
        if let Some(b) = a.to_bools() {
            let mut w = b.clone();
            w[at] = !w[at];
            out.push(Value::Array(Array::Bool(w)));
            continue;
        }
        let Some(v) = a.to_u64s() else { panic!("an array this test cannot vary: {a:?}") };
        for y in [v[at] + 1, v[at] * 2, v[at].saturating_sub(1), 0] {
            if y != v[at] {
                let mut w = v.clone();
                w[at] = y;
                out.push(Value::Array(match a {
                    Array::I32(_) => Array::I32(w.iter().map(|&x| x as i32).collect()),
                    Array::U32(_) => Array::U32(w.iter().map(|&x| x as u32).collect()),
                    _ => Array::U64(w),
                }));
            }
        }
    }
    out
}

/// An effect, said in words, or None.
fn effect(key: &str, base: &Outcome, got: &Outcome) -> Option<String> {
    let short = key.trim_start_matches("qwen4exp.");
    match (base, got) {
        (_, Outcome::Refused(e)) if e.contains(short) => Some(format!("refused: {e}")),
        (_, Outcome::Refused(e)) if e.contains(".weight") || e.contains("tensor") => Some(format!("refused: {e}")),
        (Outcome::Ran(ids0, _), Outcome::Ran(ids, _)) if ids.len() < ids0.len() => Some("fewer tokens".into()),
        (Outcome::Ran(_, l0), Outcome::Ran(_, l)) if l0 != l => Some("the logits change".into()),
        _ => None,
    }
}

/// The bytes of a file made from a fixture by changes to its metadata.
fn setup(rel: &str, change: &[(&str, Option<Value>)]) -> Vec<u8> {
    let mut bytes = std::fs::read(fixture(rel)).unwrap();
    for (k, v) in change {
        bytes = with_metadata(&GgufFile::from_bytes(rel, bytes).unwrap(), k, v.as_ref()).unwrap();
    }
    bytes
}

#[test]
fn every_key_the_config_reads_has_an_effect() {
    let scratch = strata_scratch::Scratch::new("keys");
    let dir = scratch.path();
    let real = "fixtures/real/qwen4exp-real-q8_0.gguf";
    // The 4-layer sweep model's one attention layer is its last: its layout is the interval's (4).
    let sweep4 = "fixtures/sweep/eps5-tied-4l/model.gguf";
    let setups = [
        (real, vec![]),
        (
            real,
            vec![
                ("qwen4exp.expert_shared_feed_forward_length", None),
                ("qwen4exp.feed_forward_length", Some(Value::U32(48))),
            ],
        ),
        (
            real,
            vec![
                ("qwen4exp.rope.scaling.type", Some(Value::String("yarn".into()))),
                ("qwen4exp.rope.scaling.factor", Some(Value::F32(2.0))),
            ],
        ),
        (sweep4, vec![("qwen4exp.attention.recurrent_layers", None)]),
    ];
    // A key is rewritten in each setup that reads it until one shows its effect.
    let (mut done, mut report, mut read) = (HashSet::new(), Vec::new(), Vec::new());
    for (rel, change) in setups {
        let bytes = setup(rel, &change);
        let f = GgufFile::from_bytes(rel, bytes.clone()).unwrap();
        let set = GgufSet::from_files(vec![GgufFile::from_bytes(rel, bytes.clone()).unwrap()]).unwrap();
        let vocab = strata_model::Config::from_gguf(&set).expect("the setup loads").vocab as u64;
        let prompt = prompt(rel);
        let base = run(&bytes, dir, &prompt);
        assert!(matches!(base, Outcome::Ran(..)), "{rel} with {change:?}: {base:?}");
        for key in strata_model::Config::keys_read(&set) {
            read.push(key.clone());
            if done.contains(&key) || EXEMPT.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let found = variants(&key, f.get(&key), vocab).into_iter().find_map(|v| {
                let got = run(&with_metadata(&f, &key, Some(&v)).unwrap(), dir, &prompt);
                effect(&key, &base, &got).map(|e| format!("{key} = {v}: {e}"))
            });
            if let Some(line) = found {
                report.push(line);
                done.insert(key);
            }
        }
    }
    drop(scratch);
    eprintln!("{}", report.join("\n"));
    let silent: HashSet<_> =
        read.iter().filter(|k| !done.contains(*k) && !EXEMPT.iter().any(|(e, _)| e == k)).collect();
    assert!(silent.is_empty(), "keys read with no effect on the run: {silent:?}");
    assert!(report.len() >= 40, "{} keys rewritten", report.len());
}
