#!/usr/bin/env bash
# Issue 37: drafts with the MTP input a block a row (HEAD) against strata-old (e5ebbc4: a warp a row),
# then windows under the HC variants that held their bits in callNext. VARIANTS="A=1;B=2" (env).
set -uo pipefail
cd "$(dirname "$0")/.."
export STRATA_CACHE=/tmp/strata-cache STRATA_BUILT_AT=/work/main
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
[ -x .dev/strata ] || { tar xJf .dev/pair.tar.xz -C .dev; chmod +x .dev/strata .dev/strata-old; }
s=$(date +%s)
exec > >(tee $OUT/spec_bench.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
bw=$(python3 bench/torch_bandwidth.py); echo "copy bandwidth (torch, 2 GiB, read + write): $bw TB/s"
source bench/full_model.sh
for round in 1 2; do
  for b in strata strata-old; do
    echo "== $b round $round $(( $(date +%s) - s )) s"
    timeout 150 .dev/$b bench spec -m $model --depth 4096 --reps 16 --bandwidth $bw 2>&1 | grep -v '^note' | grep -E "^\| [0-9]|plain step|drafting|draft vocabulary" | head -40
    [ $round = 2 ] && break
  done
done
IFS=";" read -ra variants <<< "${VARIANTS-STRATA_GR_DOWN_PAIR=1;STRATA_DEFINES=HC_UP_STEP=1;STRATA_QDOT_NARROW=1}"
for v in "${variants[@]}"; do
  [ -z "$v" ] && continue
  echo "== windows under $v $(( $(date +%s) - s )) s"
  env $v timeout 120 .dev/strata bench spec -m $model --depth 4096 --reps 16 --bandwidth $bw --windows-only 2>&1 | grep -v '^note' | head -16
  echo "== windows, default $(( $(date +%s) - s )) s"
  timeout 120 .dev/strata bench spec -m $model --depth 4096 --reps 16 --bandwidth $bw --windows-only 2>&1 | grep -v '^note' | head -16
done
echo "== placed decode at 12 GiB, the team's claims (HEAD) against e5ebbc4 $(( $(date +%s) - s )) s"
left=$(( 585 - ($(date +%s) - s) ))
[ $left -gt 120 ] && RUNS="new= old=BIN=.dev/strata-old,STRATA_GUESS_SLOTS=8,STRATA_GUESS_EARLY=1,STRATA_WINDOW_OVERLAP=1" GEN=128 ROUNDS=2 \
  timeout $left bash bench/placed_decode.sh > /dev/null 2>&1
grep -E "^--|decode:|logits|^[a-z]+: [0-9]" $OUT/placed_decode.log 2>/dev/null | cut -c1-240
echo "== end $(( $(date +%s) - s )) s"
