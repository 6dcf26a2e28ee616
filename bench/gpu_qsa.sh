#!/usr/bin/env bash
# One device call for QSA selection: parity, then the bench and its torch peer at 32K, 131K, 420K, 524K.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
$bin parity qsa_parity; echo "qsa_parity rc=$?"
$bin parity qsa_topk_parity --selftest; echo "qsa_topk_parity --selftest rc=$?"
for ctx in 32768 131072 420000 524280; do
  QSA_BENCH_DECODE=1 $bin bench qsa_select_bench $ctx 8 50 524288; echo "bench rc=$?"
  python3 bench/torch_qsa_peer.py $ctx 50; echo "torch rc=$?"
done
