// The attention layer (spec §5; docs/ARITHMETIC.md § qsa) for a window of T tokens: norms and rope, the KV
// cache append (fp16, int8, f32), the indexer's block keys and queries, and gated attention over the
// selected cells (or every cell on a dense layer). Twin of crates/model/src/layers/qsa.rs; the projections
// are matvec.cu's, the block scores and top-k qsa.cu's.

// One head of `dim` values at x rms-normed with w into o and roped in NEOX pairs over the first `rot` dims
// with the (cos, sin) pairs at rr, by a warp (norm_rope's and norm_rope_kv's work). A lane's values
// d = lane, lane + 32, … and their gammas (dim ≤ 32·NR_HELD) are asked for before the norm's sum, so that
// the loop after it waits on none of them: in it each round waited out a round trip. kv_store keeps its own
// line of warp_kv_group, whose PTX is what passed parity.
#define NR_HELD 8  // a lane's values of a head held through the norm (dim ≤ 256)
__device__ __forceinline__ void warp_norm_rope(const float* x, float* o, const float* w, const float* rr, int dim,
                                               int rot, float eps) {
    const int lane = threadIdx.x % WARP;
    const bool held = dim <= WARP * NR_HELD;
    float xv[NR_HELD], wv[NR_HELD];
    if (held) {
#pragma unroll
        for (int i = 0; i < NR_HELD; ++i) {
            if (lane + WARP * i < dim) {
                xv[i] = x[lane + WARP * i];
                wv[i] = w[lane + WARP * i];
            }
        }
    }
    const float rs = warp_rms_scale(x, dim, eps);
    if (held) {
#pragma unroll
        for (int i = 0; i < NR_HELD; ++i)
            if (lane + WARP * i < dim) o[lane + WARP * i] = __fmul_rn(__fmul_rn(xv[i], rs), wv[i]);
    } else {
        for (int d = lane; d < dim; d += WARP) o[d] = __fmul_rn(__fmul_rn(x[d], rs), w[d]);
    }
    __syncwarp();
    warp_rope_neox(o, rr, rot);
}

// Rows of `heads` vectors of `dim` values at in[t·in_stride + h·head_stride ..]: each rms-normed ((x·rs)·w,
// rs = 1/√(Σx²/dim + eps) by the contract) and roped in NEOX pairs over the first `rot` dims with the (cos,
// sin) row of its token (rope[t·rot/2 ..] pairs); written to out[(t·heads + h)·dim ..]. One warp each.
// blockIdx.y = 1 takes the second set of rows (in2 …, the same dim, rot and rope): a layer's q and k heads
// in one launch.
extern "C" __global__ void norm_rope(const float* __restrict__ in, int in_stride, int head_stride,
                                    float* __restrict__ out, const float* __restrict__ w, int heads,
                                    const float* __restrict__ in2, int in_stride2, int head_stride2,
                                    float* __restrict__ out2, const float* __restrict__ w2, int heads2,
                                    const float* __restrict__ rope, int dim, int rot, int T, float eps) {
    grid_dep_wait();
    if (blockIdx.y) {
        in = in2;
        in_stride = in_stride2;
        head_stride = head_stride2;
        out = out2;
        w = w2;
        heads = heads2;
    }
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    if (gw >= T * heads) return;
    const int t = gw / heads, h = gw % heads;
    warp_norm_rope(in + (size_t)t * in_stride + (size_t)h * head_stride, out + (size_t)gw * dim, w,
                   rope + (size_t)t * rot, dim, rot, eps);
}

// A group of 64 cache values at x in int8 (a warp): scale = f16(amax/127) to *scale, each code =
// clamp(rint(v/scale), ±127) (0 for a zero scale) to codes[0..64].
__device__ __forceinline__ void warp_kv_group(const float* x, unsigned short* scale, signed char* codes) {
    const int lane = threadIdx.x % WARP;
    float amax = fmaxf(fabsf(x[lane]), fabsf(x[lane + 32]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const unsigned short h = f32_to_f16_bits(__fdiv_rn(amax, 127.0f));
    const float s = f16_bits_to_f32(h);
    if (lane == 0) *scale = h;
    for (int i = lane; i < 64; i += WARP) {
        const float q = s == 0.0f ? 0.0f : fminf(fmaxf(rintf(__fdiv_rn(x[i], s)), -127.0f), 127.0f);
        codes[i] = (signed char)(int)q;
    }
}

// The cache append of T cells from `cell0`: `dim` values each. Mode 0 fp16 (round to nearest even), 1 int8
// (per 64 values scale = f16(amax/127), code = clamp(rint(v/scale), ±127), 0 for a zero scale), 2 f32.
// One warp per (token, group of 64) for int8; one thread per value otherwise. blockIdx.y = 1 stores v2
// into the second cache (a layer's k and v in one launch).
extern "C" __global__ void kv_store(const float* __restrict__ v, unsigned short* __restrict__ halves,
                                   signed char* __restrict__ codes, unsigned short* __restrict__ scales,
                                   float* __restrict__ floats, const float* __restrict__ v2,
                                   unsigned short* __restrict__ halves2, signed char* __restrict__ codes2,
                                   unsigned short* __restrict__ scales2, float* __restrict__ floats2, int mode,
                                   int dim, int cell0, int T) {
    grid_dep_wait();
    if (blockIdx.y) {
        v = v2;
        halves = halves2;
        codes = codes2;
        scales = scales2;
        floats = floats2;
    }
    if (mode == 1) {
        const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
        const int groups = dim / 64;
        if (gw >= T * groups) return;
        const int t = gw / groups, g = gw % groups;
        const float* x = v + (size_t)t * dim + 64 * g;
        float amax = fmaxf(fabsf(x[lane]), fabsf(x[lane + 32]));
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const unsigned short h = f32_to_f16_bits(__fdiv_rn(amax, 127.0f));
        const float s = f16_bits_to_f32(h);
        const size_t cell = (size_t)cell0 + t;
        if (lane == 0) scales[cell * groups + g] = h;
        for (int i = lane; i < 64; i += WARP) {
            const float q = s == 0.0f ? 0.0f : fminf(fmaxf(rintf(__fdiv_rn(x[i], s)), -127.0f), 127.0f);
            codes[cell * dim + 64 * g + i] = (signed char)(int)q;
        }
        return;
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * dim) return;
    const size_t at = (size_t)cell0 * dim + i;
    if (mode == 0) halves[at] = f32_to_f16_bits(v[i]);
    else floats[at] = v[i];
}

// A head's `dh` values at x (in global memory, written by this warp before a __syncwarp) appended to a cache
// at `cell`, dims off .. off + dh − 1 of its `dim`, by kv_store's arithmetic: fp16 or f32 a value, int8 a
// group of 64 (off and dh multiples of 64, so the head's groups are the cell's). A warp.
__device__ __forceinline__ void warp_kv_put(const float* x, int dh, unsigned short* halves, signed char* codes,
                                            unsigned short* scales, float* floats, int mode, int dim, size_t cell,
                                            int off) {
    const int lane = threadIdx.x % WARP;
    if (mode == 1) {
        for (int g = 0; g < dh / 64; ++g) {
            warp_kv_group(x + 64 * g, scales + cell * (dim / 64) + off / 64 + g, codes + cell * dim + off + 64 * g);
        }
        return;
    }
    for (int d = lane; d < dh; d += WARP) {
        if (mode == 0) halves[cell * dim + off + d] = f32_to_f16_bits(x[d]);
        else floats[cell * dim + off + d] = x[d];
    }
}

// norm_rope and kv_store in one launch (the default; STRATA_KV_FUSE=0 runs the two): blockIdx.y = 0 the
// q heads (normed and roped into out), 1 the k heads (normed and roped into out2, then each appended to
// the k cache by the warp that made it), 2 the v heads (v, hkv heads of dim dh a token, appended to the v
// cache). The same values as the two kernels.
extern "C" __global__ void norm_rope_kv(const float* __restrict__ in, int in_stride, int head_stride,
                                       float* __restrict__ out, const float* __restrict__ w, int heads,
                                       const float* __restrict__ in2, int in_stride2, int head_stride2,
                                       float* __restrict__ out2, const float* __restrict__ w2, int heads2,
                                       const float* __restrict__ rope, int dim, int rot, int T,
                                       const float* __restrict__ v, unsigned short* __restrict__ kh,
                                       signed char* __restrict__ kc, unsigned short* __restrict__ ks,
                                       float* __restrict__ kf, unsigned short* __restrict__ vh,
                                       signed char* __restrict__ vc, unsigned short* __restrict__ vs,
                                       float* __restrict__ vf, int mode, int cell0, float eps) {
    grid_dep_wait();
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    const int cache_dim = heads2 * dim;  // a cell: the k (or v) heads of a token
    if (blockIdx.y == 2) {
        if (gw >= T * heads2) return;
        const int t = gw / heads2, h = gw % heads2;
        warp_kv_put(v + (size_t)t * cache_dim + (size_t)h * dim, dim, vh, vc, vs, vf, mode, cache_dim,
                    (size_t)cell0 + t, h * dim);
        return;
    }
    const bool k = blockIdx.y == 1;
    if (k) {
        in = in2;
        in_stride = in_stride2;
        head_stride = head_stride2;
        out = out2;
        w = w2;
        heads = heads2;
    }
    if (gw >= T * heads) return;
    const int t = gw / heads, h = gw % heads;
    float* o = out + (size_t)gw * dim;
    warp_norm_rope(in + (size_t)t * in_stride + (size_t)h * head_stride, o, w, rope + (size_t)t * rot, dim, rot, eps);
    if (k) {
        __syncwarp();
        warp_kv_put(o, dim, kh, kc, ks, kf, mode, cache_dim, (size_t)cell0 + t, h * dim);
    }
}

// A cache value (dim values per cell) as f32.
__device__ __forceinline__ float kv_get(const unsigned short* halves, const signed char* codes,
                                        const unsigned short* scales, const float* floats, int mode, int dim,
                                        size_t cell, int i) {
    if (mode == 0) return f16_bits_to_f32(halves[cell * dim + i]);
    if (mode == 2) return floats[cell * dim + i];
    return __fmul_rn((float)codes[cell * dim + i], f16_bits_to_f32(scales[cell * (dim / 64) + i / 64]));
}

// Eight consecutive values i0 .. i0 + 7 of a cell (i0 a multiple of 8) in cache mode MODE, as loaded (one
// vector load: 16 bytes of fp16, 8 bytes of codes with their scale, 32 bytes of f32), made floats, each as
// kv_get gives it, only when used: a thread can have several cells' loads in flight before the first use.
// (Scalar loads took eight load instructions, each touching four cache lines for the warp.)
template <int MODE> struct KvRaw8;
template <> struct KvRaw8<0> {
    uint4 q;
    __device__ __forceinline__ void load(const unsigned short* halves, const signed char*, const unsigned short*,
                                         const float*, int dim, size_t cell, int i0) {
        q = *reinterpret_cast<const uint4*>(halves + cell * dim + i0);
    }
    __device__ __forceinline__ void get(float* v) const {
        const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = f16_bits_to_f32((unsigned short)(w[i] & 0xffffu));
            v[2 * i + 1] = f16_bits_to_f32((unsigned short)(w[i] >> 16));
        }
    }
};
template <> struct KvRaw8<1> {
    uint2 q;
    unsigned short s;
    __device__ __forceinline__ void load(const unsigned short*, const signed char* codes, const unsigned short* scales,
                                         const float*, int dim, size_t cell, int i0) {
        q = *reinterpret_cast<const uint2*>(codes + cell * dim + i0);
        s = scales[cell * (dim / 64) + i0 / 64];  // one scale covers the 8: 8 divides 64
    }
    __device__ __forceinline__ void get(float* v) const {
        const float scale = f16_bits_to_f32(s);
        const u32 w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = __fmul_rn((float)(signed char)(w[i / 4] >> (8 * (i % 4))), scale);
    }
};
template <> struct KvRaw8<2> {
    float4 a, b;
    __device__ __forceinline__ void load(const unsigned short*, const signed char*, const unsigned short*,
                                         const float* floats, int dim, size_t cell, int i0) {
        a = reinterpret_cast<const float4*>(floats + cell * dim + i0)[0];
        b = reinterpret_cast<const float4*>(floats + cell * dim + i0)[1];
    }
    __device__ __forceinline__ void get(float* v) const {
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
};

// Block keys of the blocks that complete in this window: block b's key is the mean of raw keys b·r ..
// b·r + r − 1 (added in cell order, then divided by r), rms-normed with k_norm and roped at the block's
// first position (rope row given per new block). One warp per new block.
extern "C" __global__ void block_keys(const float* __restrict__ raw, float* __restrict__ blocks, int first_block,
                                     int n_new, int r, int di, const float* __restrict__ w,
                                     const float* __restrict__ rope, int rot, float eps) {
    grid_dep_wait();
    const int nb = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (nb >= n_new) return;
    const int b = first_block + nb;
    float* key = blocks + (size_t)b * di;
    for (int d = lane; d < di; d += WARP) {
        float s = raw[(size_t)b * r * di + d];
        for (int c = 1; c < r; ++c) s = __fadd_rn(s, raw[((size_t)b * r + c) * di + d]);
        key[d] = __fdiv_rn(s, (float)r);
    }
    __syncwarp();
    warp_rms_norm(key, w, di, eps);
    warp_rope_neox(key, rope + (size_t)nb * rot, rot);
}

// Gated attention of query head h of token t (bt = t·Hq + h) over its cells: ids[t·ids_stride ..] (count[t]
// of them, ascending) or, with ids null, cells lo[t] .. lo[t] + count[t] − 1. In three kernels, so that each
// spreads over the card: s_j = dot(q, k_j)·scale by the contract; e_j = exp(s_j − max) and their sum by the
// contract; o[d] = dot(e, v[·][d]) by the contract, then o[d]/sum; output o[d]·σ(gate[d]).
// `sbuf` holds per bt the n scores (then the e_j), the per-chunk parts of the sum, and the sum.
__device__ __forceinline__ size_t attend_cell(const unsigned int* ids, int ids_stride, const int* lo, int t, int j) {
    return ids ? (size_t)ids[(size_t)t * ids_stride + j] : (size_t)(lo[t] + j);
}

// s_j for SCORE_CELLS cells a warp, j = (blockIdx.x·warps + warp)·SCORE_CELLS + u, blockIdx.y = bt: the
// cells' ids and then their keys are loaded together (one round trip each for all of them), then each
// cell's dot by the contract, as a warp alone would.
#define SCORE_CELLS 4
template <int MODE>
__device__ __forceinline__ void attend_scores_body(const float* __restrict__ q, const unsigned short* __restrict__ kh,
                                                   const signed char* __restrict__ kc, const unsigned short* __restrict__ ks,
                                                   const float* __restrict__ kf, const unsigned int* __restrict__ ids,
                                                   int ids_stride, const int* __restrict__ count, const int* __restrict__ lo,
                                                   float* __restrict__ sbuf, int sbuf_stride, int hq, int hkv, int dh,
                                                   float scale) {
    const int bt = blockIdx.y, t = bt / hq, h = bt % hq, g = h / (hq / hkv), lane = threadIdx.x % WARP;
    const int j0 = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * SCORE_CELLS, n = count[t];
    if (j0 >= n) return;
    const float* qv = q + (size_t)bt * dh;
    const int dim = hkv * dh;
    size_t cell[SCORE_CELLS];
#pragma unroll
    for (int u = 0; u < SCORE_CELLS; ++u) cell[u] = j0 + u < n ? attend_cell(ids, ids_stride, lo, t, j0 + u) : 0;
    float acc[SCORE_CELLS];
#pragma unroll
    for (int u = 0; u < SCORE_CELLS; ++u) acc[u] = 0.0f;
    for (int c = lane; c < dh / CHUNK; c += WARP) {
        // The cells' keys all loaded before the first is made floats (one round trip for them all).
        KvRaw8<MODE> raw[SCORE_CELLS];
#pragma unroll
        for (int u = 0; u < SCORE_CELLS; ++u)
            if (j0 + u < n) raw[u].load(kh, kc, ks, kf, dim, cell[u], g * dh + CHUNK * c);
        float q8[8];
        load8_f32(qv + CHUNK * c, q8);
#pragma unroll
        for (int u = 0; u < SCORE_CELLS; ++u) {
            float kv8[8];
            if (j0 + u < n) {
                raw[u].get(kv8);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) kv8[e] = 0.0f;
            }
            acc[u] = __fadd_rn(acc[u], chunk_dot(q8, kv8));
        }
    }
#pragma unroll
    for (int u = 0; u < SCORE_CELLS; ++u) {
        const float d = warp_butterfly(acc[u]);
        if (lane == 0 && j0 + u < n) sbuf[(size_t)bt * sbuf_stride + j0 + u] = __fmul_rn(d, scale);
    }
}
// A kernel per cache mode (attend_scores_f16, _i8, _f32).
#define ATTEND_SCORES(SUFFIX, MODE)                                                                          \
    extern "C" __global__ void attend_scores##SUFFIX(                                                        \
        const float* __restrict__ q, const unsigned short* __restrict__ kh, const signed char* __restrict__ kc, \
        const unsigned short* __restrict__ ks, const float* __restrict__ kf, const unsigned int* __restrict__ ids, \
        int ids_stride, const int* __restrict__ count, const int* __restrict__ lo, float* __restrict__ sbuf,  \
        int sbuf_stride, int hq, int hkv, int dh, float scale) {                                             \
        grid_dep_wait();                                                                                     \
        attend_scores_body<MODE>(q, kh, kc, ks, kf, ids, ids_stride, count, lo, sbuf, sbuf_stride, hq, hkv, dh, \
                                 scale);                                                                     \
    }
ATTEND_SCORES(_f16, 0)
ATTEND_SCORES(_i8, 1)
ATTEND_SCORES(_f32, 2)

// Per bt (a block each): the max, e_j in place of s_j, each chunk's part of the sum (all threads), then the
// lanes' running totals over their chunks in order and the butterfly (warp 0); the sum stored after the parts.
extern "C" __global__ void attend_softmax(float* __restrict__ sbuf, int sbuf_stride, const int* __restrict__ count,
                                         int hq) {
    grid_dep_wait();
    const int bt = blockIdx.x, t = bt / hq, n = count[t];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    const int nch = (n + CHUNK - 1) / CHUNK;
    float* s = sbuf + (size_t)bt * sbuf_stride;
    float* parts = s + n;
    __shared__ float red[32];
    float m = -__int_as_float(0x7f800000);
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < warps; ++w) m = fmaxf(m, red[w]);
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        float part = 0.0f;
        for (int j = CHUNK * c; j < min(n, CHUNK * c + CHUNK); ++j) {
            const float e = s_exp(__fsub_rn(s[j], m));
            s[j] = e;
            part = __fadd_rn(part, e);
        }
        parts[c] = part;
    }
    __syncthreads();
    if (warp == 0) {
        float acc = 0.0f;
        for (int c = lane; c < nch; c += WARP) acc = __fadd_rn(acc, parts[c]);
        const float total = warp_butterfly(acc);
        if (lane == 0) parts[nch] = total;
    }
}

// The values of one query head h of token t: o[d] = dot(e, v[·][d]) over its n cells by the reduction
// contract (docs/ARITHMETIC.md § dot, the cells cut into chunks of 8), then o[d]/Σe gated by σ(gate[d]).
// A chunk's sum depends only on its own 8 cells, so every chunk sum is made at once, each by a thread of
// its own; then lane L of a warp adds chunks L, L + 32, … in order and the butterfly finishes, as a warp
// alone would. Block (blockIdx.x, blockIdx.y = (t·hkv + g)·HB + hb): VALUES_DIMS dims of VALUES_HEADS query
// heads of KV group g (they read the same values), in rounds of VALUES_THREADS chunks; thread i of a round
// loads its chunk's 8 cells (their ids, then 16 bytes of values each and the heads' e_j, all in flight
// together) and makes its VALUES_HEADS · VALUES_DIMS chunk sums; warp w then adds, for its outputs, each
// lane's chunks of the round to that lane's running total. `sbuf` holds per (t, h) the e_j, the per-chunk
// parts of their sum and the sum (attend_softmax); its rows (sbuf_stride) are whole chunks.
#define VALUES_HEADS 4
#define VALUES_DIMS 8
#define VALUES_THREADS 256
#define VALUES_OUT (VALUES_HEADS * VALUES_DIMS)
#define VALUES_PARAMS                                                                                         \
    const float *__restrict__ qg, const unsigned short *__restrict__ vh, const signed char *__restrict__ vc,  \
        const unsigned short *__restrict__ vs, const float *__restrict__ vf, const unsigned int *__restrict__ ids, \
        int ids_stride, const int *__restrict__ count, const int *__restrict__ lo, const float *__restrict__ sbuf, \
        int sbuf_stride, float *__restrict__ out, int hq, int hkv, int dh
template <int MODE>
__device__ __forceinline__ void attend_values_body(VALUES_PARAMS, float (*part)[VALUES_OUT + 1]) {
    const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
    const int hpg = hq / hkv, hb_count = (hpg + VALUES_HEADS - 1) / VALUES_HEADS;
    const int hb = blockIdx.y % hb_count, tg = blockIdx.y / hb_count, t = tg / hkv, g = tg % hkv;
    const int d0 = blockIdx.x * VALUES_DIMS, dim = hkv * dh, n = count[t], nch = (n + CHUNK - 1) / CHUNK;
    const int h0 = g * hpg + hb * VALUES_HEADS, heads = min(VALUES_HEADS, hpg - hb * VALUES_HEADS);
    const float* e = sbuf + (size_t)(t * hq + h0) * sbuf_stride;
    // Warp w's outputs: w·OUT_PER .. (head k = o / VALUES_DIMS, dim d0 + o % VALUES_DIMS).
    constexpr int OUT_PER = VALUES_OUT / (VALUES_THREADS / WARP);
    float total[OUT_PER];
#pragma unroll
    for (int q = 0; q < OUT_PER; ++q) total[q] = 0.0f;
    for (int base = 0; base < nch; base += VALUES_THREADS) {
        const int c = base + tid;
        if (c < nch) {
            const int j0 = c * CHUNK, len = min(CHUNK, n - j0);
            // The chunk's ids, then its values and the heads' e_j, every load issued before any is used.
            size_t cell[CHUNK];
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) cell[i] = i < len ? attend_cell(ids, ids_stride, lo, t, j0 + i) : 0;
            KvRaw8<MODE> raw[CHUNK];
#pragma unroll
            for (int i = 0; i < CHUNK; ++i)
                if (i < len) raw[i].load(vh, vc, vs, vf, dim, cell[i], g * dh + d0);
            // A head's e_j of a whole chunk by two 16-byte loads (rows of whole chunks: the host's stride).
            float ev[VALUES_HEADS][CHUNK];
#pragma unroll
            for (int k = 0; k < VALUES_HEADS; ++k) {
                const float* ek = e + (size_t)k * sbuf_stride + j0;
                if (k < heads && len == CHUNK) {
                    const float4 a = reinterpret_cast<const float4*>(ek)[0], b = reinterpret_cast<const float4*>(ek)[1];
                    ev[k][0] = a.x; ev[k][1] = a.y; ev[k][2] = a.z; ev[k][3] = a.w;
                    ev[k][4] = b.x; ev[k][5] = b.y; ev[k][6] = b.z; ev[k][7] = b.w;
                } else {
#pragma unroll
                    for (int i = 0; i < CHUNK; ++i) ev[k][i] = k < heads && i < len ? ek[i] : 0.0f;
                }
            }
            // Each output's chunk sum: from +0, the cells' fmas in order.
            float s[VALUES_OUT];
#pragma unroll
            for (int o = 0; o < VALUES_OUT; ++o) s[o] = 0.0f;
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                if (i < len) {
                    float v[VALUES_DIMS];
                    raw[i].get(v);
#pragma unroll
                    for (int o = 0; o < VALUES_OUT; ++o)
                        s[o] = __fmaf_rn(ev[o / VALUES_DIMS][i], v[o % VALUES_DIMS], s[o]);
                }
            }
#pragma unroll
            for (int o = 0; o < VALUES_OUT; ++o) part[tid][o] = s[o];
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < OUT_PER; ++q)
            for (int i = lane; i < VALUES_THREADS && base + i < nch; i += WARP)
                total[q] = __fadd_rn(total[q], part[i][warp * OUT_PER + q]);
        __syncthreads();  // the round's sums are read before the next round writes them
    }
#pragma unroll
    for (int q = 0; q < OUT_PER; ++q) {
        const float o = warp_butterfly(total[q]);
        const int k = (warp * OUT_PER + q) / VALUES_DIMS, d = d0 + (warp * OUT_PER + q) % VALUES_DIMS, h = h0 + k;
        if (lane == 0 && k < heads && d < dh) {
            const float sum = e[(size_t)k * sbuf_stride + n + nch];
            const float gate = qg[(size_t)t * hq * 2 * dh + (size_t)h * 2 * dh + dh + d];
            out[(size_t)t * hq * dh + (size_t)h * dh + d] = __fmul_rn(__fdiv_rn(o, sum), s_sigmoid(gate));
        }
    }
}
// A kernel per cache mode (attend_values_f16, _i8, _f32), each with the registers its loads take.
#define ATTEND_VALUES(SUFFIX, MODE)                                                                       \
    extern "C" __global__ void __launch_bounds__(VALUES_THREADS) attend_values##SUFFIX(VALUES_PARAMS) {   \
        grid_dep_wait();                                                                                  \
        __shared__ float part[VALUES_THREADS][VALUES_OUT + 1]; /* +1: a warp's stores hit 32 banks */     \
        attend_values_body<MODE>(qg, vh, vc, vs, vf, ids, ids_stride, count, lo, sbuf, sbuf_stride, out, hq, \
                                 hkv, dh, part);                                                          \
    }
ATTEND_VALUES(_f16, 0)
ATTEND_VALUES(_i8, 1)
ATTEND_VALUES(_f32, 2)
