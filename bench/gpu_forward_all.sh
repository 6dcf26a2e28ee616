#!/usr/bin/env bash
# One device call: `strata parity forward_parity` (the whole GPU forward pass against the CPU, logits bit
# for bit, windows of every T = 1..8) on the tiny and small presets past 64 steps of sparse selection, and
# on the real-tool fixtures (f32, bf16, q8_0), then under each switch's other settings. Every check prints
# an `== …` heading, the tool's output (`OK …` or the first difference) and `rc=…`. Run from the repo root
# with the binary in .dev/strata. PARTS (default all four) picks sections: `defaults` (the default path),
# `switches` (run-time switches), `defines` (STRATA_DEFINES variants: each compiles every kernel file
# again, about a minute on the H200) and `layouts` (each matvec layout forced).
source "$(dirname "$0")/presets.sh"
parts=" ${PARTS:-defaults switches defines layouts} "
want() { [[ $parts == *" $1 "* ]]; }
if want defaults; then
model tiny "" fp16 int8
model small "" fp16 int8
for f in fixtures/real/qwen4exp-real-{f32,bf16,q8_0}.gguf; do
  for kv in fp16 int8; do check "$f, 64 tokens, $kv" "" $bin parity forward_parity $f --tokens 64 --kv $kv; done
done
fi
if want switches; then
# Plain edges into the kernels that join the side lane: the same bits.
model small STRATA_PDL_JOIN=0 fp16
# The experts' down products and the MoE combination as two launches: the same bits.
tool moe_parity STRATA_DOWN_COMBINE=0
model small STRATA_DOWN_COMBINE=0 fp16 int8
# Each block of a qdot product quantizing its own inputs (the default quantizes once).
tool matvec_parity STRATA_QDOT_ONCE=0
tool moe_parity STRATA_QDOT_ONCE=0
model small STRATA_QDOT_ONCE=0 fp16
# The one-token dense products' rows read from global memory after grid_dep_wait (the default stages them
# in shared memory before it): the same bits.
tool matvec_parity STRATA_QDOT_STAGE=0
tool gdn_parity STRATA_QDOT_STAGE=0
model small STRATA_QDOT_STAGE=0 fp16 int8
# The GDN conv as its own kernel (gdn_conv_norm), not in the qkv product's epilogue: the same bits.
tool gdn_parity STRATA_GDN_FUSE=0
model small STRATA_GDN_FUSE=0 fp16 int8
# The experts' input quantized by a launch of its own, not in the router's (the default): the same bits.
tool moe_parity STRATA_ROUTER_QUANTIZE=0
model small STRATA_ROUTER_QUANTIZE=0 fp16
# The GDN output quantized by a launch of its own, not in the delta kernel (the default): the same bits.
tool gdn_parity STRATA_GDN_QUANTIZE=0
model small STRATA_GDN_QUANTIZE=0 int8
# The PLE gate by one warp a stream (ple_gate_z): the same bits.
model small STRATA_PLE_SPLIT=0 fp16
model tiny STRATA_PLE_SPLIT=0 int8
# The attention's q, k and v products each quantizing x in a launch of its own (the default quantizes it
# once for the three): the same bits.
model small STRATA_QKV_ONCE=0 fp16 int8
# norm_rope then kv_store (the default appends the k and v cells in norm_rope's launch): the same bits.
tool attn_parity STRATA_KV_FUSE=0
model small STRATA_KV_FUSE=0 fp16 int8
# QUICK=1 (a shorter check after kernel work) leaves out the launch modes below.
if [ -z "${QUICK:-}" ]; then
  # Every op issued on its own instead of one graph a step: the same bits.
  model tiny STRATA_GRAPH=0 fp16
  # Without the side lane of a step's graph (the shared expert, the GDN output gate and the indexer's
  # selection then run in the main chain): the same bits.
  model small STRATA_SIDE=0 fp16 int8
  # Programmatic launches (the default) off: every kernel launched after the one before completes; the
  # same bits, side lanes or none.
  model small STRATA_PDL=0 fp16
  model tiny "STRATA_PDL=0 STRATA_SIDE=0" int8
  # The experts' gate and up products and their activation as three launches (one by default).
  model small STRATA_GLU=0 int8
  tool moe_parity STRATA_GLU=0
fi
fi
if want defines; then
# The HC split up kernel's first weights loaded before grid_dep_wait too (HC_EARLY=2).
check "gr_parity --selftest" STRATA_DEFINES=HC_EARLY=2 $bin parity gr_parity --selftest
model small STRATA_DEFINES=HC_EARLY=2 fp16
# Neither (HC_EARLY=0; the default, 1, loads the down kernel's first weights early): the same bits.
check "gr_parity --selftest" STRATA_DEFINES=HC_EARLY=0 $bin parity gr_parity --selftest
model small STRATA_DEFINES=HC_EARLY=0 fp16
# The head's warps asking for the block's whole span at its start (QDOT_ROW_AHEAD=0; the default asks for
# each warp's next row): the same bits.
tool matvec_parity STRATA_DEFINES=QDOT_ROW_AHEAD=0
model small STRATA_DEFINES=QDOT_ROW_AHEAD=0 fp16
fi
if want layouts; then
# Each matvec layout forced for every type (the plan picks one per type; both must give the CPU's bits).
for layout in block warp staged wide stream; do
  model tiny STRATA_MATVEC=$layout fp16
  tool moe_parity STRATA_MATVEC=$layout
done
fi
