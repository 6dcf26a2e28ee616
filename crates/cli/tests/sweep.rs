//! The sweep of real geometries (fixtures/sweep/, made by python/sweep_fixture.py): small random
//! `Qwen4ExpForCausalLM`s of transformers 5.23 that together vary every dimension the config allows (rms
//! epsilon 1e-5 and 1e-6, tied and untied heads, head and GDN dims, rotary fraction and M-RoPE sections,
//! rope theta, indexer heads, budget and block size 4 and 8, experts, top-k and shared width, the PLE
//! layer, n-gram order and base, vocabulary, 4 to 12 layers), each converted to f32 by llama.cpp's
//! converter. `strata run` on each, f32 KV on the CPU, greedy: every token transformers' and every logit
//! row within 1e-4 of its float64 logits (relative to the row's largest |logit|). The prompts were chosen
//! so that no decision of the reference sits on a near tie.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sweep() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/sweep");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.gguf").exists())
        .collect();
    dirs.sort();
    dirs
}

struct Expected {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    vocab: usize,
    rows: Vec<Vec<f64>>,
}

fn expected(dir: &Path) -> Expected {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let ids = |k: &str| json[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let vocab = json["vocab"].as_u64().unwrap() as usize;
    let raw = std::fs::read(dir.join("logits.f64")).unwrap();
    let all: Vec<f64> = raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
    Expected {
        prompt: ids("prompt"),
        greedy: ids("greedy"),
        vocab,
        rows: all.chunks(vocab).map(<[f64]>::to_vec).collect(),
    }
}

/// Greedy ids and the dumped logit rows of `strata run` on the CPU with an f32 KV cache.
fn run(model: &Path, prompt: &[u32], n: usize, out: &Path) -> (Vec<u32>, Vec<f32>) {
    let p = prompt.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let n = n.to_string();
    let args = ["run", "-m", model.to_str().unwrap(), "--prompt-tokens", &p, "-n", &n, "--ignore-eos", "--kv", "f32"];
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .args(["--device", "cpu", "--dump-logits", out.to_str().unwrap()])
        .output()
        .expect("strata runs");
    assert!(o.status.success(), "{}: {}", model.display(), String::from_utf8_lossy(&o.stderr));
    let ids = String::from_utf8(o.stdout).unwrap().trim().split(',').map(|s| s.trim().parse().unwrap()).collect();
    let raw = std::fs::read(out).unwrap();
    (ids, raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
}

#[test]
fn every_sweep_model_computes_what_transformers_computes() {
    let dirs = sweep();
    assert!(dirs.len() >= 5, "the sweep has {} models", dirs.len());
    let tmp = strata_scratch::Scratch::new("sweep");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let e = expected(&dir);
        let (ids, logits) = run(&dir.join("model.gguf"), &e.prompt, e.greedy.len(), &tmp.join(format!("{name}.f32")));
        assert_eq!(ids, e.greedy, "{name}: greedy tokens");
        assert_eq!(logits.len(), e.rows.len() * e.vocab, "{name}: one row per greedy token");
        let mut worst = 0f64;
        for (i, (got, want)) in logits.chunks(e.vocab).zip(&e.rows).enumerate() {
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let err = got.iter().zip(want).fold(0f64, |m, (&a, &b)| m.max((a as f64 - b).abs())) / scale;
            assert!(err <= 1e-4, "{name}: row {i}: max|Δ|/max|logit| = {err:.2e}");
            worst = worst.max(err);
        }
        eprintln!(
            "{name}: {} prompt tokens, {} greedy tokens equal, worst max|Δ|/max|logit| {worst:.2e}",
            e.prompt.len(),
            ids.len()
        );
    }
}
