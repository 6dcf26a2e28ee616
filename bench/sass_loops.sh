#!/usr/bin/env bash
# The loops of a kernel's sm_90 SASS: instructions and FFMAs of each backward branch's body, from the PTX
# the kernels_compile test writes where STRATA_PTX_DIR names (ptxas from nvidia-cuda-nvcc 13.0, nvdisasm from nvidia-cuda-nvdisasm 13.2,
# both pip wheels). No GPU needed. Usage: loops.sh PTX_FILE KERNEL...
set -euo pipefail
ptx=$1; shift
${STRATA_PTXAS:-ptxas} -arch=sm_90 -o /tmp/loops.cubin "$ptx"
${NVDISASM:-nvdisasm} /tmp/loops.cubin > /tmp/loops.sass
for k in "$@"; do
  python3 - "$k" <<'PY'
import re, sys
name = sys.argv[1]
s = open('/tmp/loops.sass').read().split('\n')
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
        loops.append(f"{len(ins)} instructions / {sum('FFMA' in x for x in ins)} FFMA")
ins = [x for x in body if x.strip().startswith('/*')]
print(f"{name}: {len(ins)} instructions in all; loops: {'; '.join(loops)}")
PY
done
