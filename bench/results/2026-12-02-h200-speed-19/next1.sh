#!/usr/bin/env bash
# For the session after speed-19 (call 1, about 8 minutes): the values-dot branch (the attention values by
# the reduction contract, one kernel per cache mode) through the candidates' checks, then against main's
# binary at 4K. Before the call: `git checkout values-dot`, build, `cp target/release/strata .dev/strata`,
# and main's binary as `.dev/strata-main` (both stripped; carry [".dev"]). The log is written to $OUT as it
# goes (a command cut off by its limit returns no output of its own).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
timeout 270 bash bench/gpu_candidates.sh "" | grep -v '^OK\|^ok' | tail -40
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 280 bash bench/engine_ab.sh ".dev/strata-main" ""
date -u
