#!/usr/bin/env bash
# One device call (issue 38, docs/PLACEMENT.md "Prompt windows"): a prompt read with the routed experts in
# host memory, in windows of W tokens, each expert a window's tokens chose and the card does not hold
# brought over the bus once for the window (STRATA_WINDOW_STREAM, on by default; with
# STRATA_ASK_MISSES_ONLY=1), against tiles of 8 asking the host (W = 8, and W = 64 with
# STRATA_WINDOW_STREAM=0). The full-size synthetic model (bench/full_model.sh; ROUTER=zipf for the
# skewed router) at --gpu-mem ${MEM:-12}, a prompt of DEPTH tokens (default 512) then 8 generated; every
# run's logits compared byte for byte with W = 8's, and the first with the whole model on the card.
# Usage: [WINDOWS="64 128 256" ("" for none)] [DEPTH=512] [MEM=12] [ROUNDS=1] [WHOLE=1 ("" for none)] [EXTRA="tiles64=STRATA_WINDOW_STREAM=0
# ov=STRATA_WINDOW_OVERLAP=1"] bench/placed_windows.sh (EXTRA: label=settings, commas between, in the
# memory plan's window unless a setting names one; "label=" alone: the defaults). Log:
# $OUT/placed_windows.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/placed_windows.log) 2>&1
source "$(dirname "$0")/full_model.sh"
depth=${DEPTH:-512}
seq 1 $depth > $t/ids.txt
run() {  # $1: a label, $2: the budget ("" for the whole model), then the settings
  local label=$1 mem=$2; shift 2
  env STRATA_ASK_MISSES_ONLY=1 "$@" timeout 200 $bin run -m $model --prompt-tokens @$t/ids.txt -n 8 --ignore-eos \
    --spec 0 --device cuda ${mem:+--gpu-mem $mem} --max-context $(( depth + 16 )) --dump-logits $t/$label.f32 \
    > /dev/null 2> $t/run.log
  local rate=$(sed -n 's/.*prompt: [^(]*(\([0-9.]*\) tok\/s).*/\1/p' $t/run.log)
  local same=$(cmp -s $t/$label.f32 $t/w8.f32 && echo SAME || echo DIFFER)
  echo "$label ($*): prompt $rate tok/s; logits against W = 8's: $same"
  grep -E "^prompt:|expert cache|host experts|^error|panicked|memory:" $t/run.log | cut -c1-320 | sed 's/^/    /'
}
run w8 ${MEM:-12} STRATA_PROMPT_WINDOW=8
[ -n "${WHOLE-1}" ] && run whole64 "" STRATA_PROMPT_WINDOW=64
for r in $(seq 1 ${ROUNDS:-1}); do
  for w in ${WINDOWS-64 128 256}; do
    run w$w-r$r ${MEM:-12} STRATA_PROMPT_WINDOW=$w
  done
  for v in ${EXTRA:-}; do  # label=SETTING,SETTING (the plan's window unless a setting says)
    run ${v%%=*}-r$r ${MEM:-12} $(echo "${v#*=}" | tr ',' ' ')
  done
  [ $r -gt 1 ] && run w8-r$r ${MEM:-12} STRATA_PROMPT_WINDOW=8
done
echo "== done $(date +%T)"
