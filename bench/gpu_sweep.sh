#!/usr/bin/env bash
# One device call: `forward_parity` (the GPU pass against the CPU, bit for bit, windows T = 1..8) on each
# model of the sweep of real geometries (fixtures/sweep/), f32 and fp16 KV, int8 where its cells are whole
# groups of 64, and fp16 with the GDN conv as its own kernel (STRATA_GDN_FUSE=0). Part of bench/gpu_eps.sh,
# alone for a sweep rebuilt since. Run from the repo root with the binary in .dev/strata.
source "$(dirname "$0")/presets.sh"
for d in fixtures/sweep/*/; do
  kvs="f32 fp16 int8"
  case $d in *eps5-tied-4l*|*eps6-tied-12l*) kvs="f32 fp16" ;; esac
  for kv in $kvs; do
    check "$d, 96 tokens, $kv" "" $bin parity forward_parity $d/model.gguf --tokens 96 --kv $kv
  done
  check "$d, 96 tokens, fp16" STRATA_GDN_FUSE=0 $bin parity forward_parity $d/model.gguf --tokens 96 --kv fp16
done
