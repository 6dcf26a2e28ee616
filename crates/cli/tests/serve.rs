//! `strata serve` on the built-in model on the CPU: bad input, keys, the queue, hang-ups and the
//! conversation cache over plain HTTP, then the official Python clients (serve_clients.py).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    /// The server's log, line by line as it comes.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// The log's lines so far that contain `s`.
    fn logged(&self, s: &str) -> Vec<String> {
        self.log.lock().unwrap().iter().filter(|l| l.contains(s)).cloned().collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strata() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    // The built-in model is made once, in a folder the tests share.
    c.env("STRATA_CACHE", env!("CARGO_TARGET_TMPDIR")).env_remove("STRATA_API_KEY");
    c
}

/// Starts `strata serve` with `args` on a free port and waits until it listens.
fn serve(args: &[&str]) -> Server {
    let mut child = strata()
        .args(["serve", "--device", "cpu", "--port", "0", "--threads", "2"])
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("starting strata serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("strata serve ended before listening").unwrap();
        if let Some(a) = line.strip_prefix("listening on http://") {
            break a.to_string();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| kept.lock().unwrap().push(l)));
    Server { child, addr, log }
}

/// One HTTP/1.1 exchange: the status, the headers (lowercase names) and the body.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    s.write_all(format!("{req}\r\n").as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a whole response");
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status = head[9..12].parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    (status, head, body)
}

fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..end]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[end + 2..end + 2 + n]);
        b = &b[end + 4 + n..];
    }
    out
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, b) = http(addr, "POST", path, &[("content-type", "application/json")], body.to_string().as_bytes());
    (status, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn chat(user: &[(&str, &str)], max_tokens: u64) -> Value {
    let messages: Vec<Value> = user.iter().map(|(r, c)| json!({"role": r, "content": c})).collect();
    json!({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0})
}

#[test]
fn bad_input_gets_a_4xx_in_the_api_shape_and_the_server_goes_on() {
    let s = serve(&["--max-context", "256", "--max-body-mib", "1"]);
    let a = s.addr.as_str();
    let long = "word ".repeat(600);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("/v1/chat/completions", b"{\"messages\": [".to_vec(), 400),
        ("/v1/chat/completions", b"[1, 2]".to_vec(), 400),
        ("/v1/chat/completions", json!({"messages": "hi"}).to_string().into_bytes(), 400),
        ("/v1/chat/completions", json!({"model": "m"}).to_string().into_bytes(), 400),
        ("/v1/chat/completions", json!({"messages": []}).to_string().into_bytes(), 400),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string().into_bytes(),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": long}]}).to_string().into_bytes(),
            400,
        ),
        ("/v1/chat/completions", chat(&[("user", "x")], 0).to_string().into_bytes(), 400),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).to_string().into_bytes(),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": "not an object"}}]})
            .to_string()
            .into_bytes(),
            400,
        ),
        ("/v1/chat/completions", b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}".to_vec(), 400),
        ("/v1/chat/completions", vec![b' '; 2 << 20], 413),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}).to_string().into_bytes(),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}})
            .to_string()
            .into_bytes(),
            400,
        ),
        ("/v1/completions", json!({"prompt": [999_999]}).to_string().into_bytes(), 400),
        // Shapes that are not JSON schemas, or are unknown.
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})
                .to_string()
                .into_bytes(),
            400,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}})
            .to_string()
            .into_bytes(),
            400,
        ),
        // Not honoured yet, so refused by name rather than ignored.
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}).to_string().into_bytes(),
            400,
        ),
        ("/v1/completions", json!({"prompt": "x", "logprobs": 21}).to_string().into_bytes(), 400),
        (
            "/v1/responses",
            json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": 7}}}).to_string().into_bytes(),
            400,
        ),
        ("/v1/responses", json!({"input": 5}).to_string().into_bytes(), 400),
        ("/v1/responses", json!({"input": "x", "top_logprobs": 2}).to_string().into_bytes(), 400),
        ("/v1/responses", json!({"input": "x", "previous_response_id": "resp_1"}).to_string().into_bytes(), 400),
        ("/v1/nothing", b"{}".to_vec(), 404),
    ];
    for (path, body, want) in &cases {
        let (status, _, b) = http(a, "POST", path, &[("content-type", "application/json")], body);
        let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).to_string();
        assert_eq!(status, *want, "{path} {shown}: {v}");
        assert!(v["error"]["message"].is_string(), "{path} {shown}: not OpenAI's error shape: {v}");
    }
    let anthropic = [
        json!({"max_tokens": 4, "messages": [{"role": "system", "content": [{"type": "image"}]}]}),
        json!({"max_tokens": 4, "messages": [{"role": "tool", "content": "x"}]}),
        json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]}),
        json!({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
               "tools": [{"name": "f", "input_schema": [1]}]}),
        json!({"max_tokens": -1, "messages": [{"role": "user", "content": "x"}]}),
        json!({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
               "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}}),
    ];
    for body in &anthropic {
        let (status, v) = post(a, "/v1/messages", body);
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["type"], "error", "{body}: not Anthropic's error shape: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    // Every 4xx line of the log says why.
    std::thread::sleep(Duration::from_millis(200));
    let refused = s.logged(" 400 ");
    assert!(refused.len() >= cases.len() + anthropic.len() - 2, "{refused:?}");
    assert!(refused.iter().all(|l| l.contains(" ms: ")), "a 4xx line without its reason: {refused:?}");
    assert!(!s.logged("messages: empty").is_empty());
    let mut plain = chat(&[("user", "still here?")], 3);
    plain["response_format"] = json!({"type": "text"});
    plain["logprobs"] = json!(false);
    let (status, v) = post(a, "/v1/chat/completions", &plain);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    // A prompt longer than the context, in the wording each API's clients look for.
    let (status, v) = post(a, "/v1/chat/completions", &chat(&[("user", &long)], 4));
    assert_eq!((status, &v["error"]["code"]), (400, &json!("context_length_exceeded")), "{v}");
    let (status, v) =
        post(a, "/v1/messages", &json!({"max_tokens": 4, "messages": [{"role": "user", "content": long}]}));
    let m = v["error"]["message"].as_str().unwrap_or_default();
    assert!(status == 400 && m.starts_with("prompt is too long: ") && m.ends_with(" tokens > 255 maximum"), "{v}");
    // A forced call: the reply begins with the call's opening, so the prompt holds it too.
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {}}}]);
    let mut free = chat(&[("user", "Weather?")], 3);
    free["tools"] = tools;
    let mut named = free.clone();
    named["tool_choice"] = json!({"type": "function", "function": {"name": "weather"}});
    let (_, free) = post(a, "/v1/chat/completions", &free);
    let (status, named) = post(a, "/v1/chat/completions", &named);
    assert_eq!(status, 200, "{named}");
    let extra = named["usage"]["prompt_tokens"].as_u64().unwrap() - free["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(extra >= 5, "the call's opening is not in the prompt: {free} {named}");
}

/// What coding agents send: Anthropic system turns inside `messages`, and budgets far past the context
/// (Claude Code asks for 64000 tokens whatever the model). The system turn is folded into the next user
/// turn (docs: turns.rs), so the reply is the one to that conversation written with the block; a budget
/// past the room is capped there and the reply ends as having reached it.
#[test]
fn agents_system_turns_and_large_budgets_are_taken() {
    let s = serve(&["--max-context", "256"]);
    let a = s.addr.as_str();
    let system_turn = json!({"max_tokens": 8, "temperature": 0, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]}, {"role": "user", "content": "why?"}]});
    let folded = json!({"max_tokens": 8, "temperature": 0, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "<system>\nbe brief\n</system>\n\nwhy?"}]});
    let (status, v) = post(a, "/v1/messages", &system_turn);
    assert_eq!(status, 200, "{v}");
    let (_, w) = post(a, "/v1/messages", &folded);
    assert_eq!(v["content"], w["content"], "the system turn is the folded user turn's block");
    assert_eq!(
        v["usage"]["input_tokens"].as_u64().unwrap() + v["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        w["usage"]["input_tokens"].as_u64().unwrap() + w["usage"]["cache_read_input_tokens"].as_u64().unwrap()
    );
    // 64000 tokens asked, the context's room given: the reply stops at the context's end.
    let big = json!({"max_tokens": 64000, "ignore_eos": true, "messages": [{"role": "user", "content": "count"}]});
    let (status, v) = post(a, "/v1/messages", &big);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
    let used = v["usage"]["input_tokens"].as_u64().unwrap() + v["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(used + v["usage"]["output_tokens"].as_u64().unwrap(), 256, "{v}");
    let mut c = chat(&[("user", "count")], 100_000);
    c["ignore_eos"] = json!(true);
    let (status, v) = post(a, "/v1/chat/completions", &c);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["total_tokens"], 256, "{v}");
    // Tools the engine cannot run are left out, said in the log and, for Responses, in its metadata.
    let codex = json!({"input": "hi", "max_output_tokens": 4, "tools": [
        {"type": "namespace", "name": "mcp"}, {"type": "web_search"},
        {"type": "function", "name": "shell", "parameters": {"type": "object"}}]});
    let (status, v) = post(a, "/v1/responses", &codex);
    assert_eq!(status, 200, "{v}");
    let note = v["metadata"]["strata_note"].as_str().unwrap_or_default();
    assert!(note.contains("namespace \"mcp\"") && note.contains("web_search") && !note.contains("shell"), "{v}");
    let claude = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "web_search_20250305", "name": "web_search"}, {"name": "Bash", "input_schema": {"type": "object"}}]});
    let (status, v) = post(a, "/v1/messages", &claude);
    assert_eq!(status, 200, "{v}");
    // The prompt's tokens counted as the reply read them; the model looked up by the name a client uses.
    let (status, n) = post(a, "/v1/messages/count_tokens", &claude);
    let read = v["usage"]["input_tokens"].as_u64().unwrap() + v["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!((status, n["input_tokens"].as_u64()), (200, Some(read)), "{n}");
    // A final assistant turn is continued, not closed: the prompt is the conversation before it and
    // then its text, token for token.
    let count = |messages: Value| {
        post(a, "/v1/messages/count_tokens", &json!({"messages": messages})).1["input_tokens"].as_u64().unwrap()
    };
    let user = json!({"role": "user", "content": "Count to five."});
    let prefill = "One, two,";
    let (_, t) = post(a, "/v1/completions", &json!({"prompt": prefill, "max_tokens": 1}));
    let own = t["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(count(json!([user, {"role": "assistant", "content": prefill}])), count(json!([user])) + own);
    let (status, v) = post(
        a,
        "/v1/messages",
        &json!({"max_tokens": 3, "messages": [user, {"role": "assistant", "content": prefill}]}),
    );
    assert_eq!(status, 200, "{v}");
    // Earlier replies' thinking blocks are taken (the template renders or drops them).
    let history = json!([user, {"role": "assistant", "content": [{"type": "thinking", "thinking": "easy", "signature": "x"},
        {"type": "redacted_thinking", "data": "y"}, {"type": "text", "text": "1 2 3 4 5"}]}, {"role": "user", "content": "Again."}]);
    let (status, v) = post(a, "/v1/messages", &json!({"max_tokens": 3, "messages": history}));
    assert_eq!(status, 200, "{v}");
    let (status, _, b) = http(a, "GET", "/v1/models/claude-sonnet-4-5", &[], b"");
    let m: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (status, &m["id"], &m["type"], &m["object"]),
        (200, &json!("claude-sonnet-4-5"), &json!("model"), &json!("model"))
    );
    let (status, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4, "tools": [{"type": "custom", "custom": {"name": "g"}}]}),
    );
    assert_eq!(status, 200, "{v}");
    std::thread::sleep(Duration::from_millis(200)); // the log line follows the reply
    for path in ["/v1/responses", "/v1/messages", "/v1/chat/completions"] {
        let lines = s.logged(&format!("POST {path} 200"));
        assert!(lines.iter().any(|l| l.contains("tools left out")), "{path}: {lines:?}");
    }
}

/// Structured output on the built-in model, sampled at temperature 1 (where a small model left to itself
/// rarely writes JSON): every reply is of the asked shape, in each API.
#[test]
fn structured_output_and_forced_calls_always_parse() {
    let server = serve(&[]);
    let a = server.addr.as_str();
    let schema = json!({"type": "object", "additionalProperties": false, "required": ["title", "stars", "tags"],
        "properties": {"title": {"type": "string", "maxLength": 20}, "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                       "tags": {"type": "array", "items": {"enum": ["calm", "bold", "odd"]}, "maxItems": 3}}});
    let meets = |v: &Value| {
        v["title"].as_str().is_some_and(|t| t.chars().count() <= 20)
            && v["stars"].as_u64().is_some_and(|n| (1..=5).contains(&n))
            && v["tags"].as_array().is_some_and(|t| {
                t.len() <= 3 && t.iter().all(|x| ["calm", "bold", "odd"].contains(&x.as_str().unwrap_or("")))
            })
            && v.as_object().unwrap().len() == 3
    };
    let user = json!([{"role": "user", "content": "Rate a fortune."}]);
    for seed in 0..3 {
        let body = json!({"messages": user, "max_tokens": 200, "temperature": 1, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "rating", "strict": true, "schema": schema}}});
        let (st, v) = post(a, "/v1/chat/completions", &body);
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let got: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(meets(&got), "seed {seed}: {got}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let body = json!({"messages": user, "max_tokens": 200, "temperature": 1, "seed": seed,
            "response_format": {"type": "json_object"}});
        let (_, v) = post(a, "/v1/chat/completions", &body);
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(serde_json::from_str::<Value>(text).is_ok_and(|o| o.is_object()), "seed {seed}: {text:?}");
        // The Responses API's text.format, and Anthropic's output_format.
        let body = json!({"input": "Rate a fortune.", "max_output_tokens": 200, "temperature": 1, "seed": seed,
            "text": {"format": {"type": "json_schema", "name": "rating", "schema": schema}}});
        let (st, v) = post(a, "/v1/responses", &body);
        assert_eq!(st, 200, "{v}");
        let text = v["output"][0]["content"][0]["text"].as_str().unwrap();
        assert!(meets(&serde_json::from_str(text).unwrap()), "seed {seed}: {text:?}");
        let body = json!({"model": "m", "max_tokens": 200, "temperature": 1, "seed": seed, "messages": user,
            "output_format": {"type": "json_schema", "schema": schema}});
        let (st, v) = post(a, "/v1/messages", &body);
        assert_eq!(st, 200, "{v}");
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(meets(&serde_json::from_str(text).unwrap()), "seed {seed}: {text:?}");
    }
    // A forced call, named or any, is always a call to an offered tool with arguments of its schema.
    let tools = json!([
        {"type": "function", "function": {"name": "rate", "parameters": schema}},
        {"type": "function", "function": {"name": "skip", "parameters": {"type": "object", "properties": {"why": {"enum": ["dull", "long"]}}, "required": ["why"], "additionalProperties": false}}}
    ]);
    for (seed, choice) in
        [(0, json!("required")), (1, json!("required")), (2, json!({"type": "function", "function": {"name": "rate"}}))]
    {
        let body = json!({"messages": user, "max_tokens": 200, "temperature": 1, "seed": seed, "tools": tools, "tool_choice": choice});
        let (st, v) = post(a, "/v1/chat/completions", &body);
        assert_eq!(st, 200, "{v}");
        let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        match call["name"].as_str().unwrap() {
            "rate" => assert!(meets(&args), "{args}"),
            "skip" => assert!(args["why"] == "dull" || args["why"] == "long", "{args}"),
            n => panic!("an unknown tool {n}"),
        }
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    }
    // Strict tools the model may call of itself (tool_choice auto): the grammar waits for a call's
    // opening; a reply that calls is held to the schemas, one that does not is free text.
    let mut strict = tools.clone();
    strict[0]["function"]["strict"] = json!(true);
    for seed in 0..3 {
        let body = json!({"messages": [{"role": "user", "content": "Rate a fortune with the tools."}],
            "max_tokens": 120, "temperature": 1, "seed": seed, "tools": strict});
        let (st, v) = post(a, "/v1/chat/completions", &body);
        assert_eq!(st, 200, "{v}");
        for call in v["choices"][0]["message"]["tool_calls"].as_array().into_iter().flatten() {
            let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            assert!(call["function"]["name"] == "rate" && meets(&args) || call["function"]["name"] == "skip", "{call}");
        }
    }
    let body = json!({"model": "m", "max_tokens": 200, "temperature": 1, "seed": 5, "messages": user,
        "tools": [{"name": "rate", "input_schema": schema}], "tool_choice": {"type": "any"}});
    let (st, v) = post(a, "/v1/messages", &body);
    assert_eq!(st, 200, "{v}");
    let used = v["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").expect("a tool_use block");
    assert!(meets(&used["input"]), "{used}");
}

/// The data lines of a server-sent event stream, as JSON (the closing `[DONE]` left out).
fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Log-probabilities: each token's bytes spell the reply, the greedy token is the first alternative,
/// the alternatives come most likely first, and a stream carries the same entries as a whole reply.
#[test]
fn logprobs_spell_the_reply_and_rank_the_alternatives() {
    let server = serve(&[]);
    let a = server.addr.as_str();
    let mut body = chat(&[("user", "Tell me a fortune.")], 24);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(3);
    let (st, v) = post(a, "/v1/chat/completions", &body);
    assert_eq!(st, 200, "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    let entries = v["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    assert!(!entries.is_empty());
    let bytes =
        |e: &Value| e["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect::<Vec<u8>>();
    let spelled: Vec<u8> = entries.iter().flat_map(bytes).collect();
    assert_eq!(String::from_utf8_lossy(&spelled).trim(), content);
    for e in &entries {
        let lp = e["logprob"].as_f64().unwrap();
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert!(lp <= 0.0 && top.windows(2).all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
        assert_eq!((bytes(&top[0]), top[0]["logprob"].as_f64()), (bytes(e), Some(lp)), "greedy takes the first");
    }
    body["stream"] = json!(true);
    let (_, _, raw) =
        http(a, "POST", "/v1/chat/completions", &[("content-type", "application/json")], body.to_string().as_bytes());
    let streamed: Vec<Value> = events(&raw)
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, entries, "the stream's entries are the whole reply's");
    // The completions API: parallel lists, offsets into the text.
    let (st, v) =
        post(a, "/v1/completions", &json!({"prompt": "The moon", "max_tokens": 12, "temperature": 0, "logprobs": 2}));
    assert_eq!(st, 200, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    let lp = &v["choices"][0]["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tokens.concat(), text);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), tokens.len());
    assert!(lp["top_logprobs"].as_array().unwrap().iter().all(|t| t.as_object().unwrap().len() <= 2));
    let offsets: Vec<u64> = lp["text_offset"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect();
    assert_eq!(offsets[0], 0);
    assert_eq!(offsets.last().copied(), Some((text.chars().count() - tokens.last().unwrap().chars().count()) as u64));
}

/// `logit_bias` and the penalties are applied before the draw: a token biased by +100 is all a greedy
/// reply writes; a strong frequency penalty keeps a greedy reply from repeating a token much; bad values
/// are 400.
#[test]
fn logit_bias_and_penalties_shape_the_draw() {
    let server = serve(&[]);
    let a = server.addr.as_str();
    let mut body = chat(&[("user", "Tell me a fortune.")], 6);
    body["logit_bias"] = json!({"42": 100});
    body["logprobs"] = json!(true);
    let (st, v) = post(a, "/v1/chat/completions", &body);
    assert_eq!(st, 200, "{v}");
    let entries = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let first = &entries[0]["bytes"];
    assert_eq!(entries.len(), 6);
    assert!(entries.iter().all(|e| &e["bytes"] == first), "every token is the biased one: {v}");
    let plain = post(a, "/v1/chat/completions", &chat(&[("user", "Tell me a fortune.")], 40)).1;
    let mut pen = chat(&[("user", "Tell me a fortune.")], 40);
    pen["frequency_penalty"] = json!(2.0);
    pen["presence_penalty"] = json!(2.0);
    pen["logprobs"] = json!(true);
    let penalized = post(a, "/v1/chat/completions", &pen).1;
    let tokens: Vec<Value> =
        penalized["choices"][0]["logprobs"]["content"].as_array().unwrap().iter().map(|e| e["bytes"].clone()).collect();
    let distinct: std::collections::BTreeSet<String> = tokens.iter().map(|t| t.to_string()).collect();
    assert!(distinct.len() * 10 >= tokens.len() * 7, "penalties keep a reply from repeating itself: {penalized}");
    assert_ne!(penalized["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
    for bad in [
        json!({"logit_bias": {"x": 1}}),
        json!({"logit_bias": {"1": 500}}),
        json!({"logit_bias": {"99999999": 1}}),
        json!({"presence_penalty": 3}),
        json!({"frequency_penalty": "a"}),
    ] {
        let mut b = chat(&[("user", "x")], 4);
        for (k, v) in bad.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (st, v) = post(a, "/v1/chat/completions", &b);
        assert_eq!(st, 400, "{bad}: {v}");
    }
}

#[test]
fn a_key_guards_every_endpoint_but_health() {
    let s = serve(&["--api-key", "sesame"]);
    let a = s.addr.as_str();
    assert_eq!(http(a, "GET", "/health", &[], b"").0, 200);
    assert_eq!(http(a, "GET", "/v1/models", &[], b"").0, 401);
    assert_eq!(http(a, "GET", "/v1/models", &[("authorization", "Bearer wrong")], b"").0, 401);
    let (status, _, b) = http(a, "GET", "/v1/models", &[("authorization", "Bearer sesame")], b"");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((status, &v["data"][0]["context_length"]), (200, &json!(65536)), "the built-in model's served context");
    assert_eq!(http(a, "GET", "/metrics", &[("x-api-key", "sesame")], b"").0, 200);
    let (status, _, b) = http(a, "POST", "/v1/messages", &[], b"{}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((status, v["error"]["type"].as_str()), (401, Some("authentication_error")), "{v}");
    let out = strata().args(["serve", "--device", "cpu", "--host", "0.0.0.0", "--port", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key"), "{}", String::from_utf8_lossy(&out.stderr));
    // No CORS headers without --cors, whatever the page.
    let page = ("origin", "http://localhost:3000");
    let (_, h, _) = http(a, "GET", "/v1/models", &[("authorization", "Bearer sesame"), page], b"");
    assert!(!h.contains("access-control-allow-origin"), "{h}");
}

/// `--cors ORIGIN`: that origin's preflight is answered without the key (browsers send none with it)
/// and its replies are marked; another origin's are not.
#[test]
fn cors_lets_the_named_origin_in_and_no_other() {
    let s = serve(&["--api-key", "sesame", "--cors", "http://localhost:3000"]);
    let a = s.addr.as_str();
    let page = ("origin", "http://localhost:3000");
    let asks =
        [("access-control-request-method", "POST"), ("access-control-request-headers", "content-type, x-api-key")];
    let (status, h, _) = http(a, "OPTIONS", "/v1/chat/completions", &[page, asks[0], asks[1]], b"");
    assert_eq!(status, 204, "{h}");
    assert!(h.contains("access-control-allow-origin: http://localhost:3000"), "{h}");
    assert!(h.contains("access-control-allow-headers: ") && h.contains("x-api-key"), "{h}");
    let (status, h, _) = http(a, "GET", "/v1/models", &[page, ("x-api-key", "sesame")], b"");
    assert_eq!(status, 200);
    assert!(h.contains("access-control-allow-origin: http://localhost:3000"), "{h}");
    let (status, h, _) = http(a, "GET", "/v1/models", &[page], b"");
    assert_eq!(status, 401, "the key is still wanted on every call but the preflight");
    assert!(h.contains("access-control-allow-origin"), "a refusal is readable by the page: {h}");
    let other = ("origin", "http://elsewhere.example");
    let (status, h, _) = http(a, "OPTIONS", "/v1/chat/completions", &[other, asks[0]], b"");
    assert_ne!(status, 204, "{h}");
    assert!(!h.contains("access-control-allow-origin"), "{h}");
}

#[test]
fn a_resumed_conversation_writes_what_a_fresh_server_writes() {
    let first = serve(&[]);
    let (_, v) = post(&first.addr, "/v1/chat/completions", &chat(&[("user", "Tell me a story.")], 12));
    let reply = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let turn2 = chat(&[("user", "Tell me a story."), ("assistant", &reply), ("user", "And then?")], 12);
    let (_, resumed) = post(&first.addr, "/v1/chat/completions", &turn2);
    let reused = resumed["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(reused > 0, "the second turn read its whole prompt again: {resumed}");
    let fresh = serve(&[]);
    let (_, whole) = post(&fresh.addr, "/v1/chat/completions", &turn2);
    assert_eq!(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(resumed["choices"][0]["message"]["content"], whole["choices"][0]["message"]["content"]);
    assert_eq!(resumed["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
    // Another conversation in between, then the first again: its state comes back from the cache.
    post(&first.addr, "/v1/chat/completions", &chat(&[("user", "Something else entirely.")], 4));
    let (_, again) = post(&first.addr, "/v1/chat/completions", &turn2);
    // The state saved where that turn began: all but the prompt's last token.
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(cached + 1, again["usage"]["prompt_tokens"].as_u64().unwrap(), "{again}");
    assert_eq!(again["choices"][0]["message"]["content"], whole["choices"][0]["message"]["content"]);
    let metrics = String::from_utf8(http(&first.addr, "GET", "/metrics", &[], b"").2).unwrap();
    let reused_total = metrics.lines().find(|l| l.starts_with("strata_reused_prompt_tokens_total"));
    assert!(reused_total.is_some_and(|l| !l.ends_with(" 0")), "{metrics}");
}

/// With drafts (the built-in model has an MTP layer), over a draft vocabulary made from the requests'
/// tokens, the replies are the plain server's, turn after turn, and the drafts are counted in /v1/status
/// and /metrics.
#[test]
fn a_speculating_server_writes_what_a_plain_one_writes() {
    let (spec, plain) = (serve(&["--spec", "3", "--draft-vocab", "512"]), serve(&[]));
    let ask = |s: &Server, body: &Value| post(&s.addr, "/v1/chat/completions", body).1;
    let turn1 = chat(&[("user", "Tell me a story.")], 24);
    let (a, b) = (ask(&spec, &turn1), ask(&plain, &turn1));
    let reply = a["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
    let turn2 = chat(&[("user", "Tell me a story."), ("assistant", &reply), ("user", "And then?")], 24);
    let (a, b) = (ask(&spec, &turn2), ask(&plain, &turn2));
    assert_eq!(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
    let (_, _, status) = http(&spec.addr, "GET", "/v1/status", &[], b"");
    let status: Value = serde_json::from_slice(&status).unwrap();
    let sp = &status["speculation"];
    assert!(sp["passes"].as_u64().unwrap() > 0 && sp["drafted"].as_u64().unwrap() > 0, "{status}");
    assert!(sp["acceptance"].as_f64().is_some_and(|a| (0.0..=1.0).contains(&a)), "{status}");
    let metrics = String::from_utf8(http(&spec.addr, "GET", "/metrics", &[], b"").2).unwrap();
    let drafted = metrics.lines().find(|l| l.starts_with("strata_drafted_tokens_total"));
    assert!(drafted.is_some_and(|l| !l.ends_with(" 0")), "{metrics}");
}

#[test]
fn a_full_queue_answers_503_and_a_client_that_leaves_stops_its_generation() {
    let s = serve(&["--queue", "1"]);
    let a = s.addr.clone();
    // A streamed generation long enough to outlast the others; read its first event, then hang up.
    let mut stream = TcpStream::connect(&a).unwrap();
    let body = json!({"messages": [{"role": "user", "content": "go"}], "max_tokens": 4000, "stream": true,
                      "ignore_eos": true})
    .to_string();
    write!(stream, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        .unwrap();
    let mut first = [0u8; 256];
    let n = stream.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let t0 = Instant::now();
    let status = || -> Value { serde_json::from_slice(&http(&a, "GET", "/v1/status", &[], b"").2).unwrap() };
    while status()["running"].is_null() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the streamed request never ran: {}", status());
        std::thread::sleep(Duration::from_millis(20));
    }
    // One waits in the queue; the queue holds one, so the next is refused.
    let waiting = {
        let a = a.clone();
        std::thread::spawn(move || post(&a, "/v1/chat/completions", &chat(&[("user", "wait")], 2)))
    };
    while status()["queue"]["waiting"] != 1 {
        assert!(t0.elapsed() < Duration::from_secs(20), "the second request never waited: {}", status());
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, head, _) =
        http(&a, "POST", "/v1/chat/completions", &[], chat(&[("user", "x")], 2).to_string().as_bytes());
    assert_eq!(code, 503);
    let refused = (head, ());
    assert!(refused.0.contains("retry-after:"), "{}", refused.0);
    let now = status();
    assert!(now["running"]["generated_tokens"].as_u64().is_some(), "{now}");
    drop(stream);
    let (code, v) = waiting.join().unwrap();
    assert_eq!(code, 200, "{v}");
    // The hung-up generation stopped long before its 4,000 tokens (over 10 s on the CPU): the waiting
    // request ran right after it.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let after = status();
    assert!(after["running"].is_null(), "{after}");
}

#[test]
fn the_official_clients_work_and_a_load_of_200_requests_loses_none() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve_clients.py");
    if !have_python("import openai, anthropic, langchain_openai, pydantic_ai") {
        return;
    }
    let s = serve(&["--cache-mib", "16"]);
    let out = Command::new("python3")
        .args([script, &format!("http://{}", s.addr), &s.child.id().to_string(), "16"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the client checks failed:\n{text}");
    assert!(text.contains(" 0 failed"), "{text}");
}

/// Whether python3 runs `imports` (the client packages .ci/run installs). CI must have them; elsewhere a
/// test that needs them says it did not run.
fn have_python(imports: &str) -> bool {
    let have = Command::new("python3").args(["-c", imports]).output().is_ok_and(|o| o.status.success());
    assert!(have || std::env::var_os("CI").is_none(), "CI must have what `{imports}` needs (.ci/run installs it)");
    if !have {
        eprintln!("skipped: python3 cannot `{imports}` here (.ci/run says what to install)");
    }
    have
}

/// The web page in headless chromium (serve_page.py): it loads without the key, asks for it, streams a
/// reply, stops one, keeps the conversation over a reload, and shows the monitor. The stopped reply never
/// runs: the log holds the generations of the page's first reply, the script's own greedy call and the
/// busy client's long reply, and no other.
#[test]
fn the_web_page_chats_stops_and_monitors_in_a_real_browser() {
    let browser =
        std::path::Path::new("/usr/bin/chromium").exists() && std::path::Path::new("/usr/bin/chromedriver").exists();
    assert!(
        browser || std::env::var_os("CI").is_none(),
        "CI must have chromium and chromedriver (.ci/run installs them)"
    );
    if !browser || !have_python("import selenium") {
        eprintln!("skipped: no chromium/chromedriver here (apt-get install chromium chromium-driver)");
        return;
    }
    let s = serve(&["--api-key", "page-key"]);
    let (st, _, page) = http(&s.addr, "GET", "/", &[], b"");
    assert_eq!(st, 200, "the page loads without the key");
    assert!(String::from_utf8_lossy(&page).contains("<title>strata</title>"));
    assert_eq!(http(&s.addr, "GET", "/v1/models", &[], b"").0, 401, "the API still wants it");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve_page.py");
    let mut cmd = Command::new("python3");
    cmd.args([script, &format!("http://{}", s.addr), "page-key"]);
    if let Some(dir) = std::env::var_os("STRATA_SCREENSHOTS") {
        cmd.arg(dir);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("page: passed"), "the page checks failed:\n{text}");
    let generations = s.logged("generation:");
    assert_eq!(generations.len(), 3, "{generations:#?}");
}
