#!/usr/bin/env bash
# One device call: the whole forward pass at the full model's width past sparse selection. A 4-layer model of
# the full preset (three GDN layers, one QSA layer whose indexer keeps 2,048 cells in blocks of 4) written on
# the device, then `forward_parity` over 2,200 tokens (sparse from cell 2,052: 148 steps past it), logits bit
# for bit in windows of every T = 1..8, fp16 and int8 KV. Run from the repo root with the binary in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=/tmp/strata-full4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
s=$(date +%s)
$bin synth --preset full --layers 4 --ple-rows-per-head 4096 -o $t/full4.gguf | tail -1
echo "written in $(( $(date +%s) - s )) s"
for kv in fp16 int8; do
  s=$(date +%s)
  echo "== full width, 4 layers, 2200 tokens, $kv"
  $bin parity forward_parity $t/full4-00001-of-00002.gguf --tokens 2200 --kv $kv; echo "rc=$? ($(( $(date +%s) - s )) s)"
done
