//! The byte-level BPE tokenizer (Qwen's pre-tokenizer) as stored in GGUF `tokenizer.ggml.*` metadata:
//! built from the file's tokens and merges, and trained from text for synthetic models.

use strata_gguf::{Array, GgufSet, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer as HfTokenizer};

/// Qwen's pre-tokenizer split (the same as its tokenizer.json).
pub const QWEN_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub const ENDOFTEXT: &str = "<|endoftext|>";
pub const IM_START: &str = "<|im_start|>";
pub const IM_END: &str = "<|im_end|>";

/// GGUF token types.
pub const TOKEN_NORMAL: i32 = 1;
pub const TOKEN_CONTROL: i32 = 3;
/// A token added whole (Qwen's `<tool_call>`, `<think>`): its text as it is, not byte-level form, and
/// matched in text before the BPE runs.
pub const TOKEN_USER_DEFINED: i32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer metadata: {0}")]
    Metadata(String),
    #[error("tokenizer: {0}")]
    Build(String),
}

fn build_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Build(e.to_string())
}

pub struct Tokenizer {
    inner: HfTokenizer,
    tokens: Vec<String>,
    /// Each token's GGUF type (control tokens are never text; user-defined ones are their text as is).
    types: Vec<i32>,
    pub eos: Option<u32>,
    pub im_end: Option<u32>,
}

/// The vocabulary of a trained or loaded tokenizer in GGUF's form.
pub struct Vocab {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
}

fn pre_tokenizer() -> Result<PreTokenizerWrapper, TokenizerError> {
    let split = Split::new(SplitPattern::Regex(QWEN_SPLIT.into()), SplitDelimiterBehavior::Isolated, false)
        .map_err(build_err)?;
    Ok(PreTokenizerWrapper::Sequence(Sequence::new(vec![
        PreTokenizerWrapper::Split(split),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
    ])))
}

fn assemble(bpe: BPE) -> Result<HfTokenizer, TokenizerError> {
    let mut t = HfTokenizer::new(bpe);
    t.with_pre_tokenizer(Some(pre_tokenizer()?));
    t.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(t)
}

const EOS_KEY: &str = "tokenizer.ggml.eos_token_id";

/// A special token id from the file, refused unless it names a token of the vocabulary.
fn special_id(key: &str, v: &Value, vocab: usize) -> Result<u32, TokenizerError> {
    match v.as_u64() {
        Some(id) if id < vocab as u64 => Ok(id as u32),
        Some(id) => Err(TokenizerError::Metadata(format!("{key} = {id} is not in the vocabulary ({vocab} tokens)"))),
        None => Err(TokenizerError::Metadata(format!("{key}: not an unsigned integer"))),
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` (model "gpt2": byte-level BPE).
    pub fn from_gguf(set: &GgufSet) -> Result<Tokenizer, TokenizerError> {
        let meta = |k: &str| TokenizerError::Metadata(format!("{k}: missing or of the wrong type"));
        let model =
            set.get("tokenizer.ggml.model").and_then(Value::as_str).ok_or_else(|| meta("tokenizer.ggml.model"))?;
        if model != "gpt2" {
            return Err(TokenizerError::Metadata(format!(
                "tokenizer.ggml.model is {model:?}; only \"gpt2\" (byte-level BPE) is supported"
            )));
        }
        let strings = |k: &str| {
            set.get(k)
                .and_then(Value::as_array)
                .and_then(Array::as_strings)
                .map(<[String]>::to_vec)
                .ok_or_else(|| meta(k))
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types: Vec<i32> = match set.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(Array::I32(v)) if v.len() == tokens.len() => v.clone(),
            Some(_) => return Err(meta("tokenizer.ggml.token_type")),
            None => vec![TOKEN_NORMAL; tokens.len()],
        };
        let vocab = Vocab { tokens, types, merges };
        let mut t = Self::from_vocab(&vocab)?;
        if let Some(v) = set.get(EOS_KEY) {
            t.eos = Some(special_id(EOS_KEY, v, t.tokens.len())?);
        }
        Ok(t)
    }

    pub fn from_vocab(v: &Vocab) -> Result<Tokenizer, TokenizerError> {
        // Every token is in the model's vocabulary, so the control tokens added below keep their ids.
        let all: tokenizers::models::bpe::Vocab =
            v.tokens.iter().enumerate().map(|(i, s)| (s.clone(), i as u32)).collect();
        let merges = v
            .merges
            .iter()
            .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| TokenizerError::Metadata("tokenizer.ggml.merges: an entry is not \"a b\"".into()))?;
        let bpe = BPE::builder().vocab_and_merges(all, merges).build().map_err(build_err)?;
        let mut inner = assemble(bpe)?;
        // Control and user-defined tokens keep their ids: add them in id order, after checking each lands
        // where it should.
        let of_type = |ty: i32| -> Vec<(u32, &String)> {
            v.tokens.iter().enumerate().filter(|(i, _)| v.types[*i] == ty).map(|(i, s)| (i as u32, s)).collect()
        };
        let (specials, added) = (of_type(TOKEN_CONTROL), of_type(TOKEN_USER_DEFINED));
        let tokens = |list: &[(u32, &String)], special: bool| -> Vec<AddedToken> {
            list.iter().map(|(_, s)| AddedToken::from(s.as_str(), special)).collect()
        };
        inner.add_special_tokens(&tokens(&specials, true));
        inner.add_tokens(&tokens(&added, false));
        for (id, s) in specials.iter().chain(&added) {
            if inner.token_to_id(s) != Some(*id) {
                return Err(TokenizerError::Metadata(format!("added token {s:?} does not map back to id {id}")));
            }
        }
        let find = |s: &str| v.tokens.iter().position(|t| t == s).map(|i| i as u32);
        Ok(Tokenizer {
            eos: find(ENDOFTEXT),
            im_end: find(IM_END),
            inner,
            tokens: v.tokens.clone(),
            types: v.types.clone(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Text to ids; special tokens written in the text (`<|im_start|>`) become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        Ok(self.inner.encode(text, false).map_err(build_err)?.get_ids().to_vec())
    }

    /// Ids to text, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, false).map_err(build_err)
    }

    /// The token's string as stored (byte-level form).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Whether the token is a control token (`<|im_end|>`), which text never spells.
    pub fn is_control(&self, id: u32) -> bool {
        self.types.get(id as usize) == Some(&TOKEN_CONTROL)
    }

    /// The bytes a text token stands for: its byte-level characters mapped back to bytes (GPT-2's
    /// table: the printable bytes stand for themselves, the other 68 for U+0100 on in byte order); a
    /// user-defined token's text as it is. None for a control token, or a character outside the table.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        match self.types.get(id as usize) {
            Some(&TOKEN_CONTROL) => None,
            Some(&TOKEN_USER_DEFINED) => Some(self.token(id)?.as_bytes().to_vec()),
            _ => self.token(id)?.chars().map(byte_of_char).collect(),
        }
    }
}

/// The byte a byte-level character stands for.
fn byte_of_char(c: char) -> Option<u8> {
    let printable = |b: u32| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    let c = c as u32;
    if c < 0x100 {
        return printable(c).then_some(c as u8);
    }
    // The non-printable bytes, in order, are U+0100, U+0101, ...
    let nth = (c - 0x100) as usize;
    (0u32..=255).filter(|&b| !printable(b)).nth(nth).map(|b| b as u8)
}

/// Trains a byte-level BPE on `texts` to at most `vocab_size` entries (specials included), then pads
/// with control tokens `<|pad_N|>` to exactly `vocab_size`.
pub fn train(texts: &[&str], vocab_size: usize) -> Result<Vocab, TokenizerError> {
    let specials = [ENDOFTEXT, IM_START, IM_END];
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(specials.iter().map(|s| AddedToken::from(*s, true)).collect())
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut trainer = tokenizers::models::TrainerWrapper::BpeTrainer(trainer);
    let mut t = assemble(BPE::default())?;
    t.train(&mut trainer, texts.iter()).map_err(build_err)?;
    let vocab = t.get_vocab(true);
    let mut tokens = vec![String::new(); vocab.len()];
    for (s, id) in vocab {
        *tokens.get_mut(id as usize).ok_or_else(|| build_err("trained ids are not dense"))? = s;
    }
    let json = serde_json::to_value(&t).map_err(build_err)?;
    let merges = json["model"]["merges"]
        .as_array()
        .ok_or_else(|| build_err("trained model has no merges"))?
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(p) => Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| build_err("unexpected merge format"))?;
    let mut types: Vec<i32> =
        tokens.iter().map(|s| if specials.contains(&s.as_str()) { TOKEN_CONTROL } else { TOKEN_NORMAL }).collect();
    for i in tokens.len()..vocab_size {
        tokens.push(format!("<|pad_{i}|>"));
        types.push(TOKEN_CONTROL);
    }
    Ok(Vocab { tokens, types, merges })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's user-defined token (Qwen's `<tool_call>`) is one token in the text, its own bytes, and
    /// comes back as its text; a control token spells no bytes.
    #[test]
    fn user_defined_tokens_are_matched_whole() {
        let mut v = train(&["a tool call, a tool call, plain words"], 300).unwrap();
        v.tokens.push("<tool_call>".into());
        v.types.push(TOKEN_USER_DEFINED);
        let t = Tokenizer::from_vocab(&v).unwrap();
        let id = (v.tokens.len() - 1) as u32;
        let ids = t.encode("a <tool_call>call").unwrap();
        assert!(ids.contains(&id), "{ids:?}");
        assert_eq!(t.decode(&ids).unwrap(), "a <tool_call>call");
        assert_eq!(t.token_bytes(id).unwrap(), b"<tool_call>");
        let spelled: Vec<u8> = ids.iter().flat_map(|&i| t.token_bytes(i).unwrap()).collect();
        assert_eq!(spelled, b"a <tool_call>call");
        let im_end = t.im_end.unwrap();
        assert!(t.is_control(im_end) && t.token_bytes(im_end).is_none());
    }
}
