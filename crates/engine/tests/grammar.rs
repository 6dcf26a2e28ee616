//! Constrained decoding on the built-in model: what a grammar allows is all that comes out, the same
//! seed gives the same tokens, and a grammar taken back gives the masks it gave before.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use strata_engine::generate::{generate_guided, Drafts, Event, GenerateConfig, Stop};
use strata_engine::grammar::{Grammars, Guide};
use strata_engine::sampler::SamplerConfig;
use strata_engine::tokenizer::Tokenizer;
use strata_gguf::GgufSet;
use strata_model::decoder::CpuDecoder;
use strata_model::{KvMode, Model, RopeScaling};

fn path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf")
}

fn setup() -> (Model, Arc<Tokenizer>, Vec<u32>) {
    let tok = Arc::new(Tokenizer::from_gguf(&GgufSet::open(path()).unwrap()).unwrap());
    let stops: Vec<u32> = [tok.eos, tok.im_end].into_iter().flatten().collect();
    (Model::open(path(), RopeScaling::None).unwrap(), tok, stops)
}

/// The text and how it ended, for a prompt and a grammar, sampled with `seed` (temperature 1).
fn run(m: &Model, tok: &Tokenizer, stops: &[u32], guide: &mut Guide, seed: u64) -> (String, Stop, Vec<u32>) {
    let prompt = tok.encode("<|im_start|>user\nGive me a record.<|im_end|>\n<|im_start|>assistant\n").unwrap();
    let cfg = GenerateConfig {
        n_predict: 120,
        stops: stops.to_vec(),
        ignore_eos: false,
        max_context: 1024,
        sampler: SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, seed, ..Default::default() },
        logits: false,
        mark: None,
        spec: Drafts::Fixed(0),
        draft_vocab: None,
    };
    let mut dec = CpuDecoder::new(m, m.new_state(KvMode::F16).unwrap());
    let mut raw_seen = 0;
    let g = generate_guided(&mut dec, &prompt, &cfg, Some(guide), |e| {
        if let Event::Logits(l) = e {
            // The caller sees the model's own logits, before the grammar's mask.
            assert!(l.iter().all(|x| x.is_finite()));
            raw_seen += 1;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(raw_seen, g.tokens.len());
    let text: Vec<u32> = g.tokens.iter().copied().filter(|t| !stops.contains(t)).collect();
    (tok.decode(&text).unwrap(), g.stop, g.tokens)
}

#[test]
fn token_bytes_spell_the_text() {
    let (_, tok, _) = setup();
    let text = "Fortune — «favours» the bold: 42 ünïcode\n\ttabs 🎲";
    let ids = tok.encode(text).unwrap();
    let bytes: Vec<u8> = ids.iter().flat_map(|&id| tok.token_bytes(id).unwrap()).collect();
    assert_eq!(bytes, text.as_bytes());
    let im_end = tok.im_end.unwrap();
    assert!(tok.is_control(im_end) && tok.token_bytes(im_end).is_none());
}

#[test]
fn a_json_schema_is_always_met() {
    let (m, tok, stops) = setup();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 999},
            "ok": {"type": "boolean"},
            "word": {"type": "string", "maxLength": 10},
            "mood": {"enum": ["calm", "bold"]}
        },
        "required": ["n", "ok", "word", "mood"],
        "additionalProperties": false
    });
    for seed in 0..4 {
        let (text, stop, tokens) = run(&m, &tok, &stops, &mut grammars.json_schema(&schema).unwrap(), seed);
        assert!(matches!(stop, Stop::StopToken(_)), "seed {seed}: {stop:?} after {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(v["n"].as_u64().is_some_and(|n| n <= 999), "{v}");
        assert!(v["ok"].is_boolean() && v["word"].as_str().is_some_and(|w| w.chars().count() <= 10), "{v}");
        assert!(v["mood"] == "calm" || v["mood"] == "bold", "{v}");
        assert_eq!(v.as_object().unwrap().len(), 4, "{v}");
        // The same seed, the same tokens.
        let (_, _, again) = run(&m, &tok, &stops, &mut grammars.json_schema(&schema).unwrap(), seed);
        assert_eq!(tokens, again, "seed {seed}");
    }
}

#[test]
fn a_lark_grammar_picks_among_its_words() {
    let (m, tok, stops) = setup();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..6 {
        let mut g = grammars.lark(r#"start: "heads" | "tails" | "edge""#).unwrap();
        let (text, stop, _) = run(&m, &tok, &stops, &mut g, seed);
        assert!(matches!(stop, Stop::StopToken(_)) && g.ended(), "{stop:?}");
        assert!(["heads", "tails", "edge"].contains(&text.as_str()), "{text:?}");
        seen.insert(text);
    }
    assert!(!seen.is_empty());
    assert!(grammars.lark("start: ").is_err() || grammars.lark("start: (").is_err(), "a broken grammar is refused");
}

#[test]
fn a_grammar_taken_back_masks_as_before() {
    let (_, tok, stops) = setup();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let mut g = grammars.json_schema(&json!({"type": "array", "items": {"type": "integer"}})).unwrap();
    let vocab = tok.vocab_size();
    let mask = |g: &mut Guide| {
        let mut l = vec![0.0f32; vocab];
        g.mask(&mut l).unwrap();
        l.iter().map(|x| x.is_finite()).collect::<Vec<bool>>()
    };
    let first = mask(&mut g);
    assert!(first.iter().any(|&a| a) && first.iter().any(|&a| !a));
    for t in tok.encode("[1, 2").unwrap() {
        assert!(mask(&mut g)[t as usize], "token {t} of \"[1, 2\" is allowed");
        g.commit(t).unwrap();
    }
    let after = mask(&mut g);
    assert_ne!(first, after);
    let n = tok.encode("[1, 2").unwrap().len();
    g.rollback(n).unwrap();
    assert_eq!(mask(&mut g), first);
    // A stop token is allowed only where the value could end.
    for t in tok.encode("[3]").unwrap() {
        assert!(!mask(&mut g)[stops[0] as usize]);
        g.commit(t).unwrap();
    }
    assert!(mask(&mut g)[stops[0] as usize]);
}

#[test]
fn objects_are_closed_unless_the_schema_opens_them() {
    use strata_engine::grammar::compact;
    let s = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}},
        "c": {"const": {"properties": {}}}, "d": {"type": "object", "properties": {}, "additionalProperties": true}}});
    let c = compact(&s);
    assert_eq!(c["additionalProperties"], false);
    assert_eq!(c["properties"]["a"]["additionalProperties"], false);
    assert_eq!(c["properties"]["c"]["const"], json!({"properties": {}}), "a value is left as it is");
    assert_eq!(c["properties"]["d"]["additionalProperties"], true, "an open object stays open");
    assert_eq!(c["x-guidance"]["whitespace_flexible"], false);
    // Decoded: an object with only its listed key (a model left open may add keys without end).
    let (m, tok, stops) = setup();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let schema = json!({"type": "object", "properties": {"w": {"type": "string", "maxLength": 8}}, "required": ["w"]});
    for seed in 0..3 {
        let (text, stop, _) = run(&m, &tok, &stops, &mut grammars.json_schema(&schema).unwrap(), seed);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?} ({stop:?})"));
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    }
}

/// A guide that waits for a trigger: no mask on the free text, the grammar's mask from the trigger on
/// (a token that carries the line break after it too), free again once the held part ends.
#[test]
fn a_guide_holds_only_what_follows_its_trigger() {
    let (_, tok, stops) = setup();
    let grammars = Grammars::new(tok.clone(), &stops).unwrap();
    let call = r#"start: WS? %json {"type": "object", "properties": {"name": {"const": "f"}}, "required": ["name"]} "\n</tool_call>"
WS: /[ \t\r\n]+/"#;
    let mut g = grammars.lark_after("<tool_call>", call).unwrap();
    let vocab = tok.vocab_size();
    let free = |g: &mut Guide| {
        let mut l = vec![0.0f32; vocab];
        g.mask(&mut l).unwrap();
        l.iter().all(|x| x.is_finite())
    };
    for t in tok.encode("Let me look. <tool_call>").unwrap() {
        assert!(free(&mut g), "the text before the trigger is free");
        g.commit(t).unwrap();
    }
    assert!(!free(&mut g), "after the trigger the grammar holds the text");
    for t in tok.encode("\n{\"name\": \"f\"}\n</tool_call>").unwrap() {
        let mut l = vec![0.0f32; vocab];
        g.mask(&mut l).unwrap();
        assert!(l[t as usize].is_finite(), "token {t} of the call is allowed");
        g.commit(t).unwrap();
    }
    assert!(free(&mut g), "the call done, the text is free again");
    assert!(!g.ended());
    // A second call is held again, and a wrong name is not allowed.
    for t in tok.encode(" <tool_call>\n{\"name\": \"").unwrap() {
        g.commit(t).unwrap();
    }
    let mut l = vec![0.0f32; vocab];
    g.mask(&mut l).unwrap();
    let g_id = tok.encode("g").unwrap()[0];
    assert!(!l[g_id as usize].is_finite(), "only the schema's name may follow");
    assert!(g.rollback(1).is_err());
}
