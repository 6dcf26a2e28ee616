#!/usr/bin/env bash
# The defaults' checks (PART=1 QUICK=1 gpu_verify.sh: every parity tool, strata run and checkpoints
# against the CPU, the whole pass under the run-time switches), then the 4K figure (three runs) and the
# gap. Arguments: settings for the environment of all of it (the winners of call 2 not yet the default).
for s in "$@"; do export "$s"; done
echo "environment: $*"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
PART=1 QUICK=1 timeout 390 bash bench/gpu_verify.sh
date -u
source bench/full_model.sh
PROFILES= REPEAT=3 timeout 110 bash bench/engine.sh 4096
date -u
