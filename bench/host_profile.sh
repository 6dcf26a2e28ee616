#!/usr/bin/env bash
# One device call: where the host's time goes while it records steps (STRATA_HOST_PROFILE=1), on the
# full-size synthetic model (bench/full_model.sh): `strata run` of a 193-token prompt and N (64) new tokens,
# plainly (--spec 0: decode steps recorded ahead) and with three drafts (--spec 3: draft chains and
# verify windows of 4). The report's `host profile:` table gives each op's share of a recording; the
# `drafting:` line the draft calls' split. Log: $OUT/host_profile.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/host_profile.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
source "$(dirname "$0")/full_model.sh"
prompt=$(printf 'word %.0s' $(seq 1 64))
for n in ${SPECS:-0 3}; do
  echo "== --spec $n $(date +%T)"
  STRATA_HOST_PROFILE=1 timeout ${T_RUN:-120} $bin run -m $model -p "$prompt" -n ${N:-64} --ignore-eos --spec $n 2>&1 >/dev/null \
    | grep -vE '^note'
done
echo "== done $(date +%T)"
