#!/usr/bin/env bash
# For the session after speed-18 (call 2 of 2, right after call 1 so that the machine and its model are
# still there): each opt-in alone, the publishing shared GLU and all five against the default at 4K,
# three interleaved rounds. About 7 minutes.
all="STRATA_QKV_ONCE=1 STRATA_ATTN_QUANTIZE=1 STRATA_SOFTMAX_IN_VALUES=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
DEPTH=4096 ROUNDS=3 timeout 500 bash bench/engine_ab.sh "" STRATA_QKV_ONCE=1 STRATA_ATTN_QUANTIZE=1 \
  STRATA_SOFTMAX_IN_VALUES=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1 "STRATA_SHARED_GLU=1 STRATA_QDOT_PUBLISH=1" "$all"
date -u
