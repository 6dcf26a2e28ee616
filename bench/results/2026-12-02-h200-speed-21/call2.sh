#!/usr/bin/env bash
# For the session after speed-20 (call 2 of 3, right after call 1, about 9 minutes): 4K, three interleaved
# rounds: main, each branch alone, the three together, and with the attention main lane's two opt-ins
# (they shorten the main lane, which may pay once the side lane, the indexer, is shorter).
exec > >(tee ${OUT:-/tmp}/next2.log) 2>&1
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 570 bash bench/engine_ab.sh .dev/strata .dev/strata-stream .dev/strata-pinned \
  ".dev/strata-split STRATA_GRAPH_SPLIT=48" ".dev/strata-combo STRATA_GRAPH_SPLIT=48" \
  ".dev/strata-combo STRATA_GRAPH_SPLIT=48 STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1"
date -u
