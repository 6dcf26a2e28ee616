// The attention layer (spec §5; docs/ARITHMETIC.md § qsa) for a window of T tokens: norms and rope, the KV
// cache append (fp16, int8, f32), the indexer's block keys and queries, and gated attention over the
// selected cells (or every cell on a dense layer). Twin of crates/model/src/layers/qsa.rs; the projections
// are matvec.cu's, the block scores and top-k qsa.cu's.

// One head of `dim` values at x rms-normed with w into o and roped in NEOX pairs over the first `rot` dims
// with the (cos, sin) pairs at rr: norm_rope's work for a warp, for norm_rope_kv. norm_rope and kv_store keep
// their own lines of this and of warp_kv_group until norm_rope_kv has run on a card: taken through these
// functions their PTX changes (the same arithmetic, scheduled otherwise), and theirs is what passed parity.
__device__ __forceinline__ void warp_norm_rope(const float* x, float* o, const float* w, const float* rr, int dim,
                                               int rot) {
    const int lane = threadIdx.x % WARP;
    const float rs = warp_rms_scale(x, dim);
    for (int d = lane; d < dim; d += WARP) o[d] = __fmul_rn(__fmul_rn(x[d], rs), w[d]);
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
                                    const float* __restrict__ rope, int dim, int rot, int T) {
    grid_dep_wait();
    if (blockIdx.y) {
        in = in2;
        in_stride = in_stride2;
        head_stride = head_stride2;
        out = out2;
        w = w2;
        heads = heads2;
    }
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (gw >= T * heads) return;
    const int t = gw / heads, h = gw % heads;
    const float* x = in + (size_t)t * in_stride + (size_t)h * head_stride;
    float* o = out + (size_t)gw * dim;
    const float rs = warp_rms_scale(x, dim);
    for (int d = lane; d < dim; d += WARP) o[d] = __fmul_rn(__fmul_rn(x[d], rs), w[d]);
    __syncwarp();
    warp_rope_neox(o, rope + (size_t)t * rot, rot);
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

// norm_rope and kv_store in one launch (STRATA_KV_FUSE=1): blockIdx.y = 0 the q heads (normed and roped
// into out), 1 the k heads (normed and roped into out2, then each appended to the k cache by the warp that
// made it), 2 the v heads (v, hkv heads of dim dh a token, appended to the v cache). The same values as
// the two kernels.
extern "C" __global__ void norm_rope_kv(const float* __restrict__ in, int in_stride, int head_stride,
                                       float* __restrict__ out, const float* __restrict__ w, int heads,
                                       const float* __restrict__ in2, int in_stride2, int head_stride2,
                                       float* __restrict__ out2, const float* __restrict__ w2, int heads2,
                                       const float* __restrict__ rope, int dim, int rot, int T,
                                       const float* __restrict__ v, unsigned short* __restrict__ kh,
                                       signed char* __restrict__ kc, unsigned short* __restrict__ ks,
                                       float* __restrict__ kf, unsigned short* __restrict__ vh,
                                       signed char* __restrict__ vc, unsigned short* __restrict__ vs,
                                       float* __restrict__ vf, int mode, int cell0) {
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
    warp_norm_rope(in + (size_t)t * in_stride + (size_t)h * head_stride, o, w, rope + (size_t)t * rot, dim, rot);
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

// Eight consecutive values i0 .. i0 + 7 of a cell (i0 a multiple of 8), each as kv_get gives it, by one
// vector load: 16 bytes of fp16, 8 bytes of codes (one scale covers them: 8 divides 64) or 32 of f32.
// Scalar loads took eight load instructions, each touching four cache lines for the warp.
__device__ __forceinline__ void kv_get8(const unsigned short* halves, const signed char* codes,
                                        const unsigned short* scales, const float* floats, int mode, int dim,
                                        size_t cell, int i0, float* v) {
    if (mode == 0) {
        const uint4 q = *reinterpret_cast<const uint4*>(halves + cell * dim + i0);
        const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = f16_bits_to_f32((unsigned short)(w[i] & 0xffffu));
            v[2 * i + 1] = f16_bits_to_f32((unsigned short)(w[i] >> 16));
        }
    } else if (mode == 2) {
        load8_f32(floats + cell * dim + i0, v);
    } else {
        const uint2 q = *reinterpret_cast<const uint2*>(codes + cell * dim + i0);
        const float scale = f16_bits_to_f32(scales[cell * (dim / 64) + i0 / 64]);
        const u32 w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = __fmul_rn((float)(signed char)(w[i / 4] >> (8 * (i % 4))), scale);
    }
}

// Block keys of the blocks that complete in this window: block b's key is the mean of raw keys b·r ..
// b·r + r − 1 (added in cell order, then divided by r), rms-normed with k_norm and roped at the block's
// first position (rope row given per new block). One warp per new block.
extern "C" __global__ void block_keys(const float* __restrict__ raw, float* __restrict__ blocks, int first_block,
                                     int n_new, int r, int di, const float* __restrict__ w,
                                     const float* __restrict__ rope, int rot) {
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
    warp_rms_norm(key, w, di);
    warp_rope_neox(key, rope + (size_t)nb * rot, rot);
}

// Gated attention of query head h of token t (bt = t·Hq + h) over its cells: ids[t·ids_stride ..] (count[t]
// of them, ascending) or, with ids null, cells lo[t] .. lo[t] + count[t] − 1. In three kernels, so that each
// spreads over the card: s_j = dot(q, k_j)·scale by the contract; e_j = exp(s_j − max) and their sum by the
// contract; o[d] = fma chain over j ascending of e_j·v_j[d] from +0, then o[d]/sum; output o[d]·σ(gate[d]).
// `sbuf` holds per bt the n scores (then the e_j), the per-chunk parts of the sum, and the sum.
__device__ __forceinline__ size_t attend_cell(const unsigned int* ids, int ids_stride, const int* lo, int t, int j) {
    return ids ? (size_t)ids[(size_t)t * ids_stride + j] : (size_t)(lo[t] + j);
}

// s_j for SCORE_CELLS cells a warp, j = (blockIdx.x·warps + warp)·SCORE_CELLS + u, blockIdx.y = bt: the
// cells' ids and then their keys are loaded together (one round trip each for all of them), then each
// cell's dot by the contract, as a warp alone would.
#define SCORE_CELLS 4
extern "C" __global__ void attend_scores(const float* __restrict__ q, const unsigned short* __restrict__ kh,
                                        const signed char* __restrict__ kc, const unsigned short* __restrict__ ks,
                                        const float* __restrict__ kf, int mode, const unsigned int* __restrict__ ids,
                                        int ids_stride, const int* __restrict__ count, const int* __restrict__ lo,
                                        float* __restrict__ sbuf, int sbuf_stride, int hq, int hkv, int dh,
                                        float scale) {
    grid_dep_wait();
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
        float q8[8], kv8[SCORE_CELLS][8];
        load8_f32(qv + CHUNK * c, q8);
#pragma unroll
        for (int u = 0; u < SCORE_CELLS; ++u) {
            if (j0 + u < n) {
                kv_get8(kh, kc, ks, kf, mode, dim, cell[u], g * dh + CHUNK * c, kv8[u]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) kv8[u][e] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < SCORE_CELLS; ++u) acc[u] = __fadd_rn(acc[u], chunk_dot(q8, kv8[u]));
    }
#pragma unroll
    for (int u = 0; u < SCORE_CELLS; ++u) {
        const float d = warp_butterfly(acc[u]);
        if (lane == 0 && j0 + u < n) sbuf[(size_t)bt * sbuf_stride + j0 + u] = __fmul_rn(d, scale);
    }
}

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

// Where a values block's thread works (blockIdx.x a slice of 32 dims, blockIdx.y = (t·hkv + g)·HB + hb):
// its token, KV group, query head (live when the warp has one of the group's heads), dim, cell count and
// that head's row of e_j (then the sum's parts and the sum).
struct ValuesAt {
    int t, g, h, n, d;
    bool live;
    const float* e;
    __device__ ValuesAt(const int* count, const float* sbuf, int sbuf_stride, int hq, int hkv, int dh) {
        const int warps = blockDim.x / WARP, hpg = hq / hkv, hb_count = (hpg + warps - 1) / warps;
        const int hb = blockIdx.y % hb_count, tg = blockIdx.y / hb_count, hi = hb * warps + threadIdx.x / WARP;
        t = tg / hkv;
        g = tg % hkv;
        h = g * hpg + hi;
        n = count[t];
        d = blockIdx.x * WARP + threadIdx.x % WARP;
        live = hi < hpg;
        e = sbuf + (size_t)(t * hq + (live ? h : 0)) * sbuf_stride;
    }
};

// Where a values kernel's `_q` form also writes its output quantized for the output product
// (STRATA_ATTN_QUANTIZE=1): the pieces (QIn's layout, qdot.cu), their codes' order (0 element order, 2
// IQ4_NL's) and the window's T. The plain kernels get none.
struct ValuesQ {
    int4* yq;
    int layout, T;
};

// The output of a values chain: o / Σe (the sum stored after the parts, or with SF the one the kernel made,
// `sum`), gated by σ(gate[d]). With QY the warp (a head's 32 dims: one piece of the output product's input,
// lane i element i) also quantizes it.
template <bool QY, bool SF>
__device__ void values_store(const ValuesAt& a, float o, const float* __restrict__ qg, float* __restrict__ out,
                             int hq, int dh, const ValuesQ& q, float sum) {
    if (!a.live || a.d >= dh) return;
    const float total = SF ? sum : a.e[a.n + (a.n + CHUNK - 1) / CHUNK];
    const float gate = qg[(size_t)a.t * hq * 2 * dh + (size_t)a.h * 2 * dh + dh + a.d];
    const float y = __fmul_rn(__fdiv_rn(o, total), s_sigmoid(gate));
    out[(size_t)a.t * hq * dh + (size_t)a.h * dh + a.d] = y;
    if (QY) {
        const int lane = threadIdx.x % WARP, byte = q.layout == 2 ? qd_pos_iq4_nl(lane) : lane;
        warp_quantize_piece_at(y, q.yq, q.T, hq * dh / QBLOCK, a.t, (a.h * dh + a.d - lane) / QBLOCK, byte);
    }
}

// The parameters every values kernel takes, and their names.
#define VALUES_PARAMS                                                                                         \
    const float *__restrict__ qg, const unsigned short *__restrict__ vh, const signed char *__restrict__ vc,  \
        const unsigned short *__restrict__ vs, const float *__restrict__ vf, int mode,                        \
        const unsigned int *__restrict__ ids, int ids_stride, const int *__restrict__ count,                  \
        const int *__restrict__ lo, const float *__restrict__ sbuf, int sbuf_stride, float *__restrict__ out, \
        int hq, int hkv, int dh
#define VALUES_ARGS qg, vh, vc, vs, vf, mode, ids, ids_stride, count, lo, sbuf, sbuf_stride, out, hq, hkv, dh
// A values kernel NAME (its body NAME_body) and its quantizing form NAME_q.
#define VALUES_KERNELS(NAME)                                                                              \
    extern "C" __global__ void NAME(VALUES_PARAMS) {                                                      \
        NAME##_body<false, false>(VALUES_ARGS, ValuesQ{nullptr, 0, 0});                                    \
    }                                                                                                     \
    extern "C" __global__ void NAME##_q(VALUES_PARAMS, int4* yq, int layout, int T) {                    \
        NAME##_body<true, false>(VALUES_ARGS, ValuesQ{yq, layout, T});                                     \
    }
// The forms NAME_s and NAME_qs that make the softmax themselves from the scores (STRATA_SOFTMAX_IN_VALUES=1,
// no attend_softmax launch before them).
#define VALUES_SOFTMAX_KERNELS(NAME)                                                                      \
    extern "C" __global__ void NAME##_s(VALUES_PARAMS) {                                                  \
        NAME##_body<false, true>(VALUES_ARGS, ValuesQ{nullptr, 0, 0});                                     \
    }                                                                                                     \
    extern "C" __global__ void NAME##_qs(VALUES_PARAMS, int4* yq, int layout, int T) {                   \
        NAME##_body<true, true>(VALUES_ARGS, ValuesQ{yq, layout, T});                                      \
    }

// attend_softmax's max and sum for the warp's head (a live warp of a values kernel, from the scores at s):
// the max over the n scores (exact: any order gives the block's), then lane L's running total over chunks
// L, L + 32, … of that chunk's e_j = exp(s_j − max) added in order, and the butterfly, so the same sum in
// every lane. The e_j themselves the caller makes as it reads them, by the same expression.
__device__ __forceinline__ float2 warp_softmax_stats(const float* __restrict__ s, int n) {
    const int lane = threadIdx.x % WARP, nch = (n + CHUNK - 1) / CHUNK;
    float m = -__int_as_float(0x7f800000);
    for (int j = lane; j < n; j += WARP) m = fmaxf(m, s[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float acc = 0.0f;
    for (int c = lane; c < nch; c += WARP) {
        float part = 0.0f;
        for (int j = CHUNK * c; j < min(n, CHUNK * c + CHUNK); ++j) part = __fadd_rn(part, s_exp(__fsub_rn(s[j], m)));
        acc = __fadd_rn(acc, part);
    }
    return make_float2(m, warp_butterfly(acc));
}

// A warp's fma chains through a tile of len cells: o = fma(e[j], tile[j][lane], o) for j ascending. The
// shared-memory reads of 8 cells are issued before their 8 fmas, so only the fmas' own latency is serial.
__device__ __forceinline__ float values_chain(float o, const float* e, const float (*tile)[WARP], int len, int lane) {
    int j = 0;
    for (; j + 8 <= len; j += 8) {
        float ee[8], vv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            ee[u] = e[j + u];
            vv[u] = tile[j + u][lane];
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) o = __fmaf_rn(ee[u], vv[u], o);
    }
    for (; j < len; ++j) o = __fmaf_rn(e[j], tile[j][lane], o);
    return o;
}

// The values, for the query heads of one KV group together (they read the same values): blockIdx.x a slice
// of 32 dims, blockIdx.y = (t·hkv + g)·HB + hb, warp w the group's head hb·warps + w. Tiles of ATTEND_TILE
// cells are read into shared memory by the whole block (the cell ids first, then the values, several loads
// in flight per thread) with each head's e_j, then each warp runs its head's fma chains through the tile. At
// most 16 warps.
#define ATTEND_TILE 128
#define ATTEND_LOADS 16
template <bool QY, bool SF>
__device__ __forceinline__ void attend_values_body(VALUES_PARAMS, const ValuesQ& q) {
    grid_dep_wait();
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    const ValuesAt a(count, sbuf, sbuf_stride, hq, hkv, dh);
    const int t = a.t, g = a.g, n = a.n, d = a.d, dim = hkv * dh;
    const bool live = a.live;
    const float* e = a.e;
    __shared__ float tile[ATTEND_TILE][WARP];
    __shared__ float et[16][ATTEND_TILE];  // each warp's head's e_j of the tile
    __shared__ unsigned int cells[ATTEND_TILE];
    float o = 0.0f;
    for (int j0 = 0; j0 < n; j0 += ATTEND_TILE) {
        const int len = min(ATTEND_TILE, n - j0);
        for (int jj = threadIdx.x; jj < len; jj += blockDim.x) {
            cells[jj] = (unsigned int)attend_cell(ids, ids_stride, lo, t, j0 + jj);
        }
        for (int jj = lane; jj < len; jj += WARP) et[warp][jj] = e[j0 + jj];
        __syncthreads();
        // Up to ATTEND_LOADS cells a thread, all loads issued before any store: with 8 warps a whole tile is
        // one round trip to memory.
        for (int jb = warp; jb < len; jb += ATTEND_LOADS * warps) {
            float v[ATTEND_LOADS];
#pragma unroll
            for (int u = 0; u < ATTEND_LOADS; ++u) {
                const int jj = jb + u * warps;
                v[u] = jj < len && d < dh ? kv_get(vh, vc, vs, vf, mode, dim, cells[jj], g * dh + d) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < ATTEND_LOADS; ++u) {
                if (jb + u * warps < len) tile[jb + u * warps][lane] = v[u];
            }
        }
        __syncthreads();
        if (live) o = values_chain(o, et[warp], tile, len, lane);
        __syncthreads();
    }
    values_store<QY, false>(a, o, qg, out, hq, dh, q, 0.0f);
}
VALUES_KERNELS(attend_values)

// attend_values with the next tile's loads in flight while the current tile's chains run (the plan's
// `prefetch` variant; the same sums). The selection's cell ids are staged in shared memory once (when they
// fit), each thread holds up to 16 values and 6 e_j of the next tile in registers, and a tile has up to 16
// cells per warp (at most 192).
#define PF_TILE 192
#define PF_PER 16
#define PF_IDS 2304
template <bool QY, bool SF>
__device__ __forceinline__ void attend_values_prefetch_body(VALUES_PARAMS, const ValuesQ& q) {
    grid_dep_wait();
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    const ValuesAt a(count, sbuf, sbuf_stride, hq, hkv, dh);
    const int t = a.t, g = a.g, n = a.n, d = a.d, dim = hkv * dh;
    const bool live = a.live;
    const float* e = a.e;
    const int tile_len = min(PF_TILE, warps * PF_PER);
    __shared__ float tile[PF_TILE][WARP];
    __shared__ float et[16][PF_TILE];
    __shared__ unsigned int sid[PF_IDS];
    const bool staged = ids != nullptr && n <= PF_IDS;
    if (staged) {
        for (int jj = threadIdx.x; jj < n; jj += blockDim.x) sid[jj] = ids[(size_t)t * ids_stride + jj];
    }
    __syncthreads();
    float v[PF_PER], ev[PF_TILE / WARP];
    auto fetch = [&](int j0) {
        const int len = min(tile_len, n - j0);
#pragma unroll
        for (int i = 0; i < PF_PER; ++i) {
            const int jj = warp + i * warps;
            if (jj < len && d < dh) {
                const size_t cell = staged ? (size_t)sid[j0 + jj] : attend_cell(ids, ids_stride, lo, t, j0 + jj);
                v[i] = kv_get(vh, vc, vs, vf, mode, dim, cell, g * dh + d);
            } else {
                v[i] = 0.0f;
            }
        }
#pragma unroll
        for (int m = 0; m < PF_TILE / WARP; ++m) {
            const int jj = lane + m * WARP;
            ev[m] = jj < len ? e[j0 + jj] : 0.0f;
        }
    };
    float o = 0.0f;
    if (n > 0) fetch(0);
    for (int j0 = 0; j0 < n; j0 += tile_len) {
        const int len = min(tile_len, n - j0);
        __syncthreads();  // every chain is done with the previous tile
#pragma unroll
        for (int i = 0; i < PF_PER; ++i) {
            const int jj = warp + i * warps;
            if (jj < len) tile[jj][lane] = v[i];
        }
#pragma unroll
        for (int m = 0; m < PF_TILE / WARP; ++m) {
            const int jj = lane + m * WARP;
            if (jj < len) et[warp][jj] = ev[m];
        }
        __syncthreads();
        if (j0 + tile_len < n) fetch(j0 + tile_len);  // in flight during the chains below
        if (live) o = values_chain(o, et[warp], tile, len, lane);
    }
    values_store<QY, false>(a, o, qg, out, hq, dh, q, 0.0f);
}
VALUES_KERNELS(attend_values_prefetch)

// attend_values for fp16 caches with the loads decoupled from registers (the plan's `pipe` variant; the same
// sums): each tile's 64 bytes a cell (the block's 32 dims) go straight from global to shared memory by
// asynchronous copies, PIPE_STAGES tiles in flight while the warps run their chains through the oldest, so a
// block waits on memory about once, not once a tile. e_j are read a warp-wide row of 32 at a time, the next
// row's load in flight, and handed to the chain by shuffles. PIPE_WARPS heads a block: more blocks, each
// with fewer chains to issue. The host uses it only for fp16 caches with dims in whole slices of 32 and
// KV groups of 4k heads (so a block is exactly PIPE_WARPS warps).
#define PIPE_TILE 192
#define PIPE_STAGES 4
#define PIPE_WARPS 4
#define PIPE_PIECES (4 * PIPE_TILE / (PIPE_WARPS * WARP))  // 6 copies a thread a tile
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void copies_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most PIPE_STAGES − 2 committed groups are still in flight.
__device__ __forceinline__ void copies_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PIPE_STAGES - 2));
#endif
}

template <bool QY, bool SF>
__device__ __forceinline__ void attend_values_pipe_body(VALUES_PARAMS, const ValuesQ& q) {
    grid_dep_wait();
    __shared__ uint4 ring[PIPE_STAGES][PIPE_TILE][4];  // 48 KB: a tile's cells, 32 halves each
    const int lane = threadIdx.x % WARP;
    const ValuesAt a(count, sbuf, sbuf_stride, hq, hkv, dh);
    const int t = a.t, n = a.n, dim = hkv * dh;
    const unsigned short* base = vh + a.g * dh + blockIdx.x * WARP;  // this block's 32 dims of cell 0
    const int tiles = (n + PIPE_TILE - 1) / PIPE_TILE;
    // Thread i of the block copies pieces i, i + 128, … (piece p: cell p / 4, its 16-byte quarter p % 4) of a
    // tile; the cells' ids are read one tile ahead of their copies, so neither waits on the other.
    u32 cell[PIPE_PIECES];
    auto ids_of = [&](int k) {
#pragma unroll
        for (int u = 0; u < PIPE_PIECES; ++u) {
            const int p = threadIdx.x + u * PIPE_WARPS * WARP, j = k * PIPE_TILE + p / 4;
            cell[u] = k < tiles && p / 4 < PIPE_TILE && j < n ? (u32)attend_cell(ids, ids_stride, lo, t, j) : 0u;
        }
    };
    auto issue = [&](int k) {
        if (k < tiles) {
#pragma unroll
            for (int u = 0; u < PIPE_PIECES; ++u) {
                const int p = threadIdx.x + u * PIPE_WARPS * WARP, j = k * PIPE_TILE + p / 4;
                if (p / 4 < PIPE_TILE && j < n) {
                    copy16_async(&ring[k % PIPE_STAGES][p / 4][p % 4], base + (size_t)cell[u] * dim + 8 * (p % 4));
                }
            }
        }
        copies_commit();  // an empty group past the last tile keeps the waits' count uniform
    };
    for (int k = 0; k < PIPE_STAGES - 1; ++k) {
        ids_of(k);
        issue(k);
    }
    ids_of(PIPE_STAGES - 1);
    // With SF the softmax's max and sum, made while the first tiles' copies are in flight; a.e then holds
    // the scores, and each e_j is made from its score as it is read.
    const float2 stats = SF && a.live ? warp_softmax_stats(a.e, n) : make_float2(0.0f, 0.0f);
    // Lane L holds e_j of cells L, L + 32, … of a tile, loaded a tile ahead: a load a row ahead waited out
    // the L2's latency at each row of 32 cells, longer than the row's chains.
    constexpr int EROWS = PIPE_TILE / WARP;
    float e_next[EROWS];
    auto e_of = [&](int k) {
#pragma unroll
        for (int u = 0; u < EROWS; ++u) {
            const int j = k * PIPE_TILE + u * WARP + lane;
            const bool in = a.live && k < tiles && j < n;
            e_next[u] = !in ? 0.0f : SF ? s_exp(__fsub_rn(a.e[j], stats.x)) : a.e[j];
        }
    };
    e_of(0);
    float o = 0.0f;
    for (int k = 0; k < tiles; ++k) {
        copies_wait();    // tile k has landed (for this thread's copies)
        __syncthreads();  // ... and everyone's; every chain is done with tile k − 1's stage
        issue(k + PIPE_STAGES - 1);
        ids_of(k + PIPE_STAGES);  // in flight during this tile's chains
        float e_tile[EROWS];
#pragma unroll
        for (int u = 0; u < EROWS; ++u) e_tile[u] = e_next[u];
        e_of(k + 1);  // likewise
        const int j0 = k * PIPE_TILE, len = min(PIPE_TILE, n - j0);
        const unsigned short* tile = reinterpret_cast<const unsigned short*>(ring[k % PIPE_STAGES]);
        if (a.live) {
#pragma unroll
            for (int ri = 0; ri < EROWS; ++ri) {
                const int r = ri * WARP, m = min(WARP, len - r);
                const float e_row = e_tile[ri];
                if (m == WARP) {
                    // A whole row: 8 cells' e_j and values fetched before their 8 fmas, so the chain waits
                    // on the fmas alone, not on a shared-memory read each (the same fmas in the same order).
#pragma unroll
                    for (int u0 = 0; u0 < WARP; u0 += 8) {
                        float ej[8], vv[8];
#pragma unroll
                        for (int u = 0; u < 8; ++u) {
                            ej[u] = __shfl_sync(0xffffffffu, e_row, u0 + u);
                            vv[u] = f16_bits_to_f32(tile[(r + u0 + u) * WARP + lane]);
                        }
#pragma unroll
                        for (int u = 0; u < 8; ++u) o = __fmaf_rn(ej[u], vv[u], o);
                    }
                } else {
                    for (int u = 0; u < m; ++u) {
                        const float ej = __shfl_sync(0xffffffffu, e_row, u);
                        o = __fmaf_rn(ej, f16_bits_to_f32(tile[(r + u) * WARP + lane]), o);
                    }
                }
            }
        }
    }
    values_store<QY, SF>(a, o, qg, out, hq, dh, q, stats.y);
}
VALUES_KERNELS(attend_values_pipe)
VALUES_SOFTMAX_KERNELS(attend_values_pipe)
