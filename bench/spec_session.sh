#!/usr/bin/env bash
# One device call for speculation on the GPU, each part with a time limit and its log in $OUT:
# the GDN parity and the speculation tests with the GPU runs against the CPU (bench/gpu_spec.sh), the
# built-in model's acceptance over held-out text on the GPU (bench/spec_accept.sh cuda), and
# `strata bench spec` on the full-size model at 4K, A/B against STRATA_OVERLAP=0 (bench/spec_bench.sh).
# Carry .dev with strata.xz, gpu_parity.xz and speculate.xz built at the same commit. The limits add up
# to 580 s, inside one call's 600 (gpu_spec.sh ran in 150 s, the spec bench with its model in 100 s a setting).
set -uo pipefail
out=${OUT:-/tmp}
T_SPEC=${T_SPEC:-120} timeout 200 bash bench/gpu_spec.sh > /dev/null 2>&1
echo "gpu_spec: $(grep -c ' ok$' $out/spec.log) ok lines, $(grep -c -E 'FAILED|DIFFERENT|panicked' $out/spec.log) failures"
STRATA_BIN=.dev/strata PROMPTS=${PROMPTS:-12} timeout 120 bash bench/spec_accept.sh cuda > $out/spec_accept.log 2>&1
tail -8 $out/spec_accept.log
AB=${AB-STRATA_OVERLAP=0} T_BENCH=${T_BENCH:-100} timeout 260 bash bench/spec_bench.sh 4096 ${REPS:-24} > /dev/null 2>&1
grep -E "plain step|^\| [1-8] \||graphs:|^-- " $out/spec_bench.log
