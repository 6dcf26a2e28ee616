#!/usr/bin/env bash
# Where a decode step's time goes between graphs: the card's idle time between one step's graph and the
# next (STRATA_GAPS=1), the host's parts of it, with and without the graph uploaded ahead.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/full_model.sh
seq 1 1024 > $t/ids.txt
for s in "" STRATA_UPLOAD_AHEAD=1 "" STRATA_UPLOAD_AHEAD=1; do
  echo "=== ${s:-default}, STRATA_GAPS=1"
  env $s STRATA_GAPS=1 $bin run -m $model --prompt-tokens @$t/ids.txt -n 256 --ignore-eos --device cuda --max-context 1300 2>&1 >/dev/null | grep -E "^(graphs|gaps|prompt)"
done
ROUNDS=3 bash bench/engine_ab.sh "" STRATA_UPLOAD_AHEAD=1
date -u
