import re,sys,os
def entries(path):
    s=open(path).read()
    s=re.sub(r'\$L__\w+','L',s); s=re.sub(r'_ZZ\w+','Z',s); s=re.sub(r'// \.globl\s+\w+','',s)
    out={}
    parts=re.split(r'(?=\.visible \.entry )',s)
    for p in parts[1:]:
        name=re.match(r'\.visible \.entry (\w+)',p).group(1)
        out[name]=p.strip()
    return out
a_dir,b_dir=sys.argv[1],sys.argv[2]
same=diff=0; only_a=[]; only_b=[]; diffs=[]
for f in sorted(os.listdir(a_dir)):
    A=entries(os.path.join(a_dir,f)); B=entries(os.path.join(b_dir,f))
    for k in A:
        if k not in B: only_a.append(k); continue
        if A[k]==B[k]: same+=1
        else: diff+=1; diffs.append(k)
    only_b+= [k for k in B if k not in A]
print(f"kernels in both: {same} identical, {diff} differ {diffs}")
print(f"only at the first: {only_a}")
print(f"only at the second: {only_b}")
