#!/usr/bin/env bash
# One device call: every kernel of one decode step of the full synthetic model, each timed alone by Nsight
# Compute (gpu__time_duration; clocks left alone), then summed by name. The sum is the step's pure kernel
# time; set beside the graph step's wall time (bench/engine.sh), the difference is what the gaps between
# kernels cost, which tells kernel work (faster kernels) from launch latency (fewer, fused kernels).
# Kernels run one launch each (STRATA_GRAPH=0): their times are the same in a graph. The run: a prompt of
# one token, then 2 decode steps; a step is the launches after one argmax up to the next.
# Output: $OUT/ncu-step.csv (raw) and the summary on stdout. Run from the repo root with the binary in
# .dev/strata.
set -uo pipefail
source "$(dirname "$0")/full_model.sh"
out=${OUT:-/tmp}
args="run -m $model --prompt-tokens 1 -n 3 --ignore-eos --device cuda --max-context 64"
$bin $args >/dev/null 2>&1  # the plan made and the kernels compiled first, outside the profile
STRATA_GRAPH=0 timeout ${NCU_TIMEOUT:-420} ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  --launch-count ${KCOUNT:-4000} $bin $args 2>/dev/null | grep '^"' > $out/ncu-step.csv
echo "ncu rc=${PIPESTATUS[0]}, $(wc -l < $out/ncu-step.csv) rows"
python3 - "$out/ncu-step.csv" <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
ks = [(r["Kernel Name"].split("(")[0], float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1.0))
      for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]
marks = [i for i, (n, _) in enumerate(ks) if n == "argmax"]
if len(marks) < 2:
    sys.exit(f"only {len(marks)} argmax launches among {len(ks)} kernels: no whole decode step profiled")
for a, b in zip(marks, marks[1:]):
    step = ks[a + 1:b + 1]
    by = collections.defaultdict(lambda: [0, 0.0])
    for n, us in step:
        by[n][0] += 1
        by[n][1] += us
    total = sum(us for _, us in step)
    print(f"decode step: {len(step)} kernels, {total / 1e3:.3f} ms of kernel time (each alone)")
    for n, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"  {n:34s} {us:9.1f} µs {100 * us / total:5.1f}%  {c:4d} × {us / c:6.2f} µs")
PY
