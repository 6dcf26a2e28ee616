#!/usr/bin/env bash
# Each kernel's device time by events (STRATA_PROFILE=kernels), decode at depth 1,024, 32 new tokens:
# the default (_quantize + _g_one_st) against own (_one_st) and cluster (_one_stc).
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/full_model.sh
seq 1 1024 > $t/ids.txt
for s in "" STRATA_QDOT_STAGE=own STRATA_QDOT_STAGE=cluster; do
  echo "=== ${s:-default}"
  env $s STRATA_PROFILE=kernels $bin run -m $model --prompt-tokens @$t/ids.txt -n 32 --ignore-eos --device cuda --max-context 1100 2>&1 >/dev/null \
    | sed -n '/decode steps/,/prompt windows/p' | head -70
done
date -u
