#!/usr/bin/env bash
# One device call: host-memory experts on the card (docs/PLACEMENT.md, "On the GPU"), bit for bit against
# the CPU: the MoE parity tool (each geometry whole and placed), the whole pass on every fixture at the
# default, with STRATA_HOST_EXPERTS=3 (three experts a block on the card, the host computing the rest;
# the cache re-ranked every 8 passes) and with the cache re-ranked after every pass (STRATA_CACHE_EVERY=1:
# swaps copied while the next pass runs), with stream slots, with guess slots (at the mixer, a stage
# earlier, and both: ops/moe/guess.rs), and the mailbox test. Carry .dev/gpu_parity.xz (bench/gpu_tests.sh says how). Log: $OUT/parity-host-experts.log.
set -uo pipefail
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/gpu_parity
built=${STRATA_BUILT_AT:-/work/main}  # the test binary finds its fixtures where it was built
[ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; }
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
log=${OUT:-/tmp}/parity-host-experts.log
for run in "moe_equals_the_cpu" "the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_CACHE_EVERY=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2,STRATA_ASK_MISSES_ONLY=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=3,STRATA_STREAM_SLOTS=2,STRATA_DEFINES=MISS_STREAM_WIDE=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=4,STRATA_STREAM_SLOTS=1,STRATA_GUESS_SLOTS=2,STRATA_GUESS_EARLY=0 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=4,STRATA_STREAM_SLOTS=1,STRATA_GUESS_SLOTS=2 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "STRATA_HOST_EXPERTS=5,STRATA_STREAM_SLOTS=1,STRATA_GUESS_SLOTS=2,STRATA_GUESS_MIXER_SLOTS=1 the_whole_pass_equals_the_cpu_on_every_fixture" \
  "host_experts_reach_the_card_with_their_bits"; do
  set -- $run
  setting=""
  [ $# -eq 2 ] && { setting=${1//,/ }; shift; }
  r=$(env $setting STRATA_REQUIRE_GPU=1 timeout 300 .dev/gpu_parity --include-ignored --test-threads 1 --exact "$1" 2>&1)
  echo "$r" >> "$log"
  echo "$setting $1: $(echo "$r" | grep -E '^test result|panicked' | head -3)"
done
