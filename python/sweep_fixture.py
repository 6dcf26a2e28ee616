#!/usr/bin/env python3
"""A sweep of small qwen4exp geometries made by the real tools (python/sweep_fixture.sh runs the phases):
each a random `Qwen4ExpForCausalLM` of transformers 5.23, converted to f32 by llama.cpp's vendored
converter, with transformers' float64 logits for a prompt long enough for sparse QSA selection and 16
greedy tokens. Together the models vary every dimension the config allows (see SPECS).

    sweep_fixture.py build   LLAMA_CPP OUT [NAME…]  # transformers 5.23: tokenizer, model, logits per spec
    sweep_fixture.py convert LLAMA_CPP OUT [NAME…]  # transformers 4.57 + the vendored converter: OUT/NAME/model.gguf

No decision of the reference sits on a near tie, so that equal greedy tokens are a fair demand: each model
is drawn again (next weight seed) until every compared row's top-1 margin is at least 0.05 and every
router and indexer top-k keeps a gap of at least 1e-5 of its row's largest |value| between the k-th and
(k+1)-th values. OUT/NAME/ receives expected.json (prompt, greedy, vocab, the spec, the margins found) and
logits.f64 (rows as real_fixture.py writes them).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_fixture as rf  # noqa: E402

GREEDY = 16
TOP1_MARGIN = 0.05
TOPK_GAP = 1e-5
SEEDS = 40

# The base geometry, then per model what differs. ple: 1-based transformers layer id (a GDN layer);
# attn: 0-based attention layers; the rest GDN.
BASE = dict(
    vocab=3000, hidden=64, layers=6, attn=[3, 5], heads=4, kv_heads=2, head_dim=32, rotary=0.5,
    mrope=[4, 2, 2], theta=1e7, gdn_k_heads=2, gdn_v_heads=4, gdn_dim=16, hc=4, hc_rank=16, experts=8,
    top_k=2, expert_ff=32, shared_ff=48, ple=2, ngram=3, heads_per_ngram=8, ple_kernel=4, ngram_base=1000, conv=4,
    idx_heads=8, idx_dim=32, budget=16, ratio=4, eps=1e-6, tied=False, prompt=0,
)
SPECS = {
    # eps 1e-5, a tied head, four layers, a small vocabulary, blocks of 8, full rotary over a 16-dim head,
    # a GDN conv of 3 taps.
    "eps5-tied-4l": dict(eps=1e-5, tied=True, vocab=1200, layers=4, attn=[3], head_dim=16, rotary=1.0,
                         mrope=[4, 2, 2], theta=1e6, idx_heads=4, idx_dim=16, budget=32, ratio=8, experts=4,
                         top_k=1, shared_ff=16, ple=1, ngram_base=500, hc=2, hc_rank=8, conv=3, prompt=1),
    # eps 1e-5, eight layers, wide GDN (4 key, 8 value heads of 8), 12 narrow experts top-4, a 64-dim head with a
    # quarter rotary, four indexer heads of 64. (With fewer than three indexer heads a block's score is 0
    # too often — every head's dot negative — for a prompt without exact ties at the top-k boundary.)
    "eps5-gdn-8l": dict(eps=1e-5, vocab=800, hidden=48, layers=8, attn=[3, 7], heads=4, kv_heads=2,
                        head_dim=64, rotary=0.25, mrope=[4, 2, 2], theta=5e5, gdn_k_heads=4, gdn_v_heads=8,
                        gdn_dim=8, idx_heads=4, idx_dim=64, budget=8, ratio=4, experts=12, top_k=4,
                        expert_ff=8, shared_ff=32, ple=3, ngram_base=400, heads_per_ngram=4, ple_kernel=3,
                        hc=3, hc_rank=16, prompt=2),
    # eps 1e-6, twelve layers, attention at irregular places, one GDN key head, a GDN conv of 5 taps, blocks
    # of 8, bigrams.
    "eps6-tied-12l": dict(eps=1e-6, tied=True, vocab=1000, hidden=32, layers=12, attn=[2, 5, 6, 11], heads=2,
                          kv_heads=1, head_dim=16, rotary=0.5, mrope=[2, 1, 1], theta=1e4, gdn_k_heads=1,
                          gdn_v_heads=2, gdn_dim=32, idx_heads=3, idx_dim=16, budget=16, ratio=8, experts=6,
                          top_k=3, expert_ff=24, shared_ff=8, ple=5, ngram=2, heads_per_ngram=8, ple_kernel=2,
                          ngram_base=700, hc_rank=8, conv=5, prompt=3),
    # eps 1e-5, untied, 16 experts top-1, a wide shared expert, 5 layers, the largest vocabulary.
    "eps5-untied-5l": dict(eps=1e-5, vocab=2800, hidden=48, layers=5, attn=[1, 4], heads=4, kv_heads=4,
                           head_dim=16, rotary=0.5, mrope=[2, 2, 0], theta=2e6, gdn_k_heads=3, gdn_v_heads=3,
                           gdn_dim=16, idx_heads=4, idx_dim=8, budget=24, ratio=4, experts=16, top_k=1,
                           expert_ff=8, shared_ff=64, ple=1, ngram_base=300, heads_per_ngram=2, ngram=4,
                           hc_rank=16, prompt=4),
    # eps 1e-6, the base with blocks of 8 and top-2 of 8: the released model's proportions, small.
    "eps6-untied-6l": dict(ratio=8, budget=24, vocab=900, expert_ff=8, shared_ff=32, ngram_base=400, prompt=5),
}

PROMPTS = [
    rf.PROMPT,
    "Every morning the baker lit the oven before the town woke. The first loaves came out at five, the rolls "
    "at six, and by seven the queue reached the corner of the square. She knew each customer by the bread they "
    "asked for: the teacher wanted rye, the postman two white rolls, and the old sailor a sweet bun that he "
    "ate on the bench by the fountain while he watched the pigeons fight over the crumbs.",
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n"
    "            out.append(a[i])\n            i += 1\n        else:\n            out.append(b[j])\n            "
    "j += 1\n    out.extend(a[i:])\n    out.extend(b[j:])\n    return out\n\nprint(merge([1, 4, 9], [2, 3, 10]))\n",
    "The river rose three feet in the night. By morning the lower fields were under water and the farmers "
    "had moved their cattle to the ridge above the mill. Nobody in the valley could remember a flood so early "
    "in the year, and the old men at the inn argued about whether the snow had melted too fast in the hills "
    "or whether the new dam upstream had let out more than it should.",
    "Q: What is the capital of France?\nA: Paris.\nQ: How many legs does a spider have?\nA: Eight.\n"
    "Q: Which planet is closest to the sun?\nA: Mercury.\nQ: What do bees make?\nA: Honey.\n"
    "Q: What colour is the sky on a clear day?\nA: Blue.\nQ: How many days are in a leap year?\nA:",
    "In the workshop the clocks all ticked at slightly different speeds, and the clockmaker liked it that "
    "way. He said a room full of clocks that agreed was a room that had stopped listening. Each week he set "
    "them again by the church bell, wrote down how far each had drifted, and kept the numbers in a green book "
    "that nobody else was allowed to read.",
]


def spec(name):
    s = dict(BASE)
    s.update(SPECS[name])
    return s


def make_model(s, vocab_size, eos, seed):
    import torch
    from transformers import Qwen4ExpForCausalLM
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig
    layer_types = ["full_attention" if l in s["attn"] else "linear_attention" for l in range(s["layers"])]
    cfg = Qwen4ExpTextConfig(
        vocab_size=vocab_size, hidden_size=s["hidden"], num_hidden_layers=s["layers"], layer_types=layer_types,
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"],
        rope_parameters={"rope_type": "default", "rope_theta": s["theta"], "partial_rotary_factor": s["rotary"],
                         "mrope_section": s["mrope"], "mrope_interleaved": True},
        linear_conv_kernel_dim=s["conv"], linear_key_head_dim=s["gdn_dim"], linear_value_head_dim=s["gdn_dim"],
        linear_num_key_heads=s["gdn_k_heads"], linear_num_value_heads=s["gdn_v_heads"],
        hc_count=s["hc"], hc_lowrank=s["hc_rank"], rms_norm_eps=s["eps"],
        num_experts=s["experts"], num_experts_per_tok=s["top_k"], moe_intermediate_size=s["expert_ff"],
        shared_expert_intermediate_size=s["shared_ff"],
        ple_layer_ids=[s["ple"]], ngram_size=s["ngram"], heads_per_ngram=s["heads_per_ngram"],
        ple_conv_kernel_size=s["ple_kernel"], ngram_vocab_size_base=s["ngram_base"], split_ngram_parts=4,
        indexer_n_heads=s["idx_heads"], indexer_kv_heads=1, indexer_head_dim=s["idx_dim"],
        indexer_budget=s["budget"], indexer_compress_ratio=s["ratio"],
        output_gate_type="sigmoid", eos_token_id=eos, pad_token_id=eos, max_position_embeddings=4096,
        tie_word_embeddings=s["tied"],
    )
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen4ExpForCausalLM(cfg)
    rf.randomize(model)
    # A sharper head than real_fixture's (×3 there, ×12 here): top-1 margins of 0.05 in every row are then
    # common rather than rare. A tied head is the embedding, N(0, 1), sharp enough.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lm_head.weight"):
                p.mul_(4.0)
    return model


class Margins:
    """Records, while active, the smallest relative gap between the k-th and (k+1)-th values of every
    top-k that makes a choice (the router's experts, the indexer's blocks)."""

    def __enter__(self):
        import torch
        self.torch, self.method, self.function = torch, torch.Tensor.topk, torch.topk
        self.gap = float("inf")

        def recorded(x, k, dim=-1, *a, **kw):
            if x.shape[dim] > k:
                s = self.torch.sort(x, dim=dim, descending=True).values
                gap = s.narrow(dim, k - 1, 1) - s.narrow(dim, k, 1)
                scale = x.abs().amax(dim=dim, keepdim=True)
                rel = self.torch.where(scale > 0, gap / scale, self.torch.zeros_like(gap))
                self.gap = min(self.gap, float(rel.min()))
            return self.method(x, k, dim, *a, **kw)

        torch.Tensor.topk, torch.topk = recorded, recorded
        return self

    def __exit__(self, *exc):
        self.torch.Tensor.topk, self.torch.topk = self.method, self.function


def greedy_run(model, prompt, n):
    """Greedy tokens, their logit rows, the smallest top-1 margin of those rows and the smallest top-k gap."""
    import torch
    ids, rows, margin = list(prompt), [], float("inf")
    with Margins() as m:
        for _ in range(n):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            rows.append(logits.double().numpy())
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], rows, margin, m.gap


def build_one(llama_cpp, out, name):
    import numpy as np
    import torch
    s = spec(name)
    d = Path(out) / name
    hf = d / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    fast = rf.build_tokenizer(llama_cpp, hf, n_regular=s["vocab"])
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    prompt = fast.encode(PROMPTS[s["prompt"]], add_special_tokens=False)
    # Sparse selection: more complete blocks than are kept, with room, at the prompt's end.
    assert len(prompt) >= s["budget"] + 3 * s["ratio"], f"{name}: prompt of {len(prompt)} tokens is too short"
    for seed in range(SEEDS):
        model = make_model(s, len(fast), eos, 1000 + seed).to(torch.float64).eval()
        greedy, rows, margin, gap = greedy_run(model, prompt, GREEDY)
        fair = margin >= TOP1_MARGIN and gap >= TOPK_GAP
        print(f"{name}: seed {1000 + seed}: top-1 margin {margin:.3g}, top-k gap {gap:.3g}"
              f"{'' if fair else ' (near tie: next seed)'}", file=sys.stderr)
        if fair:
            break
    else:
        raise SystemExit(f"{name}: no seed of {SEEDS} gives a prompt without near ties")
    model.to(torch.float32).save_pretrained(hf)
    rf.fix_layer_types(hf)
    np.concatenate(rows).astype("<f8").tofile(d / "logits.f64")
    expected = {"prompt": prompt, "greedy": greedy, "vocab": len(fast), "spec": s, "seed": 1000 + seed,
                "top1_margin": margin, "topk_gap": gap}
    (d / "expected.json").write_text(json.dumps(expected, indent=1))


def build(llama_cpp, out, names):
    for name in names:
        build_one(llama_cpp, out, name)


def convert(llama_cpp, out, names):
    convert_one = rf.converter(llama_cpp)
    for name in names:
        d = Path(out) / name
        convert_one(d / "hf", "f32", d / "model.gguf")


if __name__ == "__main__":
    phase, llama_cpp, out = sys.argv[1:4]
    {"build": build, "convert": convert}[phase](llama_cpp, out, sys.argv[4:] or list(SPECS))
