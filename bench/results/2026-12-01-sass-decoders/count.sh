#!/usr/bin/env bash
# Instructions in the T = 1 inner loop (the loop with 16 FFMA: two chunks) of a matvec kernel, from the
# sm_90 SASS of the PTX the kernels_compile test writes. No GPU needed. Usage: count.sh PTX_DIR KERNEL...
# (ptxas from nvidia-cuda-nvcc 13.0, nvdisasm from nvidia-cuda-nvdisasm 13.2, both pip wheels.)
set -euo pipefail
ptx=$1; shift
ptxas=${STRATA_PTXAS:-ptxas}; dis=${NVDISASM:-nvdisasm}
$ptxas -arch=sm_90 -o /tmp/mv.cubin $ptx/matvec-sm90.ptx
$dis /tmp/mv.cubin > /tmp/mv.sass
for k in "$@"; do
  python3 - "$k" <<'PY'
import re, sys
name = sys.argv[1]
s = open('/tmp/mv.sass').read().split('\n')
i = [k for k, l in enumerate(s) if l.startswith('.text.' + name + ':')][0]
body = []
for l in s[i + 1:]:
    if l.startswith('.text.'): break
    body.append(l)
labels, loops = {}, []
for k, l in enumerate(body):
    m = re.match(r'^(\.L_x_\d+):', l)
    if m: labels[m.group(1)] = k
    m = re.search(r'BRA `\((\.L_x_\d+)\)', l)
    if m and m.group(1) in labels and labels[m.group(1)] < k:
        ins = [x for x in body[labels[m.group(1)]:k + 1] if x.strip().startswith('/*')]
        if sum('FFMA' in x for x in ins) == 16: loops.append(len(ins))
print(name, loops[0] if loops else '?')
PY
done
