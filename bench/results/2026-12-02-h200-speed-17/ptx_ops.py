# Usage: ptx_ops.py A.ptx B.ptx KERNEL…: for each KERNEL, whether its float operations (and shuffles) come
# in the same order in both builds, and which opcodes' counts differ.
import collections, re, sys


def kernel(path, name):
    s = open(path).read()
    i = s.index(".entry " + name + "(")
    return s[i:s.index("\n}\n", i)]


def opcodes(body):
    for line in body.split("\n"):
        m = re.match(r"(@!?%p\d+ )?([a-z][\w.]*)\s", line.strip())
        if m and not line.strip().startswith("//"):
            yield m.group(2)


def floating(op):
    return re.search(r"\.(f32|f64|f16)\b", op) or op.startswith(("ex2", "fma", "rcp", "sqrt", "div", "shfl"))


a, b = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    oa, ob = list(opcodes(kernel(a, name))), list(opcodes(kernel(b, name)))
    fa, fb = [o for o in oa if floating(o)], [o for o in ob if floating(o)]
    ca, cb = collections.Counter(oa), collections.Counter(ob)
    diff = {k: (ca[k], cb[k]) for k in sorted(set(ca) | set(cb)) if ca[k] != cb[k]}
    print(f"{name}: float ops {len(fa)} / {len(fb)}, {'the same order' if fa == fb else 'DIFFER'}; "
          f"opcode counts {'the same' if not diff else 'differ: ' + str(diff)}")
