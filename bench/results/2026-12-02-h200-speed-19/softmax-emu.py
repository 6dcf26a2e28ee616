# Replays attend_softmax's new indexing (a thread's chunks, its first chunk held, the parts' sum by warp 0)
# against the old one's order, float32; e = a stand-in function of (s - m), the same on both sides.
import numpy as np, random
f32=np.float32
def add(a,b): return f32(f32(a)+f32(b))
def sub(a,b): return f32(f32(a)-f32(b))
def ex(x): return f32(np.exp(np.float64(x)))
def butterfly(v):
    v=list(v)
    for off in [16,8,4,2,1]: v=[add(v[l], v[l^off]) for l in range(32)]
    return v[0]
def old(s):
    n=len(s); nch=(n+7)//8; s=list(s); m=f32(-np.inf)
    for j in range(n): m=max(m, s[j])
    parts=[]
    for c in range(nch):
        p=f32(0)
        for j in range(8*c, min(n,8*c+8)):
            e=ex(sub(s[j],m)); s[j]=e; p=add(p,e)
        parts.append(p)
    acc=[f32(0)]*32
    for lane in range(32):
        c=lane
        while c<nch: acc[lane]=add(acc[lane],parts[c]); c+=32
    return s, parts, butterfly(acc)
def new(s, B=256):
    n=len(s); nch=(n+7)//8; s=list(s); ninf=f32(-np.inf)
    def chunk(j0, lim): return [s[j0+i] if j0+i<lim else ninf for i in range(8)]
    first={}; ms=[]
    for tid in range(B):
        first[tid]=chunk(8*tid, n if tid<nch else 0); m=ninf
        for v in first[tid]: m=max(m,v)
        c=tid+B
        while c<nch:
            for v in chunk(8*c,n): m=max(m,v)
            c+=B
        ms.append(m)
    m=max(ms)
    parts=[None]*nch
    for tid in range(B):
        c=tid
        while c<nch:
            v=first[tid] if c==tid else chunk(8*c,n)
            ln=min(8,n-8*c); p=f32(0)
            for i in range(8):
                if i<ln:
                    e=ex(sub(v[i],m)); s[8*c+i]=e; p=add(p,e)
            parts[c]=p; c+=B
    acc=[f32(0)]*32
    for lane in range(32):
        c=lane
        while c<nch: acc[lane]=add(acc[lane],parts[c]); c+=32
    return s, parts, butterfly(acc)
random.seed(2)
for n in [1,5,8,9,255,2048,2051,2600,5000]:
    s=[f32(random.uniform(-20,20)) for _ in range(n)]
    a=old(s); b=new(s)
    assert [x.tobytes() for x in a[0]]==[x.tobytes() for x in b[0]] and [x.tobytes() for x in a[1]]==[x.tobytes() for x in b[1]] and a[2].tobytes()==b[2].tobytes(), n
    print("softmax ok", n)
