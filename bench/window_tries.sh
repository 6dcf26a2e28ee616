#!/usr/bin/env bash
# One device call: window settings checked, then timed. For each NAME=VALUE setting given (a window
# kernel's other form, e.g. STRATA_QDOT_SHARE=0; bin:PATH, another build, is timed but not checked here),
# the parity tests TESTS under it (default: gpu_parity's matvec_equals and gdn_equals, which reach the
# window products' kernels at their large shapes, bit for bit against the CPU; moe_equals_the_cpu for the
# experts' kernels; PARITY=0: none, about 90 s a setting saved); then bench/window_knockout.sh with every
# setting against the default, ROUNDS (2) rounds in one call, windows on the card cut to one. Carry
# .dev/strata.xz and .dev/gpu_parity.xz (bench/gpu_tests.sh says how). Logs: $OUT/window_tries-parity.log,
# $OUT/window_knockout.log.
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: bench/window_tries.sh NAME=VALUE…" >&2; exit 2; }
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata* .dev/gpu_parity* 2>/dev/null
built=${STRATA_BUILT_AT:-/work/main}  # the test binary finds its fixtures where it was built
[ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; }
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
log=${OUT:-/tmp}/window_tries-parity.log
[ "${PARITY:-1}" = 0 ] && set_list=() || set_list=("$@")
for set in "${set_list[@]}"; do
  case "$set" in bin:*) echo "$set: another build, no parity run here (its own gpu_parity)"; continue ;; esac
  for t in ${TESTS:-matvec_equals_the_cpu gdn_equals_the_cpu}; do
    r=$(env "$set" STRATA_REQUIRE_GPU=1 .dev/gpu_parity --include-ignored --test-threads 1 --exact "$t" 2>&1)
    echo "$r" >> "$log"
    echo "$set $t: $(echo "$r" | grep -E '^test result' || echo 'no result')"
  done
done
ROUNDS=${ROUNDS:-2} REPS=${REPS:-6} bash "$(dirname "$0")/window_knockout.sh" "$@"
