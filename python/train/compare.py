#!/usr/bin/env python3
"""strata's logits against transformers' float64 ones (train.py's expected.json and logits.f64): strata runs
the same prompt greedily with an f32 KV cache and dumps its rows; each row's max|Δ| / max|logit| and whether
both chose the same token are printed, and the worst ratio. Standard library and numpy only.

    compare.py STRATA MODEL.gguf RUN [BOUND]    # exits 1 when a row passes BOUND (default 1e-4)
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main(strata, model, run, bound=1e-4):
    run = Path(run)
    exp = json.loads((run / "expected.json").read_text())
    want = np.fromfile(run / "logits.f64", dtype="<f8").reshape(-1, exp["vocab"])
    with tempfile.TemporaryDirectory() as d:
        dump = Path(d) / "rows.f32"
        cmd = [strata, "run", "-m", str(model), "--device", "cpu", "--kv", "f32", "--ignore-eos",
               "--prompt-tokens", ",".join(map(str, exp["prompt"])), "-n", str(len(exp["greedy"])),
               "--dump-logits", str(dump)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        got = np.fromfile(dump, dtype="<f4").reshape(-1, exp["vocab"]).astype(np.float64)
    ids = [int(t) for t in out.replace(",", " ").split() if t.isdigit()]
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        ratio = np.abs(g - w).max() / np.abs(w).max()
        worst = max(worst, ratio)
        print(f"row {i:2}: max|Δ|/max|logit| {ratio:.2e}, strata {int(g.argmax())}, transformers {exp['greedy'][i]}")
    same = ids[-len(exp["greedy"]):] == exp["greedy"]
    print(f"{len(got)} rows, worst {worst:.2e} (bound {bound:.0e}); strata's tokens "
          f"{'are' if same else 'are NOT'} transformers' greedy tokens")
    sys.exit(0 if worst <= bound and same and len(got) == len(want) else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(float(a) for a in sys.argv[4:5]))
