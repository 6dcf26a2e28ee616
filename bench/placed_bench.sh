#!/usr/bin/env bash
# One device call per router: the table of docs/PLACEMENT.md's bench (issue 38) on the full-size synthetic
# model (bench/full_model.sh; ROUTER=zipf for the skewed router; the disk holds one full model at a time).
# For each depth (default 4096 and 32768) the prompt of that many random tokens is read once with the
# whole model on the card and saved (--save-state); then at each budget (--gpu-mem unlimited / 32 / 24 /
# 12) a run continues it: 128 more prompt tokens (the placed prefill rate), then 48 tokens decoded plainly
# (--spec 0) and, in a run of its own, 48 with speculation (--spec auto). Each run's memory plan, cache
# hit rate, host answers and rates are printed (each run's 128 tokens its own; the cache starts from the
# routing counts the runs before left); the card's copy rate, the host link's rate each way and
# the host's read rate are measured in the same call for the floors, and the host's expert kernels timed
# at 1, 8, 14 and 16 threads (the server's spinning team and a rayon pool). Usage: bench/placed_bench.sh
# [DEPTHS] [BUDGETS]; SPECS="0" leaves out the runs with speculation, HOST_SWEEP=0 the host kernels' timing.
# Log (appended to, so a call may run it more than once): $OUT/placed_bench[-zipf].log.
set -uo pipefail
exec > >(tee -a ${OUT:-/tmp}/placed_bench${ROUTER:+-$ROUTER}.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
s0=$(date +%s); t() { echo "[$(( $(date +%s) - s0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "host: $(nproc) threads, $(lscpu | grep -E '^Model name' | sed 's/.*: *//'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
echo "card copy rate (torch, read + write): $(python3 "$(dirname "$0")/torch_bandwidth.py") TB/s"
echo "host link (torch, pinned, GB/s host→card card→host): $(python3 "$(dirname "$0")/torch_pcie.py")"
source "$(dirname "$0")/full_model.sh"
$bin bench host_qdot --rows 8 --cols 256 --window 1 --ms 1 --types Q8_0 2>&1 | grep "read rate"
# The host's expert kernels over the model's own experts at several thread counts (their rate a thread,
# and how it holds up as the threads share the host's read rate).
[ "${HOST_SWEEP:-1}" = 0 ] || timeout 90 $bin bench host_experts $model --window 4 --ms 300 --threads 1,8,14,16 2>&1 | grep -E "^\|"
t
ids() { python3 -c "import random; random.seed($1); print(','.join(str(random.randrange(3, 200000)) for _ in range($2)))"; }
for d in ${1:-4096 32768}; do
  ctx=$(( d + 1024 ))
  if [ ! -f /tmp/state-$d.bin ] || [ "$(cat /tmp/state-$d.of 2>/dev/null)" != "$model" ]; then
    ids 1 $d > /tmp/prompt-$d.txt
    timeout 300 $bin run -m $model --prompt-tokens @/tmp/prompt-$d.txt -n 1 --device cuda --max-context $ctx \
      --save-state /tmp/state-$d.bin 2>&1 | grep -E "prompt:|rror" | sed "s/^/[depth $d, whole model, saving] /"
    echo "$model" > /tmp/state-$d.of  # a state is its model's: another router's model reads its own
  fi
  t
  for mem in ${2:-unlimited 32 24 12}; do
    g=$([ "$mem" = unlimited ] || echo "--gpu-mem $mem")
    for spec in ${SPECS:-0 auto}; do
      echo "== depth $d, --gpu-mem $mem, --spec $spec"
      # Tokens of its own in each run: the cache starts from the counts the runs before left (kept in the
      # cache folder), which must not be this very conversation's.
      runs=$(( ${runs:-0} + 1 )); ids $(( 100 + runs )) 128 > /tmp/more.txt
      timeout 120 $bin run -m $model --load-state /tmp/state-$d.bin --prompt-tokens @/tmp/more.txt -n 48 --ignore-eos \
        --device cuda --max-context $ctx $g --spec $spec 2>&1 | grep -E "memory|VRAM|host|prompt:|expert cache|speculation|rror|note: the"
      t
    done
  done
done
