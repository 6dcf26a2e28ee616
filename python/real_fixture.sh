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

llama="$("$here/llama_cpp_src.sh" "$work")"

for v in tf conv; do
  [ -d "$work/venv-$v" ] || python3 -m venv --system-site-packages "$work/venv-$v"
done
python3 -c "import torch" 2>/dev/null || pip install torch numpy safetensors
"$work/venv-tf/bin/pip" install -q "transformers==5.23.0"
"$work/venv-conv/bin/pip" install -q "transformers==4.57.6" sentencepiece "protobuf>=4.21.0,<5.0.0"

"$work/venv-tf/bin/python" "$here/real_fixture.py" build "$llama" "$work/fixture"
"$work/venv-conv/bin/python" "$here/real_fixture.py" convert "$llama" "$work/fixture"
cp "$work"/fixture/qwen4exp-real-*.gguf "$work/fixture/expected.json" "$work/fixture/logits.f64" "$out/"
echo "fixtures written to $out"
