#!/usr/bin/env bash
# One device call (issues 37 and 38): speculation with the routed experts in host memory, against the CPU's
# plain text. The built-in model on the card with three experts a block held (STRATA_HOST_EXPERTS=3, the
# host computing the rest), --spec 0 / 3 / auto, greedy and sampled, with and without
# STRATA_ASK_MISSES_ONLY; then the full-size synthetic model at --gpu-mem 12 (bench/full_model.sh), --spec
# 3 against --spec 0 on 48 prompt tokens and 48 generated (the MTP layer's block runs placed too). Every
# run's text must be the CPU's (built-in) or the plain placed run's (full model). Run from the repo root
# with .dev/strata (FULL=0: the built-in model only). Log: $OUT/placed_spec.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/placed_spec.log) 2>&1
for f in .dev/strata.xz; do [ -e .dev/strata ] || xz -dkf "$f"; done
chmod +x .dev/strata
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
bad=0
echo "== the built-in model, three experts a block on the card $(date +%T)"
prompt="The secret of getting ahead is"
for temp in 0 0.8; do
  timeout 60 .dev/strata run --device cpu --spec 0 -n 64 --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/cpu.txt 2>/dev/null
  for ask in 0 1; do
    for n in 0 3 auto; do
      STRATA_HOST_EXPERTS=3 STRATA_ASK_MISSES_ONLY=$ask timeout 60 .dev/strata run --device cuda --spec $n -n 64 \
        --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/gpu.txt 2>/tmp/gpu.err
      if cmp -s /tmp/cpu.txt /tmp/gpu.txt; then same=same; else same=DIFFERENT; bad=1; fi
      echo "temp $temp ask $ask spec $n: text $same as the CPU's plain run; $(grep -E '^speculation' /tmp/gpu.err | head -1); $(grep -E 'expert cache' /tmp/gpu.err | head -1 | cut -c1-120)"
    done
  done
done
if [ "${FULL:-1}" = 0 ]; then
  echo "== done $(date +%T): $([ $bad = 0 ] && echo 'all the same' || echo 'SOME DIFFER') (the full-size model not run: FULL=0)"
  exit 0
fi
echo "== the full-size model at --gpu-mem 12 $(date +%T)"
source "$(dirname "$0")/full_model.sh"
P=$(seq -s, 3 50)
for ask in 0 1; do
  for n in 0 3; do
    STRATA_ASK_MISSES_ONLY=$ask timeout 120 $bin run -m $model --prompt-tokens $P -n 48 --ignore-eos --device cuda \
      --gpu-mem 12 --max-context 600 --spec $n > $t/spec$n-ask$ask.txt 2>$t/err
    grep -E "tok/s|^speculation|rror" $t/err | sed "s/^/[ask $ask spec $n] /"
    if [ -f $t/spec0-ask0.txt ] && ! cmp -s $t/spec0-ask0.txt $t/spec$n-ask$ask.txt; then
      echo "[ask $ask spec $n] text DIFFERENT from the plain placed run's"; bad=1
    else
      echo "[ask $ask spec $n] text same as the plain placed run's ($(wc -c < $t/spec$n-ask$ask.txt) bytes)"
    fi
  done
done
echo "== done $(date +%T): $([ $bad = 0 ] && echo 'all the same' || echo 'SOME DIFFER')"
