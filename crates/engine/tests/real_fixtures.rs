//! The tokenizer and chat template against transformers (python/real_fixture.py): the converter-written
//! file's `tokenizer.ggml.*` (a truncated Qwen2 vocabulary with its specials) must give transformers'
//! ids, and the real Qwen templates the same text as `apply_chat_template`.

use std::path::{Path, PathBuf};

use strata_engine::tokenizer::Tokenizer;
use strata_gguf::GgufSet;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real")
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join("expected.json")).unwrap()).unwrap()
}

#[test]
fn token_ids_equal_transformers() {
    let set = GgufSet::open(dir().join("qwen4exp-real-f32.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&set).unwrap();
    let cases = expected()["tokenizer"].as_array().unwrap().clone();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    for c in &cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(text).unwrap(), want, "{text:?}");
        assert_eq!(tok.decode(&want).unwrap(), text, "{text:?} round trip");
    }
}

/// The real Qwen templates the converter's source ships (Qwen3.5-4B, Qwen3-Coder, Qwen3-0.6B), on
/// conversations with a system prompt, several turns, tools, a tool call and a tool result.
#[test]
fn chat_templates_render_what_transformers_renders() {
    let cases = expected()["templates"].as_array().unwrap().clone();
    assert!(cases.len() >= 18, "{} cases", cases.len());
    let templates = dir().join("templates");
    for c in &cases {
        let name = c["template"].as_str().unwrap();
        let source = std::fs::read_to_string(templates.join(name)).unwrap();
        let t = strata_engine::chat::ChatTemplate::new(&source);
        let tools = (!c["tools"].is_null()).then_some(&c["tools"]);
        let got = t.render_json(&c["messages"], tools, c["add_generation_prompt"].as_bool().unwrap());
        match c["text"].as_str() {
            Some(want) => assert_eq!(got.as_deref().map_err(|e| e.to_string()), Ok(want), "{name}: {}", c["messages"]),
            None => assert!(got.is_err(), "{name}: transformers refused this conversation, strata rendered it"),
        }
    }
}

/// The end-of-text id must name a token: one past the vocabulary, or not an integer, is refused in one
/// line naming the key; one inside it is the id the tokenizer stops on.
#[test]
fn the_eos_id_is_checked_against_the_vocabulary() {
    use strata_gguf::{with_metadata, GgufFile, Value};
    let src = GgufFile::open(dir().join("qwen4exp-real-q8_0.gguf")).unwrap();
    let key = "tokenizer.ggml.eos_token_id";
    let tok_with = |v: Value| {
        let file = GgufFile::from_bytes("eos.gguf", with_metadata(&src, key, Some(&v)).unwrap()).unwrap();
        Tokenizer::from_gguf(&GgufSet::from_files(vec![file]).unwrap())
    };
    let vocab =
        Tokenizer::from_gguf(&GgufSet::open(dir().join("qwen4exp-real-q8_0.gguf")).unwrap()).unwrap().vocab_size();
    for bad in [Value::U32(vocab as u32), Value::U64(u64::MAX), Value::I32(-1), Value::String("x".into())] {
        let e = tok_with(bad.clone()).err().unwrap_or_else(|| panic!("eos {bad:?} was accepted")).to_string();
        assert!(e.contains(key) && !e.contains('\n'), "{e}");
    }
    assert_eq!(tok_with(Value::U32(vocab as u32 - 1)).unwrap().eos, Some(vocab as u32 - 1));
}

/// Token by token, the detokenizer releases each character whole: the pieces join to the text, and none
/// holds half a character (U+FFFD).
#[test]
fn the_detokenizer_releases_whole_characters() {
    use strata_engine::detok::Detokenizer;
    let tok = Tokenizer::from_gguf(&GgufSet::open(dir().join("qwen4exp-real-q8_0.gguf")).unwrap()).unwrap();
    for text in ["naïve café — 日本語 🙂", "emoji 🦙🦙 and ✅", "plain words"] {
        let ids = tok.encode(text).unwrap();
        let mut d = Detokenizer::new(&tok);
        let pieces: Vec<String> = ids.iter().map(|&id| d.push(id).unwrap()).collect();
        // The fixture's vocabulary spells these characters in byte tokens: some pushes hold back.
        let held = pieces.iter().filter(|p| p.is_empty()).count();
        assert!(text.is_ascii() || held > 0, "{text}: {pieces:?}");
        assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{text}: {pieces:?}");
        assert_eq!(pieces.concat() + &d.finish().unwrap(), text);
    }
}
