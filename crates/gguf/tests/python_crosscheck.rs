//! Cross-check against the `gguf` Python package (python/gguf_crosscheck.py), which implements the format
//! and the codecs on its own: a file written by strata is read by the package, a file written by the
//! package is read by strata, and every tensor of every type both know dequantizes to the same bits.
//!
//! Skipped with a message when python3 with `gguf` and `numpy` is missing, except under CI (`CI` set),
//! where .ci/run installs them and a missing package is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value as Json};
use strata_gguf::quant::random_blocks;
use strata_gguf::{Array, GgmlType, GgufBuilder, GgufFile, SplitMix64, Value};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/gguf_crosscheck.py")
}

fn python_ready() -> bool {
    let ok = Command::new("python3").args(["-c", "import gguf, numpy"]).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have python3 with the gguf and numpy packages (.ci/run installs them)"
        );
        eprintln!("SKIPPED: python3 with the gguf and numpy packages is not installed (pip install gguf numpy)");
    }
    ok
}

fn run(args: &[&str]) {
    let out = Command::new("python3").arg(script()).args(args).output().expect("python3 runs");
    assert!(out.status.success(), "gguf_crosscheck.py {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

fn tempdir(tag: &str) -> strata_scratch::Scratch {
    strata_scratch::Scratch::new(&format!("crosscheck-{tag}"))
}

/// A strata value in the dump's JSON form (floats as bit patterns, so the comparison is exact).
fn to_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!({"t": "UINT8", "v": x}),
        Value::I8(x) => json!({"t": "INT8", "v": x}),
        Value::U16(x) => json!({"t": "UINT16", "v": x}),
        Value::I16(x) => json!({"t": "INT16", "v": x}),
        Value::U32(x) => json!({"t": "UINT32", "v": x}),
        Value::I32(x) => json!({"t": "INT32", "v": x}),
        Value::F32(x) => json!({"t": "FLOAT32", "bits": x.to_bits()}),
        Value::Bool(x) => json!({"t": "BOOL", "v": x}),
        Value::String(x) => json!({"t": "STRING", "v": x}),
        Value::U64(x) => json!({"t": "UINT64", "v": x}),
        Value::I64(x) => json!({"t": "INT64", "v": x}),
        Value::F64(x) => json!({"t": "FLOAT64", "bits": x.to_bits()}),
        Value::Array(a) => {
            let sub = to_json(&a.get(0).unwrap_or_else(|| zero_of(a)))["t"].clone();
            let items: Vec<Json> = (0..a.len()).map(|i| to_json(&a.get(i).unwrap())).collect();
            json!({"t": "ARRAY", "sub": sub, "v": items})
        }
    }
}

/// Any value of an empty array's element type (only its type name is used).
fn zero_of(a: &Array) -> Value {
    match a {
        Array::U8(_) => Value::U8(0),
        Array::I8(_) => Value::I8(0),
        Array::U16(_) => Value::U16(0),
        Array::I16(_) => Value::I16(0),
        Array::U32(_) => Value::U32(0),
        Array::I32(_) => Value::I32(0),
        Array::F32(_) => Value::F32(0.0),
        Array::Bool(_) => Value::Bool(false),
        Array::String(_) => Value::String(String::new()),
        Array::Array(_) => Value::Array(Array::U8(vec![])),
        Array::U64(_) => Value::U64(0),
        Array::I64(_) => Value::I64(0),
        Array::F64(_) => Value::F64(0.0),
    }
}

/// Compares strata's reading of `file` with the package's dump of it. Returns the types whose
/// dequantization was compared.
fn compare(file: &Path, dump_dir: &Path) -> Vec<GgmlType> {
    let dump: Json = serde_json::from_slice(&std::fs::read(dump_dir.join("dump.json")).unwrap()).unwrap();
    let f = GgufFile::open(file).unwrap();
    let ours: Vec<Json> = f.metadata().iter().map(|(k, v)| json!([k, to_json(v)])).collect();
    assert_eq!(&ours, dump["metadata"].as_array().unwrap(), "metadata differs");
    let theirs = dump["tensors"].as_array().unwrap();
    assert_eq!(f.tensors().len(), theirs.len());
    let mut compared = Vec::new();
    for (t, d) in f.tensors().iter().zip(theirs) {
        assert_eq!(json!(t.name), d["name"]);
        assert_eq!(json!(t.ty.id()), d["type"], "{}", t.name);
        assert_eq!(json!(t.shape), d["shape"], "{}", t.name);
        let view = f.require(&t.name).unwrap();
        let raw = std::fs::read(dump_dir.join(d["raw"].as_str().unwrap())).unwrap();
        assert!(raw == view.data, "{}: raw bytes differ", t.name);
        if let Some(deq) = d["deq"].as_str() {
            let expect = std::fs::read(dump_dir.join(deq)).unwrap();
            let got: Vec<u8> = view.to_f32().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
            let first = got.chunks(4).zip(expect.chunks(4)).position(|(a, b)| a != b);
            assert_eq!(got.len(), expect.len(), "{}", t.name);
            assert!(first.is_none(), "{} ({}): dequantized element {} differs", t.name, t.ty, first.unwrap_or(0));
            compared.push(t.ty);
        }
    }
    compared
}

#[test]
fn strata_file_is_read_by_the_gguf_package() {
    if !python_ready() {
        return;
    }
    let dir = tempdir("strata-writes");
    let mut b = GgufBuilder::new();
    for (k, v) in common::sample_metadata() {
        if !matches!(&v, Value::Array(a) if a.is_empty()) {
            b.add(&k, v); // the package's reader cannot tell an empty array's type; it has its own test
        }
    }
    // Every type but strata's own Q2_0 (id 42), which the package does not know and refuses to read.
    let shared: Vec<GgmlType> = GgmlType::ALL.into_iter().filter(|&t| t != GgmlType::Q2_0).collect();
    let mut rng = SplitMix64::new(11);
    let tensors: Vec<_> = shared
        .iter()
        .map(|&ty| (format!("s.{}.weight", ty.name().to_lowercase()), ty, random_blocks(ty, 1024, &mut rng)))
        .collect();
    for (name, ty, _) in &tensors {
        b.add_tensor(name, &[16 * ty.block_size() as u64, 64], *ty).unwrap();
    }
    let path = dir.join("strata.gguf");
    let mut w = b.create(&path).unwrap();
    for (name, _, data) in &tensors {
        w.write_tensor(name, data).unwrap();
    }
    w.finish().unwrap();
    run(&["dump", path.to_str().unwrap(), dir.join("dump").to_str().unwrap()]);
    let compared = compare(&path, &dir.join("dump"));
    assert_eq!(compared, shared);
    println!("{} types dequantized bit for bit alike (1024 random blocks each)", compared.len());
}

#[test]
fn gguf_package_file_is_read_by_strata() {
    if !python_ready() {
        return;
    }
    let dir = tempdir("package-writes");
    for seed in 0..3 {
        let path = dir.join(format!("package-{seed}.gguf"));
        let dump = dir.join(format!("dump-{seed}"));
        run(&["write", path.to_str().unwrap(), &seed.to_string()]);
        run(&["dump", path.to_str().unwrap(), dump.to_str().unwrap()]);
        let compared = compare(&path, &dump);
        assert_eq!(compared.len(), 24, "{compared:?}");
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get("general.architecture").and_then(Value::as_str), Some("qwen4exp"));
    }
}
