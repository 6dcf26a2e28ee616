//! Generated tokens to text, a token at a time, for every front end (`strata run`'s printer, the server's
//! streams): a character whose bytes span several tokens waits for its last byte. At most [`MAX_HELD`]
//! tokens wait; past that the bytes cannot be a character, and are released as U+FFFD.

use crate::tokenizer::{Tokenizer, TokenizerError};

/// The most tokens held back for one character (a UTF-8 character has at most 4 bytes).
pub const MAX_HELD: usize = 8;

/// Turns ids into text, holding back the tokens of an unfinished character.
pub struct Detokenizer<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u32>,
}

impl<'a> Detokenizer<'a> {
    pub fn new(tok: &'a Tokenizer) -> Detokenizer<'a> {
        Detokenizer { tok, pending: Vec::new() }
    }

    /// The text `id` completes (empty while a character is unfinished).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.push(id);
        let text = self.tok.decode(&self.pending)?;
        if text.ends_with('\u{FFFD}') && self.pending.len() < MAX_HELD {
            return Ok(String::new());
        }
        self.pending.clear();
        Ok(text)
    }

    /// What is still held back, as it is, at the end of the generation.
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        let text = if self.pending.is_empty() { String::new() } else { self.tok.decode(&self.pending)? };
        self.pending.clear();
        Ok(text)
    }
}
