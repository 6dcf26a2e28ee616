#!/usr/bin/env bash
# Speed-21 call 3: main after the merge of `combo` with the three defaults turned on (the step in two
# graphs at 48 ops, the attention's input quantized once, the k and v append in norm_rope's launch):
# `strata run` against the CPU (each case also with STRATA_GRAPH_SPLIT=0), the whole pass's switches
# (QUICK=1, now with STRATA_QKV_ONCE=0 and STRATA_KV_FUSE=0), then the 4K figure.
exec > >(tee ${OUT:-/tmp}/call3.log) 2>&1
b=${1:-.dev/strata}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
md5sum $b; date -u
STRATA_BIN=$b timeout 120 bash bench/gpu_run.sh > ${OUT:-/tmp}/run.log 2>&1
echo "strata run cpu vs cuda: $(grep -c ': SAME' ${OUT:-/tmp}/run.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/run.log) not"
grep 'DIFFER\|failed' ${OUT:-/tmp}/run.log | head
date -u
PARTS=switches QUICK=1 STRATA_BIN=$b timeout 270 bash bench/gpu_forward_all.sh > ${OUT:-/tmp}/forward_switches.log 2>&1
log=${OUT:-/tmp}/forward_switches.log
echo "forward_all (switches, QUICK=1): $(grep -c '^OK' $log) OK, $(grep -c 'rc=[1-9]' $log) failed, $(grep -c '^==' $log) started"
grep -B2 'rc=[1-9]' $log | head -20
date -u
STRATA_BIN=$b PROFILES= REPEAT=3 timeout 190 bash bench/engine.sh 4096
date -u
