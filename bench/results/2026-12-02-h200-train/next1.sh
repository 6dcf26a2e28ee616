#!/usr/bin/env bash
# For the next session (one call, about 5 minutes; carry [".dev"] with .dev/strata built from main).
# 1. The built-in model became the trained one (models/fortunes.gguf: IQ4_NL experts, Q8_0 and F16 matrices,
#    width 256, experts of width 160), which has not run on a GPU: `strata run` on the GPU against the CPU
#    (gpu_run.sh has the built-in model's cases now) and its perplexity on both.
# 2. Then gpu_serve.sh: the built-in model served on the GPU against the CPU, and the first token timed cold
#    and on the same prompt again (REPEAT=2; at speed-22: 8583 and 232 ms). Run this script again on branch
#    `light-turn` (a copy of only the state's light part before a turn's first token, the turn's start cut
#    from one full copy after the reply; not on main until it has passed here) and compare the two timings.
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
