#!/usr/bin/env bash
# One device call: the full-size synthetic model written on the machine, then for each depth a greedy run
# on the GPU (prompt of DEPTH tokens, N new tokens) for prefill and decode rates, and the same run with
# STRATA_PROFILE=1 for the per-op-family time of a decode step; the card's copy bandwidth is measured by
# torch in the same call, and each depth's line gives the bytes a step reads, their floor at that
# bandwidth and the ratio of the measured step to it. Usage: bench/engine.sh [DEPTHS] [N]
# (default "4096" and 256); REPEAT=k runs each depth k times, the ratio from their median; PROFILES="1 kernels" adds the per-kernel breakdown (default "1"; PROFILES= none); SPEC=1 adds the speculation rows at
# each depth (`strata bench spec`: verify windows, drafts, and 256 tokens decoded at forced per-draft
# acceptance 0.6..0.9). Run from the repo root with the binary in .dev/strata.
set -uo pipefail
depths=${1:-4096}
n=${2:-256}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
bw=$(python3 "$(dirname "$0")/torch_bandwidth.py")
echo "copy bandwidth (torch, 2 GiB, read + write): $bw TB/s"
source "$(dirname "$0")/full_model.sh"
for d in $depths; do
  seq 1 $d > $t/ids-$d.txt  # a file: 32K ids do not fit one command-line argument
  ids=@$t/ids-$d.txt
  echo "== depth $d, $n new tokens"
  # REPEAT runs, each a process of its own (the rate moves by a few percent from one process to the next,
  # more than within one); the line below them takes their median.
  for r in $(seq 1 ${REPEAT:-1}); do
    $bin run -m $model --prompt-tokens $ids -n $n --ignore-eos --device cuda \
      --max-context $(( d + n + 8 )) 2>&1 >/dev/null | tee $t/run-$d-$r.log
  done
  # The floor of the last decode step (depth d + n − 1) at the bandwidth measured above, and the ratio.
  floor=$($bin bench step_bytes $model $(( d + n - 1 )) --bandwidth $bw)
  echo "$floor"
  rate=$(cat $t/run-$d-*.log | sed -n 's/.*decode: .*(\([0-9.]*\) tok\/s).*/\1/p' | median)
  rm -f $t/run-$d-*.log
  ms=$(echo "$floor" | sed -n 's/.*floor \([0-9.]*\) ms.*/\1/p')
  [ -n "$rate" ] && [ -n "$ms" ] && awk -v r=$rate -v f=$ms -v d=$d \
    'BEGIN { printf "depth %d: decode %.1f tok/s (median of the runs) = %.3f ms a step, %.2f x the floor of %.3f ms\n", d, r, 1000 / r, 1000 / r / f, f }'
  for p in ${PROFILES-1}; do
    echo "-- profiled (STRATA_PROFILE=$p)"
    STRATA_PROFILE=$p $bin run -m $model --prompt-tokens $ids -n $n --ignore-eos \
      --device cuda --max-context $(( d + n + 8 )) 2>&1 >/dev/null | grep -v '^note\|^device'
  done
  if [ -n "${SPEC:-}" ]; then
    echo "-- speculation (strata bench spec; acceptance forced, the random-weight model accepts none)"
    $bin bench spec -m $model --depth $d --reps 16 --bandwidth $bw 2>&1 | grep -v '^note\|^device\|^model\|^kernels'
  fi
done
