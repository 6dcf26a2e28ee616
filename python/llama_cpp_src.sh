#!/usr/bin/env bash
# Unpacks the llama-cpp-python 0.3.36 source distribution (its vendored llama.cpp: the converter, gguf-py,
# Qwen2's vocabulary and the templates) into DIR and prints the vendored llama.cpp's path.
# Usage: python/llama_cpp_src.sh DIR. Needs the package index (PyPI's simple API) and curl.
set -euo pipefail
dir="$1"
src="$dir/llama_cpp_python-0.3.36/vendor/llama.cpp"
if [ ! -d "$src" ]; then
  mkdir -p "$dir"
  index="${PIP_INDEX_URL:-https://pypi.org/simple}"
  url=$(curl -fsSL "${index%/}/llama-cpp-python/" | grep -o 'href="[^"]*llama_cpp_python-0\.3\.36\.tar\.gz[^"]*"' \
        | head -1 | sed 's/^href="//; s/"$//; s/#.*//')
  [ -n "$url" ] || { echo "llama-cpp-python 0.3.36's source archive is not on $index" >&2; exit 1; }
  curl -fsSL -o "$dir/llama_cpp_python-0.3.36.tar.gz" "$url"
  tar xzf "$dir/llama_cpp_python-0.3.36.tar.gz" -C "$dir"
fi
echo "$src"
