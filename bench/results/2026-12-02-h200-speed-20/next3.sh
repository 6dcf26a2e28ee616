#!/usr/bin/env bash
# For the session after speed-20 (call 3 of 3, about 9 minutes): the binary and settings that won call 2
# (as arguments: the binary, then its settings, e.g. `.dev/strata-combo STRATA_GRAPH_SPLIT=48`): the whole
# pass's switches (QUICK=1: the part speed-20's call 6 did not reach, and the rest), then its 4K figure.
# Merge the winning branches into main before recording the figure as main's.
exec > >(tee ${OUT:-/tmp}/next3.log) 2>&1
b=${1:-.dev/strata}; shift || true
[ $# -gt 0 ] && export "$@"
date -u
PARTS=switches QUICK=1 STRATA_BIN=$b timeout 300 bash bench/gpu_forward_all.sh > ${OUT:-/tmp}/forward_switches.log 2>&1
log=${OUT:-/tmp}/forward_switches.log
echo "forward_all (switches, QUICK=1): $(grep -c '^OK' $log) OK, $(grep -c 'rc=[1-9]' $log) failed, $(grep -c '^==' $log) started"
grep -B2 'rc=[1-9]' $log | head -20
date -u
STRATA_BIN=$b PROFILES= REPEAT=3 timeout 200 bash bench/engine.sh 4096
date -u
