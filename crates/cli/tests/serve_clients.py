"""The official `openai` and `anthropic` clients against a running `strata serve` (crates/cli/tests/serve.rs
starts it on the built-in model and runs this): every endpoint, streaming and not, a tool-call round
trip on each API, structured output through the openai client's `parse`, langchain and pydantic-ai,
log-probabilities, then a bounded load test. Usage: serve_clients.py BASE_URL SERVER_PID CACHE_MIB (the server's --cache-mib). Prints one line per
check and a closing 'N passed, N failed' line; exits non-zero on any failure."""

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import anthropic
import openai
import pydantic
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

BASE, PID, CACHE_MIB = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
an = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0)
results = []
GREEDY = {"temperature": 0}

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def check(name, f):
    try:
        f()
        results.append((name, None))
        print(f"ok   {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the run goes on
        results.append((name, e))
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)


def openai_chat():
    r = oa.chat.completions.create(model="any-name", messages=[{"role": "user", "content": "Hello"}],
                                   max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.model == "any-name"
    assert r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 0


def openai_chat_stream():
    parts, finish, usage = [], None, None
    with oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
                                    temperature=0, stream=True, stream_options={"include_usage": True}) as s:
        for chunk in s:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                parts.append(c.delta.content or "")
                finish = c.finish_reason or finish
    whole = oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
                                       temperature=0)
    assert "".join(parts) == whole.choices[0].message.content, "streamed and whole replies differ (greedy)"
    assert finish in ("stop", "length") and usage.completion_tokens == whole.usage.completion_tokens


def openai_completions():
    r = oa.completions.create(model="m", prompt="Once upon a time", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].finish_reason in ("stop", "length")
    text = "".join(c.choices[0].text for c in oa.completions.create(model="m", prompt="Once upon a time",
                                                                      max_tokens=6, temperature=0, stream=True))
    assert text == r.choices[0].text


def openai_models():
    ids = [m.id for m in oa.models.list()]
    assert len(ids) == 1, ids


def openai_tool_round_trip():
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = oa.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="auto",
                                       max_tokens=16, temperature=0)
    assert first.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # The client runs the tool and sends its result back, as after a call.
    messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                  "function": {"name": "weather", "arguments": json.dumps({"city": "Paris"})}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    second = oa.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=8, temperature=0)
    assert second.choices[0].message.role == "assistant"
    streamed = oa.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=8, temperature=0,
                                          stream=True)
    assert sum(1 for _ in streamed) >= 2


def openai_responses():
    r = oa.responses.create(model="m", input="Hello", instructions="Be brief.", max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.output[0].type == "message"
    assert isinstance(r.output_text, str) and r.usage.output_tokens >= 1
    deltas, done = [], None
    with oa.responses.stream(model="m", input="Hello", instructions="Be brief.", max_output_tokens=8,
                             temperature=0) as s:
        for ev in s:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        done = s.get_final_response()
    assert "".join(deltas) == r.output_text == done.output_text


def openai_responses_tool_round_trip():
    tools = [{"type": "function", "name": "weather", "description": "The weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "18 C"}]
    r = oa.responses.create(model="m", input=items, tools=tools, max_output_tokens=8, temperature=0)
    assert r.status in ("completed", "incomplete") and r.output


def openai_errors():
    try:
        oa.chat.completions.create(model="m", messages=[], max_tokens=4)
        raise AssertionError("empty messages accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and "messages" in str(e)
    try:
        oa.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])
        raise AssertionError("an unknown role accepted")
    except openai.BadRequestError as e:
        assert "wizard" in str(e)


def anthropic_messages():
    # Greedy (temperature 0, sent as an extra field: this client version has no temperature argument).
    r = an.messages.create(model="any", max_tokens=8, system="Be brief.", extra_body=GREEDY,
                           messages=[{"role": "user", "content": "Hello"}])
    assert r.type == "message" and r.role == "assistant" and r.content[0].type == "text"
    assert r.stop_reason in ("end_turn", "max_tokens", "stop_sequence") and r.usage.output_tokens >= 1
    with an.messages.stream(model="any", max_tokens=8, system="Be brief.", extra_body=GREEDY,
                            messages=[{"role": "user", "content": "Hello"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == r.content[0].text and final.stop_reason == r.stop_reason


def anthropic_tool_round_trip():
    tools = [{"name": "weather", "description": "The weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = an.messages.create(model="m", max_tokens=16, tools=tools, messages=messages, extra_body=GREEDY)
    assert first.stop_reason in ("end_turn", "max_tokens", "tool_use")
    messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                    "input": {"city": "Paris"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": "18 C"}]}]
    second = an.messages.create(model="m", max_tokens=8, tools=tools, messages=messages, extra_body=GREEDY)
    assert second.content and second.role == "assistant"
    with an.messages.stream(model="m", max_tokens=8, tools=tools, messages=messages, extra_body=GREEDY) as s:
        assert s.get_final_message().role == "assistant"


def anthropic_errors():
    try:
        an.messages.create(model="m", max_tokens=4, messages=[{"role": "wizard", "content": "x"}])
        raise AssertionError("an unknown role in messages accepted")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400 and e.body["type"] == "error"


def rss_kib():
    with open(f"/proc/{PID}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def load_test():
    """200 requests from 8 concurrent clients (four kinds, streamed and not): none lost, each well formed,
    and the server's memory back near where it was: above it by the saved conversations at most (their
    budget, --cache-mib) and a margin for the allocator."""
    base = rss_kib()
    errors, done = [], []
    lock = threading.Lock()

    def one(i):
        body = {"model": "m", "messages": [{"role": "user", "content": f"Request {i}"}], "max_tokens": 4}
        if i % 4 == 0:
            r = oa.chat.completions.create(**body)
            assert r.choices[0].message.content is not None
        elif i % 4 == 1:
            assert "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(**body, stream=True)
                           if c.choices) is not None
        elif i % 4 == 2:
            r = an.messages.create(model="m", max_tokens=4, messages=body["messages"])
            assert r.content[0].type == "text"
        else:
            r = oa.responses.create(model="m", input=f"Request {i}", max_output_tokens=4)
            assert r.output

    def client(k):
        for i in range(k, 200, 8):
            try:
                one(i)
                with lock:
                    done.append(i)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append((i, repr(e)))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert sorted(done) == list(range(200)), f"{200 - len(done)} requests lost"
    after = rss_kib()
    print(f"     load: 200 requests, server memory {base / 1024:.1f} MiB before, {after / 1024:.1f} MiB after")
    assert after < base + (CACHE_MIB + 32) * 1024, f"memory grew from {base} to {after} KiB"


def raw_errors():
    """curl-like requests: malformed JSON and a wrong type get a 4xx in the API's shape."""
    for path, body, shape in [("/v1/chat/completions", b"{not json", "error"),
                              ("/v1/messages", b'{"max_tokens": "x", "messages": []}', "type")]:
        req = urllib.request.Request(BASE + path, data=body, headers={"content-type": "application/json"})
        try:
            urllib.request.urlopen(req)
            raise AssertionError(f"{path} accepted {body!r}")
        except urllib.error.HTTPError as e:
            assert e.code == 400, e.code
            assert shape in json.loads(e.read()), "not the API's error shape"


class Rating(pydantic.BaseModel):
    """A typed reply: a small model left to itself writes no such thing at temperature 1."""
    title: str = pydantic.Field(max_length=20)
    stars: int = pydantic.Field(ge=1, le=5)


SAMPLED = {"temperature": 1, "max_tokens": 200}


def openai_structured():
    r = oa.chat.completions.parse(model="m", messages=[{"role": "user", "content": "Rate a fortune."}],
                                  response_format=Rating, seed=1, **SAMPLED)
    assert isinstance(r.choices[0].message.parsed, Rating), r.choices[0].message.content


def openai_logprobs():
    r = oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
                                   logprobs=True, top_logprobs=2, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens or r.choices[0].finish_reason == "stop"
    assert all(c.logprob <= 0 and len(c.top_logprobs) == 2 and c.top_logprobs[0].token == c.token for c in content)


def langchain_structured():
    llm = ChatOpenAI(base_url=BASE + "/v1", api_key="unused", model="m", seed=2, max_retries=0, **SAMPLED)
    for method in ["json_schema", "function_calling"]:
        r = llm.with_structured_output(Rating, method=method).invoke("Rate a fortune.")
        assert isinstance(r, Rating), f"{method}: {r!r}"


def pydantic_ai_output():
    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=BASE + "/v1", api_key="unused"))
    settings = {"temperature": 1, "max_tokens": 200, "seed": 3}
    for output in [Rating, NativeOutput(Rating)]:  # a forced tool call (the default), then response_format
        r = Agent(model, output_type=output, model_settings=settings, retries={"output": 0}).run_sync("Rate a fortune.")
        assert isinstance(r.output, Rating), repr(r.output)


def curl():
    """curl, as the README shows it: a streamed chat ending in [DONE], a message, /health."""
    def run(*args):
        return subprocess.run(["curl", "-sS", "-N", *args], check=True, capture_output=True, text=True).stdout
    out = run(BASE + "/v1/chat/completions", "-d", json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}))
    events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and all(json.loads(e)["object"] == "chat.completion.chunk" for e in events[:-1])
    r = json.loads(run(BASE + "/v1/messages", "-H", "x-api-key: unused", "-d", json.dumps(
        {"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})))
    assert r["type"] == "message" and r["usage"]["output_tokens"] >= 1
    assert json.loads(run(BASE + "/health")) == {"status": "ok"}


for name, f in [("openai chat", openai_chat), ("openai chat stream", openai_chat_stream),
                ("openai completions", openai_completions), ("openai models", openai_models),
                ("openai tool round trip", openai_tool_round_trip), ("openai responses", openai_responses),
                ("openai responses tool round trip", openai_responses_tool_round_trip),
                ("openai errors", openai_errors), ("anthropic messages", anthropic_messages),
                ("anthropic tool round trip", anthropic_tool_round_trip), ("anthropic errors", anthropic_errors),
                ("raw errors", raw_errors), ("openai structured output", openai_structured),
                ("openai logprobs", openai_logprobs), ("langchain structured output", langchain_structured),
                ("pydantic-ai typed output", pydantic_ai_output), ("curl", curl), ("load test", load_test)]:
    check(name, f)
failed = sum(1 for _, e in results if e)
print(f"clients: {len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
