#!/usr/bin/env bash
# For the session after speed-18 (call 1 of 2): the defaults (whose host code for attention was reshaped
# after speed-18's call 3, and whose attn_parity now runs the full model's types) and the opt-ins written
# after speed-18's device time through the candidates' checks (all five together; the publishing shared GLU
# apart), then the first decode step's lanes with the defaults and with all five (STRATA_GRAPH=lanes).
# About 8 minutes.
all="STRATA_QKV_ONCE=1 STRATA_ATTN_QUANTIZE=1 STRATA_SOFTMAX_IN_VALUES=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
timeout 420 bash bench/gpu_candidates.sh "" "$all" "STRATA_SHARED_GLU=1 STRATA_QDOT_PUBLISH=1" > ${OUT:-/tmp}/candidates.txt 2>&1
tail -3 ${OUT:-/tmp}/candidates.txt
date -u
source bench/full_model.sh
seq 1 4096 > $t/ids-4096.txt
for s in "" "$all"; do
  echo "=== lanes: ${s:-default}"
  env $s STRATA_GRAPH=lanes $bin run -m $model --prompt-tokens @$t/ids-4096.txt -n 4 --ignore-eos --device cuda \
    --max-context 4200 2>&1 >/dev/null | sed -n '/^lanes:/,/^[^ ]/p' | head -40
done
date -u
