//! Errors in each API's own shape: OpenAI's `{"error": {"message", "type", …}}` and Anthropic's
//! `{"type": "error", "error": {"type", "message"}}`. A bad request is a 4xx, never a panic.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Which API's shape an error takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
}

impl Flavor {
    /// The API a path belongs to.
    pub fn of_path(path: &str) -> Flavor {
        if path.starts_with("/v1/messages") {
            Flavor::Anthropic
        } else {
            Flavor::OpenAi
        }
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub flavor: Flavor,
    /// Seconds, for a 503 from a full queue.
    pub retry_after: Option<u64>,
    /// OpenAI's machine-readable `code` (and the `param` it is about), where it has one.
    pub code: Option<(&'static str, &'static str)>,
}

impl ApiError {
    pub fn new(status: StatusCode, flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), flavor, retry_after: None, code: None }
    }

    /// A prompt of `tokens` where the context holds `context` (with room for one more token at least), in
    /// the wording each API's clients look for: Anthropic's `prompt is too long: N tokens > M maximum`,
    /// OpenAI's `context_length_exceeded`.
    pub fn too_long(flavor: Flavor, tokens: usize, context: usize) -> ApiError {
        let most = context.saturating_sub(1);
        let message = match flavor {
            Flavor::Anthropic => format!("prompt is too long: {tokens} tokens > {most} maximum"),
            Flavor::OpenAi => format!(
                "This model's maximum context length is {context} tokens. However, your messages resulted in \
                 {tokens} tokens, with room for none to generate. Please reduce the length of the messages."
            ),
        };
        let mut e = ApiError::bad(flavor, message);
        e.code = Some(("context_length_exceeded", "messages"));
        e
    }

    pub fn bad(flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, flavor, message)
    }

    fn kind(&self) -> &'static str {
        let anthropic = self.flavor == Flavor::Anthropic;
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
            StatusCode::SERVICE_UNAVAILABLE if anthropic => "overloaded_error",
            StatusCode::SERVICE_UNAVAILABLE => "server_overloaded",
            s if s.is_server_error() && anthropic => "api_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The body in the API's shape.
    pub fn body(&self) -> serde_json::Value {
        match self.flavor {
            Flavor::OpenAi => {
                let (code, param) = self.code.map_or((None, None), |(c, p)| (Some(c), Some(p)));
                json!({"error": {"message": self.message, "type": self.kind(), "param": param, "code": code}})
            }
            Flavor::Anthropic => json!({"type": "error", "error": {"type": self.kind(), "message": self.message}}),
        }
    }
}

/// A word about a request for its line in the server's log (the reason of a 4xx, what was left out of
/// a request that was served), carried as a response extension.
#[derive(Clone, Debug)]
pub struct LogNote(pub String);

/// `r` with `note` for the log, if any.
pub fn noted(mut r: Response, note: Option<String>) -> Response {
    if let Some(n) = note {
        r.extensions_mut().insert(LogNote(n));
    }
    r
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let note = LogNote(self.message.clone());
        let mut r = (self.status, axum::Json(self.body())).into_response();
        r.extensions_mut().insert(note);
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn each_api_gets_its_own_error_shape() {
        let e = ApiError::bad(Flavor::OpenAi, "messages: missing");
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        assert_eq!(e.body()["error"]["message"], "messages: missing");
        let e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, Flavor::Anthropic, "busy");
        assert_eq!(e.body()["type"], "error");
        assert_eq!(e.body()["error"]["type"], "overloaded_error");
        assert_eq!(Flavor::of_path("/v1/messages"), Flavor::Anthropic);
        assert_eq!(Flavor::of_path("/v1/chat/completions"), Flavor::OpenAi);
        assert_eq!(e.body()["error"].get("code"), None, "Anthropic's shape has no code");
    }

    #[test]
    fn a_prompt_too_long_is_said_in_each_apis_wording() {
        let e = ApiError::too_long(Flavor::Anthropic, 31000, 4096);
        assert_eq!(e.body()["error"]["message"], "prompt is too long: 31000 tokens > 4095 maximum");
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        let e = ApiError::too_long(Flavor::OpenAi, 31000, 4096);
        assert_eq!(e.body()["error"]["code"], "context_length_exceeded");
        assert_eq!(e.body()["error"]["param"], "messages");
        let m = e.body()["error"]["message"].as_str().unwrap().to_string();
        assert!(m.contains("maximum context length is 4096 tokens") && m.contains("31000 tokens"), "{m}");
        assert_eq!(ApiError::bad(Flavor::OpenAi, "x").body()["error"]["code"], Value::Null);
    }
}
