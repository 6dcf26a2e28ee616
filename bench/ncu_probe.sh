export STRATA_CACHE=/tmp/strata-cache
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed
.dev/strata bench matvec_bench 2 > /dev/null 2>&1  # plan cached first
timeout 150 ncu --clock-control none -k regex:'matvec_(q4_k|q6_k|q8_0|bf16)_staged|matvec_q2_0_gather_warp' -c 40 --metrics $M --section WarpStateStats .dev/strata bench matvec_bench 1 > $OUT/ncu-matvec.txt 2>&1; echo ncu1 rc=$?
timeout 100 ncu --clock-control none -k regex:'gr_' -c 12 --metrics $M --section WarpStateStats .dev/strata bench fused_gr_bench 2 1 1 1 > $OUT/ncu-gr.txt 2>&1; echo ncu2 rc=$?
