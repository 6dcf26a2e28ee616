#!/usr/bin/env bash
# For the next session (one call, about 5 minutes; carry [".dev"] with .dev/strata built from main).
# 1. The built-in model became the trained one (models/fortunes.gguf: IQ4_NL experts, Q8_0 and F16 matrices,
#    width 256, experts of width 160), which has not run on a GPU: `strata run` on the GPU against the CPU
#    (gpu_run.sh has the built-in model's cases now) and its perplexity on both.
# 2. `strata serve` copies only the light part of the state before a turn's first token now
#    (CudaForward::download_state with caches = false) and cuts the turn's start from one full copy after
#    the reply: gpu_serve.sh serves on the GPU against the CPU (turn 3 restores such a cut state), then
#    times the first token cold and on the same prompt again (REPEAT=2; before: 8583 and 232 ms).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
md5sum .dev/strata; date -u
export STRATA_CACHE=/tmp/strata-cache
timeout 150 bash bench/gpu_run.sh > ${OUT:-/tmp}/run.log 2>&1
echo "strata run cpu vs cuda: $(grep -c ': SAME' ${OUT:-/tmp}/run.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/run.log) not"
grep -A3 "built-in" ${OUT:-/tmp}/run.log
.dev/strata perplexity -f fixtures/fortunes/heldout.txt --device cuda
.dev/strata perplexity -f fixtures/fortunes/heldout.txt --device cpu
date -u
REPEAT=2 timeout 330 bash bench/gpu_serve.sh 4096 128
date -u
