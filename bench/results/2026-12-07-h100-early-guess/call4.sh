#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
for f in .dev/*.xz; do [ -e "${f%.xz}" ] || xz -dkf "$f"; done; chmod +x .dev/gpu_parity .dev/strata
s=$(date +%s)
rm -rf /tmp/strata-full
ROUTER=zipf RUNS="base= g8e=STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1" GEN=128 ROUNDS=2 timeout 260 bash bench/placed_decode.sh > /dev/null 2>&1
grep -E "written|^--|decode:|requests|held" $OUT/placed_decode.log | cut -c1-220; tail -4 $OUT/placed_decode.log
echo "== end $(( $(date +%s) - s )) s"
