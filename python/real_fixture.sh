#!/usr/bin/env bash
# Rebuilds fixtures/real/ with the real tools (a few minutes; needs the package registries, no GPU):
# the llama-cpp-python 0.3.36 source distribution (its vendored converter, gguf-py, Qwen2 vocabulary and
# templates), transformers 5.23 for the model and its logits, transformers 4.57 (the converter's pinned
# version) for the conversion, and torch on the CPU.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../fixtures/real}"
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work" "$out"

source "$here/fixture_env.sh"

"$work/venv-tf/bin/python" "$here/real_fixture.py" build "$llama" "$work/fixture"
"$work/venv-conv/bin/python" "$here/real_fixture.py" convert "$llama" "$work/fixture"
cp "$work"/fixture/qwen4exp-real-*.gguf "$work/fixture/expected.json" "$work/fixture/logits.f64" "$out/"
echo "fixtures written to $out"
