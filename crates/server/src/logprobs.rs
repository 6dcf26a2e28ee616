//! Log-probabilities in a reply (`logprobs`, `top_logprobs`): taken from the exact logits by one
//! contract (strata_model::ops::logprob, docs/ARITHMETIC.md § logprob), written in each OpenAI API's form.

use serde_json::{json, Value};
use strata_engine::tokenizer::Tokenizer;
use strata_model::ops::logprob::{top_logprobs, LogNorm};

/// The most alternatives a token lists (OpenAI's limit).
pub const MAX_TOP: u64 = 20;

/// One generated token's entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// The most likely tokens there (as many as asked), most likely first.
    pub top: Vec<(Vec<u8>, f32)>,
}

/// The entry of token `t`, drawn from `logits`, with `n` alternatives.
pub fn entry(tok: &Tokenizer, logits: &[f32], t: u32, n: usize) -> TokenLogprob {
    let norm = LogNorm::of(logits);
    let bytes = |id: u32| tok.token_bytes(id).unwrap_or_else(|| tok.token(id).unwrap_or("").as_bytes().to_vec());
    TokenLogprob {
        bytes: bytes(t),
        logprob: norm.logprob(logits[t as usize]),
        top: top_logprobs(logits, &norm, n).into_iter().map(|(id, lp)| (bytes(id), lp)).collect(),
    }
}

/// A token's text (a piece of a character shows as U+FFFD, its `bytes` say which).
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A log-probability as JSON (−∞ as OpenAI writes it: a very large negative number).
fn number(lp: f32) -> Value {
    if lp.is_finite() {
        json!(lp)
    } else {
        json!(-9999.0)
    }
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
pub fn chat(entries: &[TokenLogprob]) -> Value {
    let one = |b: &[u8], lp: f32| json!({"token": text(b), "logprob": number(lp), "bytes": b});
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = one(&e.bytes, e.logprob);
            v["top_logprobs"] = e.top.iter().map(|(b, lp)| one(b, *lp)).collect();
            v
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// Completions' `logprobs`: parallel lists, `text_offset` counted in characters from `offset`.
pub fn completion(entries: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut offsets = Vec::new();
    for e in entries {
        offsets.push(at);
        at += text(&e.bytes).chars().count();
    }
    let top: Vec<Value> =
        entries.iter().map(|e| Value::Object(e.top.iter().map(|(b, lp)| (text(b), number(*lp))).collect())).collect();
    json!({
        "tokens": entries.iter().map(|e| text(&e.bytes)).collect::<Vec<_>>(),
        "token_logprobs": entries.iter().map(|e| number(e.logprob)).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": offsets,
    })
}

/// A stream's token entries waiting for the chunk that carries their text (a held tool call's wait
/// for the last chunk).
#[derive(Default)]
pub struct Pending {
    entries: Vec<TokenLogprob>,
    /// Characters sent before (completions' `text_offset`).
    sent: usize,
}

impl Pending {
    pub fn push(&mut self, e: TokenLogprob) {
        self.entries.push(e);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts the waiting entries into a chat chunk.
    pub fn into_chat(&mut self, chunk: &mut Value) {
        if !self.entries.is_empty() {
            chunk["choices"][0]["logprobs"] = chat(&self.entries);
            self.entries.clear();
        }
    }

    /// Puts the waiting entries into a completions chunk, whose text is then counted as sent.
    pub fn into_completion(&mut self, chunk: &mut Value) {
        if !self.entries.is_empty() {
            chunk["choices"][0]["logprobs"] = completion(&self.entries, self.sent);
            self.entries.clear();
        }
        self.sent += chunk["choices"][0]["text"].as_str().map_or(0, |t| t.chars().count());
    }
}
