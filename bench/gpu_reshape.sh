#!/usr/bin/env bash
# One device call for the reshaping of crates/cuda (floors, one settings value, the losing variants
# retired): the first start on a bare card and a later one, the GPU cargo tests, and every parity tool
# with the binary from before the reshaping and after it. Carry .dev/strata.xz (after),
# .dev/strata-before.xz and .dev/gpu_parity.xz (the test binary, see bench/gpu_tests.sh); the working
# tree's limit takes one strata binary a call, and the machine keeps the unpacked ones while it stays warm,
# so each part runs for the binaries there (BINS, default both).
set -uo pipefail
for b in strata strata-before gpu_parity; do
  [ -f .dev/$b.xz ] && unxz -kf .dev/$b.xz && chmod +x .dev/$b
done
bins=""
for b in ${BINS:-strata-before strata}; do [ -x .dev/$b ] && bins="$bins $b"; done
echo "binaries:$bins"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# 1. First start: an empty kernel and plan cache, and an empty driver JIT cache, so nothing is kept
# from an earlier call on this machine; then a later start with both caches as the first left them.
# The binary from before the reshaping first, for comparison.
for b in $bins; do
  fresh=$(mktemp -d)
  for start in first later; do
    s=$(date +%s%N)
    STRATA_CACHE=$fresh/strata CUDA_CACHE_PATH=$fresh/nv .dev/$b run --device cuda -p "Hello" -n 4 2>&1 \
      | grep -E "^(note|kernels|device|decode|prompt)"
    echo "$b, $start start: $(( ($(date +%s%N) - s) / 1000000 )) ms wall (the whole run of 4 tokens, built-in model)"
  done
done
# 2. The GPU cargo tests, every family's parity and the whole pass.
[ -x .dev/gpu_parity ] && bash bench/gpu_tests.sh 2>&1 | tail -16
# 3. Every parity tool, before and after.
export STRATA_CACHE=/tmp/strata-cache
for b in $bins; do
  for t in "gr_parity --selftest" gr_multi_parity qsa_parity matvec_parity gdn_parity moe_parity attn_parity \
    sample_parity "qsa_topk_parity --selftest"; do
    out=$(.dev/$b parity $t 2>&1); rc=$?
    echo "$b parity $t: $(tail -1 <<< "$out") (rc=$rc)"
  done
done
# 4. The whole pass against the CPU (presets, real fixtures; the run-time switches, each layout forced).
[ -x .dev/strata ] && [ "${FORWARD:-1}" = 1 ] || exit 0
mkdir -p ${OUT:-/tmp}
STRATA_BIN=.dev/strata PARTS="defaults switches layouts" QUICK=1 bash bench/gpu_forward_all.sh > ${OUT:-/tmp}/forward_all.log 2>&1
echo "forward_all: $(grep -c '^rc=0' ${OUT:-/tmp}/forward_all.log) checks rc=0, $(grep -c '^rc=[1-9]' ${OUT:-/tmp}/forward_all.log) failed"
grep -B3 '^rc=[1-9]' ${OUT:-/tmp}/forward_all.log | head -40
