//! What every endpoint shares: a prompt made and checked, a job queued, and its updates gathered (for a
//! reply sent whole) or passed on (for a streamed one).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::Value;
use strata_engine::grammar::Guide;
use strata_engine::sampler::{Penalties, SamplerConfig};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::errors::{ApiError, Flavor};
use crate::logprobs::TokenLogprob;
use crate::req::Fields;
use crate::worker::{Finish, Job, Update};
use crate::Shared;

/// The sampling settings common to the APIs (defaults as theirs: temperature 1; without a seed, a new
/// one each request).
pub fn sampler(f: &Fields, top_k_key: &str) -> Result<SamplerConfig, ApiError> {
    let seed = match f.get("seed") {
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        Some(v) => v
            .as_i64()
            .map(|s| s as u64)
            .or(v.as_u64())
            .ok_or_else(|| ApiError::bad(f.flavor, "seed: expected an integer"))?,
    };
    Ok(SamplerConfig {
        temperature: f.f32_in("temperature", 0.0, 2.0)?.unwrap_or(1.0),
        top_p: f.f32_in("top_p", 0.0, 1.0)?.unwrap_or(1.0),
        top_k: f.u64_in(top_k_key, 0, 1 << 20)?.unwrap_or(0) as usize,
        seed,
        penalties: penalties(f)?,
    })
}

/// OpenAI's `logit_bias` (token id → −100..100), `presence_penalty` and `frequency_penalty` (−2..2).
fn penalties(f: &Fields) -> Result<Penalties, ApiError> {
    let mut bias = Vec::new();
    if let Some(b) = f.get("logit_bias") {
        let m = b.as_object().ok_or_else(|| ApiError::bad(f.flavor, "logit_bias: expected an object"))?;
        for (k, v) in m {
            let id: u32 =
                k.parse().map_err(|_| ApiError::bad(f.flavor, format!("logit_bias: {k:?} is not a token id")))?;
            let x = v.as_f64().filter(|x| (-100.0..=100.0).contains(x));
            let x =
                x.ok_or_else(|| ApiError::bad(f.flavor, format!("logit_bias.{k}: expected a number in -100..=100")))?;
            bias.push((id, x as f32));
        }
        bias.sort_by_key(|&(t, _)| t);
    }
    Ok(Penalties {
        bias,
        presence: f.f32_in("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        frequency: f.f32_in("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
    })
}

/// A generation asked for.
pub struct Ask {
    pub prompt: Vec<u32>,
    pub max_tokens: Option<u64>,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    /// `ignore_eos` (an extension to every API): past the stop tokens, to `max_tokens`.
    pub ignore_eos: bool,
    /// The grammar the reply is decoded under (structured.rs), if any.
    pub guide: Option<Guide>,
    /// Log-probabilities, with this many alternatives a token.
    pub logprobs: Option<usize>,
}

/// What a reply sent whole carries.
pub struct Collected {
    pub text: String,
    pub finish: Finish,
    /// Each token's, when asked for.
    pub logprobs: Vec<TokenLogprob>,
}

impl Shared {
    /// Messages (and tools) through the model's chat template, then `opening` (the start of the reply,
    /// a forced tool call's), as tokens.
    pub async fn render(
        self: &Arc<Self>,
        messages: Value,
        tools: Option<Value>,
        opening: &str,
        flavor: Flavor,
    ) -> Result<Vec<u32>, ApiError> {
        let me = self.clone();
        let opening = opening.to_string();
        let text = tokio::task::spawn_blocking(move || {
            let t = me.template.as_ref().ok_or_else(|| "the model has no chat template".to_string())?;
            let messages = crate::turns::fold_system_turns(messages);
            let text = t.render_json(&messages, tools.as_ref(), true).map_err(|e| e.to_string())?;
            Ok::<_, String>(text + &opening)
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, e.to_string()))?
        .map_err(|e| ApiError::bad(flavor, e))?;
        self.encode(text, flavor).await
    }

    /// Text as tokens (special tokens written in it become their ids).
    pub async fn encode(self: &Arc<Self>, text: String, flavor: Flavor) -> Result<Vec<u32>, ApiError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.tok.encode(&text))
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, e.to_string()))?
            .map_err(|e| ApiError::bad(flavor, format!("the prompt: {e}")))
    }

    /// Queues the generation; its updates come through the receiver. Refused with 400 for a prompt that
    /// leaves no room to generate, 503 (with Retry-After) when the queue is full.
    pub fn start(&self, ask: Ask, flavor: Flavor) -> Result<UnboundedReceiver<Update>, ApiError> {
        let context = self.info.context;
        if ask.prompt.is_empty() {
            return Err(ApiError::bad(flavor, "the prompt is empty"));
        }
        if ask.prompt.len() >= context {
            return Err(ApiError::too_long(flavor, ask.prompt.len(), context));
        }
        let vocab = self.tok.vocab_size();
        if let Some(&(t, _)) = ask.sampler.penalties.bias.iter().find(|(t, _)| *t as usize >= vocab) {
            return Err(ApiError::bad(
                flavor,
                format!("logit_bias: token {t} is not in the vocabulary ({vocab} tokens)"),
            ));
        }
        let room = (context - ask.prompt.len()) as u64;
        let max_tokens = ask.max_tokens.unwrap_or(room).min(room) as usize;
        let (tx, rx) = unbounded_channel();
        let job = Job {
            prompt: ask.prompt,
            max_tokens,
            sampler: ask.sampler,
            stop: ask.stop,
            ignore_eos: ask.ignore_eos,
            guide: ask.guide.map(Box::new),
            logprobs: ask.logprobs,
            updates: tx,
            arrived: std::time::Instant::now(),
        };
        self.queue.submit(job).map_err(|_| {
            let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, flavor, "the server is busy: its queue is full");
            e.retry_after = Some(2);
            e
        })?;
        Ok(rx)
    }
}

/// The updates of a generation gathered until it ends.
pub async fn collect(mut rx: UnboundedReceiver<Update>, flavor: Flavor) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(u) = rx.recv().await {
        match u {
            Update::Text(t) => text.push_str(&t),
            Update::Logprob(e) => logprobs.push(*e),
            Update::Done(finish) => return Ok(Collected { text, finish: *finish, logprobs }),
            Update::Failed(e) => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, e)),
            Update::Started { .. } | Update::Prefill { .. } => {}
        }
    }
    Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, flavor, "the engine stopped"))
}

/// Seconds since the epoch (the APIs' `created`).
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A new id with the API's prefix.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}{:x}{:04x}", t, N.fetch_add(1, Ordering::Relaxed) & 0xffff)
}
