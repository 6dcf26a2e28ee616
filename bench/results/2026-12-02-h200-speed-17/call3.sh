#!/usr/bin/env bash
# The first decode step recorded (and its graph captured) while the prompt's last window runs, and the
# host's parts of the gap between steps; then the same tokens as the CPU (gpu_run.sh) and checkpoints.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/full_model.sh
seq 1 1024 > $t/ids.txt
for s in "" STRATA_UPLOAD_AHEAD=1; do
  echo "=== ${s:-default}, STRATA_GAPS=1"
  env $s STRATA_GAPS=1 $bin run -m $model --prompt-tokens @$t/ids.txt -n 256 --ignore-eos --device cuda --max-context 1300 2>&1 >/dev/null | grep -E "^(graphs|gaps|prompt)"
done
ROUNDS=2 bash bench/engine_ab.sh "" STRATA_UPLOAD_AHEAD=1 | grep -v "^round"
date -u
timeout 200 bash bench/gpu_run.sh
date -u
timeout 150 bash bench/gpu_checkpoint.sh | tail -5
date -u
