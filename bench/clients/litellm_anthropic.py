"""litellm against `strata serve`: its Anthropic route (which fills in max_tokens of 64K and more), streamed
and not, a forced tool call through it, and its OpenAI route. Usage: litellm_anthropic.py BASE_URL."""
import sys, litellm
base = sys.argv[1]
r = litellm.completion(model="anthropic/claude-sonnet-4-5", api_base=base, api_key="x",
                       messages=[{"role": "user", "content": "Tell me a fortune."}], temperature=0)
print("anthropic route (no max_tokens):", r.choices[0].finish_reason, repr(r.choices[0].message.content[:60]), r.usage.completion_tokens)
r = litellm.completion(model="anthropic/claude-sonnet-4-5", api_base=base, api_key="x", stream=True,
                       messages=[{"role": "user", "content": "Tell me a fortune."}], temperature=0, max_tokens=30)
print("anthropic route streamed:", repr("".join((c.choices[0].delta.content or "") for c in r)[:60]))
tools = [{"type": "function", "function": {"name": "rate", "parameters": {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["stars"]}}}]
r = litellm.completion(model="anthropic/claude-sonnet-4-5", api_base=base, api_key="x", tools=tools, tool_choice="required",
                       messages=[{"role": "user", "content": "Rate it."}], temperature=1, max_tokens=100)
print("anthropic route forced tool:", r.choices[0].message.tool_calls[0].function)
r = litellm.completion(model="openai/m", api_base=base + "/v1", api_key="x",
                       messages=[{"role": "user", "content": "Tell me a fortune."}], temperature=0, max_tokens=20)
print("openai route:", repr(r.choices[0].message.content[:60]))
