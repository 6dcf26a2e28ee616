#!/usr/bin/env bash
# Two device calls after kernel work, so that the engine bench that follows times a binary known to give
# the CPU's bits: PART=1 every parity tool (each family), `strata run` on both devices, checkpoints across
# devices and the whole pass (gpu_forward_all.sh) on the default path and under the run-time switches;
# PART=2 the whole pass under the STRATA_DEFINES variants and each forced matvec layout, then the matvec
# bench. No PART: both, one after the other. QUICK=1 leaves out the launch modes; with it each part takes
# 5–7 minutes on the H200. The logs go to /tmp/verify and, packed as one file (a device call returns only a
# few), to $OUT/verify.tgz when OUT is set. Run from the repo root with the binary in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
out=/tmp/verify
mkdir -p $out
trap '[ -n "${OUT:-}" ] && tar czf "$OUT/verify.tgz" -C /tmp verify' EXIT
part=${PART:-12}
if [[ $part == *1* ]]; then
for p in "gr_parity --selftest" gr_multi_parity matvec_parity gdn_parity moe_parity attn_parity qsa_parity sample_parity \
  "qsa_topk_parity --selftest"; do
  $bin parity $p > $out/${p%% *}.log 2>&1; echo "$p rc=$? ($(grep -E '^OK|FAIL' $out/${p%% *}.log | tail -1))"
done
bash bench/gpu_run.sh > $out/run.log 2>&1
echo "strata run cpu vs cuda: $(grep -c ': SAME' $out/run.log) SAME, $(grep -c 'DIFFER\|failed' $out/run.log) not"
grep 'DIFFER\|failed' $out/run.log | head
bash bench/gpu_checkpoint.sh > $out/checkpoint.log 2>&1
echo "checkpoints: $(grep -c ': SAME' $out/checkpoint.log) SAME, $(grep -c 'DIFFER\|failed' $out/checkpoint.log) not"
fi
# The whole pass: part 1 its default path and run-time switches, part 2 the rest.
sections=
[[ $part == *1* ]] && sections+=" defaults switches"
[[ $part == *2* ]] && sections+=" defines layouts"
PARTS="$sections" bash bench/gpu_forward_all.sh > $out/forward_all-$part.log 2>&1
log=$out/forward_all-$part.log
echo "forward_all ($sections ): $(grep -c '^OK' $log) OK, $(grep -c 'rc=[1-9]' $log) failed"
grep -B2 'rc=[1-9]' $log | head -20
if [[ $part == *2* ]]; then
  $bin bench matvec_bench 30 > $out/matvec_bench.log 2>&1; echo "matvec_bench rc=$?"; cat $out/matvec_bench.log
fi
