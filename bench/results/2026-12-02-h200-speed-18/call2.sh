#!/usr/bin/env bash
# The router's launch quantizing the experts' input, now the default: against it off, and the two other
# small opt-ins that have been ahead (STRATA_GDN_QUANTIZE=1; QDOT_ROW_AHEAD=1, the head's warps asking
# for their next row into the L2), five interleaved rounds at depth 1,024.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/full_model.sh
ROUNDS=5 timeout 420 bash bench/engine_ab.sh "" STRATA_ROUTER_QUANTIZE=0 STRATA_GDN_QUANTIZE=1 \
  STRATA_DEFINES=QDOT_ROW_AHEAD=1 "STRATA_GDN_QUANTIZE=1 STRATA_DEFINES=QDOT_ROW_AHEAD=1"
date -u
