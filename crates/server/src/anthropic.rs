//! Anthropic's messages API: system prompts, text and tool-use content blocks, tool results, and the
//! streamed events (`message_start`, `content_block_*`, `message_delta`, `message_stop`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::errors::{noted, ApiError, Flavor};
use crate::gen::{collect, new_id, sampler, Ask};
use crate::req::{check_schema, content_text, json_object, Fields};
use crate::stream::{named, sse};
use crate::structured::{any_strict, output_format};
use crate::tools::{left_out_note, offered, Reading, ToolCall};
use crate::worker::{Finish, Reason, Update};
use crate::Shared;

const F: Flavor = Flavor::Anthropic;

fn bad(msg: String) -> ApiError {
    ApiError::bad(F, msg)
}

/// `system` and `messages` as the chat template takes them: tool results become `tool` turns, tool uses
/// an assistant's `tool_calls`.
fn template_messages(f: &Fields) -> Result<Value, ApiError> {
    let mut out = Vec::new();
    match f.get("system") {
        None => {}
        Some(v) => out.push(json!({"role": "system", "content": content_text(v, "system", F)?})),
    }
    let list = f.array("messages")?.ok_or_else(|| bad("messages: missing".into()))?;
    if list.is_empty() {
        return Err(bad("messages: empty".into()));
    }
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.role: missing")))?;
        if role == "system" {
            // A system turn inside `messages` (Claude Code sends them): text only, folded into the next
            // user turn when rendered (turns.rs).
            let text = content_text(m.get("content").unwrap_or(&Value::Null), &format!("{at}.content"), F)?;
            out.push(json!({"role": "system", "content": text.ok_or_else(|| bad(format!("{at}.content: missing")))?}));
            continue;
        }
        if role != "user" && role != "assistant" {
            return Err(bad(format!("{at}.role: unknown role {role:?} (user, assistant or system)")));
        }
        match m.get("content") {
            Some(Value::String(s)) => out.push(json!({"role": role, "content": s})),
            Some(Value::Array(blocks)) => blocks_to_messages(role, blocks, &at, &mut out)?,
            Some(_) => return Err(bad(format!("{at}.content: expected a string or an array of blocks"))),
            None => return Err(bad(format!("{at}.content: missing"))),
        }
    }
    Ok(Value::Array(out))
}

/// One message's content blocks as template messages, in order.
fn blocks_to_messages(role: &str, blocks: &[Value], at: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut thinking = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                text.push_str(b.get("text").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.text: missing")))?)
            }
            // An earlier reply's reasoning: the template's `reasoning_content`, which it renders or drops
            // (Qwen's keep it only in the turns after the last user message); a redacted one has no text.
            Some("thinking") if role == "assistant" => {
                thinking.push_str(b.get("thinking").and_then(Value::as_str).unwrap_or_default())
            }
            Some("redacted_thinking") if role == "assistant" => {}
            Some("tool_use") if role == "assistant" => {
                let name = b.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.name: missing")))?;
                let input = b.get("input").cloned().unwrap_or(json!({}));
                calls.push(json!({"type": "function", "function": {"name": name, "arguments": input}}));
            }
            Some("tool_result") if role == "user" => {
                let content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => content_text(c, &format!("{at}.content"), F)?.unwrap_or_default(),
                };
                out.push(json!({"role": "tool", "content": content, "tool_call_id": b.get("tool_use_id")}));
            }
            Some(other) => {
                return Err(bad(format!("{at}: a block of type {other:?} is not supported in a {role} message")))
            }
            None => return Err(bad(format!("{at}.type: missing"))),
        }
    }
    if !text.is_empty() || !calls.is_empty() {
        let mut m = json!({"role": role, "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
        if !calls.is_empty() {
            m["tool_calls"] = Value::Array(calls);
        }
        if !thinking.is_empty() {
            m["reasoning_content"] = Value::String(thinking);
        }
        out.push(m);
    }
    Ok(())
}

/// `tools` (`name`, `description`, `input_schema`) in the function form the template takes; none when
/// `tool_choice` is `{"type": "none"}`. Server tools (a `type` other than "custom": web search, bash…)
/// are left out, and said in the second value.
fn template_tools(f: &Fields) -> Result<(Option<Value>, Vec<String>), ApiError> {
    let Some(tools) = f.array("tools")? else { return Ok((None, Vec::new())) };
    let custom = |t: &Value| matches!(t.get("type").and_then(Value::as_str), None | Some("custom"));
    let (kept, left) = offered(tools, custom);
    let mut out = Vec::new();
    for (i, t) in kept {
        let name = t.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("tools[{i}].name: missing")))?;
        check_schema(t.get("input_schema"), &format!("tools[{i}].input_schema"), F)?;
        out.push(json!({"type": "function", "function": {
            "name": name, "description": t.get("description").cloned().unwrap_or(Value::Null),
            "parameters": t.get("input_schema").cloned().unwrap_or(json!({}))}}));
    }
    let none = f.get("tool_choice").and_then(|c| c.get("type")).and_then(Value::as_str) == Some("none");
    Ok(((!out.is_empty() && !none).then_some(Value::Array(out)), left))
}

/// The call `tool_choice` forces: `{"type": "any"}` any, `{"type": "tool", "name"}` that one.
fn forced<'a>(f: &Fields<'a>) -> Result<Option<Option<&'a str>>, ApiError> {
    let Some(c) = f.get("tool_choice") else { return Ok(None) };
    match c.get("type").and_then(Value::as_str) {
        Some("any") => Ok(Some(None)),
        Some("tool") => match c.get("name").and_then(Value::as_str) {
            Some(name) => Ok(Some(Some(name))),
            None => Err(bad("tool_choice.name: missing".into())),
        },
        _ => Ok(None),
    }
}

fn stop_reason(f: &Finish, calls: bool) -> &'static str {
    match f.reason {
        _ if calls => "tool_use",
        Reason::Stop if f.stop_string.is_some() => "stop_sequence",
        Reason::Stop => "end_turn",
        Reason::Length | Reason::ContextFull => "max_tokens",
    }
}

fn usage(f: &Finish) -> Value {
    json!({"input_tokens": f.prompt_tokens - f.reused, "output_tokens": f.completion_tokens,
           "cache_read_input_tokens": f.reused, "cache_creation_input_tokens": 0})
}

fn tool_use(c: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": c.arguments})
}

/// A final assistant turn of text only (a prefill): taken out of `messages` and given back, so the reply
/// continues it rather than starting a turn of its own after it.
fn take_prefill(messages: &mut Value) -> String {
    let Some(list) = messages.as_array_mut() else { return String::new() };
    let last = list.last().filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_none());
    match last.and_then(|m| m["content"].as_str()).map(str::to_string) {
        Some(text) if list.len() > 1 => {
            list.pop();
            text
        }
        _ => String::new(),
    }
}

/// The request's prompt as tokens, how its reply is read (tool calls), and a note of the tools left out.
/// A prefill (a final assistant turn) is the start of the reply: the prompt ends with it, and the reply
/// is what comes after it.
async fn prompt(s: &Arc<Shared>, f: &Fields<'_>) -> Result<(Vec<u32>, Reading, Option<String>), ApiError> {
    let mut messages = template_messages(f)?;
    let prefill = take_prefill(&mut messages);
    let (tools, left_out) = template_tools(f)?;
    let reading = Reading::new(tools.as_ref(), forced(f)?, any_strict(f.get("tools")), F)?;
    let prompt = s.render(messages, tools, &(prefill + &reading.opening), F).await?;
    Ok((prompt, reading, left_out_note(&left_out)))
}

/// POST /v1/messages/count_tokens: the prompt's tokens as /v1/messages would read them.
pub async fn count_tokens(State(s): State<Arc<Shared>>, body: Body) -> Result<Response, ApiError> {
    let m = json_object(body, s.max_body, F).await?;
    let (prompt, _, note) = prompt(&s, &Fields::new(&m, F)).await?;
    Ok(noted(Json(json!({"input_tokens": prompt.len()})).into_response(), note))
}

/// POST /v1/messages
pub async fn messages(State(s): State<Arc<Shared>>, body: Body) -> Result<Response, ApiError> {
    let m = json_object(body, s.max_body, F).await?;
    let f = Fields::new(&m, F);
    let (prompt, reading, note) = prompt(&s, &f).await?;
    let ask = Ask {
        prompt,
        max_tokens: f.budget("max_tokens")?,
        sampler: sampler(&f, "top_k")?,
        stop: f.strings("stop_sequences")?,
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        guide: s.guide(reading.grammar.clone().or(output_format(&f)?), F).await?,
        logprobs: None,
    };
    let prompt_tokens = ask.prompt.len();
    let model = f.str("model")?.unwrap_or(&s.info.name).to_string();
    let stream = f.bool("stream")?.unwrap_or(false);
    let rx = s.start(ask, F)?;
    let id = new_id("msg_");
    if stream {
        return Ok(noted(message_stream(rx, id, model, prompt_tokens, reading).into_response(), note));
    }
    let c = collect(rx, F).await?;
    let (text, calls) = reading.parse(c.text);
    let mut content = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(calls.iter().map(tool_use));
    let r = Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason(&c.finish, !calls.is_empty()), "stop_sequence": c.finish.stop_string,
        "usage": usage(&c.finish),
    }))
    .into_response();
    Ok(noted(r, note))
}

fn message_stream(
    rx: tokio::sync::mpsc::UnboundedReceiver<Update>,
    id: String,
    model: String,
    prompt_tokens: usize,
    reading: Reading,
) -> impl IntoResponse {
    // Opened once the engine takes the request: its usage then says how much of the prompt was reused.
    let start = move |reused: usize| {
        let usage = json!({"input_tokens": prompt_tokens - reused, "output_tokens": 0,
                           "cache_read_input_tokens": reused, "cache_creation_input_tokens": 0});
        let message = json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                             "stop_reason": null, "stop_sequence": null, "usage": usage});
        let block = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
        vec![
            named("message_start", &json!({"type": "message_start", "message": message})),
            named("content_block_start", &block),
            named("ping", &json!({"type": "ping"})),
        ]
    };
    let delta = |t: &str| {
        named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": t}}),
        )
    };
    let mut split = reading.splitter();
    sse(rx, Vec::new(), move |u| match u {
        Update::Started { reused } => start(reused),
        Update::Logprob(_) => Vec::new(),
        Update::Text(t) => {
            let t = if reading.on { split.push(&t) } else { t };
            if t.is_empty() {
                Vec::new()
            } else {
                vec![delta(&t)]
            }
        }
        Update::Done(f) => {
            let (tail, calls) = split.finish();
            let mut out = Vec::new();
            if !tail.is_empty() {
                out.push(delta(&tail));
            }
            out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
            for (i, c) in calls.iter().enumerate() {
                let mut block = tool_use(c);
                block["input"] = json!({});
                out.push(named(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": i + 1, "content_block": block}),
                ));
                out.push(named(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": i + 1,
                    "delta": {"type": "input_json_delta", "partial_json": c.arguments_text()}}),
                ));
                out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": i + 1})));
            }
            out.push(named(
                "message_delta",
                &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(&f, !calls.is_empty()), "stop_sequence": f.stop_string},
                "usage": {"output_tokens": f.completion_tokens}}),
            ));
            out.push(named("message_stop", &json!({"type": "message_stop"})));
            out
        }
        Update::Failed(e) => {
            vec![named("error", &ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, F, e).body())]
        }
        Update::Prefill { .. } => Vec::new(),
    })
}
