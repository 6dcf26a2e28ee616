//! `strata serve`: the model behind the OpenAI and Anthropic APIs. The engine runs on a thread of its
//! own (the decoder borrows the model there); the HTTP side runs on a tokio runtime.

use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use serde_json::json;
use strata_engine::chat::ChatTemplate;
use strata_engine::tokenizer::Tokenizer;
use strata_server::convo::Convos;
use strata_server::worker::{self, Engine, Jobs};
use strata_server::{ModelInfo, Options, Shared};

use crate::load::EngineArgs;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Address to listen on. Anything beyond loopback needs --api-key.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Every endpoint but /health then wants it (`Authorization: Bearer KEY` or `x-api-key: KEY`).
    #[arg(long, env = "STRATA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Requests that may wait while one runs; more get 503 with Retry-After.
    #[arg(long, default_value_t = 32)]
    queue: usize,
    /// Memory for saved conversation states (MiB), the least recently used dropped first; 0 keeps none.
    #[arg(long, default_value_t = 4096)]
    cache_mib: usize,
    /// Largest request body (MiB); larger ones get 413.
    #[arg(long, default_value_t = 32)]
    max_body_mib: usize,
    /// The model's id in /v1/models (default: the file's name). Requests may name any model.
    #[arg(long)]
    name: Option<String>,
    /// Let browser pages from ORIGIN (e.g. http://localhost:3000, or * for any) call the API: preflights
    /// answered, replies marked. Off by default.
    #[arg(long, value_name = "ORIGIN")]
    cors: Option<String>,
}

/// What the engine thread hands the HTTP side once the model is loaded.
struct Ready {
    info: ModelInfo,
    tok: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
}

/// The context the built-in model serves when none is asked for: coding agents send prompts of 10–31K
/// tokens, so its trained 4,096 cells are extended (YaRN, by default past the trained context).
const BUILT_IN_SERVED_CONTEXT: usize = 65536;

pub fn run(mut a: ServeArgs) -> Result<()> {
    if a.engine.model.is_none() && a.engine.max_context.is_none() {
        a.engine.max_context = Some(BUILT_IN_SERVED_CONTEXT);
        eprintln!(
            "the built-in model serves {BUILT_IN_SERVED_CONTEXT} cells of context (trained on 4096, extended by YaRN) \
             for coding agents' long prompts; --max-context to change"
        );
    }
    let options = Options {
        host: a.host.clone(),
        port: a.port,
        api_key: a.api_key.clone().filter(|k| !k.is_empty()),
        queue: a.queue,
        max_body: a.max_body_mib << 20,
        cors: a.cors.clone(),
    };
    strata_server::check_bind(&options)?; // before minutes of loading
    let metrics = strata_server::metrics_handle()?;
    let (queue, jobs) = worker::queue(a.queue);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let settings = json!({"kv": format!("{:?}", a.engine.kv).to_lowercase(), "queue": a.queue, "spec": format!("{:?}", a.engine.spec).to_lowercase(),
                          "cache_mib": a.cache_mib, "max_body_mib": a.max_body_mib});
    let name = a.name.clone().unwrap_or_else(|| model_name(a.engine.model.as_deref()));
    let (engine_args, cache) = (a.engine.clone(), a.cache_mib << 20);
    let engine = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            if let Err(e) = engine_thread(&engine_args, cache, jobs, &ready_tx) {
                let _ = ready_tx.send(Err(e));
            }
        })
        .context("starting the engine thread")?;
    let ready = match ready_rx.recv() {
        Ok(r) => r?,
        Err(_) => return Err(anyhow!("the engine thread stopped while loading")),
    };
    let mut info = ready.info;
    info.name = name;
    info.settings = settings;
    eprintln!("serving {} ({} cells of context, {})", info.name, info.context, info.device);
    let shared = Arc::new(Shared {
        info,
        tok: ready.tok,
        template: ready.template,
        queue,
        api_key: options.api_key.clone(),
        max_body: options.max_body,
        cors: options.cors.clone(),
        started: Instant::now(),
        metrics,
        grammars: Default::default(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let served = rt.block_on(strata_server::serve(&options, shared));
    drop(rt); // the last queue handles go with the handlers: the engine thread then ends
    let _ = engine.join();
    served
}

/// The model's id: its file name without `.gguf` (and without a shard's `-00001-of-00002`).
fn model_name(path: Option<&Path>) -> String {
    let Some(p) = path else { return "strata-fortunes".into() };
    let stem = p.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    let stem = stem.strip_suffix(".gguf").unwrap_or(stem);
    match stem.rsplit_once("-of-").and_then(|(head, _)| head.rsplit_once('-')) {
        Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base.to_string(),
        _ => stem.to_string(),
    }
}

/// Loads the model and its decoder, says so, then runs jobs until the server stops.
fn engine_thread(a: &EngineArgs, cache: usize, jobs: Jobs, ready: &Sender<Result<Ready>>) -> Result<()> {
    let session = a.open()?;
    let model = &session.model;
    let tok = Arc::new(Tokenizer::from_gguf(&model.gguf).context("loading the tokenizer")?);
    let template = match ChatTemplate::from_gguf(&model.gguf) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("note: {e}: the chat endpoints will refuse requests; /v1/completions works");
            None
        }
    };
    let (mut dec, device) = session.decoder(session.context, None)?;
    let stop_tokens = [tok.eos, tok.im_end].into_iter().flatten().collect();
    let info = ModelInfo { name: String::new(), context: session.context, device, settings: json!({}) };
    let _ = ready.send(Ok(Ready { info, tok: tok.clone(), template }));
    let mut engine = Engine {
        dec: &mut *dec,
        tok: &tok,
        stop_tokens,
        max_context: session.context,
        fresh: model.new_state(session.kv)?,
        spec: a.spec,
        draft_vocab: session.draft_vocab(),
        convos: Convos::new(cache),
        live: Some(Vec::new()),
    };
    worker::work(jobs, &mut engine);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::model_name;
    use std::path::Path;

    #[test]
    fn a_model_is_named_by_its_file() {
        assert_eq!(model_name(Some(Path::new("/m/Qwen3.8-Flash-Next-Q2_0.gguf"))), "Qwen3.8-Flash-Next-Q2_0");
        assert_eq!(model_name(Some(Path::new("full-00001-of-00002.gguf"))), "full");
        assert_eq!(model_name(Some(Path::new("model-v2"))), "model-v2");
        assert_eq!(model_name(None), "strata-fortunes");
    }
}
