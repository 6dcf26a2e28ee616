#!/usr/bin/env bash
# One device call: decode rates of several settings side by side, interleaved round by round so that a
# drift of the card's speed falls on all of them alike; each run is a process of its own (the rate moves
# by a few percent from one process to the next). Usage:
#   bench/engine_ab.sh "" STRATA_PDL_JOIN=0 "STRATA_PDL_JOIN=0 STRATA_SIDE=0" ".dev/strata-b STRATA_SIDE=0"
# ("" is the default; a setting whose first word is an executable runs that binary instead of $bin, so
# two builds are compared in one call). ROUNDS (3), DEPTH (1024: the prompt; decode speed barely moves
# with depth, the selection keeping 2,048 cells) and N (256 new tokens). Prints each run and the median
# of each setting.
# Run from the repo root with the binary in .dev/strata.
set -uo pipefail
source "$(dirname "$0")/full_model.sh"
depth=${DEPTH:-1024}
n=${N:-256}
seq 1 $depth > $t/ids-ab.txt
rm -f $t/ab.txt
# The binary and the environment of setting i.
split() {
  read -r first rest <<< "$1"
  if [ -n "$first" ] && [ -x "$first" ]; then b=$first; vars=$rest; else b=$bin; vars=$1; fi
}
for i in $(seq 1 $#); do  # each binary's plan, made once before the timed runs (its choices said)
  split "${!i}"
  env $vars $b run -m $model --prompt-tokens @$t/ids-ab.txt -n 4 --ignore-eos --device cuda 2>&1 >/dev/null \
    | sed -n -e "s/^kernels: \(.*\) (.*$/setting $i's kernels: \1/p" \
      -e "s/.*(matvec layouts: \(.*\))$/setting $i's plan: \1/p"
done
for r in $(seq 1 ${ROUNDS:-3}); do
  for i in $(seq 1 $#); do
    setting=${!i}
    split "$setting"
    log=$(env $vars $b run -m $model --prompt-tokens @$t/ids-ab.txt -n $n --ignore-eos --device cuda \
      --max-context $(( depth + n + 8 )) 2>&1 >/dev/null)
    rate=$(sed -n 's/.*decode: .*(\([0-9.]*\) tok\/s).*/\1/p' <<< "$log")
    host=$(sed -n 's/^graphs: .*; the host \(.*\)$/; the host \1/p' <<< "$log")
    echo "round $r, setting $i (${setting:-default}): ${rate:-failed} tok/s$host"
    echo "$i ${rate:-0}" >> $t/ab.txt
  done
done
echo "| setting | decode tok/s (median of ${ROUNDS:-3}) |"
echo "|---|---:|"
for i in $(seq 1 $#); do
  setting=${!i}
  med=$(awk -v i=$i '$1 == i { print $2 }' $t/ab.txt | median)
  echo "| ${setting:-default} | $med |"
done
rm -f $t/ab.txt
