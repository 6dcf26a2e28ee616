#!/usr/bin/env bash
# Call A (carry .dev): the whole GPU suite and the speculation tests at HEAD (MTP input a block a row, MTP
# cells by K and V alone), the both-guesses whole pass, the HC variants' bits and times.
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
xz -dkf .dev/gpu_parity.xz; xz -dkf .dev/speculate.xz; tar xJf .dev/pair.tar.xz -C .dev; chmod +x .dev/gpu_parity .dev/speculate .dev/strata .dev/strata-old
s=$(date +%s); bin=.dev/strata
timeout 220 bash bench/gpu_tests.sh > $OUT/gpu_tests.log 2>&1; grep -E "^test |test result" $OUT/gpu_tests.log | tail -16
echo "== suite $(( $(date +%s) - s )) s"
GPU_TESTS=".dev/speculate gpu::" timeout 150 bash bench/gpu_tests.sh > $OUT/gpu_spec.log 2>&1; grep -E "^test |test result" $OUT/gpu_spec.log | tail -12
echo "== spec tests $(( $(date +%s) - s )) s"
run="STRATA_HOST_EXPERTS=5,STRATA_STREAM_SLOTS=1,STRATA_GUESS_SLOTS=2,STRATA_GUESS_MIXER_SLOTS=1"
r=$(env ${run//,/ } STRATA_REQUIRE_GPU=1 timeout 45 .dev/gpu_parity --include-ignored --test-threads 1 --exact the_whole_pass_equals_the_cpu_on_every_fixture --nocapture 2>&1)
echo "$r" > $OUT/parity-guess.log
echo "$run: $(echo "$r" | grep -E '^test result|panicked' | head -2)"
for d in "" "STRATA_DEFINES=HC_UP_STEP=1" "STRATA_GR_DOWN_PAIR=1" "STRATA_GR_DOWN_PAIR=1 STRATA_DEFINES=HC_UP_STEP=1"; do
  echo "== [$d] gr_parity"; env $d timeout 40 $bin parity gr_parity --selftest 2>&1 | tail -3
  echo "== [$d] fused_gr_bench"; env $d timeout 40 $bin bench fused_gr_bench 300 1 8 8 2>&1 | tail -24
done > $OUT/hc_variants.log 2>&1
grep -E "==|FAIL|differ|SAME|same" $OUT/hc_variants.log | head -24
echo "== end $(( $(date +%s) - s )) s"
