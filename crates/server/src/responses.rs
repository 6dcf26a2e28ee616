//! OpenAI's Responses API (what coding agents use): `input` as a string or as items (messages,
//! `function_call`s and their `function_call_output`s), `instructions`, function tools; the reply's
//! `output` items, sent whole or streamed as `response.*` events. Each request carries its whole
//! conversation (`previous_response_id` is refused): the conversation cache makes that cheap.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::errors::{noted, ApiError, Flavor};
use crate::gen::{collect, new_id, now, sampler, Ask};
use crate::req::{check_schema, content_text, json_object, Fields};
use crate::stream::{named, sse};
use crate::structured::{any_strict, text_format};
use crate::tools::{arguments, left_out_note, offered, Reading, ToolCall};
use crate::worker::{Finish, Reason, Update};
use crate::Shared;

const F: Flavor = Flavor::OpenAi;

fn bad(msg: String) -> ApiError {
    ApiError::bad(F, msg)
}

/// `instructions` and `input` as the chat template's messages.
fn template_messages(f: &Fields) -> Result<Value, ApiError> {
    let mut out: Vec<Value> = Vec::new();
    if let Some(i) = f.str("instructions")? {
        out.push(json!({"role": "system", "content": i}));
    }
    match f.get("input") {
        Some(Value::String(s)) => out.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                item_to_messages(item, &format!("input[{i}]"), &mut out)?;
            }
        }
        Some(_) => return Err(bad("input: expected a string or an array of items".into())),
        None => return Err(bad("input: missing".into())),
    }
    if out.iter().all(|m| m["role"] == "system") {
        return Err(bad("input: empty".into()));
    }
    Ok(Value::Array(out))
}

fn item_to_messages(item: &Value, at: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.role: missing")))?;
            let role = match role {
                "developer" | "system" => "system",
                "user" | "assistant" => role,
                r => return Err(bad(format!("{at}.role: unknown role {r:?}"))),
            };
            let content = content_text(item.get("content").unwrap_or(&Value::Null), &format!("{at}.content"), F)?;
            out.push(json!({"role": role, "content": content.ok_or_else(|| bad(format!("{at}.content: missing")))?}));
        }
        "function_call" => {
            let name = item.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.name: missing")))?;
            let call =
                json!({"type": "function", "function": {"name": name, "arguments": arguments(item.get("arguments"))}});
            // Calls in a row belong to one assistant turn.
            match out.last_mut() {
                Some(m) if m["role"] == "assistant" => match m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                    Some(calls) => calls.push(call),
                    None => m["tool_calls"] = json!([call]),
                },
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Array(_)) => content_text(v, &format!("{at}.output"), F)?.unwrap_or_default(),
                Some(v) => v.to_string(),
                None => return Err(bad(format!("{at}.output: missing"))),
            };
            out.push(json!({"role": "tool", "content": output, "tool_call_id": item.get("call_id")}));
        }
        // The model's own reasoning items are not read back.
        "reasoning" => {}
        other => return Err(bad(format!("{at}: an item of type {other:?} is not supported"))),
    }
    Ok(())
}

/// Function tools (`name`, `parameters` at the top level) in the form the template takes; tools of other
/// types (Codex's `namespace` and `web_search`) are left out, and said in the second value.
fn template_tools(f: &Fields) -> Result<(Option<Value>, Vec<String>), ApiError> {
    let Some(tools) = f.array("tools")? else { return Ok((None, Vec::new())) };
    let (kept, left) = offered(tools, |t| t.get("type").and_then(Value::as_str) == Some("function"));
    let mut out = Vec::new();
    for (i, t) in kept {
        let name = t.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("tools[{i}].name: missing")))?;
        check_schema(t.get("parameters"), &format!("tools[{i}].parameters"), F)?;
        out.push(json!({"type": "function", "function": {"name": name,
            "description": t.get("description").cloned().unwrap_or(Value::Null),
            "parameters": t.get("parameters").cloned().unwrap_or(json!({}))}}));
    }
    let none = matches!(f.get("tool_choice"), Some(Value::String(s)) if s == "none");
    Ok(((!out.is_empty() && !none).then_some(Value::Array(out)), left))
}

/// The call `tool_choice` forces: "required" any, `{"type": "function", "name"}` that one.
fn forced<'a>(f: &Fields<'a>) -> Result<Option<Option<&'a str>>, ApiError> {
    match f.get("tool_choice") {
        Some(Value::String(s)) if s == "required" => Ok(Some(None)),
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(name) => Ok(Some(Some(name))),
                None => Err(bad("tool_choice.name: missing".into())),
            }
        }
        _ => Ok(None),
    }
}

/// The response object around its `output` items.
struct Shell {
    id: String,
    created: u64,
    model: String,
    echo: Map<String, Value>,
    /// What the engine left out of the request (tools it cannot run): in `metadata` as `strata_note`.
    note: Option<String>,
}

impl Shell {
    fn object(&self, status: &str, output: Vec<Value>, f: Option<&Finish>) -> Value {
        let mut r = json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "model": self.model, "output": output, "error": null, "incomplete_details": null,
            "parallel_tool_calls": true, "previous_response_id": null, "metadata": {},
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
            "usage": f.map(usage),
        });
        for (k, v) in &self.echo {
            r[k] = v.clone();
        }
        if let Some(n) = &self.note {
            r["metadata"]["strata_note"] = n.as_str().into();
        }
        if let Some(f) = f.filter(|f| f.reason != Reason::Stop) {
            r["status"] = "incomplete".into();
            r["incomplete_details"] =
                json!({"reason": if f.reason == Reason::Length { "max_output_tokens" } else { "max_context" }});
        }
        r
    }
}

fn usage(f: &Finish) -> Value {
    json!({"input_tokens": f.prompt_tokens, "input_tokens_details": {"cached_tokens": f.reused},
           "output_tokens": f.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": f.prompt_tokens + f.completion_tokens})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": []}])
    } else {
        json!([])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn call_item(c: &ToolCall) -> Value {
    json!({"type": "function_call", "id": new_id("fc_"), "call_id": new_id("call_"), "name": c.name,
           "arguments": c.arguments_text(), "status": "completed"})
}

/// POST /v1/responses
pub async fn create(State(s): State<Arc<Shared>>, body: Body) -> Result<Response, ApiError> {
    let m = json_object(body, s.max_body, F).await?;
    let f = Fields::new(&m, F);
    let format = text_format(&f)?;
    // Log-probabilities are given by the chat and completions APIs; here they are refused, not ignored.
    let wants_logprobs = f.u64_in("top_logprobs", 0, 20)?.is_some_and(|n| n > 0)
        || f.get("include")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|x| x == "message.output_text.logprobs"));
    if wants_logprobs {
        return Err(bad(
            "top_logprobs: log-probabilities are given by /v1/chat/completions and /v1/completions, not here".into(),
        ));
    }
    if f.get("previous_response_id").is_some() {
        return Err(bad("previous_response_id: not supported; send the whole conversation in input".into()));
    }
    let messages = template_messages(&f)?;
    let (tools, left_out) = template_tools(&f)?;
    let note = left_out_note(&left_out);
    let reading = Reading::new(tools.as_ref(), forced(&f)?, any_strict(f.get("tools")), F)?;
    let ask = Ask {
        prompt: s.render(messages, tools, &reading.opening, F).await?,
        max_tokens: f.budget("max_output_tokens")?,
        sampler: sampler(&f, "top_k")?,
        stop: Vec::new(),
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        guide: s.guide(reading.grammar.clone().or(format), F).await?,
        logprobs: None,
    };
    let echo: Map<String, Value> =
        ["instructions", "tools", "tool_choice", "temperature", "top_p", "max_output_tokens"]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), m.get(k)?.clone())))
            .collect();
    let model = f.str("model")?.unwrap_or(&s.info.name).into();
    let shell = Shell { id: new_id("resp_"), created: now(), model, echo, note: note.clone() };
    let stream = f.bool("stream")?.unwrap_or(false);
    let rx = s.start(ask, F)?;
    if stream {
        return Ok(noted(response_stream(rx, shell, reading).into_response(), note));
    }
    let c = collect(rx, F).await?;
    let (text, calls) = reading.parse(c.text);
    let mut output = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        output.push(message_item(&new_id("msg_"), &text, "completed"));
    }
    output.extend(calls.iter().map(call_item));
    Ok(noted(Json(shell.object("completed", output, Some(&c.finish))).into_response(), note))
}

fn response_stream(
    rx: tokio::sync::mpsc::UnboundedReceiver<Update>,
    shell: Shell,
    reading: Reading,
) -> impl IntoResponse {
    let msg_id = new_id("msg_");
    let mut seq = 0u64;
    let mut ev = move |kind: &str, mut v: Value| {
        v["type"] = kind.into();
        v["sequence_number"] = seq.into();
        seq += 1;
        named(kind, &v)
    };
    let first = vec![
        ev("response.created", json!({"response": shell.object("in_progress", vec![], None)})),
        ev("response.in_progress", json!({"response": shell.object("in_progress", vec![], None)})),
        ev("response.output_item.added", json!({"output_index": 0, "item": message_item(&msg_id, "", "in_progress")})),
        ev(
            "response.content_part.added",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    let mut split = reading.splitter();
    let mut text = String::new();
    sse(rx, first, move |u| {
        let delta = |ev: &mut dyn FnMut(&str, Value) -> _, t: &str| {
            ev(
                "response.output_text.delta",
                json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": t}),
            )
        };
        match u {
            Update::Text(t) => {
                let t = if reading.on { split.push(&t) } else { t };
                if t.is_empty() {
                    return Vec::new();
                }
                text.push_str(&t);
                vec![delta(&mut ev, &t)]
            }
            Update::Done(f) => {
                let (tail, calls) = split.finish();
                let mut out = Vec::new();
                if !tail.is_empty() {
                    text.push_str(&tail);
                    out.push(delta(&mut ev, &tail));
                }
                let ids = json!({"item_id": msg_id, "output_index": 0, "content_index": 0});
                let mut done = ids.clone();
                done["text"] = text.clone().into();
                out.push(ev("response.output_text.done", done));
                let mut part = ids;
                part["part"] = json!({"type": "output_text", "text": text, "annotations": []});
                out.push(ev("response.content_part.done", part));
                let mut items = vec![message_item(&msg_id, &text, "completed")];
                out.push(ev("response.output_item.done", json!({"output_index": 0, "item": items[0]})));
                for (i, c) in calls.iter().enumerate() {
                    let item = call_item(c);
                    let mut added = item.clone();
                    added["arguments"] = "".into();
                    added["status"] = "in_progress".into();
                    out.push(ev("response.output_item.added", json!({"output_index": i + 1, "item": added})));
                    out.push(ev(
                        "response.function_call_arguments.delta",
                        json!({"item_id": item["id"], "output_index": i + 1, "delta": item["arguments"]}),
                    ));
                    out.push(ev(
                        "response.function_call_arguments.done",
                        json!({"item_id": item["id"], "output_index": i + 1, "arguments": item["arguments"]}),
                    ));
                    out.push(ev("response.output_item.done", json!({"output_index": i + 1, "item": item})));
                    items.push(item);
                }
                // Ended by its length too: the object's status says "incomplete", and clients wait for
                // this event to end the turn.
                out.push(ev("response.completed", json!({"response": shell.object("completed", items, Some(&f))})));
                out
            }
            Update::Failed(e) => {
                let mut r = shell.object("failed", vec![], None);
                r["error"] = json!({"code": "server_error", "message": e});
                vec![ev("response.failed", json!({"response": r}))]
            }
            Update::Started { .. } | Update::Prefill { .. } | Update::Logprob(_) => Vec::new(),
        }
    })
}
