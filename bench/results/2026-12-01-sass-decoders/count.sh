#!/usr/bin/env bash
# Instructions in the T = 1 inner loop (the loop with 16 FFMA: two chunks) of a matvec kernel, from the
# sm_90 SASS of the PTX the kernels_compile test writes. No GPU needed. Usage: count.sh PTX_DIR KERNEL...
# The loops are found by bench/sass_loops.sh (ptxas from nvidia-cuda-nvcc 13.0, nvdisasm from
# nvidia-cuda-nvdisasm 13.2, both pip wheels); this prints the first loop of 16 FFMAs of each kernel.
set -euo pipefail
ptx=$1; shift
bash "$(dirname "$0")/../../sass_loops.sh" "$ptx/matvec-sm90.ptx" "$@" | python3 -c '
import re, sys
for line in sys.stdin:
    name = line.split(":")[0]
    loops = [int(n) for n, f in re.findall(r"(\d+) instructions / (\d+) FFMA", line) if f == "16"]
    print(name, loops[0] if loops else "?")
'
