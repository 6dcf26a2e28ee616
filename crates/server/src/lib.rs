//! `strata serve`: the OpenAI APIs (chat completions, completions, responses, models) and Anthropic's
//! messages API over one engine, with streaming, structured output, a conversation cache, Prometheus
//! metrics and a web page (web.rs).
//!
//! The engine runs on a thread of its own ([`worker::work`]), one generation at a time; the HTTP side
//! makes each request's prompt with the model's chat template, queues it, and turns the engine's
//! updates into the API's reply or stream.

pub mod anthropic;
pub mod convo;
pub mod cors;
pub mod errors;
pub mod gen;
pub mod logprobs;
pub mod openai;
pub mod req;
pub mod responses;
pub mod stream;
pub mod structured;
pub mod text;
pub mod tools;
pub mod turns;
pub mod web;
pub mod worker;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;
use strata_engine::chat::ChatTemplate;
use strata_engine::tokenizer::Tokenizer;

use crate::errors::{ApiError, Flavor};
use crate::worker::Queue;

/// How the server listens and what it allows.
#[derive(Clone, Debug)]
pub struct Options {
    pub host: String,
    pub port: u16,
    /// Required on every endpoint but /health when set; required to listen beyond loopback.
    pub api_key: Option<String>,
    /// Requests waiting at most (the running one not counted); more get 503.
    pub queue: usize,
    /// Request bodies over this many bytes get 413.
    pub max_body: usize,
    /// `--cors ORIGIN`: the browser origin (or `*`) whose pages may call the API (cors.rs).
    pub cors: Option<String>,
}

/// What /v1/models and /v1/status say of the model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// The id /v1/models lists (any name is accepted in requests).
    pub name: String,
    pub context: usize,
    pub device: String,
    /// The engine's settings, as /v1/status shows them.
    pub settings: serde_json::Value,
}

/// What every handler reads.
pub struct Shared {
    pub info: ModelInfo,
    pub tok: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub queue: Queue,
    pub api_key: Option<String>,
    pub max_body: usize,
    pub cors: Option<String>,
    pub started: Instant,
    pub metrics: PrometheusHandle,
    /// Built on the first request for structured output (structured.rs).
    pub grammars: structured::GrammarsOnce,
}

/// Refuses a listening address beyond loopback without an API key.
pub fn check_bind(o: &Options) -> anyhow::Result<SocketAddr> {
    let ip: IpAddr = match o.host.as_str() {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h.parse().with_context(|| format!("--host {h:?} is not an IP address"))?,
    };
    if !ip.is_loopback() && o.api_key.is_none() {
        bail!("--host {ip} listens beyond this machine: give --api-key (or listen on 127.0.0.1)");
    }
    Ok(SocketAddr::new(ip, o.port))
}

/// The installed Prometheus recorder (one a process).
pub fn metrics_handle() -> anyhow::Result<PrometheusHandle> {
    static H: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    if let Some(h) = H.get() {
        return Ok(h.clone());
    }
    let h = PrometheusBuilder::new().install_recorder().context("installing the metrics recorder")?;
    Ok(H.get_or_init(|| h).clone())
}

/// Every route, behind the key check and the request counter.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(web::index))
        .route("/web/app.js", get(web::app))
        .route("/web/style.css", get(web::style))
        .route("/favicon.ico", get(web::favicon))
        .route("/health", get(health))
        .route("/v1/status", get(status))
        .route("/metrics", get(prometheus))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), authorize))
        .layer(middleware::from_fn_with_state(shared.clone(), cors::cors))
        .layer(middleware::from_fn(count))
        .with_state(shared)
}

/// Serves until Ctrl-C (or SIGTERM), then lets running requests finish.
pub async fn serve(o: &Options, shared: Arc<Shared>) -> anyhow::Result<()> {
    let addr = check_bind(o)?;
    // The grammars read the whole vocabulary once (a fraction of a second at 150K tokens): built now, on
    // a thread of their own, rather than on the first request that asks for structured output.
    let warm = shared.clone();
    std::thread::spawn(move || structured::grammars(&warm));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router(shared)).with_graceful_shutdown(shutdown()).await.context("serving")
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    eprintln!("stopping: finishing the requests in flight");
}

/// Equal bytes, in a time that does not depend on where they first differ.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// With a key set, every endpoint but /health and the web page's files wants it (`Authorization: Bearer KEY` or `x-api-key`).
async fn authorize(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let Some(key) = &s.api_key else { return next.run(req).await };
    if req.uri().path() == "/health" || web::is_page(req.uri().path()) {
        return next.run(req).await;
    }
    let h = req.headers();
    let given = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    match given {
        Some(g) if same_key(g.trim().as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::new(StatusCode::UNAUTHORIZED, Flavor::of_path(req.uri().path()), "a valid API key is required")
            .into_response(),
    }
}

/// Counts requests by endpoint and outcome.
async fn count(req: Request, next: Next) -> Response {
    let endpoint = match req.uri().path() {
        p @ ("/health"
        | "/v1/status"
        | "/metrics"
        | "/v1/models"
        | "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/responses"
        | "/v1/messages"
        | "/v1/messages/count_tokens") => p.to_string(),
        p if p.starts_with("/v1/models/") => "/v1/models/{id}".to_string(),
        p if web::is_page(p) => "page".to_string(),
        _ => "other".to_string(),
    };
    let (method, path, t0) = (req.method().clone(), req.uri().path().to_string(), Instant::now());
    let r = next.run(req).await;
    // Streamed replies: the time to their headers.
    let note = r.extensions().get::<errors::LogNote>().map(|n| format!(": {}", n.0)).unwrap_or_default();
    eprintln!("{method} {path} {} {:.1} ms{note}", r.status().as_u16(), t0.elapsed().as_secs_f64() * 1e3);
    let outcome = match r.status() {
        s if s.is_success() => "ok",
        StatusCode::SERVICE_UNAVAILABLE => "busy",
        s if s.is_client_error() => "client_error",
        _ => "server_error",
    };
    metrics::counter!("strata_requests_total", "endpoint" => endpoint, "outcome" => outcome).increment(1);
    r
}

async fn not_found(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::new(StatusCode::NOT_FOUND, Flavor::of_path(&path), format!("no endpoint {} {path}", req.method()))
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// The model as both APIs list it (OpenAI's `object`, `created`, `owned_by`; Anthropic's `type`,
/// `display_name`, `created_at`), under `id`.
fn model_object(s: &Shared, id: &str) -> serde_json::Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "strata", "context_length": s.info.context,
           "type": "model", "display_name": s.info.name, "created_at": "1970-01-01T00:00:00Z"})
}

async fn models(State(s): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let name = &s.info.name;
    Json(json!({"object": "list", "data": [model_object(&s, name)],
                "has_more": false, "first_id": name, "last_id": name}))
}

/// GET /v1/models/{id}: any name is accepted in requests, so every id is this model (clients look up the
/// name they were configured with before they send anything).
async fn model(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Json<serde_json::Value> {
    Json(model_object(&s, &id))
}

async fn status(State(s): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let running = s.queue.running();
    let m = s.queue.monitor();
    Json(json!({
        "model": s.info.name,
        "context": s.info.context,
        "device": s.info.device,
        "settings": s.info.settings,
        "uptime_seconds": s.started.elapsed().as_secs(),
        "queue": {"waiting": s.queue.waiting(), "capacity": s.queue.capacity()},
        "speculation": speculation(s.queue.spec()),
        "running": running.map(|r| json!({
            "prompt_tokens": r.prompt_tokens,
            "reused_tokens": r.reused,
            "read_tokens": r.read,
            "generated_tokens": r.generated,
            "seconds": r.since.elapsed().as_secs_f64(),
            "prefill_tokens_per_second": r.prefill_rate(),
            "decode_tokens_per_second": r.decode_rate(),
        })),
        "last": {"prefill_tokens_per_second": m.last_prefill_rate, "decode_tokens_per_second": m.last_decode_rate},
        "cache": {"conversations": m.cached.0, "bytes": m.cached.1, "budget_bytes": m.cached.2},
        "device_memory": m.memory.map(|(used, total)| json!({"used_bytes": used, "total_bytes": total})),
    }))
}

/// Speculation's totals: verify passes, drafts made and accepted, and the share accepted.
fn speculation(t: &worker::SpecTotals) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    let (passes, drafted, accepted) = (t.passes.load(Relaxed), t.drafted.load(Relaxed), t.accepted.load(Relaxed));
    json!({
        "passes": passes,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": if drafted > 0 { Some(accepted as f64 / drafted as f64) } else { None },
    })
}

async fn prometheus(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(same_key(b"secret", b"secret"));
        assert!(!same_key(b"secret", b"secreT"));
        assert!(!same_key(b"secret", b"secret2"));
        assert!(!same_key(b"", b"x"));
    }

    #[test]
    fn only_loopback_listens_without_a_key() {
        let o = |host: &str, key: Option<&str>| Options {
            host: host.into(),
            port: 8080,
            api_key: key.map(str::to_string),
            queue: 4,
            max_body: 1 << 20,
            cors: None,
        };
        assert!(check_bind(&o("127.0.0.1", None)).is_ok());
        assert!(check_bind(&o("::1", None)).is_ok());
        assert!(check_bind(&o("localhost", None)).is_ok());
        let e = check_bind(&o("0.0.0.0", None)).unwrap_err().to_string();
        assert!(e.contains("--api-key"), "{e}");
        assert!(check_bind(&o("0.0.0.0", Some("k"))).is_ok());
        assert!(check_bind(&o("not-an-ip", Some("k"))).is_err());
    }
}
