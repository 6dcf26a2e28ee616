#!/usr/bin/env bash
# For the session after speed-21 (one call, about 6 minutes; carry [".dev"] with .dev/strata built from
# main). After speed-21's device checks, crates/cuda's host code changed (no kernel did): a state from the
# host is now written into the device's buffers in place (`CudaForward::load_state`, also behind
# `--load-state` on the GPU and the server's conversation cache). So: `strata run` and checkpoints against
# the CPU again (closes #8), then bench/gpu_serve.sh (the server on the GPU against the CPU, and the
# streamed reply on the full model: #9's last item).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
md5sum .dev/strata; date -u
timeout 120 bash bench/gpu_run.sh > ${OUT:-/tmp}/run.log 2>&1
echo "strata run cpu vs cuda: $(grep -c ': SAME' ${OUT:-/tmp}/run.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/run.log) not"
timeout 100 bash bench/gpu_checkpoint.sh > ${OUT:-/tmp}/checkpoint.log 2>&1
echo "checkpoints: $(grep -c ': SAME' ${OUT:-/tmp}/checkpoint.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/checkpoint.log) not"
date -u
REPEAT=2 timeout 330 bash bench/gpu_serve.sh 4096 256
date -u
