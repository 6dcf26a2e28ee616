#!/usr/bin/env bash
# One device call: card info, the parity tools, then the HC read bench. Run from the repo root with the
# stripped release binary carried in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
t0=$(date +%s.%N)
$bin parity gr_parity --selftest; echo "gr_parity rc=$?"
t1=$(date +%s.%N)
$bin parity gr_multi_parity; echo "gr_multi_parity rc=$?"
$bin bench fused_gr_bench 300 1 8 8; echo "fused_gr_bench rc=$?"
echo "first gr_parity took $(python3 -c "print(round($t1-$t0,2))") s (NVRTC compile included)"
python3 bench/torch_hc_peer.py 300; echo "torch peer rc=$?"
