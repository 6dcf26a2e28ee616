//! A file whose routed experts' gate and up projections are fused into `ffn_gate_up_exps` (per expert the
//! gate's rows, then the up's) computes what the same weights computes unfused, bit for bit, and binds the
//! two halves as views of one tensor (the GPU uploads such a tensor once).

use std::path::Path;

use strata_gguf::{GgufBuilder, GgufFile, GgufSet};
use strata_model::{KvMode, Model, RopeScaling};

/// The converter's q8_0 fixture with every layer's `ffn_gate_exps` and `ffn_up_exps` fused.
fn fused(src: &GgufFile) -> GgufSet {
    let mut b = GgufBuilder::new();
    for (k, v) in src.metadata() {
        b.add(k, v.clone());
    }
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
            let name = format!("{block}.ffn_gate_up_exps.weight");
            b.add_tensor(&name, &[n, 2 * f, e], t.ty).unwrap();
            parts.push((name, joined));
        } else if !t.name.ends_with(".ffn_up_exps.weight") {
            b.add_tensor(&t.name, &t.shape, t.ty).unwrap();
            parts.push((t.name.clone(), src.require(&t.name).unwrap().data.to_vec()));
        }
    }
    let mut w = b.begin(Vec::new(), "fused.gguf").unwrap();
    for (name, bytes) in &parts {
        w.write_tensor(name, bytes).unwrap();
    }
    GgufSet::from_files(vec![GgufFile::from_bytes("fused.gguf", w.finish().unwrap()).unwrap()]).unwrap()
}

#[test]
fn fused_gate_up_experts_compute_the_unfused_bits() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf");
    let src = GgufFile::open(&path).unwrap();
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
    let (mut a, mut b) = (plain.new_state(KvMode::F16).unwrap(), fused.new_state(KvMode::F16).unwrap());
    for t in [5u32, 17, 3, 99, 42, 7, 11, 250] {
        let (x, y) = (plain.forward(&mut a, t), fused.forward(&mut b, t));
        assert!(x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()), "token {t}: logits differ");
    }
}
