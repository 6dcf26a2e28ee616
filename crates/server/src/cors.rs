//! `--cors ORIGIN`: browser pages served from ORIGIN (or any, with `*`) may call the API. A preflight
//! (OPTIONS with `Access-Control-Request-Method`) from that origin is answered 204 before the key check,
//! as browsers send no key with it; every other reply to it carries `Access-Control-Allow-Origin`.
//! Without `--cors` no reply carries CORS headers, so browsers keep other sites' pages out.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Shared;

/// The headers a page may send: the APIs' own and their clients'.
const ALLOWED_HEADERS: &str = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, \
                               openai-organization, openai-project, x-stainless-os, x-stainless-lang";

/// The origin to name in the reply to a request from `origin`, when `allowed` lets it in.
fn allowed_origin(allowed: &str, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    (allowed == "*" || origin.as_bytes() == allowed.trim_end_matches('/').as_bytes()).then(|| origin.clone())
}

pub async fn cors(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let Some(allowed) = s.cors.as_deref() else { return next.run(req).await };
    let Some(origin) = allowed_origin(allowed, req.headers()) else { return next.run(req).await };
    let preflight =
        req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut r = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(ALLOWED_HEADERS));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
        r
    } else {
        next.run(req).await
    };
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("origin"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_origin_or_any_with_a_star_is_let_in() {
        let mut h = HeaderMap::new();
        assert_eq!(allowed_origin("*", &h), None, "no Origin: not a browser's cross-site request");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://localhost:3000"));
        assert_eq!(allowed_origin("*", &h).unwrap(), "http://localhost:3000");
        assert_eq!(allowed_origin("http://localhost:3000/", &h).unwrap(), "http://localhost:3000");
        assert_eq!(allowed_origin("http://localhost:3001", &h), None);
        assert_eq!(allowed_origin("http://evil.example", &h), None);
    }
}
