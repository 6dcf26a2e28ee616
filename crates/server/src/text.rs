//! Generated tokens as text, a piece at a time: a character split across tokens waits for its last byte,
//! and text that could be the start of a stop string waits until it is known not to be one.

use strata_engine::detok::Detokenizer;
use strata_engine::tokenizer::Tokenizer;

/// Turns tokens into text deltas, holding back what may still change.
pub struct TextStream<'a> {
    /// Whole characters only (a character's bytes spread over tokens wait for the last).
    detok: Detokenizer<'a>,
    stops: StopMatcher,
}

impl<'a> TextStream<'a> {
    pub fn new(tok: &'a Tokenizer, stops: Vec<String>) -> TextStream<'a> {
        TextStream { detok: Detokenizer::new(tok), stops: StopMatcher::new(stops) }
    }

    /// The text that `id` releases, and whether a stop string has now been met (the text then ends
    /// before it).
    pub fn push(&mut self, id: u32) -> (String, bool) {
        let text = self.detok.push(id).unwrap_or_default();
        self.stops.push(&text)
    }

    /// The stop string that ended the text, if one did.
    pub fn matched(&self) -> Option<&str> {
        self.stops.matched.as_deref()
    }

    /// What is still held back, at the end of the generation.
    pub fn finish(&mut self) -> String {
        let tail = self.detok.finish().unwrap_or_default();
        let (mut out, stopped) = self.stops.push(&tail);
        if !stopped {
            out.push_str(&self.stops.take_held());
        }
        out
    }
}

/// Finds the first stop string in a stream of text deltas.
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released: a suffix that is the start of some stop string.
    held: String,
    stopped: bool,
    /// The stop string met.
    pub matched: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopMatcher { stops, held: String::new(), stopped: false, matched: None }
    }

    /// The text released by `delta`, and whether a stop string was met (everything from it on is dropped).
    pub fn push(&mut self, delta: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(delta);
        let first = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s))).min_by_key(|(at, _)| *at);
        if let Some((at, s)) = first {
            self.matched = Some(s.clone());
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = self.partial_suffix();
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        (out, false)
    }

    /// The text held back (at the end, when no stop string came).
    pub fn take_held(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The length of the longest suffix of the held text that begins some stop string.
    fn partial_suffix(&self) -> usize {
        let h = &self.held;
        (1..=h.len())
            .rev()
            .filter(|&n| h.is_char_boundary(h.len() - n))
            .find(|&n| self.stops.iter().any(|s| s.len() > n && s.starts_with(&h[h.len() - n..])))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for d in deltas {
            let (t, stop) = m.push(d);
            out += &t;
            if stop {
                return (out, true);
            }
        }
        out += &m.take_held();
        (out, false)
    }

    #[test]
    fn a_stop_string_across_deltas_ends_the_text_before_it() {
        assert_eq!(run(&["END"], &["hello E", "N", "D and more"]), ("hello ".into(), true));
        assert_eq!(run(&["END", "lo"], &["hello"]), ("hel".into(), true), "the earliest of two");
        let mut m = StopMatcher::new(vec!["x".into(), "ll".into()]);
        assert_eq!(m.push("hello x"), ("he".into(), true));
        assert_eq!(m.matched.as_deref(), Some("ll"));
    }

    #[test]
    fn text_that_only_looks_like_a_stop_string_is_released() {
        assert_eq!(run(&["END"], &["hello E", "NOUGH"]), ("hello ENOUGH".into(), false));
        assert_eq!(run(&["END"], &["tail E"]), ("tail E".into(), false), "held text comes out at the end");
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn the_held_suffix_respects_characters() {
        assert_eq!(run(&["é!"], &["café", "?"]), ("café?".into(), false));
        assert_eq!(run(&["é!"], &["café", "!"]), ("caf".into(), true));
    }
}
