#!/usr/bin/env python3
"""The torch peer of the HC read (spec §3) at the full model's geometry: the read composed of torch bf16
ops (rms norm per stream, down GEMV, silu, up GEMV, sigmoid gate, stream sum, inject GEMV), with the
previous half's pending write folded in, cold (8 weight sets rotated), timed as CUDA-graph replays.

    python3 bench/torch_hc_peer.py [ITERS]
"""
import sys
import torch

n, hc, r, sets = 2560, 4, 320, 8
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 300
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
W = [dict(
    norm=(1 + 0.05 * torch.randn(hc, n, device=dev, generator=g)).to(torch.bfloat16),
    down=(torch.randn(r, hc * n, device=dev, generator=g) / (hc * n) ** 0.5).to(torch.bfloat16),
    up=(torch.randn(hc * n, r, device=dev, generator=g) / r ** 0.5).to(torch.bfloat16),
    inj=(torch.randn(hc, hc * n, device=dev, generator=g) / (hc * n) ** 0.5).to(torch.bfloat16),
) for _ in range(sets)]


def read(R, y, inj_prev, w):
    R = R + y[:, None, :] * (2 * torch.sigmoid(inj_prev / hc))[:, :, None]
    xn = (R * torch.rsqrt(R.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(R.dtype)) * w["norm"]
    v = xn.reshape(R.shape[0], hc * n)
    lo = torch.nn.functional.silu((v @ w["down"].T) / hc)
    gate = torch.sigmoid((lo @ w["up"].T).reshape(-1, hc, n))
    mixed = (xn * gate).sum(1) / hc
    return R, mixed, v @ w["inj"].T


print("| T | torch µs (graph) |")
print("|---:|---:|")
for T in range(1, 9):
    R = torch.randn(T, hc, n, device=dev, generator=g).to(torch.bfloat16)
    y = torch.randn(T, n, device=dev, generator=g).to(torch.bfloat16)
    ip = torch.randn(T, hc, device=dev, generator=g).to(torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            read(R, y, ip, W[i % sets])
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(16):
            read(R, y, ip, W[i % sets])
    graph.replay()
    torch.cuda.synchronize()
    reps = max(2, iters // 16)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        graph.replay()
    b.record()
    torch.cuda.synchronize()
    print(f"| {T} | {a.elapsed_time(b) * 1e3 / (reps * 16):.2f} |")
