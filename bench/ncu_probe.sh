#!/usr/bin/env bash
# One device call: Nsight Compute's counters for the kernels of real decode steps of the full synthetic
# model (each launch timed alone, clocks left alone): time, DRAM and issue-slot use, occupancy,
# instructions, and why the warps stalled (long scoreboard: waiting on global memory; short scoreboard:
# shared memory; MIO/LG throttle: the load queues full; wait and math throttle: instruction latency and
# pipes; not selected: issue-bound). This tells a kernel bound by memory from one bound by instruction
# issue or by latency. Usage: [WINDOW=1] bench/ncu_probe.sh [REGEX] [COUNT] (default: the products, HC, MoE and GDN
# kernels, 60 launches after the prompt's). Output: $OUT/ncu-probe.txt and a table on stdout. Run from the
# repo root with the binary in .dev/strata.
set -uo pipefail
source "$(dirname "$0")/full_model.sh"
out=${OUT:-/tmp}
regex=${1:-'matvec_|gr_|moe_|gdn_'}
count=${2:-60}
args="run -m $model --prompt-tokens 1 -n 3 --ignore-eos --device cuda --max-context 64"
# WINDOW=1: the kernels of windows of 8 instead (a prompt of 24 tokens: three windows; the kernels a
# verify window of 8 runs), SKIP then counted from the first window's launches.
[ -n "${WINDOW:-}" ] && args="run -m $model --prompt-tokens $(seq -s, 1 24) -n 1 --ignore-eos --device cuda --max-context 64"
$bin $args >/dev/null 2>&1  # the plan made and the kernels compiled first, outside the profile
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,launch__registers_per_thread
M=$M,launch__grid_size,launch__block_size
for s in long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle not_selected \
  barrier no_instruction; do
  M=$M,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
# The first SKIP launches are left out; the prompt's one token runs the kernels a decode step runs.
STRATA_GRAPH=0 timeout ${NCU_TIMEOUT:-420} ncu --clock-control none -k "regex:$regex" --launch-skip ${SKIP:-30} \
  -c $count --metrics $M --csv $bin $args 2>/dev/null | grep '^"' > $out/ncu-probe.csv
echo "ncu rc=${PIPESTATUS[0]}, $(wc -l < $out/ncu-probe.csv) rows"
python3 - "$out/ncu-probe.csv" <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.OrderedDict()
for r in rows:
    key = (r["ID"], r["Kernel Name"].split("(")[0], r["Grid Size"], r["Block Size"])
    v = r["Metric Value"].replace(",", "")
    if r["Metric Name"] == "gpu__time_duration.sum":  # to µs, whatever unit ncu chose
        v = str(float(v) * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3}.get(r["Metric Unit"], 1.0))
    by.setdefault(key, {})[r["Metric Name"]] = v
def f(m, k):
    try:
        return float(m.get(k, "nan"))
    except ValueError:
        return float("nan")
stalls = ["long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "wait", "math_pipe_throttle",
          "not_selected", "barrier", "no_instruction"]
print("| kernel | grid | µs | DRAM % | issue % | warps % | top stalls (cycles per issue) |")
print("|---|---|---:|---:|---:|---:|---|")
seen = set()
for (i, name, grid, block), m in by.items():
    if (name, grid) in seen:
        continue
    seen.add((name, grid))
    st = [(f(m, f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"), s) for s in stalls]
    st = sorted((v, s) for v, s in st if v == v)[::-1][:3]  # v == v: not NaN (a metric ncu did not give)
    top = ", ".join(f"{s} {v:.2f}" for v, s in st)
    print(f"| {name} | {grid}x{block} | {f(m, 'gpu__time_duration.sum'):.2f} | "
          f"{f(m, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} | "
          f"{f(m, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):.0f} | "
          f"{f(m, 'sm__warps_active.avg.pct_of_peak_sustained_active'):.0f} | {top} |")
PY
