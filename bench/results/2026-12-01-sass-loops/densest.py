# The fewest instructions that hold N consecutive FFMAs in a kernel's SASS (nvdisasm output): how tightly
# an unrolled fma chain is packed. Usage: python3 densest.py SASS_FILE KERNEL N
import re, sys
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = open(path).read().split('\n')
i = [k for k, l in enumerate(s) if l.startswith('.text.' + name + ':')][0]
body = []
for l in s[i + 1:]:
    if l.startswith('.text.'): break
    body.append(l)
ins = [l for l in body if l.strip().startswith('/*')]
at = [k for k, l in enumerate(ins) if 'FFMA' in l]
best = min(at[a + n - 1] - at[a] + 1 for a in range(len(at) - n + 1))
print(f"{name}: {n} consecutive FFMAs within {best} instructions")
