#!/usr/bin/env bash
# For the session after speed-20 (call 1 of 3, about 6 minutes). Carry [".dev"] with two stripped
# binaries (rebuild them if their commits moved):
#   .dev/strata         main (e80fc5d's kernels; full_model.sh writes the model with it)
#   .dev/strata-stream  branch stream-kept (e44b13d): main + the indexer's stream scorer holding a whole
#                       key, launch-bounded to 256 threads (32 keys a block for Q > 4)
# First the whole pass's switches that speed-20's call 6 did not reach (all of the section, QUICK=1), then
# the stream scorer's checks, alone and with the attention main lane's two opt-ins.
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
PARTS=switches QUICK=1 timeout 280 bash bench/gpu_forward_all.sh > ${OUT:-/tmp}/forward_switches.log 2>&1
log=${OUT:-/tmp}/forward_switches.log
echo "forward_all (switches, QUICK=1): $(grep -c '^OK' $log) OK, $(grep -c 'rc=[1-9]' $log) failed, $(grep -c '^==' $log) started"
grep -B2 'rc=[1-9]' $log | head -20
date -u
STRATA_BIN=.dev/strata-stream timeout 240 bash bench/gpu_candidates.sh "" "STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" \
  | grep -E '^==|^rc=|^candidate|FAIL' | tail -40
date -u
