#!/usr/bin/env bash
# One device call: the GPU cargo tests (crates/cuda/tests/gpu_parity.rs: every kernel family's parity and
# the whole pass on every converter-written fixture), ignored in CI, run here with --ignored. The device
# machine has no Rust: build the test binary on the build machine and carry it,
#   cargo test --release -p strata-cuda --test gpu_parity --no-run   # prints target/release/deps/gpu_parity-…
#   cp that .dev/gpu_parity && strip .dev/gpu_parity && xz -k .dev/gpu_parity
# The binary finds the fixtures by the path it was built at (/work/main here): that path is made to point
# at this checkout when it is missing.
set -uo pipefail
built=${STRATA_BUILT_AT:-/work/main}
[ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; }
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
export STRATA_REQUIRE_GPU=1  # the one test that runs without a device then insists on one
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
${GPU_TESTS:-.dev/gpu_parity} --include-ignored --test-threads 1
