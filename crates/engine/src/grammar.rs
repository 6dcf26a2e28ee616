//! Constrained decoding: a grammar (a JSON schema, or a Lark grammar that may embed schemas) decides
//! which tokens may come next, and the loop sets every other token's logit to −∞ before the draw
//! (generate.rs). The grammar engine is llguidance; this file gives it the tokenizer's vocabulary as
//! bytes and keeps the mask's rule in one place: text tokens as the grammar says, and the stop tokens
//! wherever the grammar could end. Masking happens on the host, on the exact logits, so a seed draws
//! the same tokens on every device.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::tokenizer::Tokenizer;

/// The vocabulary as the grammar engine reads it: each token's bytes (control tokens marked as
/// special, so no grammar's text can spell them) and the tokenizer for the text a grammar forces.
struct Vocabulary {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tok.encode(&String::from_utf8_lossy(s)).unwrap_or_default()
    }
}

/// Grammars compiled for one tokenizer. Building it reads the whole vocabulary (a fraction of a second
/// for 150K tokens): build it once and keep it.
pub struct Grammars {
    factory: ParserFactory,
    stops: Vec<u32>,
    vocab: usize,
    /// Each token's bytes (a control token's: none), for a guide that watches the text for its trigger.
    text: Arc<Vec<Vec<u8>>>,
}

impl Grammars {
    /// For `tok`, whose model ends a reply with any of `stops` (the first is the grammar's end token).
    pub fn new(tok: Arc<Tokenizer>, stops: &[u32]) -> Result<Grammars, String> {
        let &end = stops.first().ok_or("constrained decoding needs a stop token")?;
        let vocab = tok.vocab_size();
        let bytes: Vec<Option<Vec<u8>>> = (0..vocab as u32).map(|id| tok.token_bytes(id)).collect();
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .zip(&bytes)
            .map(|(id, b)| match b {
                Some(b) => b.clone(),
                // The special marker keeps control tokens out of every grammar's text.
                None => [&[TokTrie::SPECIAL_TOKEN_MARKER][..], tok.token(id).unwrap_or("").as_bytes()].concat(),
            })
            .collect();
        let text: Vec<Vec<u8>> = bytes.into_iter().map(Option::unwrap_or_default).collect();
        let info = TokRxInfo::new(vocab as u32, end);
        let env: TokEnv = Arc::new(Vocabulary { trie: TokTrie::from(&info, &words), tok });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Grammars { factory, stops: stops.to_vec(), vocab, text: Arc::new(text) })
    }

    /// A reply that is one JSON value of the schema (`{"type": "object"}` for any object), written
    /// compactly ([`compact`]).
    pub fn json_schema(&self, schema: &Value) -> Result<Guide, String> {
        self.guide(TopLevelGrammar::from_json_schema(compact(schema)))
    }

    /// A reply the Lark grammar (llguidance's dialect, `%json {…}` for an embedded schema) accepts.
    pub fn lark(&self, grammar: &str) -> Result<Guide, String> {
        self.guide(TopLevelGrammar::from_lark(grammar.to_string()))
    }

    /// Free text until it ends with `trigger` (a tool call's opening); then the text after it held to
    /// the Lark grammar until that ends; then free text again, and so on (a reply that may call tools,
    /// each call held to its schema). The grammar should allow the whitespace a trigger's last token
    /// may carry after it.
    pub fn lark_after(&self, trigger: &str, grammar: &str) -> Result<Guide, String> {
        let mut g = self.guide(TopLevelGrammar::from_lark(grammar.to_string()))?;
        g.wait = Some(Wait {
            trigger: trigger.as_bytes().to_vec(),
            tail: Vec::new(),
            active: false,
            text: self.text.clone(),
        });
        Ok(g)
    }

    fn guide(&self, g: TopLevelGrammar) -> Result<Guide, String> {
        let parser = self.factory.create_parser(g).map_err(|e| format!("the grammar: {e}"))?;
        Ok(Guide { m: Matcher::new(Ok(parser)), stops: self.stops.clone(), vocab: self.vocab, kept: 0, wait: None })
    }
}

/// The schema as the engine decodes it:
/// - llguidance's layout settings added (unless it sets its own): JSON written as `{"a": 1, "b": [2, 3]}`,
///   one space after each `,` and `:` and none elsewhere. With free whitespace a model can pad a value
///   forever (a small one does), and one layout keeps replies alike.
/// - Objects closed: one that lists `properties` and says nothing of `additionalProperties` takes only
///   those (as grammar engines' strict modes do). Open, a model may add keys of its own without end,
///   and a client reading the reply into its type has no use for them.
pub fn compact(schema: &Value) -> Value {
    let mut s = schema.clone();
    close_objects(&mut s);
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance").or_insert_with(
            || serde_json::json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    s
}

/// Sets `additionalProperties: false` on every object schema with `properties` and no word on it,
/// through every place a schema nests (not into values: `const`, `enum`, `default`, `examples`).
fn close_objects(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("properties").is_some_and(Value::is_object) && !o.contains_key("additionalProperties") {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (k, x) in o.iter_mut() {
                if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    close_objects(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// One generation's grammar state.
pub struct Guide {
    m: Matcher,
    stops: Vec<u32>,
    /// The tokenizer's vocabulary (a model's output may be wider: those rows are never allowed).
    vocab: usize,
    /// Tokens the grammar has taken (stop tokens are not given to it).
    kept: usize,
    /// For [`Grammars::lark_after`]: the trigger the free text waits for.
    wait: Option<Wait>,
}

/// A guide's wait for its trigger.
struct Wait {
    trigger: Vec<u8>,
    /// The free text's last bytes (enough to hold the trigger).
    tail: Vec<u8>,
    /// The grammar holds the text now.
    active: bool,
    text: Arc<Vec<Vec<u8>>>,
}

impl Wait {
    /// Takes a free token's bytes; true when the text now ends with the trigger (whitespace after it
    /// allowed: a token may carry the line break that follows).
    fn sees(&mut self, bytes: &[u8]) -> bool {
        self.tail.extend_from_slice(bytes);
        let keep = self.trigger.len() + 16;
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
        let t = &self.trigger;
        let hit = (0..=self.tail.len().saturating_sub(t.len()))
            .rev()
            .find(|&i| self.tail[i..].starts_with(t))
            .is_some_and(|i| self.tail[i + t.len()..].iter().all(u8::is_ascii_whitespace));
        if hit {
            self.tail.clear();
        }
        hit
    }
}

impl Guide {
    /// Sets to −∞ the logit of every token the grammar does not allow next. The stop tokens are
    /// allowed where the grammar could end (only they, once it has ended).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        if self.wait.as_ref().is_some_and(|w| !w.active) {
            return Ok(()); // free text
        }
        let ended = self.m.is_stopped();
        let allowed = if ended { None } else { Some(self.m.compute_mask().map_err(|e| self.failed(e))?) };
        let may_end = ended || self.m.is_accepting().map_err(|e| self.failed(e))?;
        let mut any = false;
        for (id, l) in logits.iter_mut().enumerate() {
            let t = id as u32;
            let ok = if self.stops.contains(&t) {
                may_end
            } else {
                id < self.vocab && allowed.as_ref().is_some_and(|a| a.is_allowed(t))
            };
            if ok {
                any |= !l.is_nan();
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        if !any {
            return Err("the grammar allows no token here".into());
        }
        Ok(())
    }

    /// The token drawn (one that [`Guide::mask`] allowed).
    pub fn commit(&mut self, t: u32) -> Result<(), String> {
        if self.stops.contains(&t) {
            return Ok(());
        }
        if let Some(w) = self.wait.as_mut().filter(|w| !w.active) {
            let bytes = w.text.get(t as usize).cloned().unwrap_or_default();
            if w.sees(&bytes) {
                w.active = true;
                self.m.reset().map_err(|e| format!("the grammar: {e}"))?;
            }
            return Ok(());
        }
        self.m.consume_token(t).map_err(|e| self.failed(e))?;
        self.kept += 1;
        if let Some(w) = self.wait.as_mut().filter(|_| self.m.is_stopped()) {
            w.active = false; // the held part is done: free text again
        }
        Ok(())
    }

    /// Takes back the last `n` tokens committed (a speculative window's rejected drafts). Not for a
    /// guide that waits for a trigger.
    pub fn rollback(&mut self, n: usize) -> Result<(), String> {
        if self.wait.is_some() {
            return Err("a guide that waits for its trigger is not taken back".into());
        }
        let n = n.min(self.kept);
        self.m.rollback(n).map_err(|e| self.failed(e))?;
        self.kept -= n;
        Ok(())
    }

    /// Whether the grammar has ended (only a stop token may follow); never for one that waits.
    pub fn ended(&self) -> bool {
        self.wait.is_none() && self.m.is_stopped()
    }

    fn failed(&self, e: impl std::fmt::Display) -> String {
        format!("the grammar: {e}")
    }
}
