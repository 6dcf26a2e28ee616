#!/usr/bin/env bash
# For the session after speed-20 (call 2 of 3, right after call 1, about 8 minutes): 4K, three interleaved
# rounds: main, the stream scorer holding its key, the attention main lane's two opt-ins on each (they
# shorten the main lane, which may pay once the side lane, the indexer, is shorter), and SHARED_GLU.
exec > >(tee ${OUT:-/tmp}/next2.log) 2>&1
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 540 bash bench/engine_ab.sh .dev/strata .dev/strata-stream \
  ".dev/strata STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" ".dev/strata-stream STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" \
  ".dev/strata STRATA_SHARED_GLU=1"
date -u
