//! The web page at `/`: a chat that streams replies and a monitor of the engine (web/index.html,
//! app.js, style.css), carried inside the binary and fetching nothing from elsewhere. The page itself
//! loads without a key; with `--api-key` set it asks for the key and sends it with its API calls.

use axum::http::header;
use axum::response::IntoResponse;

const INDEX: &str = include_str!("web/index.html");
const APP: &str = include_str!("web/app.js");
const STYLE: &str = include_str!("web/style.css");

/// Whether `path` is one of the page's own files (served without a key).
pub fn is_page(path: &str) -> bool {
    matches!(path, "/" | "/web/app.js" | "/web/style.css" | "/favicon.ico")
}

fn file(kind: &'static str, body: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body)
}

/// No icon (browsers ask for one).
pub async fn favicon() -> axum::http::StatusCode {
    axum::http::StatusCode::NO_CONTENT
}

pub async fn index() -> impl IntoResponse {
    file("text/html; charset=utf-8", INDEX)
}

pub async fn app() -> impl IntoResponse {
    file("text/javascript; charset=utf-8", APP)
}

pub async fn style() -> impl IntoResponse {
    file("text/css; charset=utf-8", STYLE)
}
