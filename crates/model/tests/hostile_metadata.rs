//! A model file is untrusted input: every `qwen4exp.*` key of a converter-written file (fixtures/real/)
//! set to hostile values — zero, one, odd sizes, huge and negative numbers, the wrong type, arrays of the
//! wrong length or with bad entries — or dropped. Each variant must load or be refused with an error; none
//! may panic, and a variant that loads must run a few tokens without panicking.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use strata_gguf::{with_metadata, Array, GgufBuilder, GgufFile, GgufSet, Value};
use strata_model::{KvMode, Model, RopeScaling};

fn scalars() -> Vec<Value> {
    vec![
        Value::U32(0),
        Value::U32(1),
        Value::U32(2),
        Value::U32(3),
        Value::U32(5),
        Value::U32(64),
        Value::U32(1 << 20),
        Value::U32(u32::MAX),
        Value::U64((1 << 39) - 1),
        Value::U64(u64::MAX),
        Value::I32(-1),
        Value::F32(f32::NAN),
        Value::F32(-1.0),
        Value::F32(1e30),
        Value::String("x".into()),
        Value::Array(Array::U32(vec![])),
    ]
}

/// Variants of an array value: empty, one entry shorter and longer, and each entry replaced by hostile
/// numbers (the first and the last entry, to keep the count down).
fn arrays(a: &Array) -> Vec<Value> {
    let n = a.len();
    let mut out = vec![Value::Array(Array::I32(vec![])), Value::U32(4), Value::String("x".into())];
    let as_i64: Option<Vec<i64>> = (0..n).map(|i| a.get(i).and_then(|v| v.as_f64()).map(|f| f as i64)).collect();
    if let Some(v) = as_i64 {
        out.push(Value::Array(Array::I64(v[..n.saturating_sub(1)].to_vec())));
        let mut longer = v.clone();
        longer.push(1);
        out.push(Value::Array(Array::I64(longer)));
        for at in [0, n.saturating_sub(1)] {
            for bad in [0i64, 1, 3, -1, 1 << 31, i64::MAX, i64::MIN] {
                let mut w = v.clone();
                if at < w.len() {
                    w[at] = bad;
                    out.push(Value::Array(Array::I64(w)));
                }
            }
        }
    }
    if let Some(b) = a.to_bools() {
        out.push(Value::Array(Array::Bool(b.iter().map(|x| !x).collect())));
        out.push(Value::Array(Array::Bool(vec![true; n])));
        out.push(Value::Array(Array::Bool(vec![false; n])));
    }
    out
}

fn rebuild(src: &GgufFile, key: &str, value: Option<&Value>) -> GgufSet {
    let bytes = with_metadata(src, key, value).unwrap();
    GgufSet::from_files(vec![GgufFile::from_bytes("mutant.gguf", bytes).unwrap()]).unwrap()
}

#[test]
fn hostile_metadata_is_refused_or_runs_never_panics() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf");
    let src = GgufFile::open(&path).unwrap();
    let keys: Vec<(String, Value)> =
        src.metadata().iter().filter(|(k, _)| k.starts_with("qwen4exp.")).cloned().collect();
    let (mut loaded, mut refused, mut panics) = (0, 0, Vec::new());
    for (key, value) in &keys {
        let mut variants: Vec<Option<Value>> = vec![None];
        variants.extend(
            match value {
                Value::Array(a) => arrays(a),
                _ => scalars(),
            }
            .into_iter()
            .map(Some),
        );
        for v in variants {
            let set = rebuild(&src, key, v.as_ref());
            let outcome = catch_unwind(AssertUnwindSafe(|| match Model::from_set(set, RopeScaling::None) {
                Ok(model) => {
                    let mut st = model.new_state(KvMode::F16).expect("fp16 state");
                    for t in [1u32, 2, 3] {
                        model.forward(&mut st, t);
                    }
                    true
                }
                Err(e) => {
                    assert!(!e.to_string().contains('\n'), "a one-line error: {e}");
                    false
                }
            }));
            match outcome {
                Ok(true) => {
                    loaded += 1;
                    if std::env::var_os("SHOW_LOADED").is_some() {
                        eprintln!("loaded: {key} = {v:?}");
                    }
                }
                Ok(false) => refused += 1,
                Err(_) => panics.push(format!("{key} = {v:?}")),
            }
        }
    }
    eprintln!("{} keys: {loaded} variants loaded and ran, {refused} refused, {} panicked", keys.len(), panics.len());
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
    assert!(refused > loaded, "most hostile variants must be refused ({refused} refused, {loaded} loaded)");
}

/// Every tensor dropped in turn: refused naming it, except the ones the model can do without
/// (`output.weight`: the head is then the embedding).
#[test]
fn a_missing_tensor_is_refused_by_name() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf");
    let src = GgufFile::open(&path).unwrap();
    for dropped in src.tensors().iter().map(|t| t.name.clone()) {
        let mut b = GgufBuilder::new();
        for (k, v) in src.metadata() {
            b.add(k, v.clone());
        }
        let kept: Vec<_> = src.tensors().iter().filter(|t| t.name != dropped).collect();
        for t in &kept {
            b.add_tensor(&t.name, &t.shape, t.ty).unwrap();
        }
        let mut w = b.begin(Vec::new(), "mutant.gguf").unwrap();
        for t in &kept {
            w.write_tensor(&t.name, src.require(&t.name).unwrap().data).unwrap();
        }
        let file = GgufFile::from_bytes("mutant.gguf", w.finish().unwrap()).unwrap();
        let result = Model::from_set(GgufSet::from_files(vec![file]).unwrap(), RopeScaling::None);
        match (dropped.as_str(), result) {
            ("output.weight", r) => assert!(r.is_ok(), "a tied head loads"),
            (_, Ok(_)) => panic!("{dropped} dropped, and the model still loaded"),
            (_, Err(e)) => assert!(e.to_string().contains(&dropped), "{dropped}: {e}"),
        }
    }
}
