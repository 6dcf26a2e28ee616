#!/usr/bin/env bash
# One device call's part: on the full-size synthetic model at depth 4096, 256 tokens decoded with
# --spec 0 against auto (the random-weight model accepts almost nothing, so auto must cost about nothing),
# then each kernel's time in verify windows of --spec N (STRATA_PROFILE=kernels: its verify windows' table
# holds the T = N + 1 windows, and the draft chains have theirs). RUNS= leaves out the decode runs,
# SPEC_PROFILES= the profiles. Log: $OUT/spec_auto.log. Carry .dev/strata.xz.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/spec_auto.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
source "$(dirname "$0")/full_model.sh"
seq 1 4096 > $t/ids-4k.txt
for s in ${RUNS-0 auto 0 auto}; do
  echo "== depth 4096, 256 new tokens, --spec $s $(date +%T)"
  timeout 60 $bin run -m $model --prompt-tokens @$t/ids-4k.txt -n 256 --ignore-eos --spec $s --device cuda \
    --max-context 4400 2>&1 >/dev/null | grep -E 'tok/s|^speculation'
done
for s in ${SPEC_PROFILES-1 7}; do
  echo "== STRATA_PROFILE=kernels, --spec $s, a prompt of 8 tokens, 64 new $(date +%T)"
  STRATA_PROFILE=kernels timeout 60 $bin run -m $model --prompt-tokens 1,2,3,4,5,6,7,8 -n 64 --ignore-eos \
    --spec $s --device cuda --max-context 256 2>&1 >/dev/null | grep -v '^note' | head -${LINES_MAX:-100}
done
echo "== done $(date +%T)"
