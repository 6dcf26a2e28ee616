#!/usr/bin/env bash
# One device call: Nsight Compute's counters (time, DRAM and issue-slot use, occupancy, instructions, warp
# stalls) for the decode step's large matrix-vector kernels in `matvec_bench` and the HC read kernels in
# `fused_gr_bench`, to tell a kernel bound by memory from one bound by instruction issue. Output to
# $OUT/ncu-*.txt. Clocks are left alone (--clock-control none). Run from the repo root with the binary in
# .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
out=${OUT:-/tmp}
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
M=$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
M=$M,launch__registers_per_thread,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active
M=$M,lts__throughput.avg.pct_of_peak_sustained_elapsed
$bin bench matvec_bench 2 >/dev/null 2>&1  # the start-up plan made and cached first, outside the profile
timeout 150 ncu --clock-control none -k regex:'matvec_(q4_k|q6_k|q8_0|bf16)_staged|matvec_q2_0_gather_warp' -c 40 \
  --metrics $M --section WarpStateStats $bin bench matvec_bench 1 >$out/ncu-matvec.txt 2>&1
echo "ncu matvec rc=$?"
timeout 100 ncu --clock-control none -k regex:'gr_' -c 12 --metrics $M --section WarpStateStats \
  $bin bench fused_gr_bench 2 1 1 1 >$out/ncu-gr.txt 2>&1
echo "ncu gr rc=$?"
