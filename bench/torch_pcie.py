"""The host link's copy rate in GB/s each way, measured by torch: 1 GiB between pinned host memory and
the card, 10 times after 2 warm-ups each way, timed by CUDA events. bench/placed_bench.sh prints the
PCIe part of each step's floor at these rates."""
import torch

h = torch.empty(1024**3 // 4, pin_memory=True)
d = torch.empty(h.numel(), device="cuda")


def rate(dst, src):
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(10):
        dst.copy_(src, non_blocking=True)
    e.record()
    torch.cuda.synchronize()
    return 10 * src.numel() * 4 / (s.elapsed_time(e) / 1e3) / 1e9


print(f"{rate(d, h):.1f} {rate(h, d):.1f}")
