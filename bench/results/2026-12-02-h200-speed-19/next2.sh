#!/usr/bin/env bash
# For the session after speed-19 (call 2 of 3, right after call 1, about 9 minutes): the four binaries of
# next1.sh at 4K, and the tip with the opt-ins that shorten a lane, three interleaved rounds.
exec > >(tee ${OUT:-/tmp}/next2.log) 2>&1
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 540 bash bench/engine_ab.sh .dev/strata-main .dev/strata-values \
  .dev/strata-attn .dev/strata ".dev/strata STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" \
  ".dev/strata STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1"
date -u
