#!/usr/bin/env bash
# One device call: `strata bench spec` on the full-size synthetic model (written on the machine:
# bench/full_model.sh) at each depth (default 4096), the card's copy bandwidth measured by torch in the
# same call for the floors. Usage: bench/spec_bench.sh [DEPTHS] [REPS]; AB="STRATA_OVERLAP=0" runs each
# depth again under that setting (A/B in one call), AB="A=1;B=2 C=0" under each of several in turn.
# Log: $OUT/spec_bench.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/spec_bench.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
bw=$(python3 "$(dirname "$0")/torch_bandwidth.py")
echo "copy bandwidth (torch, 2 GiB, read + write): $bw TB/s"
source "$(dirname "$0")/full_model.sh"
for d in ${1:-4096}; do
  echo "== depth $d $(date +%T)"
  timeout ${T_BENCH:-300} $bin bench spec -m $model --depth $d --reps ${2:-32} --bandwidth $bw 2>&1 | grep -v '^note'
  IFS=';' read -ra variants <<< "${AB:-}"
  for v in "${variants[@]}"; do
    [ -z "$v" ] && continue
    echo "-- the same under $v"
    env $v timeout ${T_BENCH:-300} $bin bench spec -m $model --depth $d --reps ${2:-32} --bandwidth $bw 2>&1 | grep -v '^note'
  done
done
echo "== done $(date +%T)"
