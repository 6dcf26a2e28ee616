#!/usr/bin/env bash
# One device call for speculation on the GPU (docs/SPECULATION.md): the GPU parity tests, the
# speculation tests on the device (crates/engine/tests/speculate.rs, `gpu` module), then the built-in
# model's runs with --spec 0..7 on the GPU against the CPU's text, with each run's acceptance line.
# Carries .dev/{strata,gpu_parity,speculate}.xz (built on the build machine, as bench/gpu_tests.sh says).
set -uo pipefail
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata .dev/gpu_parity .dev/speculate 2>/dev/null
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
echo "== GPU parity tests"
GPU_TESTS=.dev/gpu_parity bash bench/gpu_tests.sh 2>&1 | grep -E "^test |test result|panicked|FAILED|assert" | tail -40
echo "== speculation tests (CPU and GPU)"
GPU_TESTS=.dev/speculate bash bench/gpu_tests.sh 2>&1 | grep -E "^test |test result|panicked|FAILED|assert|left|right" | tail -40
echo "== the built-in model: --spec N on the GPU against the CPU's plain text"
prompt="The secret of getting ahead is"
for temp in 0 0.8; do
  .dev/strata run --device cpu --spec 0 -n ${N:-96} --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/cpu.txt 2>/dev/null
  for n in 0 1 2 3 4 5 6 7 auto; do
    .dev/strata run --device cuda --spec $n -n ${N:-96} --temp $temp --seed 5 --ignore-eos -p "$prompt" > /tmp/gpu.txt 2>/tmp/gpu.err
    same=$(cmp -s /tmp/cpu.txt /tmp/gpu.txt && echo same || echo DIFFERENT)
    echo "temp $temp spec $n: text $same as the CPU's plain run; $(grep -E '^speculation' /tmp/gpu.err | head -1); $(grep -E 'tok/s' /tmp/gpu.err | tail -1)"
  done
done
