#!/usr/bin/env bash
# One device call (issue: the file's rms epsilon): every parity tool (each takes the norms' epsilon 1e-6 and
# 1e-5 in turn: crates/cuda/src/tools/parity.rs EPSILONS), then `forward_parity` (the whole GPU pass against the
# CPU, logits and MTP drafts bit for bit, windows T = 1..8) on the sweep of real geometries
# (fixtures/sweep/: eps 1e-5 and 1e-6), on the tiny and small presets written with --rms-eps 1e-5, and the
# default checks of gpu_forward_all.sh (eps 1e-6). Every check prints `== …`, the tool's output and `rc=…`.
# Run from the repo root with the binary in .dev/strata.
source "$(dirname "$0")/presets.sh"
start=$SECONDS
for name in gr_parity gr_multi_parity qsa_parity matvec_parity gdn_parity moe_parity attn_parity sample_parity; do
  case $name in gr_parity) check "$name --selftest" "" $bin parity $name --selftest ;; *) tool $name "" ;; esac
done
check "qsa_topk_parity --selftest" "" $bin parity qsa_topk_parity --selftest
source "$(dirname "$0")/gpu_sweep.sh"
$bin synth --preset tiny --rms-eps 1e-5 -o $t/tiny5.gguf >/dev/null
$bin synth --preset small --rms-eps 1e-5 -o $t/small5.gguf >/dev/null
for kv in fp16 int8; do
  check "tiny, eps 1e-5, 140 tokens, $kv" "" $bin parity forward_parity $t/tiny5.gguf --tokens 140 --kv $kv
  check "small, eps 1e-5, 600 tokens, $kv" "" $bin parity forward_parity $t/small5.gguf --tokens 600 --kv $kv
done
# The other kernels that take eps, each behind its switch, at eps 1e-5: ple_gate_z (one warp a stream),
# norm_rope then kv_store, gdn_conv_norm with the plain gdn_delta kernels, the GDN output quantized apart.
for vars in STRATA_PLE_SPLIT=0 STRATA_KV_FUSE=0 STRATA_GDN_FUSE=0 STRATA_GDN_QUANTIZE=0; do
  check "small, eps 1e-5, 600 tokens, fp16" $vars $bin parity forward_parity $t/small5.gguf --tokens 600 --kv fp16
done
check "eps5-gdn-8l, 96 tokens, fp16" "STRATA_PLE_SPLIT=0 STRATA_KV_FUSE=0 STRATA_GDN_FUSE=0" \
  $bin parity forward_parity fixtures/sweep/eps5-gdn-8l/model.gguf --tokens 96 --kv fp16
echo "eps part: $((SECONDS - start)) s"
# The checks of gpu_forward_all.sh at the released model's eps: its defaults and (QUICK) its switches.
PARTS="defaults switches" QUICK=1 source "$(dirname "$0")/gpu_forward_all.sh"
echo "all: $((SECONDS - start)) s"
