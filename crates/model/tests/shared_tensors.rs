//! Tensors that serve twice are bound as views of one tensor, which is what lets the GPU upload them once:
//! the fused `ffn_gate_up_exps` (per expert the gate's rows, then the up's), which computes what the same
//! weights compute unfused, bit for bit; and a tied head (no `output.weight`), which computes what an
//! `output.weight` holding the embedding's bytes computes.

use std::path::Path;

use strata_gguf::{GgmlType, GgufBuilder, GgufFile, GgufSet};
use strata_model::{KvMode, Model, RopeScaling};

fn fixture() -> GgufFile {
    GgufFile::open(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf")).unwrap()
}

/// A file of `src`'s metadata and the tensors `parts` (name, shape, type, bytes), in that order.
fn rebuilt(src: &GgufFile, parts: &[(String, Vec<u64>, GgmlType, Vec<u8>)]) -> GgufSet {
    let mut b = GgufBuilder::new();
    for (k, v) in src.metadata() {
        b.add(k, v.clone());
    }
    for (name, shape, ty, _) in parts {
        b.add_tensor(name, shape, *ty).unwrap();
    }
    let mut w = b.begin(Vec::new(), "rebuilt.gguf").unwrap();
    for (name, _, _, bytes) in parts {
        w.write_tensor(name, bytes).unwrap();
    }
    GgufSet::from_files(vec![GgufFile::from_bytes("rebuilt.gguf", w.finish().unwrap()).unwrap()]).unwrap()
}

/// The same tokens through both models: every logit the same bits.
fn same_logits(a: &Model, b: &Model) {
    let (mut x, mut y) = (a.new_state(KvMode::F16).unwrap(), b.new_state(KvMode::F16).unwrap());
    for t in [5u32, 17, 3, 99, 42, 7, 11, 250] {
        let (p, q) = (a.forward(&mut x, t), b.forward(&mut y, t));
        assert!(p.iter().zip(&q).all(|(u, v)| u.to_bits() == v.to_bits()), "token {t}: logits differ");
    }
}

/// The converter's q8_0 fixture with every layer's `ffn_gate_exps` and `ffn_up_exps` fused.
fn fused(src: &GgufFile) -> GgufSet {
    let mut parts = Vec::new();
    for t in src.tensors() {
        if let Some(block) = t.name.strip_suffix(".ffn_gate_exps.weight") {
            let (n, f, e) = (t.shape[0], t.shape[1], t.shape[2]);
            let gate = src.require(&t.name).unwrap().data;
            let up = src.require(&format!("{block}.ffn_up_exps.weight")).unwrap().data;
            let per = gate.len() / e as usize;
            let joined: Vec<u8> = (0..e as usize)
                .flat_map(|x| [&gate[x * per..(x + 1) * per], &up[x * per..(x + 1) * per]].concat())
                .collect();
            parts.push((format!("{block}.ffn_gate_up_exps.weight"), vec![n, 2 * f, e], t.ty, joined));
        } else if !t.name.ends_with(".ffn_up_exps.weight") {
            parts.push((t.name.clone(), t.shape.clone(), t.ty, src.require(&t.name).unwrap().data.to_vec()));
        }
    }
    rebuilt(src, &parts)
}

#[test]
fn fused_gate_up_experts_compute_the_unfused_bits() {
    let src = fixture();
    let set = fused(&src);
    assert!(set.tensors().any(|(_, t)| t.name.ends_with("ffn_gate_up_exps.weight")), "the rewrite fused nothing");
    assert!(!set.tensors().any(|(_, t)| t.name.ends_with("ffn_gate_exps.weight")));
    let plain = Model::from_set(GgufSet::from_files(vec![src]).unwrap(), RopeScaling::None).unwrap();
    let fused = Model::from_set(set, RopeScaling::None).unwrap();
    for layer in &fused.weights.layers {
        let (g, u) = (&layer.moe.gate_exps, &layer.moe.up_exps);
        assert!(std::ptr::eq(&g.m.bytes[..], &u.m.bytes[..]), "gate and up must view one tensor");
        assert_eq!((g.offset, u.offset, g.stride, u.stride), (0, u.stride / 2, u.stride, u.stride));
    }
    same_logits(&plain, &fused);
}

#[test]
fn a_tied_head_is_the_embedding_bound_once() {
    let src = fixture();
    let keep = |t: &strata_gguf::TensorInfo| {
        (t.name.clone(), t.shape.clone(), t.ty, src.require(&t.name).unwrap().data.to_vec())
    };
    let embd = src.tensors().iter().find(|t| t.name == "token_embd.weight").unwrap().clone();
    let others: Vec<_> = src.tensors().iter().filter(|t| t.name != "output.weight").map(keep).collect();
    let mut copied = others.clone();
    copied.push(("output.weight".into(), embd.shape.clone(), embd.ty, src.require(&embd.name).unwrap().data.to_vec()));
    let tied = Model::from_set(rebuilt(&src, &others), RopeScaling::None).unwrap();
    let untied = Model::from_set(rebuilt(&src, &copied), RopeScaling::None).unwrap();
    assert!(
        std::ptr::eq(&tied.weights.output.bytes[..], &tied.weights.token_embd.bytes[..]),
        "one tensor, bound twice"
    );
    assert!(!std::ptr::eq(&untied.weights.output.bytes[..], &untied.weights.token_embd.bytes[..]));
    same_logits(&tied, &untied);
}
