#!/usr/bin/env bash
# For the session after speed-20 (call 1 of 3, about 8 minutes). Carry [".dev"] with four stripped
# binaries (rebuild them if their commits moved; the md5 sums in the README say which is which):
#   .dev/strata         main at 308f0e8: e80fc5d's kernels, a token's PLE rows read with their cache misses
#                       overlapped, their time said (host only; full_model.sh writes the model with it)
#   .dev/strata-old     e80fc5d (64a83f4's build: the binary of speed-20's 198.4 tok/s)
#   .dev/strata-stream  branch stream-kept (08ee2c9): main + the indexer's stream scorer holding a whole
#                       key, launch-bounded to 256 threads (32 keys a block for Q > 4)
#   .dev/strata-pinned  branch pinned-read (8987989): main + small reads (the token) through pinned memory
# First the whole pass's switches that speed-20's call 6 did not reach (all of the section, QUICK=1), then
# the branches' checks (the stream scorer also with the attention main lane's two opt-ins).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
PARTS=switches QUICK=1 timeout 280 bash bench/gpu_forward_all.sh > ${OUT:-/tmp}/forward_switches.log 2>&1
log=${OUT:-/tmp}/forward_switches.log
echo "forward_all (switches, QUICK=1): $(grep -c '^OK' $log) OK, $(grep -c 'rc=[1-9]' $log) failed, $(grep -c '^==' $log) started"
grep -B2 'rc=[1-9]' $log | head -20
date -u
STRATA_BIN=.dev/strata-stream timeout 200 bash bench/gpu_candidates.sh "" "STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" \
  | grep -E '^==|^rc=|^candidate|FAIL' | tail -40
date -u
STRATA_BIN=.dev/strata-pinned timeout 100 bash bench/gpu_candidates.sh "" | grep -E '^candidate|FAIL' | tail
date -u
