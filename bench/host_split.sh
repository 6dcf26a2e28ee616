#!/usr/bin/env bash
# One device call (issue 38): placed decode at --gpu-mem 12 on the full-size synthetic model (ROUTER=zipf for
# the skewed router), a 512-token prompt then 64 tokens, under: the default; STRATA_ASK_MISSES_ONLY=1 (the
# card counts its routings and asks the host only where a slot is left to it); and that with the host
# keeping a share of each request's streamable misses (STRATA_DEFINES=MISS_HOST_KEEP=‰, misses.cu), so
# that the bus and the host's threads split them. Two rounds, interleaved; each run's logits compared
# with the default's (placement changes no bit). Usage: [KEEPS="0 150 300"] [ROUNDS=2] bench/host_split.sh. Run from
# the repo root with .dev/strata. Log: $OUT/host_split.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/host_split.log) 2>&1
source "$(dirname "$0")/full_model.sh"
seq 1 512 > $t/ids.txt
run() {  # $1: a label, then the settings
  local label=$1; shift
  echo "-- $label $(date +%T)"
  env "$@" timeout 100 $bin run -m $model --prompt-tokens @$t/ids.txt -n 64 --ignore-eos --spec 0 --device cuda \
    --gpu-mem 12 --max-context 600 --dump-logits $t/$label.f32 2>&1 >/dev/null | grep -E "tok/s|requests|stream slots"
  cmp -s $t/default.f32 $t/$label.f32 && echo "logits: SAME as the default's" || echo "logits: DIFFER from the default's"
}
run default STRATA_ASK_MISSES_ONLY=0
for r in $(seq 1 ${ROUNDS:-2}); do
  for keep in ${KEEPS:-0 150 300}; do
    run ask-keep$keep-r$r STRATA_ASK_MISSES_ONLY=1 STRATA_DEFINES=MISS_HOST_KEEP=$keep
  done
  run default-r$r STRATA_ASK_MISSES_ONLY=0
done
