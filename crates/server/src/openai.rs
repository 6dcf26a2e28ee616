//! OpenAI's chat completions and completions: replies sent whole or streamed as `chat.completion.chunk`s
//! ending in `data: [DONE]`, tool calls parsed from the model's output into `tool_calls`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::errors::{noted, ApiError, Flavor};
use crate::gen::{collect, new_id, now, sampler, Ask};
use crate::logprobs::{self, Pending, MAX_TOP};
use crate::req::{check_schema, content_text, json_object, Fields};
use crate::stream::{data, sse};
use crate::structured::{any_strict, response_format};
use crate::tools::{arguments, left_out_note, offered, Reading, ToolCall};
use crate::worker::{Finish, Reason, Update};
use crate::Shared;

const F: Flavor = Flavor::OpenAi;

/// The roles a message may have.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// OpenAI `messages` as the chat template takes them: content as text, `developer` as `system`, tool
/// calls' arguments as JSON objects.
pub fn template_messages(v: Option<&Value>) -> Result<Value, ApiError> {
    let list = match v {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::bad(F, "messages: empty")),
        Some(_) => return Err(ApiError::bad(F, "messages: expected an array")),
        None => return Err(ApiError::bad(F, "messages: missing")),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("messages[{i}]");
            let m = m.as_object().ok_or_else(|| ApiError::bad(F, format!("{at}: expected an object")))?;
            let role =
                m.get("role").and_then(Value::as_str).ok_or_else(|| ApiError::bad(F, format!("{at}.role: missing")))?;
            if !ROLES.contains(&role) {
                return Err(ApiError::bad(F, format!("{at}.role: unknown role {role:?}")));
            }
            let content = content_text(m.get("content").unwrap_or(&Value::Null), &format!("{at}.content"), F)?;
            let calls = tool_calls(m.get("tool_calls"), &at)?;
            if content.is_none() && calls.is_empty() {
                return Err(ApiError::bad(F, format!("{at}.content: missing")));
            }
            let role = if role == "developer" { "system" } else { role };
            let mut out = json!({"role": role, "content": content});
            if !calls.is_empty() {
                out["tool_calls"] = Value::Array(calls);
            }
            if let Some(id) = m.get("tool_call_id") {
                out["tool_call_id"] = id.clone();
            }
            Ok(out)
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// An assistant message's `tool_calls`, each `{"type": "function", "function": {"name", "arguments"}}`
/// with the arguments read from their JSON string.
fn tool_calls(v: Option<&Value>, at: &str) -> Result<Vec<Value>, ApiError> {
    let Some(list) = v.filter(|v| !v.is_null()) else { return Ok(Vec::new()) };
    let list = list.as_array().ok_or_else(|| ApiError::bad(F, format!("{at}.tool_calls: expected an array")))?;
    list.iter()
        .enumerate()
        .map(|(j, c)| {
            let f =
                c.get("function").ok_or_else(|| ApiError::bad(F, format!("{at}.tool_calls[{j}].function: missing")))?;
            let name = f.get("name").and_then(Value::as_str);
            let name = name.ok_or_else(|| ApiError::bad(F, format!("{at}.tool_calls[{j}].function.name: missing")))?;
            Ok(json!({"type": "function", "function": {"name": name, "arguments": arguments(f.get("arguments"))}}))
        })
        .collect()
}

/// The request's function tools (a schema that is not an object is refused) as the template takes them,
/// or `None` when there are none or `tool_choice` is "none"; tools of other types (`custom`, …) are left
/// out, and said in the second value.
pub fn template_tools(f: &Fields) -> Result<(Option<Value>, Vec<String>), ApiError> {
    let Some(tools) = f.array("tools")? else { return Ok((None, Vec::new())) };
    let function = |t: &Value| matches!(t.get("type").and_then(Value::as_str), None | Some("function"));
    let (kept, left) = offered(tools, function);
    for &(i, t) in &kept {
        let func = t.get("function").ok_or_else(|| ApiError::bad(F, format!("tools[{i}].function: missing")))?;
        if func.get("name").and_then(Value::as_str).is_none() {
            return Err(ApiError::bad(F, format!("tools[{i}].function.name: missing")));
        }
        check_schema(func.get("parameters"), &format!("tools[{i}].function.parameters"), F)?;
    }
    let none = matches!(f.get("tool_choice"), Some(Value::String(s)) if s == "none");
    let kept: Vec<Value> = kept.into_iter().map(|(_, t)| t.clone()).collect();
    Ok(((!kept.is_empty() && !none).then_some(Value::Array(kept)), left))
}

/// The call `tool_choice` forces: "required" any, `{"type": "function", "function": {"name"}}` that one.
fn forced<'a>(f: &Fields<'a>) -> Result<Option<Option<&'a str>>, ApiError> {
    match f.get("tool_choice") {
        Some(Value::String(s)) if s == "required" => Ok(Some(None)),
        Some(Value::Object(o)) => match o.get("function").and_then(|x| x.get("name")).and_then(Value::as_str) {
            Some(name) => Ok(Some(Some(name))),
            None => Err(ApiError::bad(F, "tool_choice.function.name: missing")),
        },
        _ => Ok(None),
    }
}

/// `max_completion_tokens` or `max_tokens` (capped at the context's room when the reply starts).
fn max_tokens(f: &Fields) -> Result<Option<u64>, ApiError> {
    Ok(f.budget("max_completion_tokens")?.or(f.budget("max_tokens")?))
}

fn only_one_choice(f: &Fields) -> Result<(), ApiError> {
    match f.u64_in("n", 1, u64::MAX)? {
        Some(n) if n > 1 => Err(ApiError::bad(F, "n: one choice only")),
        _ => Ok(()),
    }
}

/// Chat's log-probabilities: `logprobs: true`, with `top_logprobs` (0–20) alternatives a token.
fn chat_logprobs(f: &Fields) -> Result<Option<usize>, ApiError> {
    let top = f.u64_in("top_logprobs", 0, MAX_TOP)?;
    match (f.bool("logprobs")?.unwrap_or(false), top) {
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
        (false, Some(n)) if n > 0 => Err(ApiError::bad(F, "top_logprobs: needs logprobs: true")),
        (false, _) => Ok(None),
    }
}

pub fn finish_reason(f: &Finish, calls: bool) -> &'static str {
    match f.reason {
        _ if calls => "tool_calls",
        Reason::Stop => "stop",
        Reason::Length | Reason::ContextFull => "length",
    }
}

pub fn usage(f: &Finish) -> Value {
    json!({
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": f.reused},
    })
}

/// The calls in OpenAI's form; a streamed delta's carry their `index` too.
fn calls_json(calls: &[ToolCall], streamed: bool) -> Vec<Value> {
    let call = |c: &ToolCall| {
        json!({"id": new_id("call_"), "type": "function",
               "function": {"name": c.name, "arguments": c.arguments_text()}})
    };
    let index = |(i, mut v): (usize, Value)| {
        if streamed {
            v["index"] = i.into();
        }
        v
    };
    calls.iter().map(call).enumerate().map(index).collect()
}

/// A failure in an OpenAI stream: the error object, then the end.
fn failed(e: String) -> Vec<Event> {
    vec![
        data(&ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, F, e).body()),
        Event::default().data("[DONE]"),
    ]
}

/// POST /v1/chat/completions
pub async fn chat(State(s): State<Arc<Shared>>, body: Body) -> Result<Response, ApiError> {
    let m = json_object(body, s.max_body, F).await?;
    let f = Fields::new(&m, F);
    only_one_choice(&f)?;
    let messages = template_messages(f.get("messages"))?;
    let (tools, left_out) = template_tools(&f)?;
    let note = left_out_note(&left_out);
    let reading = Reading::new(tools.as_ref(), forced(&f)?, any_strict(f.get("tools")), F)?;
    let ask = Ask {
        prompt: s.render(messages, tools, &reading.opening, F).await?,
        max_tokens: max_tokens(&f)?,
        sampler: sampler(&f, "top_k")?,
        stop: f.strings("stop")?,
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        guide: s.guide(reading.grammar.clone().or(response_format(&f)?), F).await?,
        logprobs: chat_logprobs(&f)?,
    };
    let model = f.str("model")?.unwrap_or(&s.info.name).to_string();
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = m.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool);
    let with_logprobs = ask.logprobs.is_some();
    let rx = s.start(ask, F)?;
    let (id, created) = (new_id("chatcmpl-"), now());
    if stream {
        let r = chat_stream(rx, id, created, model, reading, include_usage.unwrap_or(false)).into_response();
        return Ok(noted(r, note));
    }
    let c = collect(rx, F).await?;
    let (content, calls) = reading.parse(c.text);
    let mut message = json!({"role": "assistant", "content": if content.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(content) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls_json(&calls, false));
    }
    let r = Json(json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message,
                     "logprobs": if with_logprobs { logprobs::chat(&c.logprobs) } else { Value::Null },
                     "finish_reason": finish_reason(&c.finish, !calls.is_empty())}],
        "usage": usage(&c.finish),
    }))
    .into_response();
    Ok(noted(r, note))
}

fn chat_stream(
    rx: tokio::sync::mpsc::UnboundedReceiver<Update>,
    id: String,
    created: u64,
    model: String,
    reading: Reading,
    include_usage: bool,
) -> impl IntoResponse {
    let chunk = move |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let first = vec![data(&chunk(json!({"role": "assistant", "content": ""}), Value::Null))];
    let mut split = reading.splitter();
    let mut pending = Pending::default();
    sse(rx, first, move |u| match u {
        Update::Logprob(e) => {
            pending.push(*e);
            Vec::new()
        }
        Update::Text(t) => {
            let t = if reading.on { split.push(&t) } else { t };
            if t.is_empty() {
                return Vec::new();
            }
            let mut c = chunk(json!({"content": t}), Value::Null);
            pending.into_chat(&mut c);
            vec![data(&c)]
        }
        Update::Done(f) => {
            let mut out = Vec::new();
            let (tail, calls) = split.finish();
            if !tail.is_empty() || !pending.is_empty() {
                let mut c = chunk(json!({"content": tail}), Value::Null);
                pending.into_chat(&mut c);
                out.push(data(&c));
            }
            if !calls.is_empty() {
                out.push(data(&chunk(json!({"tool_calls": calls_json(&calls, true)}), Value::Null)));
            }
            let mut last = chunk(json!({}), Value::String(finish_reason(&f, !calls.is_empty()).into()));
            if include_usage {
                last["usage"] = Value::Null;
            }
            out.push(data(&last));
            if include_usage {
                let mut u = chunk(json!({}), Value::Null);
                u["choices"] = json!([]);
                u["usage"] = usage(&f);
                out.push(data(&u));
            }
            out.push(Event::default().data("[DONE]"));
            out
        }
        Update::Failed(e) => failed(e),
        Update::Started { .. } | Update::Prefill { .. } => Vec::new(),
    })
}

/// The prompt of /v1/completions: a string, or an array holding one string or one list of token ids.
async fn completion_prompt(s: &Arc<Shared>, m: &Map<String, Value>) -> Result<Vec<u32>, ApiError> {
    let vocab = s.tok.vocab_size() as u64;
    let ids = |a: &Vec<Value>| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|v| match v.as_u64() {
                Some(t) if t < vocab => Ok(t as u32),
                _ => Err(ApiError::bad(F, format!("prompt: {v} is not a token id below {vocab}"))),
            })
            .collect()
    };
    match m.get("prompt") {
        Some(Value::String(t)) => s.encode(t.clone(), F).await,
        Some(Value::Array(a)) if a.iter().all(Value::is_number) && !a.is_empty() => ids(a),
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::String(t) => s.encode(t.clone(), F).await,
            Value::Array(x) => ids(x),
            _ => Err(ApiError::bad(F, "prompt: expected a string or token ids")),
        },
        Some(Value::Array(_)) => Err(ApiError::bad(F, "prompt: one prompt per request")),
        Some(_) => Err(ApiError::bad(F, "prompt: expected a string or token ids")),
        None => Err(ApiError::bad(F, "prompt: missing")),
    }
}

/// POST /v1/completions
pub async fn completions(State(s): State<Arc<Shared>>, body: Body) -> Result<Response, ApiError> {
    let m = json_object(body, s.max_body, F).await?;
    let f = Fields::new(&m, F);
    only_one_choice(&f)?;
    let ask = Ask {
        prompt: completion_prompt(&s, &m).await?,
        max_tokens: Some(f.budget("max_tokens")?.unwrap_or(16)),
        sampler: sampler(&f, "top_k")?,
        stop: f.strings("stop")?,
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        guide: s.guide(response_format(&f)?, F).await?,
        // The completions API's `logprobs` is the number of alternatives (0: the chosen token's only).
        logprobs: f.u64_in("logprobs", 0, MAX_TOP)?.map(|n| n as usize),
    };
    let model = f.str("model")?.unwrap_or(&s.info.name).to_string();
    let stream = f.bool("stream")?.unwrap_or(false);
    let with_logprobs = ask.logprobs.is_some();
    let rx = s.start(ask, F)?;
    let (id, created) = (new_id("cmpl-"), now());
    let chunk = move |text: &str, finish: Value| {
        json!({"id": id, "object": "text_completion", "created": created, "model": model,
               "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]})
    };
    if stream {
        let mut pending = Pending::default();
        return Ok(sse(rx, Vec::new(), move |u| match u {
            Update::Logprob(e) => {
                pending.push(*e);
                Vec::new()
            }
            Update::Text(t) => {
                let mut c = chunk(&t, Value::Null);
                pending.into_completion(&mut c);
                vec![data(&c)]
            }
            Update::Done(f) => {
                let mut last = chunk("", Value::String(finish_reason(&f, false).into()));
                pending.into_completion(&mut last);
                last["usage"] = usage(&f);
                vec![data(&last), Event::default().data("[DONE]")]
            }
            Update::Failed(e) => failed(e),
            _ => Vec::new(),
        })
        .into_response());
    }
    let c = collect(rx, F).await?;
    let mut out = chunk(&c.text, Value::String(finish_reason(&c.finish, false).into()));
    if with_logprobs {
        out["choices"][0]["logprobs"] = logprobs::completion(&c.logprobs, 0);
    }
    out["usage"] = usage(&c.finish);
    Ok(Json(out).into_response())
}
