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

source "$here/fixture_env.sh"

"$work/venv-tf/bin/python" "$here/sweep_fixture.py" build "$llama" "$work/sweep" "$@"
"$work/venv-conv/bin/python" "$here/sweep_fixture.py" convert "$llama" "$work/sweep" "$@"
for d in "$work"/sweep/*/; do
  name=$(basename "$d")
  mkdir -p "$out/$name"
  cp "$d/model.gguf" "$d/expected.json" "$d/logits.f64" "$out/$name/"
done
echo "fixtures written to $out"
