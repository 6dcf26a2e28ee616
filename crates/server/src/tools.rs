//! Tool calls in the model's output: the Qwen family's form, a JSON object `{"name": …, "arguments": …}`
//! between `<tool_call>` and `</tool_call>`. A streamed reply releases its text up to the first
//! `<tool_call>` as it comes, and the calls once the generation ends.

use serde_json::Value;

use crate::errors::{ApiError, Flavor};
use crate::structured::{forced_call, strict_calls, Shape};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The request's tools the engine can offer the model (those `runs` says it can: function tools) and a
/// word for each of the others (its type, and its name where it has one), which are left out of the
/// prompt: Codex sends `namespace` and `web_search` tools, Claude Code Anthropic's server tools. The
/// words go on the request's log line and, where the API has a place for them, into the response.
pub fn offered(tools: &[Value], runs: impl Fn(&Value) -> bool) -> (Vec<(usize, &Value)>, Vec<String>) {
    let (mut kept, mut left) = (Vec::new(), Vec::new());
    for (i, t) in tools.iter().enumerate() {
        if runs(t) {
            kept.push((i, t));
        } else {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("?");
            left.push(match t.get("name").and_then(Value::as_str) {
                Some(name) => format!("{kind} {name:?}"),
                None => kind.to_string(),
            });
        }
    }
    (kept, left)
}

/// The note for tools left out (none when none were).
pub fn left_out_note(left: &[String]) -> Option<String> {
    (!left.is_empty()).then(|| format!("tools left out (the engine runs function tools only): {}", left.join(", ")))
}

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
    Some(ToolCall { name, arguments: arguments(v.get("arguments")) })
}

/// A call's arguments as a JSON value: an object as it is, a JSON string (as the OpenAI APIs carry them,
/// and as some models write them) read, none an empty object.
pub fn arguments(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(a) => a.clone(),
    }
}

/// How a reply's tool calls are read: not at all (no tools offered), or from its text, which begins with
/// the opening of a call when the request forces one (`tool_choice` required, or a named function): the
/// prompt then ends with that opening, so the model writes the call.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub on: bool,
    pub opening: String,
    /// A forced call's grammar after the opening (structured.rs): the call is then always one that
    /// parses, to a tool offered, with arguments of its schema.
    pub grammar: Option<Shape>,
}

impl Reading {
    /// For the template's `tools` (function form) and the forced choice: `Some(None)` any call,
    /// `Some(Some(name))` that function's.
    /// `strict`: a tool asks for strict calls, so calls the model begins of itself are held to the
    /// tools' schemas too.
    pub fn new(
        tools: Option<&Value>,
        forced: Option<Option<&str>>,
        strict: bool,
        flavor: Flavor,
    ) -> Result<Reading, ApiError> {
        let Some(tools) = tools else {
            return match forced {
                Some(_) => Err(ApiError::bad(flavor, "tool_choice: a call is required, but no tools are given")),
                None => Ok(Reading::default()),
            };
        };
        let opening = match forced {
            None => String::new(),
            Some(None) => format!("{OPEN}\n"),
            Some(Some(name)) => {
                let known = tools.as_array().into_iter().flatten().any(|t| t["function"]["name"] == name);
                if !known {
                    return Err(ApiError::bad(flavor, format!("tool_choice: no tool named {name:?}")));
                }
                format!("{OPEN}\n{{\"name\": {}, \"arguments\": ", Value::String(name.into()))
            }
        };
        let grammar = match forced {
            Some(name) => Some(forced_call(tools, name, CLOSE)),
            None if strict => Some(strict_calls(tools, OPEN, CLOSE)),
            None => None,
        };
        Ok(Reading { on: true, opening, grammar })
    }

    /// The reply's text outside its calls, and the calls.
    pub fn parse(&self, text: String) -> (String, Vec<ToolCall>) {
        if !self.on {
            return (text, Vec::new());
        }
        parse(&format!("{}{text}", self.opening))
    }

    /// A splitter for a streamed reply, the opening already in it.
    pub fn splitter(&self) -> ToolSplit {
        let mut s = ToolSplit::default();
        s.push(&self.opening);
        s
    }
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
    fn a_forced_call_begins_the_reply() {
        let tools = json!([{"type": "function", "function": {"name": "weather"}}]);
        let r = Reading::new(Some(&tools), Some(Some("weather")), false, Flavor::OpenAi).unwrap();
        assert_eq!(r.opening, "<tool_call>\n{\"name\": \"weather\", \"arguments\": ");
        let (text, calls) = r.parse("{\"city\": \"Paris\"}}\n</tool_call>".into());
        assert_eq!((text.as_str(), calls.len()), ("", 1));
        assert_eq!(calls[0].arguments, json!({"city": "Paris"}));
        let mut split = r.splitter();
        assert_eq!(split.push("{}}</tool_call>"), "", "a forced reply streams no text");
        assert_eq!(split.finish().1.len(), 1);
        assert_eq!(Reading::new(Some(&tools), Some(None), false, Flavor::OpenAi).unwrap().opening, "<tool_call>\n");
        assert!(Reading::new(Some(&tools), Some(Some("time")), false, Flavor::OpenAi).is_err(), "an unknown tool");
        assert!(Reading::new(None, Some(None), false, Flavor::OpenAi).is_err(), "a call required without tools");
        let off = Reading::new(None, None, false, Flavor::OpenAi).unwrap();
        assert_eq!(off.parse("<tool_call>{\"name\": \"f\"}</tool_call>".into()).1.len(), 0, "no tools: text");
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
