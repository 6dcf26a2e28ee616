//! The chat template (`tokenizer.chat_template`, Jinja) rendered with minijinja the way transformers'
//! `apply_chat_template` renders it: `trim_blocks` and `lstrip_blocks`, loop controls, Python's string
//! methods (`startswith`, `split`, `rstrip`, …), `raise_exception`, and a `tojson` that writes what
//! Python's `json.dumps` writes (`", "` and `": "` separators, no HTML escaping, keys in their order).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value as JValue};
use strata_gguf::{GgufSet, Value};

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the model has no tokenizer.chat_template")]
    Missing,
    #[error("chat template: {0}")]
    Template(String),
}

/// A plain text message.
pub struct Message<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

pub struct ChatTemplate {
    source: String,
}

impl ChatTemplate {
    pub fn from_gguf(set: &GgufSet) -> Result<ChatTemplate, ChatError> {
        let source = set.get("tokenizer.chat_template").and_then(Value::as_str).ok_or(ChatError::Missing)?;
        Ok(ChatTemplate { source: source.to_string() })
    }

    pub fn new(source: &str) -> ChatTemplate {
        ChatTemplate { source: source.to_string() }
    }

    /// The prompt text for `messages`, ending with the assistant's turn opened when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, ChatError> {
        let msgs: Vec<serde_json::Value> =
            messages.iter().map(|m| serde_json::json!({ "role": m.role, "content": m.content })).collect();
        self.render_json(&serde_json::Value::Array(msgs), None, add_generation_prompt)
    }

    /// The prompt text for OpenAI-style `messages` (tool calls, tool results) and `tools` (function
    /// schemas), as JSON values.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let env = environment(&self.source).map_err(|e| ChatError::Template(e.to_string()))?;
        let ctx = context! {
            messages => JValue::from_serialize(messages),
            tools => tools.map(JValue::from_serialize),
            add_generation_prompt => add_generation_prompt,
        };
        env.get_template("chat").and_then(|t| t.render(ctx)).map_err(|e| ChatError::Template(describe(&e)))
    }
}

fn environment(source: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    // Python's iter(): None and numbers are not iterable; Jinja2's Undefined iterates as empty.
    env.add_test("iterable", |v: JValue| !matches!(v.kind(), ValueKind::None | ValueKind::Bool | ValueKind::Number));
    env.add_function("raise_exception", |msg: String| -> Result<JValue, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_template_owned("chat", source.to_string())?;
    Ok(env)
}

/// The error with its causes (the template's own `raise_exception` message among them).
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(&format!(": {c}"));
        cause = c.source();
    }
    s
}

/// Python's `json.dumps(x, ensure_ascii=False)`, and `indent=N` when given.
fn tojson(v: JValue, kwargs: Kwargs) -> Result<JValue, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    dump(&v, indent, 0, &mut out)?;
    Ok(JValue::from_safe_string(out))
}

fn dump(v: &JValue, indent: Option<usize>, depth: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&python_number(v)),
        ValueKind::String => quote(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<JValue> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                dump(item, indent, depth + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<JValue> = v.try_iter()?.collect();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                quote(&k.to_string(), out);
                out.push_str(": ");
                dump(&v.get_item(k)?, indent, depth + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        _ => quote(&v.to_string(), out),
    }
    Ok(())
}

/// An int as digits; a float as Python's repr writes it (`1.0`, `0.5`, `1e-07`).
fn python_number(v: &JValue) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if f == f.trunc() && f.abs() < 1e16 {
        return format!("{f:.1}");
    }
    let s = format!("{f:e}");
    let (m, e) = s.split_once('e').expect("exponent form");
    let e: i32 = e.parse().expect("exponent");
    if (-5..16).contains(&e) {
        format!("{f}")
    } else {
        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    }
}

/// A JSON string as Python writes it with ensure_ascii=False.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: serde_json::Value) -> String {
        tojson(JValue::from_serialize(&v), Kwargs::from_iter(std::iter::empty::<(&str, JValue)>())).unwrap().to_string()
    }

    #[test]
    fn tojson_writes_what_python_writes() {
        // json.dumps({"b": 1, "a": [1.0, 0.5, "x<y>\n\"é"], "c": None, "d": True, "e": 1e-07}, ensure_ascii=False)
        let v = serde_json::json!({"b": 1, "a": [1.0, 0.5, "x<y>\n\"é"], "c": null, "d": true, "e": 1e-7});
        assert_eq!(json(v), r#"{"b": 1, "a": [1.0, 0.5, "x<y>\n\"é"], "c": null, "d": true, "e": 1e-07}"#);
        assert_eq!(json(serde_json::json!([])), "[]");
        assert_eq!(json(serde_json::json!({})), "{}");
    }

    #[test]
    fn python_string_methods_and_raise_exception() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.content.split(' ')[0].upper() }}|{{ m.content.startswith('he') }}{% endfor %}\
             {% if not add_generation_prompt %}{{ raise_exception('no prompt') }}{% endif %}",
        );
        let msgs = serde_json::json!([{"role": "user", "content": "hello world"}]);
        assert_eq!(t.render_json(&msgs, None, true).unwrap(), "HELLO|True");
        let e = t.render_json(&msgs, None, false).unwrap_err().to_string();
        assert!(e.contains("no prompt"), "{e}");
    }
}
