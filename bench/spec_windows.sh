#!/usr/bin/env bash
# One device call: why a verify window's kernels cost what they cost, and auto's cost where nothing is
# accepted. Nsight Compute's counters (bench/ncu_probe.sh WINDOW=1: DRAM and issue use, occupancy, stall
# reasons) for the kernels that take most of a window of 8 (the experts' gathers, the HC read, the dense
# § qdot products, the GDN delta rule), then bench/spec_auto.sh's decode at depth 4K with --spec 0
# against auto. Logs: $OUT/ncu-probe.csv, $OUT/spec_windows.log, $OUT/spec_auto.log. Carry .dev/strata.xz.
set -uo pipefail
out=${OUT:-/tmp}
exec > >(tee $out/spec_windows.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
source "$(dirname "$0")/full_model.sh"
echo "== the kernels of windows of 8 under Nsight Compute $(date +%T)"
WINDOW=1 SKIP=${SKIP:-60} NCU_TIMEOUT=${NCU_TIMEOUT:-200} bash "$(dirname "$0")/ncu_probe.sh" \
  'gather_glu|gather_combine|gr_up_split|gr_down_split|qdot_q8_0_g$|qdot_q6_k_g$|qdot_q4_k_g_conv|gdn_delta' \
  ${COUNT:-40}
echo "== auto against --spec 0 $(date +%T)"
SPEC_PROFILES= timeout 150 bash "$(dirname "$0")/spec_auto.sh" > /dev/null 2>&1
grep -E "^==|tok/s|^specul" $out/spec_auto.log
echo "== done $(date +%T)"
