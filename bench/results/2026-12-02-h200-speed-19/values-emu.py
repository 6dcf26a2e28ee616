# Emulates attend_values_body's and attend_softmax's indexing (not the hardware), float32 with fma via float64,
# against the contract order (CPU weighted_sum / ops::dot::sum), to catch index mistakes before a device call.
import numpy as np, random
f32=np.float32
def fma(a,b,c): return f32(np.float64(a)*np.float64(b)+np.float64(c))
def add(a,b): return f32(f32(a)+f32(b))
def butterfly(v):
    v=list(v)
    for off in [16,8,4,2,1]:
        v=[add(v[l], v[l^off]) for l in range(32)]
    return v[0]
def contract_dot(e, col):
    lanes=[f32(0)]*32
    for c in range(0,(len(e)+7)//8):
        s=f32(0)
        for j in range(8*c, min(len(e),8*c+8)): s=fma(e[j], col[j], s)
        lanes[c%32]=add(lanes[c%32], s)
    return butterfly(lanes)
def kernel_values(e_heads, V, heads_live, THREADS=256, HEADS=4, DIMS=8):
    n=len(V); nch=(n+7)//8; OUT=HEADS*DIMS; WARPS=THREADS//32; OUT_PER=OUT//WARPS
    total=[[f32(0)]*32 for _ in range(OUT)]  # [output][lane]
    for base in range(0,nch,THREADS):
        part={}
        for tid in range(THREADS):
            c=base+tid
            if c>=nch: continue
            j0=8*c; ln=min(8,n-j0)
            s=[f32(0)]*OUT
            for i in range(8):
                if i<ln:
                    for o in range(OUT):
                        k=o//DIMS; ev=e_heads[k][j0+i] if k<heads_live else f32(0)
                        s[o]=fma(ev, V[j0+i][o%DIMS], s[o])
            part[tid]=s
        for warp in range(WARPS):
            for q in range(OUT_PER):
                for lane in range(32):
                    i=lane
                    while i<THREADS and base+i<nch:
                        total[warp*OUT_PER+q][lane]=add(total[warp*OUT_PER+q][lane], part[i][warp*OUT_PER+q]); i+=32
    return [butterfly(total[o]) for o in range(OUT)]
random.seed(1)
for n in [1,7,9,64,300,2051,2600]:
    V=[[f32(random.uniform(-1,1)) for _ in range(8)] for _ in range(n)]
    E=[[f32(random.random()) for _ in range(n)] for _ in range(4)]
    for live in [4,2]:
        got=kernel_values(E,V,live)
        for o in range(32):
            k=o//8
            if k>=live: continue
            want=contract_dot(E[k],[V[j][o%8] for j in range(n)])
            assert got[o].tobytes()==want.tobytes(), (n,live,o,got[o],want)
    print("values ok", n)
