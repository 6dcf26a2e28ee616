//! Structured output: the shape a request asks its reply to take (OpenAI's `response_format`, the
//! Responses API's `text.format`, a forced tool call), made into a grammar the engine decodes under
//! (strata_engine::grammar): the reply is then always of that shape, not just asked to be.

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use serde_json::{json, Value};
use strata_engine::grammar::{compact, Grammars, Guide};

use crate::errors::{ApiError, Flavor};
use crate::req::Fields;
use crate::Shared;

/// What the reply must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// One JSON value of the schema.
    Json(Value),
    /// Text a Lark grammar (llguidance's dialect) accepts.
    Lark(String),
    /// Free text, and after each `trigger` in it, text the Lark grammar accepts.
    After { trigger: String, lark: String },
}

/// Chat's (and completions') `response_format`: `text` (none), `json_object` (any object), or
/// `json_schema` (`json_schema.schema`; a missing schema is any JSON value).
pub fn response_format(f: &Fields) -> Result<Option<Shape>, ApiError> {
    let Some(r) = f.get("response_format") else { return Ok(None) };
    format(f.flavor, "response_format", r, r.get("json_schema").and_then(|j| j.get("schema")))
}

/// The Responses API's `text.format`: as [`response_format`], the schema beside the type.
pub fn text_format(f: &Fields) -> Result<Option<Shape>, ApiError> {
    let Some(r) = f.get("text").and_then(|t| t.get("format")) else { return Ok(None) };
    format(f.flavor, "text.format", r, r.get("schema"))
}

/// Anthropic's `output_format` (structured outputs): `{"type": "json_schema", "schema"}`.
pub fn output_format(f: &Fields) -> Result<Option<Shape>, ApiError> {
    let Some(r) = f.get("output_format") else { return Ok(None) };
    format(f.flavor, "output_format", r, r.get("schema"))
}

fn format(flavor: Flavor, key: &str, r: &Value, schema: Option<&Value>) -> Result<Option<Shape>, ApiError> {
    match r.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Shape::Json(json!({"type": "object"})))),
        Some("json_schema") => match schema {
            None | Some(Value::Null) => Ok(Some(Shape::Json(json!({})))),
            Some(s @ (Value::Object(_) | Value::Bool(true))) => Ok(Some(Shape::Json(s.clone()))),
            Some(_) => Err(ApiError::bad(flavor, format!("{key}: the schema is not a JSON schema object"))),
        },
        Some(t) => Err(ApiError::bad(
            flavor,
            format!("{key}.type: {t:?} is not one of \"text\", \"json_object\", \"json_schema\""),
        )),
        None => Err(ApiError::bad(flavor, format!("{key}.type: missing"))),
    }
}

/// The grammar of a forced call after its opening (tools.rs): `name` given, the function's arguments
/// (`parameters`, any object when it has none) and the close; any call, one object naming one of the
/// `tools` (template form) with its arguments. Either way the reply then ends.
pub fn forced_call(tools: &Value, name: Option<&str>, close: &str) -> Shape {
    let params = |t: &Value| match t["function"].get("parameters") {
        Some(p @ Value::Object(_)) => p.clone(),
        _ => json!({"type": "object"}),
    };
    let functions = tools.as_array().into_iter().flatten();
    let (schema, after) = match name {
        Some(n) => {
            let t = functions.into_iter().find(|t| t["function"]["name"] == n);
            (t.map_or(json!({"type": "object"}), params), format!("}}\n{close}"))
        }
        None => {
            let calls: Vec<Value> = functions
                .map(|t| {
                    json!({"type": "object",
                       "properties": {"name": {"const": t["function"]["name"]}, "arguments": params(t)},
                       "required": ["name", "arguments"], "additionalProperties": false})
                })
                .collect();
            (json!({"anyOf": calls}), format!("\n{close}"))
        }
    };
    Shape::Lark(format!("start: %json {} {}", compact(&schema), Value::String(after)))
}

/// Calls the model may begin of itself (`tool_choice` auto) where a tool is `strict`: after each
/// `open` the reply is held to one call of an offered tool with arguments of its schema (the line
/// break after the opening allowed either way), then the close; the text around the calls is free.
pub fn strict_calls(tools: &Value, open: &str, close: &str) -> Shape {
    let Shape::Lark(call) = forced_call(tools, None, close) else { unreachable!("forced_call is Lark") };
    let lark = call.replacen("start: ", "start: WS? ", 1) + "\nWS: /[ \\t\\r\\n]+/";
    Shape::After { trigger: open.to_string(), lark }
}

/// Whether any of the request's tools asks to be `strict` (OpenAI's `function.strict` or `strict`,
/// Anthropic's `strict`).
pub fn any_strict(tools: Option<&Value>) -> bool {
    let strict = |t: &Value| {
        t.get("strict") == Some(&Value::Bool(true)) || t["function"].get("strict") == Some(&Value::Bool(true))
    };
    tools.and_then(Value::as_array).is_some_and(|ts| ts.iter().any(strict))
}

/// The grammars of the served model's tokenizer, built on first use ([`Shared::grammars`]).
pub type GrammarsOnce = OnceLock<Result<Arc<Grammars>, String>>;

pub fn grammars(s: &Shared) -> Result<Arc<Grammars>, String> {
    s.grammars
        .get_or_init(|| {
            let stops: Vec<u32> = [s.tok.eos, s.tok.im_end].into_iter().flatten().collect();
            Grammars::new(s.tok.clone(), &stops).map(Arc::new)
        })
        .clone()
}

impl Shared {
    /// The shape compiled for one generation (a bad schema or grammar is the request's 400).
    pub async fn guide(self: &Arc<Self>, shape: Option<Shape>, flavor: Flavor) -> Result<Option<Guide>, ApiError> {
        let Some(shape) = shape else { return Ok(None) };
        let me = self.clone();
        let guide = tokio::task::spawn_blocking(move || {
            let g = grammars(&me).map_err(|e| (true, e))?;
            match &shape {
                Shape::Json(schema) => g.json_schema(schema),
                Shape::Lark(lark) => g.lark(lark),
                Shape::After { trigger, lark } => g.lark_after(trigger, lark),
            }
            .map_err(|e| (false, e))
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, e.to_string()))?;
        match guide {
            Ok(g) => Ok(Some(g)),
            Err((true, e)) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, e)),
            Err((false, e)) => Err(ApiError::bad(flavor, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn formats_are_read_or_refused() {
        let read = |v: Value| response_format(&Fields::new(&fields(v), Flavor::OpenAi));
        assert_eq!(read(json!({})).unwrap(), None);
        assert_eq!(read(json!({"response_format": {"type": "text"}})).unwrap(), None);
        assert_eq!(
            read(json!({"response_format": {"type": "json_object"}})).unwrap(),
            Some(Shape::Json(json!({"type": "object"})))
        );
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let asked = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}});
        assert_eq!(read(asked).unwrap(), Some(Shape::Json(s.clone())));
        assert!(read(json!({"response_format": {"type": "yaml"}})).is_err());
        assert!(read(json!({"response_format": {}})).is_err());
        let bad = json!({"response_format": {"type": "json_schema", "json_schema": {"schema": [1]}}});
        assert!(read(bad).is_err());
        let m = fields(json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": s}}}));
        assert_eq!(text_format(&Fields::new(&m, Flavor::OpenAi)).unwrap(), Some(Shape::Json(s)));
    }

    #[test]
    fn a_forced_call_grammar_names_the_tools() {
        let tools = json!([
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "time"}}
        ]);
        let Shape::Lark(one) = forced_call(&tools, Some("weather"), "</tool_call>") else { panic!() };
        assert!(
            one.contains("\"city\"") && !one.contains("\"time\"") && one.ends_with("\"}\\n</tool_call>\""),
            "{one}"
        );
        let Shape::Lark(any) = forced_call(&tools, None, "</tool_call>") else { panic!() };
        assert!(any.contains("\"weather\"") && any.contains("\"time\"") && any.contains("anyOf"), "{any}");
    }
}
