"""The card's copy bandwidth in TB/s (read + write), measured by torch: a 2 GiB copy, 20 times after 3
warm-ups, timed by CUDA events. The bench scripts print each figure's floor at this rate."""
import torch

x = torch.empty(2 * 1024**3 // 4, device="cuda")
y = torch.empty_like(x)
for _ in range(3):
    y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize()
s.record()
for _ in range(20):
    y.copy_(x)
e.record()
torch.cuda.synchronize()
print(f"{20 * 2 * x.numel() * 4 / (s.elapsed_time(e) / 1e3) / 1e12:.3f}")
