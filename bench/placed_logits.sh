#!/usr/bin/env bash
# One device call: the full-size synthetic model's logits under every VRAM budget, byte for byte
# (docs/PLACEMENT.md: no placement may change a bit), then decode speeds with the experts in host memory.
# `strata run --dump-logits` over 20 prompt tokens (windows of 8, so prompt windows run placed too) and 16
# generated, with the whole model on the card and at --gpu-mem 32 / 24 / 12 / 8, each compared with the
# first; then 96 tokens at --gpu-mem 24 and 12 (the cache's hit rate, the host's time a request and tok/s
# in each run's lines). ROUTER=zipf runs the skewed-router model instead (bench/full_model.sh; the device's
# disk holds one full-size model: delete /tmp/strata-full first). Run from the repo root with the binary
# in .dev/strata.
set -uo pipefail
source "$(dirname "$0")/full_model.sh"
s0=$(date +%s); t() { echo "[$(( $(date +%s) - s0 )) s]"; }
P=$(seq -s, 3 22)
echo "== logits under each budget (20 prompt tokens, 16 generated)"
for mem in "" 32 24 12 8; do
  timeout 60 $bin run -m $model --prompt-tokens $P -n 16 --ignore-eos --device cuda --max-context 4096 \
    ${mem:+--gpu-mem $mem} --dump-logits /tmp/logits-$mem.bin 2>&1 | grep -E "memory:|host:|tok/s|expert cache|rror|note: the" | sed "s/^/[$mem] /"
  if [ -n "$mem" ]; then
    cmp /tmp/logits-.bin /tmp/logits-$mem.bin && echo "[$mem] logits identical to the whole model's ($(stat -c %s /tmp/logits-$mem.bin) bytes)"
  fi
done; t
for mem in 24 12; do
  echo "== --gpu-mem $mem, 96 tokens"
  timeout 60 $bin run -m $model --prompt-tokens $P -n 96 --ignore-eos --device cuda --max-context 4096 --gpu-mem $mem 2>&1 \
    | grep -E "memory:|host:|tok/s|expert cache|rror" | head -8; t
done
