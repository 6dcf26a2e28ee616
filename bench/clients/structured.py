"""Structured output through langchain-openai (each with_structured_output method) and pydantic-ai (tool
output, NativeOutput, PromptedOutput), sampled at temperature 1 on `strata serve`. json_mode and
PromptedOutput give the server no schema, so what comes back is the model's own: a 15M model's JSON rarely
fits. Usage: structured.py BASE_URL."""
import asyncio, sys
from pydantic import BaseModel, Field
base = sys.argv[1]

class Rating(BaseModel):
    title: str = Field(max_length=20)
    stars: int = Field(ge=1, le=5)

from langchain_openai import ChatOpenAI
llm = ChatOpenAI(base_url=base + "/v1", api_key="x", model="m", temperature=1, max_tokens=200)
for method in ["json_schema", "function_calling", "json_mode"]:
    try:
        r = llm.with_structured_output(Rating, method=method).invoke("Rate a fortune." + (" Reply in JSON." if method == "json_mode" else ""))
        print("langchain", method, "->", repr(r))
    except Exception as e:
        print("langchain", method, "FAILED", type(e).__name__, e)
r = llm.with_structured_output(Rating).invoke("Rate a fortune.")
print("langchain default ->", repr(r))

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=base + "/v1", api_key="x"))
agent = Agent(model, output_type=Rating, model_settings={"temperature": 1, "max_tokens": 200})
try:
    r = agent.run_sync("Rate a fortune.")
    print("pydantic-ai ->", repr(r.output))
except Exception as e:
    print("pydantic-ai FAILED", type(e).__name__, e)
from pydantic_ai import NativeOutput, PromptedOutput
for kind in [NativeOutput, PromptedOutput]:
    try:
        a = Agent(model, output_type=kind(Rating), model_settings={"temperature": 1, "max_tokens": 200})
        print("pydantic-ai", kind.__name__, "->", repr(a.run_sync("Rate a fortune.").output))
    except Exception as e:
        print("pydantic-ai", kind.__name__, "FAILED", type(e).__name__, e)
