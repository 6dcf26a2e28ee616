#!/usr/bin/env bash
# CPU decode speed of the reference engine: tiny and small presets at 1 and 2 threads.
# Prints a markdown table: decode tok/s (best of 3 runs of 64 greedy tokens after a 64-token prompt),
# the bytes of weights one token reads, and the floor those bytes set at this machine's measured
# single-thread read bandwidth.
#   bench/cpu_decode.sh [WORKDIR]    (STRATA_BIN=path: time that binary instead of building this tree's)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d)}
if [ -z "${STRATA_BIN:-}" ]; then cargo build --release -q -p strata-cli; fi
bin=${STRATA_BIN:-target/release/strata}
for p in tiny small; do
  [ -f "$work/$p.gguf" ] || "$bin" synth --preset "$p" -o "$work/$p.gguf" 2>/dev/null
done
prompt=$(python3 -c "print(','.join(str((i*7919+13)%4000+3) for i in range(64)))")
bw=$(python3 - <<'PY'
import numpy as np, time
a = np.ones(1 << 27, dtype=np.float32)  # 512 MiB
a.sum(); t = time.perf_counter()
for _ in range(5): a.sum()
print(5 * a.nbytes / (time.perf_counter() - t))
PY
)
echo "read bandwidth (numpy sum, one thread): $(python3 -c "print(f'{$bw/1e9:.2f}')") GB/s"
echo
echo "| preset | threads | decode tok/s | weight bytes / token | floor tok/s | of floor |"
echo "|---|---:|---:|---:|---:|---:|"
for p in tiny small; do
  # Bytes a token reads: every dense tensor, the routed experts' k/E share; not the MTP layer, nor the
  # embedding and PLE tables (a few rows each).
  bytes=$("$bin" gguf info "$work/$p.gguf" | python3 -c "
import sys, re
meta = {}; total = 0
lines = sys.stdin.read().splitlines()
for l in lines:
    m = re.match(r'\s+qwen4exp\.(expert_count|expert_used_count) = (\d+)', l)
    if m: meta[m.group(1)] = int(m.group(2))
for l in lines:
    f = l.split()
    if len(f) >= 5 and f[-1].isdigit() and f[-2].isdigit() and f[0].endswith('.weight'):
        name, b = f[0], int(f[-2])
        if name.startswith('mtp.') or name in ('token_embd.weight', 'per_layer_token_embd.weight'): continue
        if '_exps' in name: b = b * meta['expert_used_count'] // meta['expert_count']
        total += b
print(total)")
  for t in 1 2; do
    best=0
    for r in 1 2 3; do
      rate=$("$bin" run -m "$work/$p.gguf" --prompt-tokens "$prompt" -n 64 --ignore-eos --threads $t --device cpu 2>&1 >/dev/null | grep "decode:" | sed -E 's/.*decode: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tok\/s\).*/\1/')
      best=$(python3 -c "print(max($best, $rate))")
    done
    python3 -c "
b=$bytes; bw=$bw; r=$best
print(f'| $p | $t | {r:.1f} | {b/1e6:.1f} MB | {bw/b:.0f} | {r/(bw/b)*100:.1f} % |')"
  done
done
