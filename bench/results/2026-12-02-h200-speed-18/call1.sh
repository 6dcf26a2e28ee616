#!/usr/bin/env bash
# STRATA_ROUTE=glu brought back (it changes the PTX of moe_route_block and the _gather_glu kernels): the
# candidates' checks on the defaults and on it, then the A/B at depth 1,024 of the default, STRATA_SPIN=1,
# STRATA_ROUTER_QUANTIZE=1, STRATA_ROUTE=glu and their combinations, and the gap with STRATA_GAPS=1.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
s=$(date +%s)
timeout 300 bash bench/gpu_candidates.sh "" STRATA_ROUTE=glu "STRATA_ROUTE=glu STRATA_ROUTER_QUANTIZE=1" > $OUT/candidates.txt 2>&1
tail -3 $OUT/candidates.txt
echo "candidates took $(( $(date +%s) - s )) s"
date -u
source bench/full_model.sh
seq 1 1024 > $t/ids.txt
for st in "" STRATA_SPIN=1; do
  echo "=== ${st:-default}, STRATA_GAPS=1"
  env $st STRATA_GAPS=1 $bin run -m $model --prompt-tokens @$t/ids.txt -n 256 --ignore-eos --device cuda --max-context 1300 2>&1 >/dev/null | grep -E "^(graphs|gaps|prompt|decode)"
done
date -u
ROUNDS=3 timeout 200 bash bench/engine_ab.sh "" STRATA_SPIN=1 STRATA_ROUTER_QUANTIZE=1 STRATA_ROUTE=glu \
  "STRATA_ROUTE=glu STRATA_ROUTER_QUANTIZE=1" "STRATA_SPIN=1 STRATA_ROUTE=glu STRATA_ROUTER_QUANTIZE=1"
date -u
