#!/usr/bin/env bash
# For the session after speed-19 (call 1, about 8 minutes): the values-dot branch (the attention values by
# the reduction contract, one kernel per cache mode; then the scores kernel per cache mode) through the
# candidates' checks, then against main's binary at 4K. Three binaries, stripped, carried in .dev
# (carry [".dev"]); left there by speed-19, rebuild them if their commits moved:
#   .dev/strata-main    main                     (no kernel change in speed-19)
#   .dev/strata-values  values-dot at 9a75138    (the values kernel alone)
#   .dev/strata         values-dot's tip         (the values and the scores kernels)
# The log is written to $OUT as it goes (a command cut off by its limit returns no output of its own).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
STRATA_BIN=.dev/strata timeout 240 bash bench/gpu_candidates.sh "" | grep -v '^OK\|^ok' | tail -40
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 330 bash bench/engine_ab.sh .dev/strata-main .dev/strata-values .dev/strata
date -u
