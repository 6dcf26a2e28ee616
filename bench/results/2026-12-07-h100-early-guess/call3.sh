#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
for f in .dev/*.xz; do [ -e "${f%.xz}" ] || xz -dkf "$f"; done; chmod +x .dev/gpu_parity .dev/strata
s=$(date +%s)
uptime; free -g | head -2
RUNS="base= g8e=STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1" GEN=128 ROUNDS=3 timeout 170 bash bench/placed_decode.sh > /dev/null 2>&1
grep -E "^--|decode:|requests" $OUT/placed_decode.log | cut -c1-220; tail -4 $OUT/placed_decode.log
echo "== decode $(( $(date +%s) - s )) s"
WINDOW=1 NCU_TIMEOUT=$(( 560 - ($(date +%s) - s) )) timeout $(( 570 - ($(date +%s) - s) )) bash bench/ncu_probe.sh 'gr_|gather' 40 2>&1 | tail -45
echo "== end $(( $(date +%s) - s )) s"
