// The attention layer (spec §5; docs/ARITHMETIC.md § qsa) for a window of T tokens: norms and rope, the KV
// cache append (fp16, int8, f32), the indexer's block keys and queries, and gated attention over the
// selected cells (or every cell on a dense layer). Twin of crates/model/src/layers/qsa.rs; the projections
// are matvec.cu's, the block scores and top-k qsa.cu's.

// Rows of `heads` vectors of `dim` values at in[t·in_stride + h·head_stride ..]: each rms-normed ((x·rs)·w,
// rs = 1/√(Σx²/dim + eps) by the contract) and roped in NEOX pairs over the first `rot` dims with the (cos,
// sin) row of its token (rope[t·rot/2 ..] pairs); written to out[(t·heads + h)·dim ..]. One warp each.
extern "C" __global__ void norm_rope(const float* __restrict__ in, int in_stride, int head_stride,
                                    float* __restrict__ out, const float* __restrict__ w,
                                    const float* __restrict__ rope, int heads, int dim, int rot, int T) {
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (gw >= T * heads) return;
    const int t = gw / heads, h = gw % heads;
    const float* x = in + (size_t)t * in_stride + (size_t)h * head_stride;
    float* o = out + (size_t)gw * dim;
    float acc = 0.0f;
    for (int c = lane; c < dim / CHUNK; c += WARP) acc = __fadd_rn(acc, chunk_dot(x + CHUNK * c, x + CHUNK * c));
    const float rs = s_rsqrt(__fadd_rn(__fdiv_rn(warp_butterfly(acc), (float)dim), 1e-6f));
    for (int d = lane; d < dim; d += WARP) o[d] = __fmul_rn(__fmul_rn(x[d], rs), w[d]);
    __syncwarp();
    const int half = rot / 2;
    const float* rr = rope + (size_t)t * rot;
    for (int i = lane; i < half; i += WARP) {
        const float c = rr[2 * i], s = rr[2 * i + 1], x0 = o[i], x1 = o[i + half];
        o[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        o[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// The cache append of T cells from `cell0`: `dim` values each. Mode 0 fp16 (round to nearest even), 1 int8
// (per 64 values scale = f16(amax/127), code = clamp(rint(v/scale), ±127), 0 for a zero scale), 2 f32.
// One warp per (token, group of 64) for int8; one thread per value otherwise.
extern "C" __global__ void kv_store(const float* __restrict__ v, unsigned short* __restrict__ halves,
                                   signed char* __restrict__ codes, unsigned short* __restrict__ scales,
                                   float* __restrict__ floats, int mode, int dim, int cell0, int T) {
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

// A cache value (dim values per cell) as f32.
__device__ __forceinline__ float kv_get(const unsigned short* halves, const signed char* codes,
                                        const unsigned short* scales, const float* floats, int mode, int dim,
                                        size_t cell, int i) {
    if (mode == 0) return f16_bits_to_f32(halves[cell * dim + i]);
    if (mode == 2) return floats[cell * dim + i];
    return __fmul_rn((float)codes[cell * dim + i], f16_bits_to_f32(scales[cell * (dim / 64) + i / 64]));
}

// Block keys of the blocks that complete in this window: block b's key is the mean of raw keys b·r ..
// b·r + r − 1 (added in cell order, then divided by r), rms-normed with k_norm and roped at the block's
// first position (rope row given per new block). One warp per new block.
extern "C" __global__ void block_keys(const float* __restrict__ raw, float* __restrict__ blocks, int first_block,
                                     int n_new, int r, int di, const float* __restrict__ w,
                                     const float* __restrict__ rope, int rot) {
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
    float acc = 0.0f;
    for (int c = lane; c < di / CHUNK; c += WARP) acc = __fadd_rn(acc, chunk_dot(key + CHUNK * c, key + CHUNK * c));
    const float rs = s_rsqrt(__fadd_rn(__fdiv_rn(warp_butterfly(acc), (float)di), 1e-6f));
    __syncwarp();
    for (int d = lane; d < di; d += WARP) key[d] = __fmul_rn(__fmul_rn(key[d], rs), w[d]);
    __syncwarp();
    const int half = rot / 2;
    const float* rr = rope + (size_t)nb * rot;
    for (int i = lane; i < half; i += WARP) {
        const float c = rr[2 * i], s = rr[2 * i + 1], x0 = key[i], x1 = key[i + half];
        key[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        key[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// Gated attention of query head h of token t (blockIdx.x = t·Hq + h) over its cells: ids[t·ids_stride ..]
// (count[t] of them, ascending) or, with ids null, cells lo[t] .. n_cells[t] − 1. s_j = dot(q, k_j)·scale by
// the contract (a warp per cell); e_j = exp(s_j − max); the sum of e by the contract; o[d] = fma chain over
// j ascending of e_j·v_j[d] from +0, then o[d]/sum; output o[d]·σ(gate[d]). `sbuf` is scratch per block.
extern "C" __global__ void attend(const float* __restrict__ q, const float* __restrict__ qg,
                                 const unsigned short* __restrict__ kh, const signed char* __restrict__ kc,
                                 const unsigned short* __restrict__ ks, const float* __restrict__ kf,
                                 const unsigned short* __restrict__ vh, const signed char* __restrict__ vc,
                                 const unsigned short* __restrict__ vs, const float* __restrict__ vf, int mode,
                                 const unsigned int* __restrict__ ids, int ids_stride, const int* __restrict__ count,
                                 const int* __restrict__ lo, float* __restrict__ sbuf, int sbuf_stride,
                                 float* __restrict__ out, int hq, int hkv, int dh, float scale) {
    const int bt = blockIdx.x, t = bt / hq, h = bt % hq, g = h / (hq / hkv);
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    const int dim = hkv * dh, n = count[t];
    const float* qv = q + (size_t)bt * dh;
    float* s = sbuf + (size_t)bt * sbuf_stride;
    auto cell_of = [&](int j) -> size_t { return ids ? (size_t)ids[(size_t)t * ids_stride + j] : (size_t)(lo[t] + j); };
    for (int j = warp; j < n; j += warps) {
        const size_t cell = cell_of(j);
        float acc = 0.0f;
        for (int c = lane; c < dh / CHUNK; c += WARP) {
            float kv8[8], q8[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                kv8[e] = kv_get(kh, kc, ks, kf, mode, dim, cell, g * dh + CHUNK * c + e);
                q8[e] = qv[CHUNK * c + e];
            }
            acc = __fadd_rn(acc, chunk_dot(q8, kv8));
        }
        const float d = warp_butterfly(acc);
        if (lane == 0) s[j] = __fmul_rn(d, scale);
    }
    __syncthreads();
    __shared__ float red[32];
    float m = -__int_as_float(0x7f800000);
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < warps; ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) s[j] = s_exp(__fsub_rn(s[j], m));
    __syncthreads();
    if (warp == 0) {
        float acc = 0.0f;
        for (int c = lane; c < (n + CHUNK - 1) / CHUNK; c += WARP) {
            float part = 0.0f;
            for (int j = CHUNK * c; j < min(n, CHUNK * c + CHUNK); ++j) part = __fadd_rn(part, s[j]);
            acc = __fadd_rn(acc, part);
        }
        const float total = warp_butterfly(acc);
        if (lane == 0) red[0] = total;
    }
    __syncthreads();
    const float total = red[0];
    for (int d = threadIdx.x; d < dh; d += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < n; ++j) o = __fmaf_rn(s[j], kv_get(vh, vc, vs, vf, mode, dim, cell_of(j), g * dh + d), o);
        const float gate = qg[(size_t)t * hq * 2 * dh + (size_t)h * 2 * dh + dh + d];
        out[(size_t)t * hq * dh + (size_t)h * dh + d] = __fmul_rn(__fdiv_rn(o, total), s_sigmoid(gate));
    }
}
