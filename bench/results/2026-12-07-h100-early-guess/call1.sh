#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
s=$(date +%s)
timeout 200 bash bench/gpu_placed.sh > $OUT/gpu_placed.out 2>&1; cat $OUT/gpu_placed.out
echo "== placed parity $(( $(date +%s) - s )) s"
RUNS="base= g8=STRATA_GUESS_SLOTS=8 g8e=STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1 g8b48=STRATA_GUESS_SLOTS=8,STRATA_SIDE_COPY_BLOCKS=48" GEN=128 ROUNDS=2 timeout 260 bash bench/placed_decode.sh > /dev/null 2>&1
tail -8 $OUT/placed_decode.log
echo "== decode $(( $(date +%s) - s )) s"
WINDOWS="" WHOLE="" EXTRA="d= ov=STRATA_WINDOW_OVERLAP=1" ROUNDS=2 timeout $(( 570 - ($(date +%s) - s) )) bash bench/placed_windows.sh > /dev/null 2>&1
grep -E "tok/s" $OUT/placed_windows.log | head
echo "== end $(( $(date +%s) - s )) s"
