#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
for f in .dev/*.xz; do [ -e "${f%.xz}" ] || xz -dkf "$f"; done; chmod +x .dev/gpu_parity .dev/strata
s=$(date +%s)
for run in "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2,STRATA_GUESS_SLOTS=3 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2,STRATA_GUESS_SLOTS=3,STRATA_GUESS_EARLY=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=1,STRATA_GUESS_SLOTS=4,STRATA_GUESS_EARLY=1,STRATA_CACHE_EVERY=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2,STRATA_DEFINES=MISS_STREAM_WIDE=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "host_experts_reach_the_card_with_their_bits"; do
  set -- $run; setting=""
  [ $# -eq 2 ] && { setting=${1//,/ }; shift; }
  r=$(env $setting STRATA_REQUIRE_GPU=1 timeout 100 .dev/gpu_parity --include-ignored --test-threads 1 --exact "$1" 2>&1)
  echo "$r" >> $OUT/parity-guess.log
  echo "$setting $1: $(echo "$r" | grep -E '^test result|panicked' | head -3)"
done
echo "== parity $(( $(date +%s) - s )) s"
RUNS="g8e=STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1 g16e=STRATA_GUESS_SLOTS=16,STRATA_GUESS_EARLY=1 g8ew=STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1,STRATA_SIDE_COPY_BLOCKS=768 g4e=STRATA_GUESS_SLOTS=4,STRATA_GUESS_EARLY=1 s4g8e=STRATA_STREAM_SLOTS=4,STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1" GEN=128 ROUNDS=2 timeout 330 bash bench/placed_decode.sh > /dev/null 2>&1
grep -E "^--|decode:" $OUT/placed_decode.log | cut -c1-160; tail -7 $OUT/placed_decode.log
echo "== end $(( $(date +%s) - s )) s"
