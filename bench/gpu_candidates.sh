#!/usr/bin/env bash
# One device call for settings not yet run on a card (opt-in switches, STRATA_DEFINES variants): each one
# through the parity tools of the families a decode kernel change touches and the whole pass on the small
# preset (fp16 and int8 KV), printed as gpu_forward_all.sh prints (`== …`, the tool's output, `rc=…`),
# then a line a setting: `candidate SETTING: N checks, F failed`. A setting that passes can then be timed
# against the default (bench/engine_ab.sh). Usage (settings as engine_ab.sh takes them):
#   bench/gpu_candidates.sh STRATA_DEFINES=QDOT_ROW_AHEAD=0 "STRATA_QDOT_STAGE=0 STRATA_DEFINES=HC_EARLY=2"
# Each distinct STRATA_DEFINES compiles every kernel file once more (about a minute on the H200). Run
# from the repo root with the binary in .dev/strata.
source "$(dirname "$0")/presets.sh"
summary=()
for setting in "$@"; do
  log=$(
    for p in "gr_parity --selftest" matvec_parity gdn_parity moe_parity attn_parity qsa_parity; do
      check "$p" "$setting" $bin parity $p
    done
    model small "$setting" fp16 int8
  )
  echo "$log"
  summary+=("candidate $setting: $(grep -c '^rc=' <<< "$log") checks, $(grep -c '^rc=[1-9]' <<< "$log") failed")
done
printf '%s\n' "${summary[@]}"
