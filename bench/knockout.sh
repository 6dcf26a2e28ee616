#!/usr/bin/env bash
# One device call: what each kernel family takes from a decode step as the step's graph runs it. Each
# family is left out of the graphs (STRATA_SKIP, crates/cuda/src/runtime/skip.rs: the output is garbage, for
# timing only) and the step time is compared with the full step's, runs interleaved round by round as
# in engine_ab.sh. Events time each kernel alone; this counts overlap (programmatic launches, the side
# lane): a family off the critical path saves little. Usage:
#   bench/knockout.sh [FAMILY…]   (a family: STRATA_SKIP's value, e.g. gr_norm_split or "matvec_q4_k*")
# ROUNDS (2), DEPTH (1024) and N (256) as engine_ab.sh. Run from the repo root with the binary in .dev/strata.
set -uo pipefail
source "$(dirname "$0")/full_model.sh"
depth=${DEPTH:-1024}
n=${N:-256}
if [ $# -eq 0 ]; then
  set -- gr_norm_split gr_down_split gr_up_split "matvec_q4_k*" "matvec_q6_k*" "matvec_q8_0*" "matvec_q2_0*" \
    "matvec_f32*" "matvec_q4_0*" "matvec_iq4_nl*" gdn_conv_norm "gdn_delta*" "attend_*" "qsa_scores*" moe_act
fi
seq 1 $depth > $t/ids-ko.txt
rm -f $t/ko.txt
run() {  # decode tok/s of one run with STRATA_SKIP=$1 ("" for none)
  STRATA_SKIP="$1" $bin run -m $model --prompt-tokens @$t/ids-ko.txt -n $n --ignore-eos --device cuda \
    --max-context $(( depth + n + 8 )) 2>&1 >/dev/null | sed -n 's/.*decode: .*(\([0-9.]*\) tok\/s).*/\1/p'
}
run "" >/dev/null  # the plan and the kernels made once, outside the timed runs
for r in $(seq 1 ${ROUNDS:-2}); do
  for i in $(seq 0 $#); do
    if [ $i -eq 0 ]; then fam=""; else fam=${!i}; fi
    rate=$(run "$fam")
    echo "round $r, ${fam:-(full step)}: ${rate:-failed} tok/s"
    echo "$i ${rate:-0}" >> $t/ko.txt
  done
done
base=$(awk '$1 == 0 { print $2 }' $t/ko.txt | median)
echo "| left out | decode tok/s (median of ${ROUNDS:-2}) | ms a step | ms saved | share of the step |"
echo "|---|---:|---:|---:|---:|"
for i in $(seq 0 $#); do
  if [ $i -eq 0 ]; then fam="(nothing)"; else fam=${!i}; fi
  med=$(awk -v i=$i '$1 == i { print $2 }' $t/ko.txt | median)
  awk -v f="$fam" -v m="$med" -v b="$base" 'BEGIN {
    if (m <= 0 || b <= 0) { printf "| `%s` | failed | | | |\n", f; exit }
    s = 1000 / b - 1000 / m
    printf "| `%s` | %.1f | %.3f | %.3f | %.1f%% |\n", f, m, 1000 / m, s, 100 * s * b / 1000 }'
done
rm -f $t/ko.txt
