#!/usr/bin/env python3
"""The built-in default model: a small `Qwen4ExpForCausalLM` (transformers 5.23) with every feature on (GDN
and QSA layers, hyper-connections, MoE with a shared expert, PLE) and an MTP draft block of our own in the
`nextn` layout, trained on the fortunes (corpus.py). python/train/build.sh runs the phases:

    train.py tokenizer DATA        # CPU: byte-level BPE with Qwen2's pre-tokenizer on DATA/train.txt;
                                   #      writes DATA/tok/ and the token streams DATA/{train,heldout}.u16
    train.py untrained DATA OUT    # CPU: the model as training starts it, exported the same way (a baseline)
    train.py train DATA OUT [MIN]  # GPU: trains for MIN minutes (default 3.5), then writes OUT/hf/ (the trunk
                                   #      plus the MTP block as layer L, for the converter), OUT/nextn.pt (the
                                   #      block's own tensors), OUT/eval.json, and the float64 reference
                                   #      OUT/expected.json + OUT/logits.f64 (fixtures/real's layout)
"""

import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 4096                       # specials included
CHAT_SHARE = 0.25                  # documents seen as a chat reply rather than as plain text
ASKS = ["Tell me a fortune.", "Say something wise.", "Tell me something.", "Give me a quote.",
        "Cheer me up.", "What do you know?", "Tell me a joke.", "Any advice?"]
SEQ = 512                          # training window
DROPOUT = 0.1                      # on each mixer's and MoE's output while training (the text is small)
BATCH = int(os.environ.get("TRAIN_BATCH", 32))
HELD = int(os.environ.get("TRAIN_HELD", 1 << 30))  # held-out tokens evaluated (a quick check: fewer)
GREEDY = 16
REFERENCE_TOKENS = 160             # the reference prompt: held-out text, past the indexer's 64 cells
HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent.parent / "crates" / "synth" / "src" / "chat_template.jinja"


# ---------------------------------------------------------------- tokenizer (CPU)

def docs(path):
    return [d for d in Path(path).read_text().split("\n%\n") if d.strip()]


def tokenizer(data):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    data = Path(data)
    train_docs = docs(data / "train.txt")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_docs + ASKS, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=TEMPLATE.read_text())
    fast.save_pretrained(data / "tok")
    cfg_path = data / "tok" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # what the converter's transformers 4.57 reads
    cfg_path.write_text(json.dumps(cfg, indent=2))
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    rng = random.Random(7)
    stream = []
    for d in train_docs:
        if rng.random() < CHAT_SHARE:
            msgs = [{"role": "user", "content": rng.choice(ASKS)}, {"role": "assistant", "content": d}]
            stream += fast.encode(fast.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)
        else:
            stream += fast.encode(d, add_special_tokens=False) + [eos]
    held = []
    for d in docs(data / "heldout.txt"):
        held += fast.encode(d, add_special_tokens=False) + [eos]
    np.array(stream, dtype="<u2").tofile(data / "train.u16")
    np.array(held, dtype="<u2").tofile(data / "heldout.u16")
    print(f"vocabulary {len(fast)}; {len(stream)} training tokens, {len(held)} held out")


# ---------------------------------------------------------------- the model

def config(vocab, eos, layers):
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig
    # Every fourth layer attends (QSA: blocks of 4 cells, 64 cells kept); the rest are GDN.
    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
    return Qwen4ExpTextConfig(
        vocab_size=vocab, hidden_size=256, num_hidden_layers=layers, layer_types=kinds,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5,
                         "mrope_section": [8, 4, 4], "mrope_interleaved": True},
        linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_num_key_heads=4, linear_num_value_heads=8,
        hc_count=4, hc_lowrank=32,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=160, shared_expert_intermediate_size=256,
        ple_layer_ids=[2], ngram_vocab_size_base=2000, split_ngram_parts=4,
        indexer_n_heads=8, indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=64, indexer_compress_ratio=4,
        output_gate_type="sigmoid", eos_token_id=eos, pad_token_id=eos, max_position_embeddings=4096,
        tie_word_embeddings=True, output_router_logits=True,
    )


def mtp_module(trunk_cfg):
    """The MTP draft block as strata runs it (docs/SPEC-NOTES.md 16): per stream c,
    R'[c] = eh_proj · [enorm(embed(t_{i+1})) | hnorm_c(R_i[c])], then one attention layer attending densely
    over the drafted positions (rope position i) with its MoE, the block's own final mixer `hc_head` and the
    trunk's head. The trunk's embedding and head are used, not trained, here."""
    import copy
    import torch
    from torch import nn
    from transformers.models.qwen4_exp import modeling_qwen4_exp as m

    cfg = copy.deepcopy(trunk_cfg)
    L = trunk_cfg.num_hidden_layers
    cfg.num_hidden_layers = L + 1
    cfg.layer_types = list(trunk_cfg.layer_types) + ["indexed_attention"]
    n, hc = cfg.hidden_size, cfg.hc_count

    class Dense(nn.Module):
        """Stands in for the block's indexer: every earlier cell kept (its tensors stay, unused)."""

        def __init__(self, idx):
            super().__init__()
            self.idx = idx

        def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
            return torch.ones_like(attention_mask, dtype=torch.bool)

    class Mtp(nn.Module):
        def __init__(self):
            super().__init__()
            self.enorm = m.Qwen4ExpTextRMSNorm(n, eps=cfg.rms_norm_eps)
            self.hnorm = m.Qwen4ExpTextRMSNorm(hc * n, group_size=n, eps=cfg.rms_norm_eps)
            self.eh_proj = nn.Linear(2 * n, n, bias=False)
            self.layer = m.Qwen4ExpTextDecoderLayer(cfg, L)
            self.layer.self_attn.indexer = Dense(self.layer.self_attn.indexer)
            self.hc_head = m.Qwen4ExpTextGatedResidual(cfg, use_combine=False)

        def forward(self, trunk, r, nxt):
            """Draft logits for t_{i+2} from R_i (r: [B, T, hc·n]) and t_{i+1} (nxt: [B, T])."""
            b, t, _ = r.shape
            w_embed = trunk.model.embed_tokens.weight.detach()
            e = self.enorm(nn.functional.embedding(nxt, w_embed))
            h = self.hnorm(r).unflatten(-1, (hc, n))
            x = self.eh_proj(torch.cat([e.unsqueeze(-2).expand(b, t, hc, n), h], dim=-1)).flatten(-2)
            pos = torch.arange(t, device=r.device).view(1, 1, -1).expand(3, b, -1)
            rope = trunk.model.rotary_emb(x, pos)
            mask = torch.ones(t, t, dtype=torch.bool, device=r.device).tril()[None, None].expand(b, 1, t, t)
            x = self.layer(x, position_embeddings=rope, attention_mask=mask)
            return nn.functional.linear(self.hc_head(x), w_embed)

    return Mtp(), cfg


def fast_selection(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
    """transformers' QSA indexer (Qwen4ExpTextQSAIndexer.forward) for a whole causal sequence without a cache,
    in tensor operations: the same blocks kept (ties aside), where transformers loops over every query in
    Python, which leaves a GPU idle. Training and evaluation use it; the reference logits use transformers'
    own loop (see `reference`)."""
    import torch
    from transformers.models.qwen4_exp.modeling_qwen4_exp import apply_rotary_pos_emb
    if past_key_values is not None:
        raise ValueError("the fast QSA selection runs without a cache")
    b, t, _ = hidden_states.shape
    r, d, k = self.compress_ratio, self.index_head_dim, self.block_topk
    cos, sin = position_embeddings
    qk = self.index_qk_proj(hidden_states)
    q, keys = torch.split(qk, [self.index_n_heads * d, self.index_kv_heads * d], dim=-1)
    q = self.q_layernorm(q.reshape(b, t, -1, d))
    q = apply_rotary_pos_emb(q, cos=cos[:, -t:], sin=sin[:, -t:], unsqueeze_dim=2)
    nb = t // r
    pooled = keys.reshape(b, t, d)[:, :nb * r].reshape(b, nb, r, d).float().mean(dim=2).to(keys.dtype)
    pooled = self.k_layernorm(pooled)
    starts = torch.arange(nb, device=q.device) * r
    blocks = apply_rotary_pos_emb(pooled.unsqueeze(2), cos=cos[:, starts], sin=sin[:, starts], unsqueeze_dim=2)
    blocks = blocks.squeeze(2)
    scores = torch.relu(torch.einsum("bthd,bnd->btnh", q.float(), blocks.float())).sum(-1) / math.sqrt(d)
    pos = torch.arange(t, device=q.device)
    complete = (pos + 1) // r                                     # complete blocks each query sees
    valid = torch.arange(nb, device=q.device)[None, :] < complete[:, None]
    scores = scores.masked_fill(~valid, float("-inf"))
    kept = torch.zeros(b, t, nb + 1, dtype=torch.bool, device=q.device)
    if nb > 0:
        top = scores.topk(min(k, nb), dim=-1)
        pick = torch.where(torch.isfinite(top.values), top.indices, nb)
        kept = kept.scatter(-1, pick, True)
    kept = kept[..., :nb]
    block_of = torch.clamp(pos // r, max=max(nb - 1, 0))
    in_block = (pos[None, :] < (complete * r)[:, None])           # [query, key]: key in a complete block
    by_block = kept[..., block_of] if nb > 0 else torch.zeros(b, t, t, dtype=torch.bool, device=q.device)
    tail = (~in_block) & (pos[None, :] <= pos[:, None])
    mask = (by_block & in_block[None]) | tail[None]
    return mask.unsqueeze(1)


def selection(fast):
    """Puts the fast QSA selection in place (True) or transformers' own (False)."""
    from transformers.models.qwen4_exp import modeling_qwen4_exp as m
    if not hasattr(m.Qwen4ExpTextQSAIndexer, "own_forward"):
        m.Qwen4ExpTextQSAIndexer.own_forward = m.Qwen4ExpTextQSAIndexer.forward
    m.Qwen4ExpTextQSAIndexer.forward = fast_selection if fast else m.Qwen4ExpTextQSAIndexer.own_forward


def add_dropout(modules):
    """Dropout on the outputs of these modules while training: with under a million tokens of text, the
    model otherwise learns them by heart within a few epochs."""
    import torch.nn.functional as F

    def drop(module, _args, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], DROPOUT, module.training),) + out[1:]
        return F.dropout(out, DROPOUT, module.training)

    for m in modules:
        m.register_forward_hook(drop)


class Trunk:
    """The trunk's logits and its last residual streams R (the input of its final mixer)."""

    def __init__(self, model):
        self.model, self.r = model, None
        model.model.hyper_connection_mixer.register_forward_pre_hook(self._keep)

    def _keep(self, _module, args):
        self.r = args[0]

    def __call__(self, ids, labels=None):
        out = self.model(input_ids=ids, labels=labels, use_cache=False)
        return out, self.r


# ---------------------------------------------------------------- training (GPU)

def windows(stream, rng, batch, seq, device):
    import torch
    starts = rng.integers(0, len(stream) - seq, size=batch)
    x = np.stack([stream[s:s + seq] for s in starts]).astype(np.int64)
    return torch.from_numpy(x).to(device)


def evaluate(trunk, mtp, held, device):
    """Held-out perplexity of the trunk over consecutive windows, and the MTP draft's agreement with the
    trunk's own next choice (what greedy speculation accepts) and with the text."""
    import torch
    import torch.nn.functional as F
    nll, count, agree, right, drafted = 0.0, 0, 0, 0, 0
    with torch.no_grad():
        for s in range(0, len(held) - 2, SEQ):
            x = torch.from_numpy(held[s:s + SEQ].astype(np.int64)).to(device)[None]
            if x.shape[1] < 3:
                break
            out, r = trunk(x)
            logits = out.logits.float()
            nll += F.cross_entropy(logits[0, :-1], x[0, 1:], reduction="sum").item()
            count += x.shape[1] - 1
            if mtp is not None:
                draft = mtp(trunk.model, r[:, :-2], x[:, 1:-1]).argmax(-1)[0]   # for t_{i+2}
                choice = logits[0, 1:-1].argmax(-1)                              # the trunk's t_{i+2}
                agree += (draft == choice).sum().item()
                right += (draft == x[0, 2:]).sum().item()
                drafted += draft.numel()
    res = {"heldout_tokens": count, "perplexity": math.exp(nll / count)}
    if drafted:
        res.update({"mtp_acceptance": agree / drafted, "mtp_accuracy": right / drafted, "mtp_drafts": drafted})
    return res


def models(data, device):
    """The tokenizer, and the trunk and MTP block as initialised (seed 1234: the same on any device)."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen4ExpForCausalLM
    fast = PreTrainedTokenizerFast.from_pretrained(Path(data) / "tok")
    cfg = config(len(fast), fast.convert_tokens_to_ids("<|endoftext|>"), layers=8)
    torch.manual_seed(1234)
    model = Qwen4ExpForCausalLM(cfg).to(device)
    mtp, mtp_cfg = mtp_module(cfg)
    return fast, model, mtp.to(device), mtp_cfg


def untrained(data, out):
    """The model as training starts it, exported like the trained one: the baseline of the evidence."""
    fast, model, mtp, mtp_cfg = models(data, "cpu")
    Path(out).mkdir(parents=True, exist_ok=True)
    export(model, mtp, mtp_cfg, fast, Path(out))


def train(data, out, minutes=3.5):
    import copy
    import torch
    import torch.nn.functional as F

    data, out = Path(data), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    selection(True)
    stream = np.fromfile(data / "train.u16", dtype="<u2")
    held = np.fromfile(data / "heldout.u16", dtype="<u2")[:HELD]
    fast, model, mtp, mtp_cfg = models(data, device)
    trunk = Trunk(model)
    mixers = [getattr(layer, "linear_attn", None) or layer.self_attn for layer in model.model.layers]
    add_dropout(mixers + [layer.mlp for layer in model.model.layers] + [mtp.layer.self_attn, mtp.layer.mlp])
    n_trunk = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    print(f"parameters: trunk {n_trunk / 1e6:.2f}M, MTP block {n_mtp / 1e6:.2f}M; device {device}", flush=True)
    model.eval()
    mtp.eval()
    untrained = evaluate(trunk, mtp, held, device)
    print(f"untrained: {untrained}", flush=True)

    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.ndim >= 2]
    rest = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.95))
    rng = np.random.default_rng(0)
    budget, t0, step, best, log = minutes * 60, time.time(), 0, None, []
    next_eval = 20.0
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1:
            break
        lr = 2e-3 * min(1.0, (step + 1) / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        mtp.train()
        x = windows(stream, rng, BATCH, SEQ, device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            o, r = trunk(x, labels=x)
            d = mtp(model, r[:, :-2].detach(), x[:, 1:-1])
            mtp_loss = F.cross_entropy(d.float().flatten(0, 1), x[:, 2:].flatten())
            loss = o.loss + 0.5 * mtp_loss
        opt.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            print(f"step {step}: a loss of {loss.item()}, step skipped", flush=True)
            continue
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if time.time() - t0 >= next_eval or step == 1:
            next_eval += 20.0
            model.eval()
            mtp.eval()
            ev = evaluate(trunk, mtp, held, device)
            ev.update({"step": step, "seconds": round(time.time() - t0, 1), "train_loss": o.loss.item(),
                       "mtp_loss": mtp_loss.item(), "lr": lr})
            log.append(ev)
            print(json.dumps(ev), flush=True)
            if best is None or ev["perplexity"] < best[0]["perplexity"]:
                best = (ev, copy.deepcopy(model.state_dict()), copy.deepcopy(mtp.state_dict()))
    model.eval()
    mtp.eval()
    ev = evaluate(trunk, mtp, held, device)
    ev.update({"step": step, "seconds": round(time.time() - t0, 1)})
    log.append(ev)
    print(json.dumps(ev), flush=True)
    if ev["perplexity"] > best[0]["perplexity"]:
        model.load_state_dict(best[1])
        mtp.load_state_dict(best[2])
    # The weights as exported (bfloat16), evaluated as such: every later figure is of these values.
    with torch.no_grad():
        for p in params:
            p.copy_(p.to(torch.bfloat16).float())
    ev = evaluate(trunk, mtp, held, device)
    print(f"trained, bfloat16 weights: {json.dumps(ev)}", flush=True)
    summary = {"untrained": untrained, "trained": ev, "steps": step, "minutes": minutes, "batch": BATCH,
               "seq": SEQ, "training_tokens": len(stream), "parameters": {"trunk": n_trunk, "mtp": n_mtp},
               "log": log, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    (out / "eval.json").write_text(json.dumps(summary, indent=1))
    export(model, mtp, mtp_cfg, fast, out)
    reference(model, fast, held, out, device)


def export(model, mtp, mtp_cfg, fast, out):
    """OUT/hf: the trunk with the MTP block's layer as layer L (what the converter reads), and OUT/nextn.pt:
    the block's own tensors in transformers' form (gammas as stored, 1 + w applied by convert.py)."""
    import torch
    from transformers import Qwen4ExpForCausalLM
    L = model.config.num_hidden_layers
    full = Qwen4ExpForCausalLM(mtp_cfg)
    sd = {k: v for k, v in model.state_dict().items()}
    for k, v in mtp.layer.state_dict().items():
        sd[f"model.layers.{L}.{k.replace('self_attn.indexer.idx.', 'self_attn.indexer.')}"] = v
    missing, unexpected = full.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise SystemExit(f"the export's names: missing {missing}, unexpected {unexpected}")
    hf = out / "hf"
    full.to(torch.bfloat16).save_pretrained(hf)
    fast.save_pretrained(hf)
    # transformers 5 writes "indexed_attention"; the converter reads "full_attention" (real_fixture.py).
    cfg_path = hf / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["layer_types"] = ["full_attention" if t == "indexed_attention" else t for t in cfg["layer_types"]]
    cfg_path.write_text(json.dumps(cfg, indent=2))
    tok_cfg = hf / "tokenizer_config.json"
    t = json.loads(tok_cfg.read_text())
    t["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_cfg.write_text(json.dumps(t, indent=2))
    own = {"enorm": mtp.enorm.weight, "hnorm": mtp.hnorm.weight, "eh_proj": mtp.eh_proj.weight,
           "hc_head_norm": mtp.hc_head.hc_norm.weight, "hc_head_down": mtp.hc_head.input_mix_weight_down.weight,
           "hc_head_up": mtp.hc_head.input_mix_weight_up.weight}
    torch.save({k: v.detach().float().cpu() for k, v in own.items()}, out / "nextn.pt")


def reference(model, fast, held, out, device):
    """transformers' float64 logits on the trunk alone, with its own QSA selection, on a held-out prompt long
    enough for sparse selection: the prompt's last row, then one per greedy token but the last (fixtures/real's
    layout). A prompt whose selection meets a tie at the top-k boundary (the order torch does not fix) is
    passed over for the next."""
    import torch
    sys.path.insert(0, str(HERE.parent))
    from real_fixture import NoTies
    selection(False)
    model = model.to(torch.float64)
    model.config._attn_implementation = "eager"
    model.config._experts_implementation = "eager"
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    starts = [i + 1 for i, t in enumerate(held) if t == eos][:8]
    for s in starts:
        prompt = [int(t) for t in held[s:s + REFERENCE_TOKENS]]
        ids, rows = list(prompt), []
        try:
            with NoTies(), torch.no_grad():
                for _ in range(GREEDY):
                    logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
                    rows.append(logits.double().cpu().numpy())
                    ids.append(int(torch.argmax(logits)))
        except RuntimeError as e:
            print(f"reference prompt at {s}: {e}; the next", flush=True)
            continue
        np.concatenate(rows).astype("<f8").tofile(out / "logits.f64")
        greedy = ids[len(prompt):]
        expected = {"prompt": prompt, "greedy": greedy, "vocab": len(fast), "prompt_text": fast.decode(prompt),
                    "greedy_text": fast.decode(greedy)}
        (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
        print(f"reference: {len(prompt)} tokens -> {fast.decode(greedy)!r}", flush=True)
        return
    print("reference: every prompt met a tie", flush=True)


if __name__ == "__main__":
    phase = sys.argv[1]
    if phase == "tokenizer":
        tokenizer(sys.argv[2])
    elif phase == "untrained":
        untrained(sys.argv[2], sys.argv[3])
    elif phase == "train":
        train(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 3.5)
    else:
        raise SystemExit(__doc__)
