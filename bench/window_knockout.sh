#!/usr/bin/env bash
# One device call: what each kernel family takes from a verify window as its graph runs on the card
# (docs/SPECULATION.md). For each family, `strata bench spec --windows-only` with the family left out of
# every graph (STRATA_SKIP, runtime/skip.rs: the output is garbage, for timing only) and each graph timed
# on the card (STRATA_GAPS=1: events around the graph, not the host's recording). The drop against the
# full run is the family's share of the critical path at that T; events around each kernel alone
# (STRATA_PROFILE) count time the graph overlaps. Usage: bench/window_knockout.sh [FAMILY…] (a family:
# STRATA_SKIP's value, e.g. gr_up_split or "gdn_delta*" or a comma list; NAME=VALUE, a setting; or
# bin:PATH, another build of strata, for a change no setting reaches, e.g. bin:.dev/strata-b with a second
# binary carried as .dev/strata-b.xz). DEPTH (1024), REPS (8), ROUNDS
# (1: each family once, the full run before each round and after the last). Carry .dev/strata.xz.
# Log: $OUT/window_knockout.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/window_knockout.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source "$(dirname "$0")/full_model.sh"
if [ $# -eq 0 ]; then
  dense=qdot_q8_0_g,qdot_q4_0_g,qdot_q6_k_g,qdot_q4_k_g,qdot_iq4_nl_g,qdot_q4_k_g_conv
  quant=qdot_q8_0_quantize,qdot_q4_0_quantize,qdot_q6_k_quantize,qdot_q4_k_quantize,qdot_iq4_nl_quantize,qdot_q2_0_quantize
  one="qdot_q8_0_g_one*,qdot_q4_0_g_one*,qdot_q6_k_g_one*,qdot_q4_k_g_one*,qdot_iq4_nl_g_one*"
  # The likeliest to matter first, so that a call's time limit cuts the least. (The router's output is
  # routing: leaving it out moves which experts run, so its row says little.)
  set -- $dense "$one" "qdot_q2_0_g_gather*" gr_up_split gr_down_split gr_norm_split $quant "gdn_delta*" \
    gdn_conv_norm "attend_*,norm_rope_kv,kv_store" "qsa_scores*,block_keys" "moe_act,moe_combine" "matvec_*" \
    "ple_*" mtp_input
fi
# One run: "step T1 T2 T4 T8 wall" (ms on the card: the plain step, then verify windows cut to one; then
# the plain step's wall time, host included, beside its time on the card). An entry
# with "=" in it is a setting to run under instead (NAME=VALUE: e.g. a kernel's other form), nothing left out.
run() {
  local skip="$1" set="STRATA_GAPS=1" b=$bin
  case "$1" in bin:*) skip=""; b=${1#bin:} ;; *=*) skip=""; set="$1" ;; esac
  env STRATA_GAPS=1 "$set" STRATA_SKIP="$skip" timeout 120 $b bench spec -m $model --depth ${DEPTH:-1024} --reps ${REPS:-8} \
    --bandwidth 1 --windows-only 2>&1 | awk '
      /^plain step: / { wall = $3 }
      /^on the card/ { for (i = 1; i <= NF; ++i) if ($i == "step") step = $(i + 1) }
      /^\| [1248] \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { w[$2] = $8 }
      END { if (step != "") print step, w[1], w[2], w[4], w[8], wall }'
}
echo "| left out | step (ms) | T = 1 | T = 2 | T = 4 | T = 8 | step's wall time | step saved | T = 2 saved | T = 4 saved | T = 8 saved |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
full=$(run "")
echo "| (nothing) | ${full// / | } | | | | |"
for r in $(seq 1 ${ROUNDS:-1}); do
  for fam in "$@"; do
    got=$(run "$fam")
    [ -z "$got" ] && { echo "| $fam | failed | | | | | | | | | |"; continue; }
    echo "$full $got" | awk -v f="$fam" '{ printf "| %s | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |\n",
      f, $7, $8, $9, $10, $11, $12, $1 - $7, $3 - $9, $4 - $10, $5 - $11 }'
  done
  full=$(run "")
  echo "| (nothing) | ${full// / | } | | | | |"
done
echo "== done $(date +%T)"
