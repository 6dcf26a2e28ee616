#!/usr/bin/env bash
# One device call for speculation on the GPU (docs/SPECULATION.md): the GDN parity test (rewind slots),
# the speculation tests on the device (crates/engine/tests/speculate.rs, `gpu` module), then the built-in
# model's runs with --spec 0..7 on the GPU against the CPU's text, with each run's acceptance line.
# Carries .dev/{strata,gpu_parity,speculate}.xz (built on the build machine, as bench/gpu_tests.sh says).
# Every stage has a time limit and the log goes to $OUT/spec.log as it is written.
set -uo pipefail
log=${OUT:-/tmp}/spec.log
exec > >(tee "$log") 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata .dev/gpu_parity .dev/speculate 2>/dev/null
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
echo "== GDN parity (with rewind slots) $(date +%T)"
GPU_TESTS=".dev/gpu_parity gdn" timeout ${T_PARITY:-120} bash bench/gpu_tests.sh
echo "== speculation tests on the GPU $(date +%T)"
GPU_TESTS=".dev/speculate gpu::" timeout ${T_SPEC:-240} bash bench/gpu_tests.sh
echo "== the built-in model: --spec N on the GPU against the CPU's plain text $(date +%T)"
prompt="The secret of getting ahead is"
for temp in 0 0.8; do
  timeout 60 .dev/strata run --device cpu --spec 0 -n ${N:-96} --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/cpu.txt 2>/dev/null
  for n in 0 1 3 7 auto; do
    timeout 60 .dev/strata run --device cuda --spec $n -n ${N:-96} --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/gpu.txt 2>/tmp/gpu.err
    same=$(cmp -s /tmp/cpu.txt /tmp/gpu.txt && echo same || echo DIFFERENT)
    echo "temp $temp spec $n: text $same as the CPU's plain run; $(grep -E '^speculation' /tmp/gpu.err | head -1); $(grep -E 'tok/s' /tmp/gpu.err | tail -1)"
  done
done
echo "== done $(date +%T)"
