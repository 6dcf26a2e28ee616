#!/usr/bin/env bash
# Whether this checkout's kernels compile to the same sm_90 machine code as those of an earlier revision (one
# whose kernels passed the parity tools on a card): each kernel both have, its SASS compared instruction by
# instruction (branch labels and the compiler's numbering of its internal functions aside). Where every
# kernel of the default path is the same, a change that touched only other kernels, macros that are off, or
# host code needs no device time to show the same bits. No GPU: the PTX from the kernels_compile test
# (NVRTC and ptxas from the CUDA wheels, as in .ci/run), nvdisasm from the nvidia-cuda-nvdisasm wheel.
# Usage: STRATA_PTXAS=… NVDISASM=… LD_LIBRARY_PATH=<nvrtc lib> bench/sass_same.sh REV
set -euo pipefail
rev=${1:?usage: bench/sass_same.sh REV}
ptxas=${STRATA_PTXAS:-ptxas}
dis=${NVDISASM:-nvdisasm}
root=$(git rev-parse --show-toplevel)
# The kernels_compile test writes its PTX where STRATA_PTX_DIR names.
# Each checkout builds in a target folder of its own (sharing one, cargo took the other's test as fresh).
ptx_of() {  # checkout folder, target folder, destination
  rm -rf "$3"
  touch "$1"/crates/cuda/kernels/*  # the kernels are include_str!'s: make sure the test is rebuilt from them
  (cd "$1" && STRATA_PTX_DIR="$3" CARGO_TARGET_DIR="$2" cargo test -q --release -p strata-cuda \
    --test kernels_compile >/dev/null 2>&1) || { echo "kernels_compile failed in $1"; exit 1; }
  ls "$3"/*-sm90.ptx >/dev/null 2>&1 || { echo "no PTX written (is STRATA_PTXAS set?)"; exit 1; }
}
work=$(mktemp -d)
[ -z "${KEEP:-}" ] || echo "keeping $work"
trap 'git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
git -C "$root" worktree add -q "$work/old" "$rev"
ptx_of "$work/old" "$root/target/sass-same" "$work/ptx-old"
ptx_of "$root" "$root/target" "$work/ptx-new"
for ptx in "$work"/ptx-old/*-sm90.ptx; do
  f=$(basename "$ptx")
  [ -f "$work/ptx-new/$f" ] || { echo "${f%-sm90.ptx}: not in this checkout"; continue; }
  "$ptxas" -arch=sm_90 -o "$work/a.cubin" "$ptx" && "$dis" "$work/a.cubin" > "$work/a.sass"
  "$ptxas" -arch=sm_90 -o "$work/b.cubin" "$work/ptx-new/$f" && "$dis" "$work/b.cubin" > "$work/b.sass"
  python3 - "$work/a.sass" "$work/b.sass" "${f%-sm90.ptx}" <<'PY'
import re, sys
def kernels(path):
    out, name = {}, None
    for line in open(path):
        m = re.match(r'^\.text\.(\S+):', line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = re.search(r'/\*[0-9a-f]{4}\*/\s+(.*?);', line)
        if name and m:
            ins = re.sub(r'\.L_x_\d+', 'L', m.group(1))
            out[name].append(re.sub(r'\$__internal_\d+_', '$__internal_N_', ins))
    return out
old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
both = [k for k in old if k in new]
differ = [k for k in both if old[k] != new[k]]
added = [k for k in new if k not in old]
print(f"{sys.argv[3]}: {len(both) - len(differ)} of {len(both)} kernels the same SASS"
      + (f"; DIFFER: {' '.join(differ)}" if differ else "")
      + (f"; {len(added)} new" if added else "")
      + (f"; {len(old) - len(both)} gone" if len(old) > len(both) else ""))
PY
done
