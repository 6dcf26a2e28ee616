#!/usr/bin/env bash
# One device call: `strata parity forward_parity` (the whole GPU forward pass against the CPU, logits bit
# for bit, windows of every T = 1..8) on the tiny and small presets past 64 steps of sparse selection, and
# on the real-tool fixtures (f32, bf16, q8_0). Run from the repo root with the binary in .dev/strata.
source "$(dirname "$0")/presets.sh"
for kv in fp16 int8; do
  echo "== tiny, 140 tokens, $kv"; $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv $kv; echo "rc=$?"
done
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv"; $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
for f in fixtures/real/qwen4exp-real-{f32,bf16,q8_0}.gguf; do
  for kv in fp16 int8; do
    echo "== $f, 64 tokens, $kv"; $bin parity forward_parity $f --tokens 64 --kv $kv; echo "rc=$?"
  done
done
# One token's dense layouts tuned per shape on the model's own matrices (opt-in, STRATA_TUNE=1): the same bits.
echo "== small, 600 tokens, fp16, STRATA_TUNE=1"
STRATA_TUNE=1 $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
# Plain edges into the kernels that join the side lane (STRATA_PDL_JOIN=0): the same bits.
echo "== small, 600 tokens, fp16, STRATA_PDL_JOIN=0"
STRATA_PDL_JOIN=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
# The experts' down products and the MoE combination as two launches (STRATA_DOWN_COMBINE=0): the same bits.
echo "== moe_parity, STRATA_DOWN_COMBINE=0"; STRATA_DOWN_COMBINE=0 $bin parity moe_parity; echo "rc=$?"
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv, STRATA_DOWN_COMBINE=0"
  STRATA_DOWN_COMBINE=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
# The routing by one warp (STRATA_ROUTE=warp; the default is moe_route_block): the same ids and weights.
echo "== moe_parity, STRATA_ROUTE=warp"; STRATA_ROUTE=warp $bin parity moe_parity; echo "rc=$?"
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv, STRATA_ROUTE=warp"
  STRATA_ROUTE=warp $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
# Each block of a qdot product quantizing its own inputs (STRATA_QDOT_ONCE=0; the default quantizes once).
echo "== matvec_parity, STRATA_QDOT_ONCE=0"; STRATA_QDOT_ONCE=0 $bin parity matvec_parity; echo "rc=$?"
echo "== moe_parity, STRATA_QDOT_ONCE=0"; STRATA_QDOT_ONCE=0 $bin parity moe_parity; echo "rc=$?"
echo "== small, 600 tokens, fp16, STRATA_QDOT_ONCE=0"
STRATA_QDOT_ONCE=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
# The qdot dense kernels' weights asked for before grid_dep_wait (STRATA_DEFINES=QDOT_EARLY=1, opt-in).
echo "== matvec_parity, QDOT_EARLY=1"; STRATA_DEFINES=QDOT_EARLY=1 $bin parity matvec_parity; echo "rc=$?"
# The GDN conv in the qkv product's epilogue and the q/k norms in the delta kernel (STRATA_GDN_FUSE=1,
# opt-in): the same bits.
echo "== gdn_parity, STRATA_GDN_FUSE=1"; STRATA_GDN_FUSE=1 $bin parity gdn_parity; echo "rc=$?"
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv, STRATA_GDN_FUSE=1"
  STRATA_GDN_FUSE=1 $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
# The PLE gate by a block a stream (STRATA_PLE_SPLIT=1, opt-in): the same bits.
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv, STRATA_PLE_SPLIT=1"
  STRATA_PLE_SPLIT=1 $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
echo "== tiny, 140 tokens, fp16, STRATA_PLE_SPLIT=1"
STRATA_PLE_SPLIT=1 $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv fp16; echo "rc=$?"
# Weights asked into the L2 ahead (STRATA_AHEAD=hc,products,experts, opt-in): the same bits.
echo "== small, 600 tokens, fp16, STRATA_AHEAD=hc,products,experts"
STRATA_AHEAD=hc,products,experts $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
# The HC split kernels' first weights loaded before grid_dep_wait (STRATA_DEFINES=HC_EARLY=2, opt-in).
echo "== gr_parity --selftest, HC_EARLY=2"; STRATA_DEFINES=HC_EARLY=2 $bin parity gr_parity --selftest; echo "rc=$?"
echo "== small, 600 tokens, fp16, HC_EARLY=2"
STRATA_DEFINES=HC_EARLY=2 $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
# QUICK=1 (a short call after kernel work): the default path above and every matvec layout below;
# not the launch modes and the attention variants.
if [ -z "${QUICK:-}" ]; then
# Every op issued on its own instead of one graph a step (STRATA_GRAPH=0): the same bits.
echo "== tiny, 140 tokens, fp16, STRATA_GRAPH=0"
STRATA_GRAPH=0 $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv fp16; echo "rc=$?"
# Without the side lane of a step's graph (the shared expert, the GDN output gate and the indexer's
# selection then run in the main chain): the same bits.
for kv in fp16 int8; do
  echo "== small, 600 tokens, $kv, STRATA_SIDE=0"
  STRATA_SIDE=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
# Programmatic launches (the default) off: every kernel launched after the one before completes; the
# same bits, side lanes or none.
echo "== small, 600 tokens, fp16, STRATA_PDL=0"
STRATA_PDL=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv fp16; echo "rc=$?"
echo "== tiny, 140 tokens, int8, STRATA_PDL=0 STRATA_SIDE=0"
STRATA_PDL=0 STRATA_SIDE=0 $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv int8; echo "rc=$?"
# The experts' gate and up products and their activation as three launches (STRATA_GLU=0; one by default).
echo "== small, 600 tokens, int8, STRATA_GLU=0"
STRATA_GLU=0 $bin parity forward_parity $t/small.gguf --tokens 600 --kv int8; echo "rc=$?"
echo "== moe_parity, STRATA_GLU=0"; STRATA_GLU=0 $bin parity moe_parity; echo "rc=$?"
fi
# Each matvec layout forced for every type (the plan picks one per type; both must give the CPU's bits).
for layout in block warp staged multi wide stream; do
  echo "== tiny, 140 tokens, fp16, STRATA_MATVEC=$layout"
  STRATA_MATVEC=$layout $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv fp16; echo "rc=$?"
  echo "== moe_parity, STRATA_MATVEC=$layout"; STRATA_MATVEC=$layout $bin parity moe_parity; echo "rc=$?"
done
[ -n "${QUICK:-}" ] && exit 0
# Each attention-values variant forced (the plan picks one; each must give the CPU's bits).
for attend in tiles prefetch pipe; do
  kv=int8; [ $attend = pipe ] && kv=fp16  # the pipe kernel reads fp16 caches (others go to tiles)
  echo "== attn_parity, STRATA_ATTEND=$attend"; STRATA_ATTEND=$attend $bin parity attn_parity; echo "rc=$?"
  echo "== small, 600 tokens, $kv, STRATA_ATTEND=$attend"
  STRATA_ATTEND=$attend $bin parity forward_parity $t/small.gguf --tokens 600 --kv $kv; echo "rc=$?"
done
