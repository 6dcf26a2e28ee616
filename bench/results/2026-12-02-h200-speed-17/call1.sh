#!/usr/bin/env bash
# The four producer-side quantize opt-ins (speed-16, not yet run on a card) through the candidates' checks
# all together, then each alone, all four and STRATA_QDOT_RPW=1 against the default at depth 1,024.
all="STRATA_HC_PUBLISH=2 STRATA_GDN_QUANTIZE=1 STRATA_ROUTER_QUANTIZE=1 STRATA_QDOT_PUBLISH=1"
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 150 bash bench/gpu_candidates.sh "$all" 2>&1 | tail -60
ROUNDS=3 timeout 420 bash bench/engine_ab.sh "" STRATA_HC_PUBLISH=1 STRATA_GDN_QUANTIZE=1 STRATA_ROUTER_QUANTIZE=1 \
  STRATA_QDOT_PUBLISH=1 "$all" STRATA_QDOT_RPW=1
