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
}

impl ApiError {
    pub fn new(status: StatusCode, flavor: Flavor, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), flavor, retry_after: None }
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
                json!({"error": {"message": self.message, "type": self.kind(), "param": null, "code": null}})
            }
            Flavor::Anthropic => json!({"type": "error", "error": {"type": self.kind(), "message": self.message}}),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
