# Sourced by real_fixture.sh and sweep_fixture.sh: sets `llama` (the vendored llama.cpp of the
# llama-cpp-python 0.3.36 source distribution, unpacked into $work) and makes $work/venv-tf (transformers
# 5.23, for the models and their logits) and $work/venv-conv (transformers 4.57, the converter's pin), both
# over the system's torch (installed on the CPU if missing).
llama="$("$here/llama_cpp_src.sh" "$work")"
for v in tf conv; do
  [ -d "$work/venv-$v" ] || python3 -m venv --system-site-packages "$work/venv-$v"
done
python3 -c "import torch" 2>/dev/null || pip install torch numpy safetensors
"$work/venv-tf/bin/pip" install -q "transformers==5.23.0"
"$work/venv-conv/bin/pip" install -q "transformers==4.57.6" sentencepiece "protobuf>=4.21.0,<5.0.0"
