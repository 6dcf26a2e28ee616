# The last decode step's kernels from ncu's CSV (gpu__time_duration.sum, each kernel alone, caches warm):
# per kernel name, then per family. Usage: zcat ncu.csv.gz | python3 breakdown.py
import csv, sys, collections
rows = list(csv.DictReader(l for l in sys.stdin if l.startswith('"')))
starts = [i for i, x in enumerate(rows) if "embed" in x["Kernel Name"]]
step = rows[starts[-1]:]
us = lambda x: float(x["Metric Value"].replace(",", "")) / 1e3
total = sum(us(x) for x in step)
print(f"last step: {len(step)} kernels, {total:.1f} µs summed (each alone)")
by = collections.defaultdict(lambda: [0.0, 0])
for x in step:
    by[x["Kernel Name"]][0] += us(x); by[x["Kernel Name"]][1] += 1
for k, (v, n) in sorted(by.items(), key=lambda e: -e[1][0]):
    print(f"  {k:32s} {v:8.1f} µs {100*v/total:5.1f}%  {n:4d} × {v/n:6.2f} µs")
fam = lambda k: ("HC" if k.startswith("gr_") else "quantize" if k.endswith("_quantize") else
                 "experts" if "gather" in k else "dense products" if k.startswith(("qdot_", "matvec_")) else
                 "GDN" if k.startswith("gdn_") else "MoE routing/act" if k.startswith("moe_") else
                 "attention/QSA" if k.startswith(("qsa_", "attend_", "norm_rope", "kv_store")) else "other")
f = collections.defaultdict(lambda: [0.0, 0])
for k, (v, n) in by.items():
    f[fam(k)][0] += v; f[fam(k)][1] += n
print("by family:")
for k, (v, n) in sorted(f.items(), key=lambda e: -e[1][0]):
    print(f"  {k:20s} {v:8.1f} µs {100*v/total:5.1f}%  {n:4d} kernels")
