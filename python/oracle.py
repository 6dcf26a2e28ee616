#!/usr/bin/env python3
"""An independent float64 oracle of the qwen4exp model, written from the spec (shared/spec/qwen4exp.md) as its
§0 corrects it to the real model (transformers' qwen4_exp, llama.cpp's converter layout).

It reads the GGUF with its own small header parser, dequantizes with the `gguf` package (and the spec's
Q2_0 layout, which the package does not know), and runs the forward pass of spec §2-§7 in numpy float64.

    oracle.py MODEL --prompt-tokens 1,2,3 -n 32 [--kv fp16|int8] --out LOGITS.f32 [--tokens-out IDS]

writes the same rows `strata run --dump-logits` writes: the last prompt position's logits, then one row per
greedy token but the last (little-endian f32), and prints the greedy ids.
"""

import argparse
import struct
import sys

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

EPS = 1e-6
Q2_0 = 42


# ---------------------------------------------------------------- GGUF

def read_gguf(path):
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(data)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(buf[pos:pos + n]).decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert bytes(buf[0:4]) == b"GGUF", "not a GGUF file"
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    assert version in (2, 3)
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        infos.append((name, dims, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    data_start = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, ty, off in infos:
        n = int(np.prod(dims))
        if ty == Q2_0:
            nbytes = n // 64 * 18
        else:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ty)]
            nbytes = n // block * size
        raw = np.asarray(data[data_start + off:data_start + off + nbytes])
        tensors[name] = (dims, ty, raw)
    return meta, tensors


def dequant_q2_0(raw):
    """Spec §10: 64 weights in 18 bytes, fp16 d then 2-bit codes; weight i is bits 2(i%4).. of byte i/4."""
    b = raw.reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float64)
    codes = (b[:, 2:, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
    return ((codes.reshape(-1, 64).astype(np.float64) - 1.0) * d).ravel()


# The types whose products take the input quantized to int8 (docs/ARITHMETIC.md § qdot): Q4_0, Q8_0,
# Q4_K, Q6_K, IQ4_NL, Q2_0.
QDOT_TYPES = {2, 8, 12, 14, 20, Q2_0}


def quantize_input(x):
    """§ qdot: blocks of 32, d = amax/127, codes round-half-even(x·127/amax) clamped to ±127."""
    g = x.reshape(-1, 32)
    amax = np.abs(g).max(axis=1, keepdims=True)
    safe = np.where(amax > 0, amax, 1.0)
    q = np.where(amax > 0, np.clip(np.round(g * (127.0 / safe)), -127, 127), 0.0)
    return (q * (amax / 127.0)).reshape(x.shape)


class QdotWeight(np.ndarray):
    """A weight of a qdot type: `W @ x` quantizes the vector x first, as the engine does."""

    def __matmul__(self, x):
        return np.asarray(self) @ quantize_input(np.asarray(x))


def tensor(tensors, name):
    dims, ty, raw = tensors[name]
    if ty == Q2_0:
        flat = dequant_q2_0(raw)
    else:
        flat = dequantize(raw, GGMLQuantizationType(ty)).astype(np.float64).ravel()
    w = flat.reshape(list(reversed(dims)))  # [.., ne1, ne0]: rows of ne0
    return w.view(QdotWeight) if ty in QDOT_TYPES else w


# ---------------------------------------------------------------- math

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.logaddexp(0.0, x)


def rms(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)


def rope(x, pos, rot, base):
    """NEOX pairs (i, i + rot/2) over the first rot dims; angles in float64, rounded to f32 once."""
    half = rot // 2
    i = np.arange(half, dtype=np.float64)
    ang = pos * base ** (-2.0 * i / rot)
    c = np.cos(ang).astype(np.float32).astype(np.float64)
    s = np.sin(ang).astype(np.float32).astype(np.float64)
    y = x.copy()
    x0, x1 = x[..., :half], x[..., half:rot]
    y[..., :half] = x0 * c - x1 * s
    y[..., half:rot] = x0 * s + x1 * c
    return y


def kv_round(x, mode):
    if mode == "f32":
        return x
    if mode == "fp16":
        return x.astype(np.float16).astype(np.float64)
    g = x.reshape(-1, 64)
    scale = (np.abs(g).max(axis=1, keepdims=True) / 127.0).astype(np.float16).astype(np.float64)
    q = np.where(scale > 0, np.clip(np.round(g / np.where(scale > 0, scale, 1.0)), -127, 127), 0.0)
    return (q * scale).reshape(x.shape)


def key_order(s):
    """Selection keys of spec §5.5: s + 0, NaN ranks as 0."""
    s = np.where(np.isnan(s), 0.0, s)
    return s + 0.0


# ---------------------------------------------------------------- model

class Oracle:
    def __init__(self, path, kv_mode):
        self.meta, self.t = read_gguf(path)
        m = lambda k: self.meta["qwen4exp." + k]
        self.nextn = self.meta.get("qwen4exp.nextn_predict_layers", 0)
        self.L = m("block_count") - self.nextn
        self.n, self.hc, self.r = m("embedding_length"), m("hyper_connection.count"), m("hyper_connection.low_rank")
        rec = self.meta.get("qwen4exp.attention.recurrent_layers")
        if rec is None:
            fai = self.meta.get("qwen4exp.full_attention_interval", 4)
            rec = [(l + 1) % fai != 0 for l in range(self.L)]
        ratios = self.meta.get("qwen4exp.attention.compress_ratios", [0] * self.L)
        self.attn_ratio = {l: int(ratios[l]) for l in range(self.L) if not rec[l]}
        self.hq, self.hkv, self.dh = m("attention.head_count"), m("attention.head_count_kv"), m("attention.key_length")
        self.rot, self.base = m("rope.dimension_count"), float(m("rope.freq_base"))
        self.hi, self.di, self.topk = m("attention.indexer.head_count"), m("attention.indexer.key_length"), m("attention.indexer.top_k")
        self.S, self.hk, self.hv = m("ssm.state_size"), m("ssm.group_count"), m("ssm.time_step_rank")
        self.K = m("ssm.conv_kernel")
        self.E, self.k_used, self.f = m("expert_count"), m("expert_used_count"), m("expert_feed_forward_length")
        self.ple_layer = None
        if self.meta.get("qwen4exp.ple.layers"):
            self.ple_layer = int(m("ple.layers")[0])
            self.ple_m = m("embedding_length_per_layer_input")
            self.ngram, self.hpn, self.ple_k = m("ple.ngram_size"), m("ple.heads_per_ngram"), m("ple.conv_kernel")
            self.mult, self.hvocab, self.hoff = m("ple.layer_multipliers"), m("ple.head_vocab_sizes"), m("ple.head_offsets")
            self.ple_eos = m("ple.eos_token_id")
        self.kv_mode = kv_mode
        self.W = {name: tensor(self.t, name) for name in self.t}
        self.reset()

    def reset(self):
        n, hc = self.n, self.hc
        C = 2 * self.hk * self.S + self.hv * self.S
        self.pos = 0
        self.gdn = {l: (np.zeros((self.K - 1, C)), np.zeros((self.hv, self.S, self.S))) for l in range(self.L) if not self.is_qsa(l)}
        self.qsa = {l: {"k": [], "v": [], "raw": [], "blocks": []} for l in range(self.L) if self.is_qsa(l)}
        self.prev = []  # all previous tokens
        if self.ple_layer is not None:
            self.z_hist = [np.zeros(hc * n) for _ in range((self.ple_k - 1) * self.ngram)]

    def is_qsa(self, l):
        """An attention layer (QSA, or dense when its block size is 0)."""
        return l in self.attn_ratio

    def w(self, name):
        return self.W[name]

    # -- §3
    def hc_read(self, R, p, inject=True):
        hc, n = self.hc, self.n
        xn = rms(R) * self.w(p + "_norm.weight").reshape(hc, n)
        v = xn.ravel()
        # The HC read's products take their input unquantized whatever the weights' type (§ hc).
        lo = silu((np.asarray(self.w(p + "_down.weight")) @ v) / hc)
        g = (np.asarray(self.w(p + "_up.weight")) @ lo).reshape(hc, n)
        mixed = (xn * sigmoid(g)).sum(axis=0) / hc
        inj = np.asarray(self.w(p + "_inject.weight")) @ v if inject else None
        return mixed, inj

    def hc_write(self, R, y, inj):
        return R + y[None, :] * (2.0 * sigmoid(inj / self.hc))[:, None]

    # -- §4
    def gdn_layer(self, x, l):
        b = f"blk.{l}"
        S, hk, hv = self.S, self.hk, self.hv
        conv_state, M = self.gdn[l]
        u = self.w(b + ".attn_qkv.weight") @ x
        z = self.w(b + ".attn_gate.weight") @ x
        cw = self.w(b + ".ssm_conv1d.weight")  # [C, K]
        frames = np.vstack([conv_state, u[None, :]])  # t-K+1 .. t
        c = silu((cw * frames.T).sum(axis=1))
        conv_state[:] = frames[1:]
        q = c[:hk * S].reshape(hk, S)
        k = c[hk * S:2 * hk * S].reshape(hk, S)
        v = c[2 * hk * S:].reshape(hv, S)
        q = q / np.sqrt((q * q).sum(axis=1, keepdims=True) + EPS) / np.sqrt(S)
        k = k / np.sqrt((k * k).sum(axis=1, keepdims=True) + EPS)
        beta = sigmoid(self.w(b + ".ssm_beta.weight") @ x)
        gate = softplus(self.w(b + ".ssm_alpha.weight") @ x + self.w(b + ".ssm_dt.bias")) * self.w(b + ".ssm_a")
        ys = []
        for j in range(hv):
            i = j % hk  # the converter's tiled value-head order
            M[j] *= np.exp(gate[j])
            p = M[j].T @ k[i]
            M[j] += np.outer(k[i], beta[j] * (v[j] - p))
            o = M[j].T @ q[i]
            ys.append(rms(o) * self.w(b + ".ssm_norm.weight") * sigmoid(z[j * S:(j + 1) * S]))
        return self.w(b + ".ssm_out.weight") @ np.concatenate(ys)

    # -- §5
    def qsa_layer(self, x, l):
        return self.attention(x, f"blk.{l}", self.qsa[l], self.pos, self.attn_ratio[l])

    def attention(self, x, b, st, pos, ratio, window=None):
        """§5 at position pos with QSA blocks of `ratio` cells; ratio 0: every cell (dense); `window`: at
        most the last that many cells (the MTP layer, §9)."""
        dh, hq, hkv = self.dh, self.hq, self.hkv
        qg = (self.w(b + ".attn_q.weight") @ x).reshape(hq, 2 * dh)
        q, gate = qg[:, :dh], qg[:, dh:]
        q = rope(rms(q) * self.w(b + ".attn_q_norm.weight"), pos, self.rot, self.base)
        k = (self.w(b + ".attn_k.weight") @ x).reshape(hkv, dh)
        k = rope(rms(k) * self.w(b + ".attn_k_norm.weight"), pos, self.rot, self.base)
        v = (self.w(b + ".attn_v.weight") @ x).reshape(hkv, dh)
        st["k"].append(kv_round(k, self.kv_mode))
        st["v"].append(kv_round(v, self.kv_mode))
        if ratio == 0:
            lo = 0 if window is None else max(0, len(st["k"]) - window)
            return self.attend(q, gate, st, list(range(lo, len(st["k"]))), b)
        # indexer (spec §0.7): the block the current cell completes is scored by this query too
        r = ratio
        st["raw"].append(self.w(b + ".indexer.k_proj.weight") @ x)
        n_cells = pos + 1
        if n_cells % r == 0:
            mean = np.sum(st["raw"], axis=0) / r
            st["raw"] = []
            kb = rope(rms(mean) * self.w(b + ".indexer.k_norm.weight"), n_cells - r, self.rot, self.base)
            st["blocks"].append(kb)
        complete, keep = n_cells // r, self.topk // r
        if complete <= keep:
            cells = list(range(n_cells))
        else:
            Q = (self.w(b + ".indexer.q_proj.weight") @ x).reshape(self.hi, self.di)
            Q = rope(rms(Q) * self.w(b + ".indexer.q_norm.weight"), pos, self.rot, self.base)
            K = np.array(st["blocks"][:complete])
            scores = np.maximum(Q @ K.T, 0.0).sum(axis=0) / np.sqrt(self.di)
            best = sorted(range(complete), key=lambda bb: (-key_order(scores[bb]), bb))[:keep]
            cells = [c for bb in sorted(best) for c in range(bb * r, (bb + 1) * r)]
            cells += list(range(complete * r, n_cells))
        self.last_cells = cells
        return self.attend(q, gate, st, cells, b)

    def attend(self, q, gate, st, cells, b):
        dh, hq, hkv = self.dh, self.hq, self.hkv
        Ks = np.array([st["k"][c] for c in cells])  # [cells, hkv, dh]
        Vs = np.array([st["v"][c] for c in cells])
        out = []
        for h in range(hq):
            g = h // (hq // hkv)
            s = Ks[:, g, :] @ q[h] / np.sqrt(dh)
            p = np.exp(s - s.max())
            p /= p.sum()
            out.append((p @ Vs[:, g, :]) * sigmoid(gate[h]))
        return self.w(b + ".attn_output.weight") @ np.concatenate(out)

    # -- §7
    def moe(self, x, l):
        return self.moe_at(x, f"blk.{l}")

    def moe_at(self, x, b):
        logits = self.w(b + ".ffn_gate_inp.weight") @ x
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = sorted(range(self.E), key=lambda e: (-p[e], e))[:self.k_used]
        total = max(sum(p[e] for e in top), 2.0 ** -14)
        if b + ".ffn_gate_up_exps.weight" in self.W:  # fused: per expert the gate's f rows, then the up's
            gu = self.w(b + ".ffn_gate_up_exps.weight")
            gate_e, up_e = gu[:, :self.f], gu[:, self.f:]
        else:
            gate_e, up_e = self.w(b + ".ffn_gate_exps.weight"), self.w(b + ".ffn_up_exps.weight")
        down_e = self.w(b + ".ffn_down_exps.weight")
        y = np.zeros(self.n)
        for e in top:
            y += (p[e] / total) * (down_e[e] @ (silu(gate_e[e] @ x) * (up_e[e] @ x)))
        sh = self.w(b + ".ffn_down_shexp.weight") @ (silu(self.w(b + ".ffn_gate_shexp.weight") @ x) * (self.w(b + ".ffn_up_shexp.weight") @ x))
        return y + sigmoid(self.w(b + ".ffn_gate_inp_shexp.weight").reshape(-1) @ x) * sh

    # -- §6
    def ple_rows(self, t):
        """Spec §0.8: predecessors before the start are the EOS id; an EOS among them stands and every
        older one becomes the EOS id; the hash is transformers' (int64 products, XOR, floored remainder)."""
        eos = self.ple_eos
        older = list(reversed(self.prev))[:self.ngram - 1]
        older += [eos] * (self.ngram - 1 - len(older))
        ctx, seen = [t], False
        for p in older:
            ctx.append(eos if seen else p)
            seen = seen or p == eos
        rows = []
        for h in range((self.ngram - 1) * self.hpn):
            mixed = 0
            for i in range(2 + h // self.hpn):
                mixed ^= (ctx[i] * self.mult[i]) % 2 ** 64
            if mixed >= 2 ** 63:
                mixed -= 2 ** 64
            rows.append(self.hoff[h] + mixed % self.hvocab[h])
        return rows

    def ple(self, R, t):
        hc, n, b = self.hc, self.n, f"blk.{self.ple_layer}"
        table = self.w("per_layer_token_embd.weight")
        emb = np.concatenate([table[r] for r in self.ple_rows(t)])
        key = rms((self.w(b + ".ple_key.weight") @ emb).reshape(hc, n)) * self.w(b + ".ple_norm_key.weight").reshape(hc, n)
        query = rms(R) * self.w(b + ".ple_norm_query.weight").reshape(hc, n)
        value = self.w(b + ".ple_value.weight") @ emb
        s = (key * query).sum(axis=1) / np.sqrt(n)
        gate = sigmoid(np.sign(s) * np.sqrt(np.maximum(np.abs(s), 1e-6)))
        gated = value[None, :] * gate[:, None]
        z = (rms(gated) * self.w(b + ".ple_norm_conv.weight").reshape(hc, n)).ravel()
        w = self.w(b + ".ple_conv1d.weight")  # [hc*n, K], taps oldest first, dilation ngram
        K, d = self.ple_k, self.ngram
        conv = w[:, K - 1] * z
        for tap in range(K - 1):
            conv = conv + w[:, tap] * self.z_hist[tap * d]
        self.z_hist = self.z_hist[1:] + [z]
        return R + gated + silu(conv).reshape(hc, n)

    # -- §2
    def forward(self, t):
        self.trace = []  # R after each layer (for debugging against other implementations)
        self.trace_parts = []  # per layer: the mixer's output, the MoE's input and output
        e = np.asarray(self.w("token_embd.weight"))[t]
        R = np.tile(e, (self.hc, 1))
        for l in range(self.L):
            if l == self.ple_layer:
                R = self.ple(R, t)
            mixed, inj = self.hc_read(R, f"blk.{l}.hc_attn")
            y = self.qsa_layer(mixed, l) if self.is_qsa(l) else self.gdn_layer(mixed, l)
            R = self.hc_write(R, y, inj)
            mixed, inj = self.hc_read(R, f"blk.{l}.hc_ffn")
            y2 = self.moe(mixed, l)
            R = self.hc_write(R, y2, inj)
            self.trace_parts.append((y, mixed, y2))
            self.trace.append(R.copy())
        final, _ = self.hc_read(R, "output_hc", inject=False)
        self.prev.append(t)
        self.pos += 1
        self.hidden = R
        return self.head() @ final

    def head(self):
        """output.weight, or the embedding when the file has none (tied)."""
        return self.W.get("output.weight", self.W["token_embd.weight"])

    # -- §9
    def mtp_draft(self, R, nxt, pos, cache):
        """One draft step from streams R at cell pos with the token at pos + 1: (draft logits, R')."""
        hc, n = self.hc, self.n
        b = f"blk.{self.L}"
        e = rms(np.asarray(self.w("token_embd.weight"))[nxt]) * self.w(b + ".nextn.enorm.weight")
        wh = self.w(b + ".nextn.hnorm.weight").reshape(-1)
        wh = np.tile(wh, hc).reshape(hc, n) if wh.size == n else wh.reshape(hc, n)
        eh = self.w(b + ".nextn.eh_proj.weight")
        Rp = np.array([eh @ np.concatenate([e, rms(R[c]) * wh[c]]) for c in range(hc)])
        mixed, inj = self.hc_read(Rp, b + ".hc_attn")
        Rp = self.hc_write(Rp, self.attention(mixed, b, cache, pos, 0, window=32768), inj)
        mixed, inj = self.hc_read(Rp, b + ".hc_ffn")
        Rp = self.hc_write(Rp, self.moe_at(mixed, b), inj)
        final, _ = self.hc_read(Rp, b + ".nextn.hc_head", inject=False)
        return self.head() @ final, Rp


def greedy(logits):
    best = np.max(logits)
    return int(np.flatnonzero(logits == best)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", required=True)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--kv", default="fp16", choices=["fp16", "int8", "f32"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mtp-tokens", default="", help="after the prompt, MTP draft steps with these next tokens")
    ap.add_argument("--mtp-out", help="the draft steps' logits rows (little-endian f32)")
    a = ap.parse_args()
    o = Oracle(a.model, a.kv)
    prompt = [int(x) for x in a.prompt_tokens.split(",")]
    for t in prompt:
        logits = o.forward(t)
    if a.mtp_tokens:
        cache = {"k": [], "v": [], "raw": [], "blocks": []}
        R, pos, rows = o.hidden, len(prompt) - 1, []
        for nxt in (int(x) for x in a.mtp_tokens.split(",")):
            draft, R = o.mtp_draft(R, nxt, pos, cache)
            rows.append(draft.astype("<f4"))
            pos += 1
        np.concatenate(rows).tofile(a.mtp_out)
    rows, ids = [], []
    for i in range(a.n):
        rows.append(logits.astype("<f4"))
        ids.append(greedy(logits))
        if i + 1 < a.n:
            logits = o.forward(ids[-1])
    np.concatenate(rows).tofile(a.out)
    print(",".join(map(str, ids)))


if __name__ == "__main__":
    sys.exit(main())
