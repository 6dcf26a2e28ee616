#!/usr/bin/env python3
"""torch peers of the QSA selection (full indexer geometry: 4 heads of 128, kpool 4, top_k 2048): the block
scores as a torch matmul + relu + sum over heads, and torch.topk of the block scores (512 blocks = 2048
cells), for Q = 1..8 queries, timed as CUDA-graph replays.

    python3 bench/torch_qsa_peer.py CTX [REPS]
"""
import sys
import torch

ctx = int(sys.argv[1])
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
hi, di, kpool, blocks_kept = 4, 128, 4, 2048 // 4
nb = ctx // kpool
g = torch.Generator(device="cuda").manual_seed(0)
keys = torch.rand(nb, di, device="cuda", generator=g) - 0.5


def timed(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        graph.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / (reps * 10)


print(f"| cells | Q | torch scores µs | torch.topk µs |")
print("|---:|---:|---:|---:|")
for q in range(1, 9):
    qs = torch.rand(q * hi, di, device="cuda", generator=g) - 0.5
    sc = torch.empty(q, nb, device="cuda")

    def scores():
        sc.copy_(torch.relu(qs @ keys.T).view(q, hi, nb).sum(1))

    def topk():
        torch.topk(sc, blocks_kept, dim=1)

    print(f"| {ctx} | {q} | {timed(scores):.2f} | {timed(topk):.2f} |")
