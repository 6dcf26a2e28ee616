#!/usr/bin/env bash
# speed-19 call 3: what attention's kernels after the join take from a 4K step as the graph runs it
# (STRATA_SKIP, timing only), and the four opt-ins that did not lose in call 2 together against the default.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
DEPTH=4096 ROUNDS=2 N=128 timeout 330 bash bench/knockout.sh "attend_values*" attend_scores attend_softmax "attend_*"
date -u
four="STRATA_QKV_ONCE=1 STRATA_ATTN_QUANTIZE=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1"
DEPTH=4096 ROUNDS=3 timeout 220 bash bench/engine_ab.sh "" "$four"
date -u
