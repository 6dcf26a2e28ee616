#!/usr/bin/env bash
# One device call: the whole forward pass at the full model's width past sparse selection. A 4-layer model of
# the full preset (three GDN layers, one QSA layer) written on the device with an indexer that keeps 256
# cells (the full model's 2,048 would need 2,100 tokens of the CPU reference at full width, past one call),
# then `forward_parity` over 420 tokens (sparse from cell 260: 160 steps past it), logits and MTP drafts bit
# for bit in windows of every T = 1..8, fp16 and int8 KV. Run from the repo root with the binary in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=/tmp/strata-full4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
s=$(date +%s)
$bin synth --preset full --layers 4 --indexer-top-k 256 --ple-rows-per-head 4096 -o $t/full4.gguf | tail -1
echo "written in $(( $(date +%s) - s )) s"
for kv in fp16 int8; do
  s=$(date +%s)
  echo "== full width, 4 layers, 420 tokens, $kv"
  $bin parity forward_parity $t/full4-00001-of-00002.gguf --tokens 420 --kv $kv; echo "rc=$? ($(( $(date +%s) - s )) s)"
done
