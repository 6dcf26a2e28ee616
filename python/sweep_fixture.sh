#!/usr/bin/env bash
# Rebuilds fixtures/sweep/ with the real tools (a few minutes; needs the package registries, no GPU): the
# same packages as real_fixture.sh (the llama-cpp-python 0.3.36 source distribution's converter,
# transformers 5.23 for the models and their logits, transformers 4.57 for the conversion, torch on the
# CPU). NAMES (optional) picks models of python/sweep_fixture.py's SPECS.
# Usage: python/sweep_fixture.sh [OUT [NAME…]]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../fixtures/sweep}"
shift || true
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work" "$out"

llama="$("$here/llama_cpp_src.sh" "$work")"

for v in tf conv; do
  [ -d "$work/venv-$v" ] || python3 -m venv --system-site-packages "$work/venv-$v"
done
python3 -c "import torch" 2>/dev/null || pip install torch numpy safetensors
"$work/venv-tf/bin/pip" install -q "transformers==5.23.0"
"$work/venv-conv/bin/pip" install -q "transformers==4.57.6" sentencepiece "protobuf>=4.21.0,<5.0.0"

"$work/venv-tf/bin/python" "$here/sweep_fixture.py" build "$llama" "$work/sweep" "$@"
"$work/venv-conv/bin/python" "$here/sweep_fixture.py" convert "$llama" "$work/sweep" "$@"
for d in "$work"/sweep/*/; do
  name=$(basename "$d")
  mkdir -p "$out/$name"
  cp "$d/model.gguf" "$d/expected.json" "$d/logits.f64" "$out/$name/"
done
echo "fixtures written to $out"
