#!/usr/bin/env bash
# One device call after kernel work: every parity tool (each family, each forced variant, `strata run` on
# both devices, checkpoints across devices, the whole pass on the presets and the converter's fixtures)
# and then the matvec bench, so that the engine bench that follows times a binary known to give the CPU's
# bits (QUICK=1: the whole pass only on the default path and each forced matvec layout). The logs go to
# /tmp/verify and, packed as one file (a device call returns only a few), to $OUT/verify.tgz when OUT is set. Run from the repo root with the binary in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
out=/tmp/verify
mkdir -p $out
trap '[ -n "${OUT:-}" ] && tar czf "$OUT/verify.tgz" -C /tmp verify' EXIT
for p in "gr_parity --selftest" gr_multi_parity matvec_parity gdn_parity moe_parity attn_parity qsa_parity sample_parity \
  "qsa_topk_parity --selftest"; do
  $bin parity $p > $out/${p%% *}.log 2>&1; echo "$p rc=$? ($(grep -E '^OK|FAIL' $out/${p%% *}.log | tail -1))"
done
bash bench/gpu_run.sh > $out/run.log 2>&1
echo "strata run cpu vs cuda: $(grep -c ': SAME' $out/run.log) SAME, $(grep -c 'DIFFER\|failed' $out/run.log) not"
grep 'DIFFER\|failed' $out/run.log | head
bash bench/gpu_checkpoint.sh > $out/checkpoint.log 2>&1
echo "checkpoints: $(grep -c ': SAME' $out/checkpoint.log) SAME, $(grep -c 'DIFFER\|failed' $out/checkpoint.log) not"
bash bench/gpu_forward_all.sh > $out/forward_all.log 2>&1
echo "forward_all: $(grep -c '^OK' $out/forward_all.log) OK, $(grep -c 'rc=[1-9]' $out/forward_all.log) failed"
grep -B2 'rc=[1-9]' $out/forward_all.log | head -20
$bin bench matvec_bench 30 > $out/matvec_bench.log 2>&1; echo "matvec_bench rc=$?"; cat $out/matvec_bench.log
