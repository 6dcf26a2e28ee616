#!/usr/bin/env bash
# One device call: every parity tool (HC read in all its variants, QSA scores in every scorer, top-k in
# every kernel), then the HC and QSA benches with their torch peers. Run from the repo root with the
# stripped release binary carried in .dev/strata; output to $OUT/parity_all.log when OUT is set.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
$bin parity gr_parity --selftest; echo "gr_parity --selftest rc=$?"
$bin parity gr_multi_parity; echo "gr_multi_parity rc=$?"
$bin parity qsa_parity; echo "qsa_parity rc=$?"
$bin parity qsa_topk_parity --selftest; echo "qsa_topk_parity --selftest rc=$?"
$bin parity qsa_topk_parity 420000 8 20 524288 0; echo "qsa_topk_parity decode rc=$?"
$bin parity qsa_topk_parity 300000 5 20 524288 1; echo "qsa_topk_parity prompt rc=$?"
$bin bench fused_gr_bench 300 1 8 8; echo "fused_gr_bench rc=$?"
python3 bench/torch_hc_peer.py 300; echo "torch hc peer rc=$?"
for ctx in 32768 131072 524280; do
  QSA_BENCH_DECODE=1 $bin bench qsa_select_bench $ctx 8 50 524288; echo "qsa_select_bench $ctx rc=$?"
  python3 bench/torch_qsa_peer.py $ctx 50; echo "torch qsa peer $ctx rc=$?"
done
