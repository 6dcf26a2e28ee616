#!/usr/bin/env python3
"""Fixtures made by the real tools: a small random `Qwen4ExpForCausalLM` (transformers 5.23), converted by
llama.cpp's own converter, and what transformers computes for it. python/real_fixture.sh runs the phases
with the right packages; see README § "Checked against the real tools".

    real_fixture.py build   LLAMA_CPP OUT   # transformers 5.23: tokenizer, model, float64 logits, templates
    real_fixture.py convert LLAMA_CPP OUT   # transformers 4.57 + the vendored converter: f32, bf16, q8_0

LLAMA_CPP is `vendor/llama.cpp` of the llama-cpp-python 0.3.36 source distribution. OUT receives:
  hf/                     the transformers checkpoint (not committed)
  qwen4exp-real-{f32,bf16,q8_0}.gguf
  expected.json           prompt ids, greedy ids, tokenizer cases, chat-template cases
  logits.f64              little-endian float64 rows: the last prompt position's logits, then one row per
                          greedy token but the last (row i chose greedy token i), as `--dump-logits` writes
"""

import json
import os
import struct
import sys
from pathlib import Path

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
N_REGULAR = 3000          # the first 3000 tokens of Qwen2's vocabulary (bytes and the earliest merges)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GREEDY = 16
TEMPLATES = ["Qwen3.5-4B.jinja", "Qwen3-Coder.jinja", "Qwen-Qwen3-0.6B.jinja"]

PROMPT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. From the lamp room he could see "
    "the whole harbour: the fishing boats coming home, the gulls circling the market, and the long grey line "
    "of the breakwater. In winter the storms came in from the west, and the waves threw spray over the rocks "
    "so high that the glass rattled in its frame. He kept a logbook of every ship that passed, with the time, "
    "the weather and the direction of the wind, and on quiet nights he read old letters by the light."
)


def qwen2_vocab(llama_cpp, n_regular=N_REGULAR):
    """Tokens, merges and specials of Qwen2's real vocabulary, cut to the first `n_regular` tokens."""
    sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    import gguf
    r = gguf.GGUFReader(str(Path(llama_cpp) / "models" / "ggml-vocab-qwen2.gguf"))
    field = lambda k: r.fields[k]
    toks = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode() for i in field("tokenizer.ggml.tokens").data]
    merges = [bytes(field("tokenizer.ggml.merges").parts[i]).decode() for i in field("tokenizer.ggml.merges").data]
    kept = toks[:n_regular]
    keep = set(kept)
    cut = []
    for m in merges:
        a, b = m.split(" ", 1)
        if a in keep and b in keep and a + b in keep:
            cut.append((a, b))
    return kept, cut


def build_tokenizer(llama_cpp, out, n_regular=N_REGULAR):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    kept, merges = qwen2_vocab(llama_cpp, n_regular)
    vocab = {t: i for i, t in enumerate(kept)}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    chat = (Path(llama_cpp) / "models" / "templates" / TEMPLATES[0]).read_text()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=chat)
    fast.save_pretrained(out)
    # transformers 5 names its own tokenizer class; the converter's transformers 4.57 reads the same
    # tokenizer.json as a PreTrainedTokenizerFast.
    cfg_path = Path(out) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return fast


def make_model(vocab_size, eos):
    import torch
    from transformers import Qwen4ExpForCausalLM
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig
    cfg = Qwen4ExpTextConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=6,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention",
                     "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5,
                         "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        hc_count=4, hc_lowrank=16,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        ple_layer_ids=[2], ngram_vocab_size_base=1000, split_ngram_parts=4,
        indexer_n_heads=8, indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=16, indexer_compress_ratio=4,
        output_gate_type="sigmoid", eos_token_id=eos, pad_token_id=eos, max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the reference loop, which runs in float64
    torch.manual_seed(1234)
    model = Qwen4ExpForCausalLM(cfg)
    randomize(model)
    return model


def randomize(model):
    """Weights drawn so every feature matters: projections keep their input's scale, norm gammas and the
    PLE conv are not their zero init, the router is decisive."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and "embed" not in name:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
            elif "embed" in name:
                p.normal_(0.0, 1.0)
            elif name.endswith("norm.weight") or "layernorm" in name or "norm_" in name:
                p.normal_(0.0, 0.1)  # stored as 1 + w by the converter
            elif name.endswith("conv1d.weight"):
                p.uniform_(-0.5, 0.5)
        for name, p in model.named_parameters():
            if name.endswith("ple.conv1d.weight"):
                p.uniform_(-0.5, 0.5)
            if name.endswith("lm_head.weight"):
                p.mul_(3.0)


class NoTies:
    """Refuses a top-k (the indexer's blocks, the router's experts) whose k-th and (k+1)-th values are
    equal: torch.topk breaks such ties in no fixed order, while strata keeps the lower index, so a
    fixture must not depend on one. (With few indexer heads, blocks whose every head dot is negative
    all score 0; eight heads make that rare.)"""

    def __enter__(self):
        import torch
        self.torch, self.method, self.function = torch, torch.Tensor.topk, torch.topk

        def checked(x, k, dim=-1, *a, **kw):
            s = self.torch.sort(x, dim=dim, descending=True).values
            if x.shape[dim] > k and bool((s.narrow(dim, k - 1, 1) == s.narrow(dim, k, 1)).any()):
                raise RuntimeError("a tie at the top-k boundary: the fixture would depend on torch's order")
            return self.method(x, k, dim, *a, **kw)

        torch.Tensor.topk, torch.topk = checked, checked
        return self

    def __exit__(self, *exc):
        self.torch.Tensor.topk, self.torch.topk = self.method, self.function


def greedy_run(model, prompt, n):
    import torch
    ids, rows = list(prompt), []
    with NoTies():
        for _ in range(n):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            rows.append(logits.double().numpy())
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], rows


def tokenizer_cases(fast):
    pieces = [
        "Hello, world!", "naïve café — 日本語 🙂", "fn main() { let x = 1; }", "  leading and trailing  ",
        "tabs\tand\nnewlines\r\n", "1234567890 3.14159 1e-7", "I've been told he's there, 'RE you sure?",
        "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>", "a<|im_end|>b", "", " ", "\n\n\n",
        "def f(x):\n    return x * 2\n", "SELECT * FROM t WHERE a = 'b';", "https://example.com/a?b=c&d=e",
        "Ünïcödé ñ ß ø å", "emoji 🦙🦙 and ✅", "mixed CASE Words", "don't won't can't",
    ]
    words = PROMPT.split()
    for i in range(0, len(words) - 6, 3):
        pieces.append(" ".join(words[i:i + 6]))
    for i in range(200):
        w = words[(i * 7) % len(words)]
        pieces.append(f"{w}{i}{'!' * (i % 3)} {w.upper()}\t{i * 31 % 97}")
    return [{"text": t, "ids": fast.encode(t, add_special_tokens=False)} for t in pieces]


def template_cases(fast, llama_cpp):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather at a place",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}},
                       "required": ["city"]}}}]
    convs = [
        {"messages": [{"role": "user", "content": "Hello!"}], "tools": None},
        {"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And 3+3?"}], "tools": None},
        {"messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "user", "content": "Thanks. And Rome?"}], "tools": tools},
    ]
    cases = []
    for name in TEMPLATES:
        text = (Path(llama_cpp) / "models" / "templates" / name).read_text()
        for c in convs:
            for gen in (True, False):
                try:
                    out = fast.apply_chat_template(c["messages"], tools=c["tools"], tokenize=False,
                                                   add_generation_prompt=gen, chat_template=text)
                except Exception as e:  # a template may refuse a conversation (e.g. no user turn): record it
                    out = None
                    print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
                cases.append({"template": name, "messages": c["messages"], "tools": c["tools"],
                              "add_generation_prompt": gen, "text": out})
    return cases


def build(llama_cpp, out):
    import numpy as np
    import torch
    out = Path(out)
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    fast = build_tokenizer(llama_cpp, hf)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    model = make_model(len(fast), eos)
    model.save_pretrained(hf)
    fix_layer_types(hf)
    model = model.to(torch.float64).eval()
    prompt = fast.encode(PROMPT, add_special_tokens=False)
    greedy, rows = greedy_run(model, prompt, GREEDY)
    np.concatenate(rows).astype("<f8").tofile(out / "logits.f64")
    expected = {
        "prompt": prompt, "greedy": greedy, "vocab": len(fast), "prompt_text": PROMPT,
        "greedy_text": fast.decode(greedy),
        "tokenizer": tokenizer_cases(fast), "templates": template_cases(fast, llama_cpp),
    }
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
    print(f"prompt {len(prompt)} tokens, greedy {greedy}")


def fix_layer_types(hf):
    """transformers 5 writes the layer types as "indexed_attention"; the converter (and the released
    checkpoint) name them "full_attention", which is what sets the block sizes in the file."""
    cfg_path = Path(hf) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["layer_types"] = ["full_attention" if t == "indexed_attention" else t for t in cfg["layer_types"]]
    cfg_path.write_text(json.dumps(cfg, indent=2))


def converter(llama_cpp):
    """The vendored converter's entry point, with one change: a tokenizer whose pre-tokenizer hash it does
    not know (a truncated or newly trained vocabulary with Qwen2's pre-tokenizer) is given the `qwen2`
    pre-tokenizer instead of refused."""
    sys.path.insert(0, str(Path(llama_cpp)))
    sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    sys.argv = ["convert_hf_to_gguf.py"]
    import convert_hf_to_gguf  # noqa: F401  (registers the models)
    from conversion.base import TextModel
    original = TextModel.get_vocab_base_pre

    def with_fallback(self, tokenizer):
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            return "qwen2"

    TextModel.get_vocab_base_pre = with_fallback

    def convert_one(hf, kind, outfile):
        sys.argv = ["convert_hf_to_gguf.py", str(hf), "--outtype", kind, "--outfile", str(outfile)]
        convert_hf_to_gguf.main()
    return convert_one


def convert(llama_cpp, out):
    out = Path(out)
    convert_one = converter(llama_cpp)
    for kind in ("f32", "bf16", "q8_0"):
        convert_one(out / "hf", kind, out / f"qwen4exp-real-{kind}.gguf")


if __name__ == "__main__":
    phase, llama_cpp, out = sys.argv[1:4]
    {"build": build, "convert": convert}[phase](llama_cpp, out)
