#!/usr/bin/env bash
# One device call: where a verify window's and a draft chain's time goes on the full-size synthetic
# model, kernel by kernel (STRATA_PROFILE=kernels: an event either side of each launch, so each launch
# carries a few µs of the events' own), for --spec N in SPECS (default 1 3 7), after a prompt of 8
# tokens, 64 new. Each table of the run's report (decode steps, verify windows, draft chains) is cut to
# its first ROWS kernels (default 24). Log: $OUT/spec_profile.log. Carry .dev/strata.xz.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/spec_profile.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
source "$(dirname "$0")/full_model.sh"
for n in ${SPECS:-1 3 7}; do
  echo "== STRATA_PROFILE=kernels, --spec $n, a prompt of 8 tokens, 64 new $(date +%T)"
  STRATA_PROFILE=kernels timeout 120 $bin run -m $model --prompt-tokens 1,2,3,4,5,6,7,8 -n 64 --ignore-eos \
    --spec $n --device cuda --max-context 256 2>&1 >/dev/null | grep -v '^note' \
    | awk -v rows=${ROWS:-24} '/^profile of/ { n = 0; print; next } /^  / { if (++n <= rows) print; next } { print }'
done
echo "== done $(date +%T)"
