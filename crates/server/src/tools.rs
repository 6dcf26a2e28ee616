//! Tool calls in the model's output: the Qwen family's form, a JSON object `{"name": …, "arguments": …}`
//! between `<tool_call>` and `</tool_call>`. A streamed reply releases its text up to the first
//! `<tool_call>` as it comes, and the calls once the generation ends.

use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// One call: the function's name and its arguments as a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

impl ToolCall {
    /// The arguments as a JSON string (what the OpenAI APIs carry).
    pub fn arguments_text(&self) -> String {
        self.arguments.to_string()
    }
}

/// The reply's text outside the calls (trimmed), and the calls that parse. A block whose JSON does not
/// parse as a call stays in the text, as the model wrote it.
pub fn parse(text: &str) -> (String, Vec<ToolCall>) {
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut s = text;
    while let Some(at) = s.find(OPEN) {
        rest.push_str(&s[..at]);
        let body = &s[at + OPEN.len()..];
        let (inner, after, whole) = match body.find(CLOSE) {
            Some(end) => (&body[..end], &body[end + CLOSE.len()..], &s[at..at + OPEN.len() + end + CLOSE.len()]),
            None => (body, "", &s[at..]),
        };
        match call(inner) {
            Some(c) => calls.push(c),
            None => rest.push_str(whole),
        }
        s = after;
    }
    rest.push_str(s);
    (rest.trim().to_string(), calls)
}

fn call(json: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(json.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        // Some models write the arguments as a JSON string.
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(a) => a.clone(),
    };
    Some(ToolCall { name, arguments })
}

/// Splits a stream of text deltas: text before the first `<tool_call>` is released as it comes (a
/// suffix that may begin the tag is held), everything from the tag on is kept for [`parse`] at the end.
#[derive(Default)]
pub struct ToolSplit {
    held: String,
    in_calls: bool,
}

impl ToolSplit {
    /// The text `delta` releases.
    pub fn push(&mut self, delta: &str) -> String {
        self.held.push_str(delta);
        if self.in_calls {
            return String::new();
        }
        if let Some(at) = self.held.find(OPEN) {
            self.in_calls = true;
            let out = self.held[..at].to_string();
            self.held.drain(..at);
            return out;
        }
        let keep =
            (1..OPEN.len()).rev().find(|&n| self.held.len() >= n && self.held.ends_with(&OPEN[..n])).unwrap_or(0);
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        out
    }

    /// At the end: the text still held that is not a call, and the calls.
    pub fn finish(&mut self) -> (String, Vec<ToolCall>) {
        let held = std::mem::take(&mut self.held);
        if !self.in_calls {
            return (held, Vec::new());
        }
        let (text, calls) = parse(&held);
        (text, calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_are_read_and_the_text_around_them_kept() {
        let text =
            "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                    <tool_call>{\"name\": \"time\", \"arguments\": \"{\\\"zone\\\": \\\"CET\\\"}\"}</tool_call>";
        let (rest, calls) = parse(text);
        assert_eq!(rest, "Let me look.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], ToolCall { name: "weather".into(), arguments: json!({"city": "Paris"}) });
        assert_eq!(calls[1].arguments, json!({"zone": "CET"}), "arguments written as a string are read");
        assert_eq!(calls[0].arguments_text(), "{\"city\":\"Paris\"}");
    }

    #[test]
    fn a_block_that_is_not_a_call_stays_text() {
        let (rest, calls) = parse("a <tool_call>not json</tool_call> b");
        assert!(calls.is_empty());
        assert_eq!(rest, "a <tool_call>not json</tool_call> b");
        let (rest, calls) = parse("x <tool_call>{\"name\": \"f\"}");
        assert_eq!((rest.as_str(), calls.len()), ("x", 1), "an unclosed call at the end still counts");
        assert_eq!(calls[0].arguments, json!({}));
    }

    #[test]
    fn a_stream_releases_text_before_the_calls_only() {
        let mut s = ToolSplit::default();
        let mut out = String::new();
        for d in ["Hi <", "tool", "_call>{\"name\": \"f\", ", "\"arguments\": {}}</tool_call>"] {
            out += &s.push(d);
        }
        assert_eq!(out, "Hi ");
        let (tail, calls) = s.finish();
        assert_eq!((tail.as_str(), calls.len()), ("", 1));
        let mut s = ToolSplit::default();
        assert_eq!(s.push("a <to"), "a ");
        assert_eq!(s.push("y"), "<toy");
        assert_eq!(s.finish(), (String::new(), vec![]));
    }
}
