//! The CPU engine on the synthetic tiny model: determinism (runs, threads, checkpoints), the tokenizer
//! and chat template from metadata, and clear errors for broken models.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use strata_engine::chat::{ChatTemplate, Message};
use strata_engine::tokenizer::Tokenizer;
use strata_gguf::{Array, GgufBuilder, GgufFile, GgufSet, Value};
use strata_model::{Config, KvMode, Model, ModelError, RopeScaling};
use strata_synth::{Options, Preset};

fn tiny() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = strata_scratch::for_process("synth-test");
        let path = dir.join("tiny.gguf");
        let o = Options {
            preset: Preset::tiny(),
            experts: strata_gguf::GgmlType::Q2_0,
            seed: 0,
            router: strata_synth::Router::Uniform,
        };
        strata_synth::write(&path, &o, &|_, _| {}).unwrap();
        path
    })
}

fn prompt() -> Vec<u32> {
    (0..80).map(|i| (i * 7919 + 13) % 4000 + 3).collect()
}

/// Logits of every position of `tokens`, as bytes.
fn run(model: &Model, tokens: &[u32], kv: KvMode) -> Vec<u8> {
    let mut st = model.new_state(kv).unwrap();
    tokens.iter().flat_map(|&t| model.forward(&mut st, t)).flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn same_bits_on_1_and_2_threads_and_on_reruns() {
    let model = Model::open(tiny(), RopeScaling::None).unwrap();
    let p = prompt();
    let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let one = pool(1).install(|| run(&model, &p, KvMode::F16));
    let two = pool(2).install(|| run(&model, &p, KvMode::F16));
    assert!(one == two, "1 and 2 threads differ");
    assert!(one == run(&model, &p, KvMode::F16), "a rerun differs");
    let int8 = run(&model, &p, KvMode::Int8);
    assert!(one != int8, "the KV mode should change the bits");
    let logits: Vec<f32> = one.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(logits.iter().all(|v| v.is_finite()));
}

#[test]
fn checkpoint_restores_exactly() {
    let model = Model::open(tiny(), RopeScaling::None).unwrap();
    let p = prompt();
    let mut st = model.new_state(KvMode::F16).unwrap();
    for &t in &p[..70] {
        model.forward(&mut st, t);
    }
    let saved = st.clone();
    let a: Vec<Vec<f32>> = p[70..].iter().map(|&t| model.forward(&mut st, t)).collect();
    let mut st = saved;
    let b: Vec<Vec<f32>> = p[70..].iter().map(|&t| model.forward(&mut st, t)).collect();
    assert_eq!(a, b);
}

#[test]
fn tokenizer_round_trips_unicode_and_specials() {
    let set = GgufSet::open(tiny()).unwrap();
    let tok = Tokenizer::from_gguf(&set).unwrap();
    assert_eq!(tok.vocab_size(), 4096);
    for text in ["Hello, world!", "naïve café — 日本語 🙂 \t\n  spaces", "fn main() { let x = 1; }", ""] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>").unwrap();
    let start = tok.encode("<|im_start|>").unwrap();
    assert_eq!(start.len(), 1, "a special token is one id");
    assert_eq!(ids[0], start[0]);
    assert_eq!(Some(*ids.last().unwrap()), tok.im_end);
    assert_eq!(tok.decode(&ids).unwrap(), "<|im_start|>user\nhi<|im_end|>");
    let chat = ChatTemplate::from_gguf(&set).unwrap();
    let text = chat.render(&[Message { role: "user", content: "Hello" }], true).unwrap();
    assert_eq!(text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn the_chat_template_writes_tools_tool_calls_and_results() {
    let chat = ChatTemplate::new(strata_synth::CHAT_TEMPLATE);
    let messages = serde_json::json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "time", "arguments": {"zone": "CET"}}}
        ]},
        {"role": "tool", "content": "18 C"},
        {"role": "tool", "content": "14:00"},
        {"role": "assistant", "content": "18 C at 14:00."}
    ]);
    let tools = serde_json::json!([{"type": "function", "function": {"name": "weather", "parameters": {}}}]);
    let text = chat.render_json(&messages, Some(&tools), true).unwrap();
    let want = concat!(
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user ",
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        "{\"type\": \"function\", \"function\": {\"name\": \"weather\", \"parameters\": {}}}\n</tools>\n\n",
        "For each function call, return a json object with function name and arguments within ",
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": ",
        "<args-json-object>}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n",
        "<tool_call>\n{\"name\": \"time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\n14:00\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n18 C at 14:00.<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(text, want);
    let plain = chat.render_json(
        &serde_json::json!([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]),
        None,
        false,
    );
    assert_eq!(plain.unwrap(), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
}

#[test]
fn synth_is_deterministic() {
    let dir = tiny().parent().unwrap();
    let other = dir.join("tiny-again.gguf");
    let o = Options {
        preset: Preset::tiny(),
        experts: strata_gguf::GgmlType::Q2_0,
        seed: 0,
        router: strata_synth::Router::Uniform,
    };
    strata_synth::write(&other, &o, &|_, _| {}).unwrap();
    assert!(std::fs::read(&other).unwrap() == std::fs::read(tiny()).unwrap(), "same seed, other bytes");
    let o = Options { seed: 1, ..o };
    strata_synth::write(&other, &o, &|_, _| {}).unwrap();
    assert!(std::fs::read(&other).unwrap() != std::fs::read(tiny()).unwrap(), "another seed, same bytes");
}

/// A copy of the tiny model with its metadata and tensors passed through `edit`.
fn edited(name: &str, edit: impl Fn(&str, &[u64]) -> Option<Vec<u64>>, drop_key: Option<&str>) -> PathBuf {
    let src = GgufFile::open(tiny()).unwrap();
    let mut b = GgufBuilder::new();
    for (k, v) in src.metadata() {
        if Some(k.as_str()) != drop_key {
            b.add(k, v.clone());
        }
    }
    let mut kept = Vec::new();
    for t in src.tensors() {
        if let Some(shape) = edit(&t.name, &t.shape) {
            b.add_tensor(&t.name, &shape, t.ty).unwrap();
            kept.push((t.name.clone(), shape));
        }
    }
    let path = tiny().parent().unwrap().join(name);
    let mut w = b.create(&path).unwrap();
    for (n, shape) in kept {
        let t = src.require(&n).unwrap();
        let want = t.info.ty.bytes_for(shape.iter().product()).unwrap() as usize;
        let mut data = t.data.to_vec();
        data.resize(want, 0);
        w.write_tensor(&n, &data).unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn broken_models_are_clear_errors() {
    let missing_key = edited("no-key.gguf", |_, s| Some(s.to_vec()), Some("qwen4exp.ssm.state_size"));
    let e = Model::open(&missing_key, RopeScaling::None).err().unwrap();
    assert!(matches!(&e, ModelError::Metadata { key, .. } if key == "qwen4exp.ssm.state_size"), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");

    let no_tensor = edited("no-tensor.gguf", |n, s| (n != "blk.2.ssm_out.weight").then(|| s.to_vec()), None);
    let e = Model::open(&no_tensor, RopeScaling::None).err().unwrap();
    assert!(e.to_string().contains("blk.2.ssm_out.weight"), "{e}");

    let wrong = edited(
        "wrong-shape.gguf",
        |n, s| Some(if n == "blk.3.attn_k.weight" { vec![256, 64] } else { s.to_vec() }),
        None,
    );
    let e = Model::open(&wrong, RopeScaling::None).err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains("blk.3.attn_k.weight") && msg.contains("[256, 128]") && msg.contains("[256, 64]"), "{msg}");

    let set = GgufSet::open(tiny()).unwrap();
    assert_eq!(Config::from_gguf(&set).unwrap().vocab, 4096);

    // The retired layout of older `strata synth` files (an indexer kpool key) is refused, not misread.
    let old = edited_with_key("old-layout.gguf", "qwen4exp.attention.indexer.kpool", Value::U32(4));
    let e = Model::open(&old, RopeScaling::None).err().unwrap().to_string();
    assert!(e.contains("kpool") && e.contains("retired layout"), "{e}");

    // A PLE layer that is not a GDN layer of the trunk names the key.
    let bad_ple = edited_with_key("bad-ple.gguf", "qwen4exp.ple.layers", Value::Array(Array::I32(vec![3])));
    let e = Model::open(&bad_ple, RopeScaling::None).err().unwrap().to_string();
    assert!(e.contains("qwen4exp.ple.layers"), "{e}");

    // A QSA block size that does not divide top_k names the key.
    let ratios = Value::Array(Array::I32(vec![0, 0, 0, 3, 0, 0, 0, 4]));
    let bad_ratio = edited_with_key("bad-ratio.gguf", "qwen4exp.attention.compress_ratios", ratios);
    let e = Model::open(&bad_ratio, RopeScaling::None).err().unwrap().to_string();
    assert!(e.contains("qwen4exp.attention.indexer.top_k"), "{e}");
}

/// A copy of the tiny model with one metadata key set (added or replaced).
fn edited_with_key(name: &str, key: &str, value: Value) -> PathBuf {
    let path = edited(name, |_, s| Some(s.to_vec()), Some(key));
    let src = GgufFile::open(&path).unwrap();
    let mut b = GgufBuilder::new();
    for (k, v) in src.metadata() {
        b.add(k, v.clone());
    }
    b.add(key, value);
    for t in src.tensors() {
        b.add_tensor(&t.name, &t.shape, t.ty).unwrap();
    }
    let out = tiny().parent().unwrap().join(format!("k-{name}"));
    let mut w = b.create(&out).unwrap();
    for t in src.tensors() {
        w.write_tensor(&t.name, src.require(&t.name).unwrap().data).unwrap();
    }
    w.finish().unwrap();
    out
}

#[test]
fn checkpoint_bytes_restore_exactly_and_refuse_bad_input() {
    let model = Model::open(tiny(), RopeScaling::None).unwrap();
    let p = prompt();
    for kv in [KvMode::F16, KvMode::Int8, KvMode::F32] {
        let mut st = model.new_state(kv).unwrap();
        for &t in &p[..70] {
            model.forward(&mut st, t);
        }
        let mut bytes = Vec::new();
        st.save(&model.config, &mut bytes).unwrap();
        let a: Vec<Vec<f32>> = p[70..].iter().map(|&t| model.forward(&mut st, t)).collect();
        let mut restored = strata_model::State::load(&model.config, &bytes[..]).unwrap();
        let b: Vec<Vec<f32>> = p[70..].iter().map(|&t| model.forward(&mut restored, t)).collect();
        assert_eq!(a, b, "{kv:?}: the restored state continues with the same bits");
        // Every truncation is an error; so is a flipped magic, and trailing bytes.
        for cut in (0..bytes.len()).step_by(997) {
            assert!(strata_model::State::load(&model.config, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong = bytes.clone();
        wrong[0] ^= 1;
        assert!(strata_model::State::load(&model.config, &wrong[..]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(strata_model::State::load(&model.config, &longer[..]).is_err());
        // A huge count where a vector's length stands: an error, not an allocation.
        let mut huge = bytes.clone();
        huge[29..37].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(strata_model::State::load(&model.config, &huge[..]).is_err());
    }
    // Another geometry refuses it.
    let mut other = model.config.clone();
    other.idx_top_k += 1;
    let mut bytes = Vec::new();
    model.new_state(KvMode::F16).unwrap().save(&model.config, &mut bytes).unwrap();
    let e = strata_model::State::load(&other, &bytes[..]).unwrap_err();
    assert!(e.to_string().contains("geometry"), "{e}");
}

/// The tiny model with its § qdot types' tensors dequantized to F32 (products in f32: no input code can
/// fall on the other side of a rounding boundary from the float oracle's).
fn tiny_float() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = tiny().with_file_name("tiny-float.gguf");
        strata_gguf::dequantized_copy(tiny(), &path, strata_model::ops::qdot::uses_qdot).unwrap();
        path
    })
}

/// The MTP draft layer (spec §9) against the numpy oracle: after an 80-token prompt, three chained draft
/// steps from the trunk's last residual streams; the same argmax and max|Δ| / max|logit| ≤ 2e-3 per step,
/// on the tiny model's weights in F32 (with int8 inputs one code on the other side of a rounding boundary
/// moves the logits by up to ~1e-2; engine_agrees_with_the_numpy_oracle covers them).
#[test]
fn mtp_drafts_agree_with_the_numpy_oracle() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3 with gguf and numpy (.ci/run installs them)");
        eprintln!("SKIPPED: python3 with the gguf and numpy packages is not installed");
        return;
    }
    let model = Model::open(tiny_float(), RopeScaling::None).unwrap();
    let p = prompt();
    let mut st = model.new_state(KvMode::F16).unwrap();
    let mut r = Vec::new();
    for &t in &p {
        r = model.forward_hidden(&mut st, t).1;
    }
    let nexts = [17u32, 2024, 999];
    let mut cache = model.mtp_cache(KvMode::F16);
    let mut ours = Vec::new();
    for (j, &nx) in nexts.iter().enumerate() {
        let (logits, rp) =
            model.mtp_draft(&mut cache, &r, nx, p.len() - 1 + j).expect("the tiny model has an MTP layer");
        ours.push(logits);
        r = rp;
    }
    let dir = tiny_float().parent().unwrap();
    let (out, mtp_out) = (dir.join("oracle-main.f32"), dir.join("oracle-mtp.f32"));
    let ids: Vec<String> = p.iter().map(|t| t.to_string()).collect();
    let nx: Vec<String> = nexts.iter().map(|t| t.to_string()).collect();
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/oracle.py");
    let status = std::process::Command::new("python3")
        .arg(&oracle)
        .args([
            tiny_float().to_str().unwrap(),
            "--prompt-tokens",
            &ids.join(","),
            "-n",
            "1",
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--mtp-tokens", &nx.join(","), "--mtp-out", mtp_out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let theirs: Vec<f32> =
        std::fs::read(&mtp_out).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let vocab = model.config.vocab;
    assert_eq!(theirs.len(), nexts.len() * vocab);
    for (j, (a, b)) in ours.iter().zip(theirs.chunks(vocab)).enumerate() {
        let argmax = |r: &[f32]| r.iter().enumerate().fold(0, |m, (i, v)| if *v > r[m] { i } else { m });
        assert_eq!(argmax(a), argmax(b), "draft step {j}: argmax differs");
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        println!("MTP draft step {j}: max|Δ|/max|logit| = {:.3e}", diff / scale);
        assert!(diff / scale <= 2e-3, "draft step {j}: {}", diff / scale);
    }
}

/// An MTP-only file of the tiny model's MTP block (the converter's `--mtp` layout: the metadata and
/// `blk.8.*` only), with its final mixer under `renamed(name)`.
fn mtp_sidecar(file: &str, renamed: impl Fn(&str) -> String, edit_key: Option<(&str, Value)>) -> PathBuf {
    let src = GgufFile::open(tiny()).unwrap();
    let mut b = GgufBuilder::new();
    for (k, v) in src.metadata() {
        let value = match &edit_key {
            Some((key, value)) if k == key => value.clone(),
            _ => v.clone(),
        };
        b.add(k, value);
    }
    let kept: Vec<_> = src.tensors().iter().filter(|t| t.name.starts_with("blk.8.")).collect();
    for t in &kept {
        b.add_tensor(&renamed(&t.name), &t.shape, t.ty).unwrap();
    }
    let path = tiny().parent().unwrap().join(file);
    let mut w = b.create(&path).unwrap();
    for t in &kept {
        w.write_tensor(&renamed(&t.name), src.require(&t.name).unwrap().data).unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn mtp_from_a_separate_file_drafts_the_same_bits() {
    let own = Model::open(tiny(), RopeScaling::None).unwrap();
    let p = prompt();
    let drafts = |model: &Model| {
        let mut st = model.new_state(KvMode::F16).unwrap();
        let mut r = Vec::new();
        for &t in &p[..40] {
            r = model.forward_hidden(&mut st, t).1;
        }
        let mut cache = model.mtp_cache(KvMode::F16);
        let (mut out, mut pos) = (Vec::new(), 39);
        for &next in &p[40..43] {
            let (logits, rp) = model.mtp_draft(&mut cache, &r, next, pos).unwrap();
            out.push(logits);
            r = rp;
            pos += 1;
        }
        out
    };
    let want = drafts(&own);
    // The newer layout (nextn.hc_head_*) and the older one (the mixer under output_hc_*).
    let older = |n: &str| n.replace("blk.8.nextn.hc_head_", "output_hc_");
    for (file, rename) in
        [("mtp-new.gguf", &(|n: &str| n.to_string()) as &dyn Fn(&str) -> String), ("mtp-old.gguf", &older)]
    {
        let mut m = Model::open(tiny(), RopeScaling::None).unwrap();
        m.weights.mtp = None;
        m.attach_mtp(mtp_sidecar(file, rename, None)).unwrap();
        assert_eq!(drafts(&m), want, "{file}");
    }
    // A sidecar of another geometry names the key.
    let bad = mtp_sidecar("mtp-bad.gguf", |n| n.to_string(), Some(("qwen4exp.expert_used_count", Value::U32(3))));
    let mut m = Model::open(tiny(), RopeScaling::None).unwrap();
    let e = m.attach_mtp(bad).unwrap_err().to_string();
    assert!(e.contains("qwen4exp.expert_used_count"), "{e}");
}

/// Without `output.weight` the head is the embedding (a tied head): the logits equal those of a file whose
/// `output.weight` is a copy of `token_embd.weight`.
#[test]
fn a_file_without_a_head_uses_the_embedding() {
    let src = GgufFile::open(tiny()).unwrap();
    let write = |name: &str, with_copy: bool| {
        let mut b = GgufBuilder::new();
        for (k, v) in src.metadata() {
            b.add(k, v.clone());
        }
        let embd = src.require("token_embd.weight").unwrap();
        let kept: Vec<_> = src.tensors().iter().filter(|t| t.name != "output.weight").collect();
        for t in &kept {
            b.add_tensor(&t.name, &t.shape, t.ty).unwrap();
        }
        if with_copy {
            b.add_tensor("output.weight", &embd.info.shape, embd.info.ty).unwrap();
        }
        let path = tiny().parent().unwrap().join(name);
        let mut w = b.create(&path).unwrap();
        for t in &kept {
            w.write_tensor(&t.name, src.require(&t.name).unwrap().data).unwrap();
        }
        if with_copy {
            w.write_tensor("output.weight", embd.data).unwrap();
        }
        w.finish().unwrap();
        path
    };
    let tied = Model::open(write("tied.gguf", false), RopeScaling::None).unwrap();
    let copied = Model::open(write("copied-head.gguf", true), RopeScaling::None).unwrap();
    let p = prompt();
    assert_eq!(run(&tied, &p[..20], KvMode::F16), run(&copied, &p[..20], KvMode::F16));
    assert_ne!(
        run(&tied, &p[..20], KvMode::F16),
        run(&Model::open(tiny(), RopeScaling::None).unwrap(), &p[..20], KvMode::F16)
    );
}

/// The forward pass over a window of T tokens (the layer loop written once for every back-end) gives each
/// token the bits it gets alone, for T = 1..8 and the CPU's longer prompt windows (16, 32, 33), with fp16
/// and int8 KV, past the point where selection turns sparse (68 cells: 16 blocks of 4 kept).
#[test]
fn a_window_of_tokens_equals_single_steps() {
    let model = Model::open(tiny(), RopeScaling::None).unwrap();
    let p = prompt();
    for kv in [KvMode::F16, KvMode::Int8] {
        let single = run(&model, &p, kv);
        for t in (1..=8).chain([16, 32, 33]) {
            let mut st = model.new_state(kv).unwrap();
            let mut bytes = Vec::new();
            for window in p.chunks(t) {
                let (logits, streams) = model.forward_window(&mut st, window);
                assert_eq!((logits.len(), streams.len()), (window.len(), window.len()));
                bytes.extend(logits.iter().flatten().flat_map(|v| v.to_le_bytes()));
            }
            assert_eq!(st.pos, p.len());
            assert!(bytes == single, "{kv:?}: windows of {t} tokens give other bits than single steps");
        }
    }
}
