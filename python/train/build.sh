#!/usr/bin/env bash
# Rebuilds the built-in default model, models/fortunes.gguf, and its evidence. Run from the repository root
# on a Linux machine with apt-get, the package index and curl; the training step needs an NVIDIA GPU (on the
# H200 it took 3.5 minutes of training in a call of about 4), every other step runs on a CPU.
#
#   python/train/build.sh [WORK]     # WORK (default .dev/train): where everything is made
#
# Steps: the corpus (Debian's `fortunes`), the tokenizer and token streams, training (skipped when
# WORK/run/hf exists: a run made on a GPU machine can be copied there), the untrained baseline, the
# converter (f32), strata's logits against transformers', the experts quantized to IQ4_NL and the other
# matrices to Q8_0, and strata's held-out perplexity of the trained and the untrained model.
set -euo pipefail
root="$(pwd)"
work="$(realpath -m "${1:-.dev/train}")"
mkdir -p "$work"
strata="${STRATA_BIN:-$root/target/release/strata}"
[ -x "$strata" ] || cargo build --release -p strata-cli

# 1. The text: Debian 12's `fortunes` (BSD licence), pinned.
if [ ! -f "$work/data/train.txt" ]; then
  (cd "$work" && apt-get download fortunes=1:1.99.1-7.3)
  dpkg-deb -x "$work"/fortunes_1%3a1.99.1-7.3_all.deb "$work/deb"
  python3 python/train/corpus.py "$work/deb/usr/share/games/fortunes" "$work/data"
fi

# 2. Python: transformers 5.23 (the model) and 4.57 (the converter's pin), torch, the vendored converter.
for v in tf conv; do [ -d "$work/venv-$v" ] || python3 -m venv "$work/venv-$v"; done
"$work/venv-tf/bin/pip" install -q torch numpy safetensors "transformers==5.23.0"
"$work/venv-conv/bin/pip" install -q torch numpy safetensors "transformers==4.57.6" sentencepiece \
  "protobuf>=4.21.0,<5.0.0"
llama="$(python/llama_cpp_src.sh "$work")"
[ -f "$work/data/train.u16" ] || "$work/venv-tf/bin/python" python/train/train.py tokenizer "$work/data"

# 3. Training (GPU). Elsewhere: copy WORK/data to a GPU machine, run the line below there, and copy its
#    output folder back to WORK/run.
if [ ! -d "$work/run/hf" ]; then
  "$work/venv-tf/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
    echo "no GPU here: run 'python3 python/train/train.py train DATA RUN 3.5' on one, then copy RUN to $work/run" >&2
    exit 1
  }
  "$work/venv-tf/bin/python" python/train/train.py train "$work/data" "$work/run" 3.5 | tee "$work/train.log"
fi
[ -d "$work/untrained/hf" ] || "$work/venv-tf/bin/python" python/train/train.py untrained "$work/data" "$work/untrained"

# 4. The files: f32 from the converter plus the MTP block, checked against transformers, then quantized.
for m in run untrained; do
  [ -f "$work/$m-f32.gguf" ] || "$work/venv-conv/bin/python" python/train/convert.py "$llama" "$work/$m" "$work/$m-f32.gguf"
  "$strata" gguf quantize "$work/$m-f32.gguf" "$work/$m.gguf" --experts IQ4_NL --matrices Q8_0
done
python3 python/train/compare.py "$strata" "$work/run-f32.gguf" "$work/run" | tee "$work/compare.txt"
cp "$work/run.gguf" models/fortunes.gguf

# 5. Held-out perplexity as strata computes it, on the files as shipped.
python3 -c 'import numpy as np, sys; print(" ".join(map(str, np.fromfile(sys.argv[1], dtype="<u2"))))' \
  "$work/data/heldout.u16" > "$work/heldout.ids"
for m in run untrained; do
  echo "$m: $("$strata" perplexity -m "$work/$m.gguf" --device cpu --drafts --tokens "@$work/heldout.ids" | tr "\n" " ")"
done | tee "$work/perplexity.txt"
