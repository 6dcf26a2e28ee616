#!/usr/bin/env bash
# One device call, the host's half only (issue 38): the host's Q2_0 § qdot kernels on the card machine's
# CPU, the 512-bit kernel against the 256-bit one (STRATA_Q2_0_WIDE), then `strata bench host_experts` over
# the full-size synthetic model's own experts at 1, 8, 14 and 16 threads, from the file's mapping and from
# a copy in 2 MB pages (--huge: whether page walks hold a thread back), and the 256-bit kernel at 1 and 14.
# Run from the repo root with .dev/strata. Log: $OUT/host_kernels.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/host_kernels.log) 2>&1
source "$(dirname "$0")/full_model.sh"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Flags" | cut -c1-160
for w in 1 0; do
  echo "-- STRATA_Q2_0_WIDE=$w"
  STRATA_Q2_0_WIDE=$w timeout 60 $bin bench host_qdot --types Q2_0 --rows 640 --cols 2560 --window 8 --ms 300 2>&1 | grep -E "^\|"
done
for v in "" "--huge"; do
  timeout 100 $bin bench host_experts $model --window 1 --ms 300 --gap-us 100 --threads 1,8,14,16 $v 2>&1 | grep -v "^note"
done
STRATA_Q2_0_WIDE=0 timeout 60 $bin bench host_experts $model --window 1 --ms 300 --gap-us 100 --threads 1,14 2>&1 | grep -v "^note"
