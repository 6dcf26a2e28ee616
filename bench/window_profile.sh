#!/usr/bin/env bash
# One device call: where a window of 8 tokens spends its time on the full-size synthetic model, kernel by
# kernel (STRATA_PROFILE=kernels: an event either side of each launch) and by op family (STRATA_PROFILE=1),
# from a prompt of PROMPT tokens read in windows of 8, beside the decode step's; then decode at depth 4K
# with --spec 0 against --spec auto (the random-weight model accepts almost nothing, so auto's cost where
# drafts do not pay is what shows). Logs in $OUT/window_profile.log. Carry .dev/strata.xz.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/window_profile.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
source "$(dirname "$0")/full_model.sh"
seq 1 ${PROMPT:-1024} > $t/ids-p.txt
for p in kernels 1; do
  echo "== STRATA_PROFILE=$p, a prompt of ${PROMPT:-1024} tokens, 16 new $(date +%T)"
  STRATA_PROFILE=$p timeout 120 $bin run -m $model --prompt-tokens @$t/ids-p.txt -n 16 --ignore-eos --spec 0 \
    --device cuda --max-context 4096 2>&1 >/dev/null | grep -v '^note' | head -${LINES_MAX:-90}
done
seq 1 4096 > $t/ids-4k.txt
for s in 0 auto 0 auto; do
  echo "== depth 4096, 256 new tokens, --spec $s $(date +%T)"
  timeout 90 $bin run -m $model --prompt-tokens @$t/ids-4k.txt -n 256 --ignore-eos --spec $s --device cuda \
    --max-context 4400 2>&1 >/dev/null | grep -E 'tok/s|^speculation'
done
echo "== done $(date +%T)"
