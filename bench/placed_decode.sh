#!/usr/bin/env bash
# One device call (issue 38): placed decode on the full-size synthetic model (bench/full_model.sh; ROUTER=zipf
# for the skewed router) at --gpu-mem ${MEM:-12}: a prompt of DEPTH tokens (default 512), then GEN (default
# 64) greedy tokens, under each of RUNS (label=SETTING,SETTING …; "label=" alone: the defaults), ROUNDS
# times interleaved. Every run's logits compared byte for byte with the first's (placement changes no
# bit). Usage: RUNS="base= g8=STRATA_GUESS_SLOTS=8" [ROUNDS=2] [DEPTH=512] [GEN=64] [MEM=12]
# bench/placed_decode.sh. A setting BIN=PATH runs that binary for its label. Log: $OUT/placed_decode.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/placed_decode.log) 2>&1
source "$(dirname "$0")/full_model.sh"
depth=${DEPTH:-512}
seq 1 $depth > $t/ids.txt
first=""
rm -f $t/rates.txt
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in ${RUNS:-base=}; do
    label=${v%%=*}-r$r
    settings=$(echo "${v#*=}" | tr ',' ' ')
    echo "-- $label ($settings) $(date +%T)"
    b=$bin  # a setting BIN=PATH runs another binary (a build before a change, say)
    for s in $settings; do [ "${s%%=*}" = BIN ] && b=${s#BIN=}; done
    settings=$(echo "$settings" | tr ' ' '\n' | grep -v '^BIN=' | tr '\n' ' ')
    env $settings timeout 200 $b run -m $model --prompt-tokens @$t/ids.txt -n ${GEN:-64} --ignore-eos --spec 0 \
      --device cuda --gpu-mem ${MEM:-12} --max-context $(( depth + ${GEN:-64} + 16 )) --dump-logits $t/$label.f32 \
      2>&1 >/dev/null | grep -E "tok/s|requests|stream slots|^error|panicked|memory:" | cut -c1-330 | tee $t/run.log
    rate=$(sed -n 's/.*decode: [^(]*(\([0-9.]*\) tok\/s).*/\1/p' $t/run.log)
    [ -n "$rate" ] && echo "${v%%=*} $rate" >> $t/rates.txt
    [ -z "$first" ] && first=$t/$label.f32
    cmp -s $first $t/$label.f32 && echo "logits: SAME as the first run's" || echo "logits: DIFFER from the first run's"
  done
done
echo "== decode tok/s, the median of each setting's rounds (the first round of the first setting starts cold)"
for v in ${RUNS:-base=}; do
  echo "${v%%=*}: $(awk -v l=${v%%=*} '$1 == l { print $2 }' $t/rates.txt | median)"
done
echo "== done $(date +%T)"
