//! Reading a request body: the bytes within the size limit, JSON, and typed fields, each error naming
//! the field.

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::errors::{ApiError, Flavor};

/// The body as a JSON object.
pub async fn json_object(body: Body, limit: usize, flavor: Flavor) -> Result<Map<String, Value>, ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, flavor, format!("the request body is over {limit} bytes"))
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| ApiError::bad(flavor, format!("the body is not UTF-8: {e}")))?;
    match serde_json::from_str(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad(flavor, "the body must be a JSON object")),
        Err(e) => Err(ApiError::bad(flavor, format!("the body is not valid JSON: {e}"))),
    }
}

/// Typed access to a request's fields; every error names the field.
pub struct Fields<'a> {
    pub m: &'a Map<String, Value>,
    pub flavor: Flavor,
}

impl<'a> Fields<'a> {
    pub fn new(m: &'a Map<String, Value>, flavor: Flavor) -> Fields<'a> {
        Fields { m, flavor }
    }

    fn wrong(&self, key: &str, want: &str) -> ApiError {
        ApiError::bad(self.flavor, format!("{key}: expected {want}"))
    }

    /// The field, unless absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.m.get(key).filter(|v| !v.is_null())
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| self.wrong(key, "a string"))).transpose()
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        self.get(key).map(|v| v.as_bool().ok_or_else(|| self.wrong(key, "true or false"))).transpose()
    }

    /// A number within `lo..=hi`.
    pub fn f32_in(&self, key: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let x = v.as_f64().ok_or_else(|| self.wrong(key, "a number"))?;
        if !(lo as f64..=hi as f64).contains(&x) {
            return Err(ApiError::bad(self.flavor, format!("{key}: {x} is outside {lo}..={hi}")));
        }
        Ok(Some(x as f32))
    }

    /// A whole number within `lo..=hi`.
    /// A token budget (`max_tokens` and the like): a whole number of at least one, however large. The
    /// engine caps it at the room the prompt leaves in the context, and the reply then ends as if it had
    /// reached it (clients ask for 64K–128K whatever the model holds).
    pub fn budget(&self, key: &str) -> Result<Option<u64>, ApiError> {
        self.u64_in(key, 1, u64::MAX)
    }

    pub fn u64_in(&self, key: &str, lo: u64, hi: u64) -> Result<Option<u64>, ApiError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let x = match v.as_u64() {
            Some(x) => x,
            None if v.as_i64().is_some() => {
                return Err(ApiError::bad(self.flavor, format!("{key}: {v} is below {lo}")))
            }
            None => return Err(self.wrong(key, "a whole number")),
        };
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::bad(self.flavor, format!("{key}: {x} is outside {lo}..={hi}")));
        }
        Ok(Some(x))
    }

    /// A string or an array of strings (OpenAI's `stop`, Anthropic's `stop_sequences`).
    pub fn strings(&self, key: &str) -> Result<Vec<String>, ApiError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(a)) => {
                a.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(|| self.wrong(key, "strings"))).collect()
            }
            Some(_) => Err(self.wrong(key, "a string or an array of strings")),
        }
    }

    /// An array (absent: none).
    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        self.get(key).map(|v| v.as_array().ok_or_else(|| self.wrong(key, "an array"))).transpose()
    }
}

/// A message's content as text: a string, or an array of parts whose text parts are joined (`text`,
/// `input_text`, `output_text`); `None` for null. Any other part is refused by name.
pub fn content_text(v: &Value, at: &str, flavor: Flavor) -> Result<Option<String>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(parts) => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("text" | "input_text" | "output_text", Some(t)) => out.push_str(t),
                    _ => {
                        return Err(ApiError::bad(
                            flavor,
                            format!("{at}[{i}]: a content part of type {kind:?} is not supported (text only)"),
                        ))
                    }
                }
            }
            Ok(Some(out))
        }
        _ => Err(ApiError::bad(flavor, format!("{at}: expected a string or an array of content parts"))),
    }
}

/// A tool's JSON schema must be an object.
pub fn check_schema(v: Option<&Value>, at: &str, flavor: Flavor) -> Result<(), ApiError> {
    match v {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::bad(flavor, format!("{at}: the tool's schema must be a JSON object"))),
    }
}
