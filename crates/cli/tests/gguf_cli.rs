//! `strata gguf info|dequant` and the CLI's error behaviour, run as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strata_gguf::quant::random_blocks;
use strata_gguf::{Array, GgmlType, GgufBuilder, GgufFile, SplitMix64, Value};

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("strata runs")
}

fn tempdir(tag: &str) -> strata_scratch::Scratch {
    strata_scratch::Scratch::new(&format!("cli-{tag}"))
}

fn sample(dir: &Path) -> PathBuf {
    let mut b = GgufBuilder::new();
    b.add("general.architecture", Value::String("qwen4exp".into()));
    b.add("tokenizer.ggml.tokens", Value::Array(Array::String((0..1000).map(|i| format!("tok{i}")).collect())));
    let mut rng = SplitMix64::new(5);
    let tensors: Vec<_> = [GgmlType::Q4_K, GgmlType::Q2_0, GgmlType::BF16]
        .iter()
        .map(|&ty| (format!("{}.weight", ty.name().to_lowercase()), ty, random_blocks(ty, 8, &mut rng)))
        .collect();
    for (name, ty, _) in &tensors {
        b.add_tensor(name, &[4 * ty.block_size() as u64, 2], *ty).unwrap();
    }
    let path = dir.join("sample.gguf");
    let mut w = b.create(&path).unwrap();
    for (name, _, data) in &tensors {
        w.write_tensor(name, data).unwrap();
    }
    w.finish().unwrap();
    path
}

/// A failed command: the exit code, and stderr as exactly one line.
fn failure(out: &Output) -> (i32, String) {
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    (out.status.code().unwrap(), err)
}

#[test]
fn info_prints_metadata_and_tensor_table() {
    let dir = tempdir("info");
    let path = sample(&dir);
    let out = strata(&["gguf", "info", path.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("general.architecture = \"qwen4exp\""), "{text}");
    assert!(text.contains("… (1000 String in all)"), "long arrays are summarised: {text}");
    assert!(!text.contains("tok999"), "{text}");
    let row = text.lines().find(|l| l.trim_start().starts_with("q2_0.weight")).expect("a row per tensor");
    let f = GgufFile::open(&path).unwrap();
    let t = f.require("q2_0.weight").unwrap().info;
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "Q2_0");
    assert_eq!(cols[cols.len() - 2], t.n_bytes.to_string());
    assert_eq!(cols[cols.len() - 1], (f.header().data_offset + t.offset).to_string());
}

#[test]
fn dequant_writes_little_endian_f32() {
    let dir = tempdir("dequant");
    let path = sample(&dir);
    let f = GgufFile::open(&path).unwrap();
    for name in ["q4_k.weight", "q2_0.weight", "bf16.weight"] {
        let out_path = dir.join(format!("{name}.f32"));
        let out = strata(&["gguf", "dequant", path.to_str().unwrap(), name, "-o", out_path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let want: Vec<u8> = f.require(name).unwrap().to_f32().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(std::fs::read(&out_path).unwrap(), want, "{name}");
    }
}

#[test]
fn errors_are_one_line_with_nonzero_exit() {
    let dir = tempdir("errors");
    let path = sample(&dir);
    let p = path.to_str().unwrap();

    let (code, err) = failure(&strata(&["gguf", "info", "/no/such/model.gguf"]));
    assert_eq!(code, 1);
    assert!(err.contains("/no/such/model.gguf"), "{err}");

    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 10);
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, bytes).unwrap();
    let (_, err) = failure(&strata(&["gguf", "info", cut.to_str().unwrap()]));
    assert!(err.contains("cut.gguf") && err.contains("past the end"), "{err}");

    let (_, err) = failure(&strata(&["gguf", "dequant", p, "missing.weight", "-o", "/tmp/x"]));
    assert!(err.contains("missing.weight"), "{err}");

    let (code, err) = failure(&strata(&["gguf", "info", p, "--bogus"]));
    assert_eq!(code, 2);
    assert!(err.contains("--bogus"), "{err}");

    let (_, err) = failure(&strata(&["gguf", "dequant", p, "q4_k.weight", "-o", "/no/such/dir/out.f32"]));
    assert!(err.contains("/no/such/dir/out.f32"), "{err}");
}
