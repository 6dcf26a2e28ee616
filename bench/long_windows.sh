#!/usr/bin/env bash
# One device call (~400 s; carry .dev with the stripped strata binary in .dev/strata or .dev/strata.xz
# and the gpu_parity test binary in .dev/gpu_parity.xz): the long prompt windows' kernels,
# STRATA_MOE_GROUPED and STRATA_HC_LONG. First their bits: moe_parity (its grouped cases run whatever the
# setting), the long HC read's parity, and the whole pass on every fixture (forward_parity's windows of
# 13 and 40) under both; then the full-size model's 4K prompt (bench/prompt_windows.sh) in windows of 8,
# 64 and 256 with both on (and gr_down_long pipelined, HC_LONG_PIPE), each alone and neither, the logits
# after the prompt against windows of 8's.
set -uo pipefail
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache} STRATA_BUILT_AT=${STRATA_BUILT_AT:-/work/main}
out=${OUT:-/tmp}
[ -x .dev/gpu_parity ] || xz -dkf .dev/gpu_parity.xz
chmod +x .dev/gpu_parity
s=$(date +%s)
STRATA_MOE_GROUPED=1 STRATA_HC_LONG=1 GPU_TESTS=".dev/gpu_parity moe_equals hc_long the_whole_pass" \
  timeout 300 bash bench/gpu_tests.sh > $out/gpu_long.log 2>&1
grep -E "test result|FAILED|panicked|^test " $out/gpu_long.log | head -20
STRATA_DEFINES=HC_LONG_PIPE=1 GPU_TESTS=".dev/gpu_parity hc_long" timeout 120 bash bench/gpu_tests.sh > $out/gpu_long_pipe.log 2>&1
echo "HC_LONG_PIPE=1: $(grep -E "test result|FAILED|panicked" $out/gpu_long_pipe.log | head -3)"
echo "== tests $(( $(date +%s) - s )) s"
pw() { timeout $(( 585 - ($(date +%s) - s) )) bash bench/prompt_windows.sh > $out/prompt_$1.log 2>&1
       grep -E "round|error|written" $out/prompt_$1.log; }
STRATA_MOE_GROUPED=1 STRATA_HC_LONG=1 WINDOWS="8 64 256" ROUNDS=1 pw both
STRATA_MOE_GROUPED=1 STRATA_HC_LONG=1 STRATA_DEFINES=HC_LONG_PIPE=1 WINDOWS="64 256" ROUNDS=1 pw both_pipe
STRATA_MOE_GROUPED=1 WINDOWS="64 256" ROUNDS=1 pw grouped
STRATA_HC_LONG=1 WINDOWS="64 256" ROUNDS=1 pw hclong
WINDOWS="64 256 8" ROUNDS=1 pw tiled
echo "== end $(( $(date +%s) - s )) s"
