// The arithmetic contract on the GPU (docs/ARITHMETIC.md): the same operations in the same order as
// crates/model/src/ops. Compiled with --fmad=false, no fast math, IEEE division and square root; every
// fused multiply-add is written as __fmaf_rn.

typedef unsigned short bf16_t;
typedef unsigned int u32;

#define WARP 32
#define CHUNK 8

// fp16 bits to f32 exactly as strata_gguf's f16_to_f32: every fp16 value is an f32 value, so the card's
// conversion instruction gives the same bits (one instruction, no branches; only a NaN's payload may
// differ, and parity counts any two NaNs as equal). The host build spells it out.
__device__ __forceinline__ float f16_bits_to_f32(unsigned short hb) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hb));
    return f;
#endif
    const u32 h = hb, sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    if (em >= 0x7c00u) return __uint_as_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em >= 0x0400u) return __uint_as_float(sign | ((em << 13) + ((127u - 15u) << 23)));
    return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)em, 5.9604644775390625e-8f)));  // 2^-24
}

// f32 to fp16 bits, round to nearest even (PTX cvt.rn; the `half` crate's f16::from_f32 for every non-NaN).
__device__ __forceinline__ unsigned short f32_to_f16_bits(float f) {
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    // The host build of the decoder test: the compiler's own conversion, also round to nearest even.
    const _Float16 v = (_Float16)f;
    unsigned short h;
    memcpy(&h, &v, 2);
    return h;
#endif
}

__device__ __forceinline__ float bf16_to_f32(bf16_t h) { return __uint_as_float(((u32)h) << 16); }

// A small integer (|v| < 2^22) as f32, the same value as (float)v: the bits of 1.5·2^23 + v hold v in the
// low mantissa, and subtracting 1.5·2^23 is exact. An integer add and a float subtract, both at the full
// rate, where a conversion instruction issues at a fraction of it (the decoders convert every weight).
__device__ __forceinline__ float small_int_f32(int v) { return __fsub_rn(__int_as_float(0x4B400000 + v), 12582912.0f); }

// (x & mask) | bits in one logic instruction (lop3; the compiler makes two of it).
__device__ __forceinline__ u32 and_or(u32 x, u32 mask, u32 bits) {
#ifdef __CUDA_ARCH__
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "r"(mask), "r"(bits));
    return r;
#else
    return (x & mask) | bits;
#endif
}

// The order key of a score (ops/topk.rs score_key): s + 0 (−0 → +0), NaN ranks as 0; unsigned order is
// numeric order.
__device__ __forceinline__ u32 score_key(float s) {
    if (isnan(s)) s = 0.0f;
    u32 b = __float_as_uint(__fadd_rn(s, 0.0f));
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The butterfly over the warp's lane totals: offsets 16, 8, 4, 2, 1; every lane ends with the same bits.
__device__ __forceinline__ float warp_butterfly(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// e^x (ops/act.rs exp): reduction by ln 2 in two parts, degree-7 Taylor by fma, exact powers of two.
__device__ __forceinline__ float s_pow2(int e) { return __uint_as_float((u32)(e + 127) << 23); }

__device__ float s_exp(float x) {
    if (isnan(x)) return x;
    if (x > 88.8f) return __int_as_float(0x7f800000);
    if (x < -104.0f) return 0.0f;
    const float LOG2E = __uint_as_float(0x3fb8aa3bu);
    const float LN2_HI = __uint_as_float(0x3f317200u);
    const float LN2_LO = __uint_as_float(0x35bfbe8eu);
    float k = rintf(__fmul_rn(x, LOG2E));
    float r = __fmaf_rn(-k, LN2_LO, __fmaf_rn(-k, LN2_HI, x));
    const u32 C[8] = {0x3f800000u, 0x3f800000u, 0x3f000000u, 0x3e2aaaabu,
                      0x3d2aaaabu, 0x3c088889u, 0x3ab60b61u, 0x39500d01u};
    float p = __uint_as_float(C[7]);
#pragma unroll
    for (int i = 6; i >= 0; --i) p = __fmaf_rn(p, r, __uint_as_float(C[i]));
    int ki = (int)k;
    if (ki > 127) return __fmul_rn(__fmul_rn(p, s_pow2(127)), s_pow2(ki - 127));
    if (ki < -126) return __fmul_rn(__fmul_rn(p, s_pow2(-126)), s_pow2(ki + 126));
    return __fmul_rn(p, s_pow2(ki));
}

// ln x (ops/act.rs ln): x = (1 + f)·2^k with 1 + f in [√½, √2); s = f/(2 + f), z = s², R = z·P(z).
__device__ float s_ln(float x) {
    if (isnan(x) || x < 0.0f) return __uint_as_float(0x7fc00000u);
    if (x == 0.0f) return __int_as_float(0xff800000);
    if (isinf(x)) return x;
    int bias = 0;
    if (x < __uint_as_float(0x00800000u)) {  // subnormal: ×2^24, exact
        x = __fmul_rn(x, 16777216.0f);
        bias = -24;
    }
    const u32 bits = __float_as_uint(x);
    int k = (int)((bits >> 23) & 0xff) - 126 + bias;
    float m = __uint_as_float((bits & 0x807fffffu) | (126u << 23));
    if (m < __uint_as_float(0x3f3504f3u)) {
        m = __fmul_rn(m, 2.0f);
        k -= 1;
    }
    const float f = __fsub_rn(m, 1.0f);
    const float s = __fdiv_rn(f, __fadd_rn(2.0f, f));
    const float z = __fmul_rn(s, s);
    const u32 C[6] = {0x3f2aaaabu, 0x3ecccccdu, 0x3e924925u, 0x3e638e39u, 0x3e3a2e8cu, 0x3e1d89d9u};
    float p = __uint_as_float(C[5]);
#pragma unroll
    for (int i = 4; i >= 0; --i) p = __fmaf_rn(p, z, __uint_as_float(C[i]));
    const float r = __fmul_rn(z, p);
    const float hfsq = __fmul_rn(__fmul_rn(0.5f, f), f);
    const float kf = (float)k;
    const float LN2_HI = __uint_as_float(0x3f317200u), LN2_LO = __uint_as_float(0x35bfbe8eu);
    return __fsub_rn(__fmul_rn(kf, LN2_HI),
                     __fsub_rn(__fsub_rn(hfsq, __fmaf_rn(s, __fadd_rn(hfsq, r), __fmul_rn(kf, LN2_LO))), f));
}

// ln(1 + t) for t ≥ 0 (ops/act.rs ln1p).
__device__ __forceinline__ float s_ln1p(float t) {
    const float u = __fadd_rn(1.0f, t);
    return u == 1.0f ? t : __fdiv_rn(__fmul_rn(s_ln(u), t), __fsub_rn(u, 1.0f));
}

// softplus (ops/act.rs): x above 20, else ln1p(e^x).
__device__ __forceinline__ float s_softplus(float x) { return x > 20.0f ? x : s_ln1p(s_exp(x)); }

__device__ __forceinline__ float s_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, s_exp(-x))); }
__device__ __forceinline__ float s_silu(float x) { return __fmul_rn(x, s_sigmoid(x)); }
__device__ __forceinline__ float s_rsqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

// Eight BF16 of a 16-byte aligned chunk, as f32.
__device__ __forceinline__ void load8_bf16(const bf16_t* p, float* w) {
    uint4 q = *reinterpret_cast<const uint4*>(p);
    u32 v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        w[2 * i] = __uint_as_float(v[i] << 16);
        w[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
    }
}

// Eight f32 of a 32-byte aligned chunk (two 16-byte loads; global or shared memory).
__device__ __forceinline__ void load8_f32(const float* p, float* x) {
    const float4* q = reinterpret_cast<const float4*>(p);
    const float4 a = q[0], b = q[1];
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w; x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}

__device__ __forceinline__ void store8_f32(float* p, const float* x) {
    float4* q = reinterpret_cast<float4*>(p);
    q[0] = make_float4(x[0], x[1], x[2], x[3]);
    q[1] = make_float4(x[4], x[5], x[6], x[7]);
}

// One chunk's sum: s = fma(w[e], x[e], s) from +0 in element order.
__device__ __forceinline__ float chunk_dot(const float* w, const float* x) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < CHUNK; ++e) s = __fmaf_rn(w[e], x[e], s);
    return s;
}

// One warp's dot of a weight row of n values (F32 when kind is 1, BF16 when 2) with x, by the reduction
// contract: lane L dots its chunks L, L + 32, … (8 fmas each from +0) and adds them in order, then the
// butterfly; every lane gets the sum: the same sums as matvec.cu's row dot of that row. In two steps, for
// a kernel that may start while the one before still runs (programmatic launches): `fetch` loads lane L's
// first ROW_EARLY chunks of the row into registers, before grid_dep_wait (a weight does not depend on the
// kernels before), and `dot` then loads the chunks of x, all at once, and sums. Chunks past the first
// ROW_EARLY a lane (rows over 8·32·ROW_EARLY values) are loaded in `dot`.
#define ROW_EARLY 10
struct EarlyRow {
    uint4 raw[ROW_EARLY][2];  // a chunk as loaded: F32 in two 16-byte halves, BF16 in the first
    __device__ __forceinline__ static void load(const void* w, int kind, int c, uint4* r) {
        const uint4* p = reinterpret_cast<const uint4*>(w) + (kind == 1 ? 2 * c : c);
        r[0] = p[0];
        if (kind == 1) r[1] = p[1];
    }
    __device__ __forceinline__ static void values(const uint4* r, int kind, float* w8) {
        if (kind == 1) {
            const float4 a = *reinterpret_cast<const float4*>(&r[0]), b = *reinterpret_cast<const float4*>(&r[1]);
            w8[0] = a.x; w8[1] = a.y; w8[2] = a.z; w8[3] = a.w; w8[4] = b.x; w8[5] = b.y; w8[6] = b.z; w8[7] = b.w;
        } else {
            const u32 v[4] = {r[0].x, r[0].y, r[0].z, r[0].w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w8[2 * i] = __uint_as_float(v[i] << 16);
                w8[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
            }
        }
    }
    __device__ __forceinline__ void fetch(const void* w, int kind, int n) {
        const int lane = threadIdx.x % WARP;
#pragma unroll
        for (int i = 0; i < ROW_EARLY; ++i) {
            const int c = lane + WARP * i;
            if (c < n / CHUNK) load(w, kind, c, raw[i]);
        }
    }
    __device__ __forceinline__ float dot(const void* w, int kind, const float* x, int n) const {
        const int lane = threadIdx.x % WARP;
        float x8[ROW_EARLY][CHUNK];
#pragma unroll
        for (int i = 0; i < ROW_EARLY; ++i) {
            const int c = lane + WARP * i;
            if (c < n / CHUNK) load8_f32(x + CHUNK * c, x8[i]);
        }
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < ROW_EARLY; ++i) {
            const int c = lane + WARP * i;
            if (c < n / CHUNK) {
                float w8[CHUNK];
                values(raw[i], kind, w8);
                acc = __fadd_rn(acc, chunk_dot(w8, x8[i]));
            }
        }
        for (int c = lane + WARP * ROW_EARLY; c < n / CHUNK; c += WARP) {
            uint4 r[2];
            load(w, kind, c, r);
            float w8[CHUNK], xv[CHUNK];
            values(r, kind, w8);
            load8_f32(x + CHUNK * c, xv);
            acc = __fadd_rn(acc, chunk_dot(w8, xv));
        }
        return warp_butterfly(acc);
    }
};

// Two rows' dots with the same x (each as EarlyRow's: the same sums), in one loop: both rows' loads are in
// flight together, so two dots cost about one dot's round trips to memory, not two.
__device__ __forceinline__ void warp_row_dot2(const void* w1, const void* w2, int kind, const float* x, int n,
                                              float* d1, float* d2) {
    const int lane = threadIdx.x % WARP;
    float a1 = 0.0f, a2 = 0.0f;
#pragma unroll 4
    for (int c = lane; c < n / CHUNK; c += WARP) {
        float u8[CHUNK], v8[CHUNK], x8[CHUNK];
        if (kind == 1) {
            load8_f32((const float*)w1 + CHUNK * c, u8);
            load8_f32((const float*)w2 + CHUNK * c, v8);
        } else {
            load8_bf16((const bf16_t*)w1 + CHUNK * c, u8);
            load8_bf16((const bf16_t*)w2 + CHUNK * c, v8);
        }
        load8_f32(x + CHUNK * c, x8);
        a1 = __fadd_rn(a1, chunk_dot(u8, x8));
        a2 = __fadd_rn(a2, chunk_dot(v8, x8));
    }
    *d1 = warp_butterfly(a1);
    *d2 = warp_butterfly(a2);
}

// One warp's rms norm pieces (docs/ARITHMETIC.md § norm), n a multiple of 8: the sum of squares by the
// reduction contract (every lane ends with it), rs = 1/√(Σx²/n + eps), and the norm in place, (x·rs)·w.
// eps is the file's rms epsilon (attention.layer_norm_rms_epsilon), a kernel argument from the host.
__device__ __forceinline__ float warp_sum_squares(const float* v, int n) {
    const int lane = threadIdx.x % WARP;
    float acc = 0.0f;
    for (int c = lane; c < n / CHUNK; c += WARP) acc = __fadd_rn(acc, chunk_dot(v + CHUNK * c, v + CHUNK * c));
    return warp_butterfly(acc);
}

// 1/√(ss/n + eps) from a sum of squares: every rms norm's scale, whatever sums the squares.
__device__ __forceinline__ float rms_scale_of(float ss, int n, float eps) {
    return s_rsqrt(__fadd_rn(__fdiv_rn(ss, (float)n), eps));
}

__device__ __forceinline__ float warp_rms_scale(const float* v, int n, float eps) {
    return rms_scale_of(warp_sum_squares(v, n), n, eps);
}

__device__ void warp_rms_norm(float* x, const float* w, int n, float eps) {
    const float rs = warp_rms_scale(x, n, eps);
    __syncwarp();
    for (int d = threadIdx.x % WARP; d < n; d += WARP) x[d] = __fmul_rn(__fmul_rn(x[d], rs), w[d]);
    __syncwarp();
}

// Rope in NEOX pairs (i, i + rot/2) over the first `rot` values of x in place, with the (cos, sin) pairs
// of rr, by one warp (ops/rope.rs).
__device__ void warp_rope_neox(float* x, const float* rr, int rot) {
    const int half = rot / 2;
    for (int i = threadIdx.x % WARP; i < half; i += WARP) {
        const float c = rr[2 * i], s = rr[2 * i + 1], x0 = x[i], x1 = x[i + half];
        x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        x[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// Asynchronous copies of 16 bytes from global to shared memory (cp.async, sm_80+: the bytes do not pass
// through registers, so a block can fetch its next rows while its warps decode the ones before); older
// cards copy through registers, synchronously, the same bytes. matvec.cu's staged and stream layouts and
// qdot.cu's staged kernels stage weight rows with them.
__device__ __forceinline__ void stage_copy16(uint4* dst, const uint4* src) {
#if __CUDA_ARCH__ >= 800
    u32 d;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(d) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    *dst = *src;
#endif
}
__device__ __forceinline__ void stage_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Wait until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void stage_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Every kernel calls this before it reads anything the kernels before it wrote: at its top, or, for the
// dense staged products, after starting the copy of their weights (which no kernel writes). A kernel of a
// step's graph may follow the one before it by a programmatic edge (capture.rs; on by default, off with
// STRATA_PDL=0): it may be launched while that one runs, and waits here until the one before has
// completed and its writes are visible; then lets the next one launch. Every thread reaches it, so a
// kernel never completes before the one it follows. Without such an edge both are no-ops. Nothing
// computed changes either way. The next launch comes after the wait, not before: before it, several
// kernels ahead sit resident and waiting, and a step was 5.3% slower on the H200 (speed-15).
__device__ __forceinline__ void grid_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The butterfly of § dot over 32 lane totals taken one lane at a time (qdot.cu's tensor-core products,
// hc.cu's long windows), lane brev5(i) as the i-th: the
// butterfly's lane 0 is a balanced tree whose leaves, left to right, are lanes 0, 16, 8, 24, 4, 20, …
// (offset 16 pairs lane l with l + 16, offset 8 pairs those sums, …), so adding each leaf into a stack of
// partial sums as a binary counter carries (`lv`, one a level) gives its bits with five sums held. Returns
// the sum the leaf completes; after the 32nd leaf (i = 31) that is the butterfly's result. Addition
// commutes, so which operand of a pair comes first does not matter.
__device__ __forceinline__ float qd_tree_push(float (&lv)[5], int i, float x) {
#pragma unroll
    for (int b = 0; b < 5; ++b) {
        if (((i >> b) & 1) == 0) {
            lv[b] = x;
            return x;
        }
        x = __fadd_rn(lv[b], x);
    }
    return x;
}

// qd_tree_push for a leaf whose index is known only at run time (a loop over the leaves kept rolled): the
// same sums in the same order, each level's step predicated, so that the stack stays in registers where a
// branch out of the loop would put it in local memory.
__device__ __forceinline__ float qd_tree_push_at(float (&lv)[5], int i, float x) {
    bool open = true;
#pragma unroll
    for (int b = 0; b < 5; ++b) {
        if (open) {
            if ((i >> b) & 1) {
                x = __fadd_rn(lv[b], x);
            } else {
                lv[b] = x;
                open = false;
            }
        }
    }
    return x;
}

// Lane brev5(i): the i-th leaf of that tree.
__device__ __forceinline__ int qd_tree_lane(int i) {
    return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// The slot a gather's block takes and its expert's cache slot: slot blockIdx.y, or with a list (a placed
// prompt window's chunk, ops/moe/window.rs) the list's entry blockIdx.y, its id ids[blockIdx.y] either
// way. False where the block has nothing to do: a negative slot or id (a chunk's unused entries, or a
// slot the pass leaves to another). The list and the ids are outputs of kernels before: read after
// grid_dep_wait.
__device__ __forceinline__ bool gather_slot(const int* __restrict__ ids, const int* __restrict__ list, int& ts,
                                            int& id) {
    ts = list ? list[blockIdx.y] : (int)blockIdx.y;
    id = ids[blockIdx.y];
    return ts >= 0 && id >= 0;
}

// Thread-block clusters (sm_90 and later): this CTA's rank in its cluster, and a barrier of the whole
// cluster (arrive is a release, wait an acquire, so every write before it, to global or shared memory, is
// seen by every thread of the cluster after it). qsa.cu's cluster top-k and gdn.cu's split delta rule.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
#endif

// Causal depthwise conv of K taps of channel ch, then silu (docs/ARITHMETIC.md § gdn; gdn.cu's conv and
// qdot.cu's conv epilogue): frames are the K − 1 kept ones (oldest first)
// and the window's tokens in order; the K − 1 newest are kept. KC > 0: K = KC known when compiled, so
// the frames stay in registers and every load of the channel is issued at once (the model's K = 4);
// KC = 0: any K ≤ 16 (the host checks). The same fmas in the same order either way.
template <int KC>
struct ConvFrames {
    static constexpr int KMAX = KC > 0 ? KC : 16;
    float frames[KMAX];
    float wk[KMAX];
    // The channel's kept frames and its taps: neither depends on the kernels of this step before the conv
    // (the tail is this kernel's own, from the step before), so they may be read before grid_dep_wait.
    __device__ __forceinline__ void load(const float* __restrict__ tail, const float* __restrict__ w, int C, int K,
                                         int ch) {
#pragma unroll
        for (int i = 0; i < KMAX - 1; ++i) {
            if (i < K - 1) frames[i] = tail[(size_t)i * C + ch];
        }
#pragma unroll
        for (int i = 0; i < KMAX; ++i) {
            if (i < K) wk[i] = w[(size_t)K * ch + i];
        }
    }
    // A verify window's rewind slots (docs/SPECULATION.md): the frames kept after token t < T − 1 into
    // slot t ((K − 1) frames of C channels a slot); the last token's are the tail itself. Stores only.
    __device__ __forceinline__ void keep_slot(float* __restrict__ slots, int C, int K, int T, int t, int ch) const {
        if (slots == nullptr || t + 1 >= T) return;
        float* slot = slots + (size_t)t * (K - 1) * C;
#pragma unroll
        for (int i = 0; i < KMAX - 1; ++i) {
            if (i < K - 1) slot[(size_t)i * C + ch] = frames[i];
        }
    }
    // The window's tokens through the channel, then the K − 1 newest frames kept.
    __device__ __forceinline__ void run(const float* __restrict__ u, float* __restrict__ tail, float* __restrict__ out,
                                        int C, int K, int T, int ch, float* __restrict__ slots = nullptr) {
        for (int t = 0; t < T; ++t) {
            const float cur = u[(size_t)t * C + ch];
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < KMAX - 1; ++i) {
                if (i < K - 1) s = __fmaf_rn(wk[i], frames[i], s);
            }
            s = __fmaf_rn(wk[K - 1], cur, s);
            out[(size_t)t * C + ch] = s_silu(s);
#pragma unroll
            for (int i = 0; i + 1 < KMAX - 1; ++i) {
                if (i + 1 < K - 1) frames[i] = frames[i + 1];
            }
            if (K > 1) frames[K - 2] = cur;
            keep_slot(slots, C, K, T, t, ch);
        }
#pragma unroll
        for (int i = 0; i < KMAX - 1; ++i) {
            if (i < K - 1) tail[(size_t)i * C + ch] = frames[i];
        }
    }
    // run with the window's inputs in registers (vals[t] for t < T ≤ NT): the same fmas in the same order.
    // (Its body repeats run's rather than sharing a step with it: sharing changed the code ptxas makes of
    // gdn_conv_norm, whose PTX is kept as the parity tools checked it until this path is checked too.)
    template <int NT>
    __device__ __forceinline__ void run_vals(const float (&vals)[NT], float* __restrict__ tail, float* __restrict__ out,
                                             int C, int K, int T, int ch, float* __restrict__ slots = nullptr) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= T) break;
            const float cur = vals[t];
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < KMAX - 1; ++i) {
                if (i < K - 1) s = __fmaf_rn(wk[i], frames[i], s);
            }
            s = __fmaf_rn(wk[K - 1], cur, s);
            out[(size_t)t * C + ch] = s_silu(s);
#pragma unroll
            for (int i = 0; i + 1 < KMAX - 1; ++i) {
                if (i + 1 < K - 1) frames[i] = frames[i + 1];
            }
            if (K > 1) frames[K - 2] = cur;
            keep_slot(slots, C, K, T, t, ch);
        }
#pragma unroll
        for (int i = 0; i < KMAX - 1; ++i) {
            if (i < K - 1) tail[(size_t)i * C + ch] = frames[i];
        }
    }
};

// Ask for the 128-byte lines of bytes [p, p + bytes) into the L2, thread i of n taking lines i, i + n, …
// A prefetch waits for nothing and changes no value: a loop that then reads the span meets its bytes in
// the cache instead of waiting out memory at each step, and weights (which no kernel writes) may be asked
// for before grid_dep_wait, while the kernel before still runs.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes, int i, int n) {
    const size_t end = (size_t)p + bytes;
    for (size_t a = ((size_t)p & ~(size_t)127) + 128u * (size_t)i; a < end; a += 128u * (size_t)n) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
}

// ---- docs/ARITHMETIC.md § qdot: the input of a product over an integer type, quantized to int8 in
// pieces of QBLOCK values (qdot.cuh's products; kernels whose outputs feed them may quantize too).
#define QBLOCK 32
#define QMAX 127.0f

// An input element times 127/amax as its code: rounded half to even, clamped to ±127; NaN gives 0
// (ops/qdot.rs `code`). Clamping before rounding gives the same integer as after.
__device__ __forceinline__ int qd_code(float v) {
    if (v != v) return 0;
    return __float2int_rn(fminf(fmaxf(v, -QMAX), QMAX));
}

// A block's scale from its largest magnitude: sets d = amax/127 and returns id = 127/amax, or 0 when
// amax is 0 (every code is then 0, as x·0 is 0 or NaN).
__device__ __forceinline__ float qd_scale(float amax, float* d) {
    *d = __fdiv_rn(amax, QMAX);
    return amax == 0.0f ? 0.0f : __fdiv_rn(QMAX, amax);
}

// Piece f of vector t quantized from the 32 lanes' values (lane i element i): the amax by a butterfly
// of maxima from +0 (exact, so any order gives qd_quantize's), each lane's code, the sums of lanes
// 0..15's and 16..31's codes; written into QIn's layout (codes [T][P][32 bytes], then the halves' sums
// [T][P], then the scales [T][P]), the lane's code at byte `byte` of the piece's 32 (the products' order
// of the codes: the lane itself for element order, qd_pos_iq4_nl(lane) for IQ4_NL's).
__device__ __forceinline__ void warp_quantize_piece_at(float v, int4* yq, int T, int P, int t, int f, int byte) {
    const int lane = threadIdx.x % WARP, i = t * P + f;
    float amax = fmaxf(0.0f, fabsf(v));  // a NaN is passed over
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d;
    const float id = qd_scale(amax, &d);
    const int c = qd_code(__fmul_rn(v, id));
    reinterpret_cast<signed char*>(yq)[(size_t)32 * i + byte] = (signed char)c;
    int s = c;
#pragma unroll
    for (int o = 8; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int other = __shfl_xor_sync(0xffffffffu, s, 16);
    if (lane == 0) {
        int2* sum = reinterpret_cast<int2*>(reinterpret_cast<int*>(yq) + 8 * T * P);
        sum[i] = make_int2(s, other);
        reinterpret_cast<float*>(sum + T * P)[i] = d;
    }
}

// warp_quantize_piece_at in element order.
__device__ __forceinline__ void warp_quantize_piece(float v, int4* yq, int T, int P, int t, int f) {
    warp_quantize_piece_at(v, yq, T, P, t, f, threadIdx.x % WARP);
}

// The byte of IQ4_NL's code order that holds element i of a piece (qdot.cuh's IQ4_NLQ::pos): the
// type's nibbles pair elements j and j + 16, and its lookups take four nibbles of two bytes at a time.
__device__ __forceinline__ int qd_pos_iq4_nl(int i) {
    const int e = i % 16, r = e % 4;
    return 4 * (2 * (e / 4) + r / 2) + 2 * (r % 2) + i / 16;
}
