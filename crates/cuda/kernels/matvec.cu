// Matrix-vector products over quantized weights (docs/ARITHMETIC.md § matvec) for a window of T = 1..8
// tokens: y[t][row] = dot(dequant(W[row]), x[t]). Twin of crates/model/src/ops/matvec.rs: each chunk of 8
// weights is dequantized exactly as the CPU codec does (the same operations, so the same bits), then the
// reduction contract: lane L owns chunks L, L + 32, …; each chunk's 8 fmas into a fresh +0, added to the
// lane's running total; the butterfly. One warp per row; the row's weights are read once for all T tokens.

// A weight row's chunk c (elements 8c .. 8c + 7) as f32, per type. `row` is the row's first byte.
__device__ __forceinline__ unsigned short u16_at(const unsigned char* p) {
    return (unsigned short)(p[0] | (p[1] << 8));
}

struct F32W {
    static constexpr int BS = 1, TS = 4;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        load8_f32(reinterpret_cast<const float*>(row) + 8 * c, w);
    }
};

// Eight 16-bit values in one 16-byte load (a row of 8k halves starts 16-byte aligned).
__device__ __forceinline__ void load8_u16(const unsigned char* p, u32* h) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        h[2 * i] = words[i] & 0xffffu;
        h[2 * i + 1] = words[i] >> 16;
    }
}

struct F16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        u32 h[8];
        load8_u16(row + 16 * c, h);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = f16_bits_to_f32((unsigned short)h[e]);
    }
};

struct BF16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        u32 h[8];
        load8_u16(row + 16 * c, h);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __uint_as_float(h[e] << 16);
    }
};

// Q8_0: blocks of 32 in 34 bytes: fp16 d, 32 int8 codes; value = q·d.
struct Q8_0W {
    static constexpr int BS = 32, TS = 34;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 34;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn((float)(signed char)b[2 + o + e], d);
    }
};

// Q4_0: blocks of 32 in 18 bytes: fp16 d, 16 bytes; element j < 16 is byte j's low nibble, j ≥ 16 byte
// j − 16's high nibble; value = (q − 8)·d.
struct Q4_0W {
    static constexpr int BS = 32, TS = 18;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 18;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int j = o + e;
            const int q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
            w[e] = __fmul_rn((float)(q - 8), d);
        }
    }
};

// Q5_0: blocks of 32 in 22 bytes: fp16 d, 32 high bits (u32, bit j for element j), 16 bytes of low
// nibbles as Q4_0; value = (q − 16)·d.
struct Q5_0W {
    static constexpr int BS = 32, TS = 22;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 22;
        const float d = f16_bits_to_f32(u16_at(b));
        const u32 qh = (u32)b[2] | ((u32)b[3] << 8) | ((u32)b[4] << 16) | ((u32)b[5] << 24);
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int j = o + e;
            const int lo = j < 16 ? (b[6 + j] & 0xf) : (b[6 + j - 16] >> 4);
            const int q = lo | (int)(((qh >> j) & 1u) << 4);
            w[e] = __fmul_rn((float)(q - 16), d);
        }
    }
};

// Q2_0: blocks of 64 in 18 bytes: fp16 d, 16 bytes of 2-bit codes (element i: bits 2·(i%4) of byte i/4);
// value = (code − 1)·d.
struct Q2_0W {
    static constexpr int BS = 64, TS = 18;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 64) * 18;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 64;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int i = o + e;
            const int code = (b[2 + i / 4] >> (2 * (i % 4))) & 3;
            w[e] = __fmul_rn((float)(code - 1), d);
        }
    }
};


// The K-quants: super-blocks of 256. `p` is the chunk's first element within its super-block.
__device__ __forceinline__ void scale_min_k4(int j, const unsigned char* q, int* s, int* m) {
    if (j < 4) {
        *s = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *s = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, qs[128]; value = (d·sc)·q − dmin·m.
struct Q4_KW {
    static constexpr int BS = 256, TS = 144;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 144;
        const int p = (8 * c) % 256, j = p / 32, l0 = p % 32;
        int s, m;
        scale_min_k4(j, b + 4, &s, &m);
        const float d1 = __fmul_rn(f16_bits_to_f32(u16_at(b)), (float)s);
        const float m1 = __fmul_rn(f16_bits_to_f32(u16_at(b + 2)), (float)m);
        const unsigned char* q = b + 16 + 32 * (j / 2);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fsub_rn(__fmul_rn(d1, (float)((q[l0 + e] >> (4 * (j % 2))) & 0xf)), m1);
    }
};

// Q5_K: Q4_K plus qh[32] (element 32j + l takes bit j of qh[l] as its fifth bit); qs at 48.
struct Q5_KW {
    static constexpr int BS = 256, TS = 176;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 176;
        const int p = (8 * c) % 256, j = p / 32, l0 = p % 32;
        int s, m;
        scale_min_k4(j, b + 4, &s, &m);
        const float d1 = __fmul_rn(f16_bits_to_f32(u16_at(b)), (float)s);
        const float m1 = __fmul_rn(f16_bits_to_f32(u16_at(b + 2)), (float)m);
        const unsigned char* qh = b + 16;
        const unsigned char* q = b + 48 + 32 * (j / 2);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int l = l0 + e;
            const int v = ((q[l] >> (4 * (j % 2))) & 0xf) | (((qh[l] >> j) & 1) << 4);
            w[e] = __fsub_rn(__fmul_rn(d1, (float)v), m1);
        }
    }
};

// Q6_K: ql[128], qh[64], 16 int8 scales, d; value = (d·sc)·(q − 32).
struct Q6_KW {
    static constexpr int BS = 256, TS = 210;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 210;
        const int p = (8 * c) % 256, n = p / 128, k = (p % 128) / 32, l0 = p % 32;
        const float d = f16_bits_to_f32(u16_at(b + 208));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int l = l0 + e;
            const int lo = (b[n * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xf;
            const int hi = (b[128 + n * 32 + l] >> (2 * k)) & 3;
            const float sc = (float)(signed char)b[192 + n * 8 + 2 * k + l / 16];
            w[e] = __fmul_rn(__fmul_rn(d, sc), (float)((lo | (hi << 4)) - 32));
        }
    }
};

// Q3_K: hmask[32], qs[64], 12 bytes of 16 six-bit scales, d; value = (d·(scale − 32))·(q − sub).
struct Q3_KW {
    static constexpr int BS = 256, TS = 110;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 110;
        const int p = (8 * c) % 256, n = p / 128, j = (p % 128) / 32, l0 = p % 32;
        const unsigned char* sc = b + 96;
        const int is = n * 8 + 2 * j + l0 / 16;  // a chunk of 8 lies in one half of 16
        const int lo = (sc[is % 8] >> (4 * (is / 8))) & 0xf, hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
        const float dl = __fmul_rn(f16_bits_to_f32(u16_at(b + 108)), (float)((lo | (hi << 4)) - 32));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int l = l0 + e;
            const int q = (b[32 + n * 32 + l] >> (2 * j)) & 3;
            const int sub = 4 - 4 * ((b[l] >> (n * 4 + j)) & 1);
            w[e] = __fmul_rn(dl, (float)(q - sub));
        }
    }
};

// The IQ4 formats' 16 values.
__constant__ signed char IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL: blocks of 32 in 18 bytes, Q4_0's nibble layout; value = d·table[q].
struct IQ4_NLW {
    static constexpr int BS = 32, TS = 18;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 18;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int j = o + e;
            const int q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
            w[e] = __fmul_rn(d, (float)IQ4_VALUES[q]);
        }
    }
};

// IQ4_XS: d, scales_h (u16), scales_l[4], then 8 runs of 16 bytes; run ib: d·(scale − 32) times the table.
struct IQ4_XSW {
    static constexpr int BS = 256, TS = 136;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 136;
        const int p = (8 * c) % 256, ib = p / 32, o = p % 32;
        const int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf, hi = (u16_at(b + 2) >> (2 * ib)) & 3;
        const float dl = __fmul_rn(f16_bits_to_f32(u16_at(b)), (float)((lo | (hi << 4)) - 32));
        const unsigned char* qs = b + 8 + 16 * ib;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int j = o + e;
            const int q = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
            w[e] = __fmul_rn(dl, (float)IQ4_VALUES[q]);
        }
    }
};

// The lattice formats (the experts' types): groups of 8 (IQ2_XS) or 4 (IQ3_*) magnitudes from a grid
// (IQ2XS_GRID, IQ3XXS_GRID, IQ3S_GRID, prepended from strata_gguf's tables), signs from a 7-bit index with
// even parity (IQ2_XS, IQ3_XXS) or a bit each (IQ3_S). A chunk of 8 is one IQ2 group, two IQ3 groups.
__device__ __forceinline__ unsigned int ksigns(unsigned int i) { return i | ((__popc(i) & 1u) << 7); }
__device__ __forceinline__ float signed_by(float v, unsigned int negative) {
    return __uint_as_float(__float_as_uint(v) ^ (negative << 31));
}

// IQ2_XS: d, qs[32] u16 (9-bit grid index | 7-bit sign index << 9), scales[8] (a nibble per 16);
// value = d·(0.5 + s)·0.25 · grid · sign.
struct IQ2_XSW {
    static constexpr int BS = 256, TS = 74;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 74;
        const int p = (8 * c) % 256, ib = p / 32, l = (p % 32) / 8;
        const int s = (b[66 + ib] >> (4 * (l / 2))) & 0xf;
        const float db = __fmul_rn(__fmul_rn(f16_bits_to_f32(u16_at(b)), __fadd_rn(0.5f, (float)s)), 0.25f);
        const unsigned int q = u16_at(b + 2 + 2 * (4 * ib + l));
        const unsigned long long grid = IQ2XS_GRID[q & 511];
        const unsigned int signs = ksigns(q >> 9);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            w[j] = signed_by(__fmul_rn(db, (float)((grid >> (8 * j)) & 0xff)), (signs >> j) & 1);
        }
    }
};

// IQ3_XXS: d, qs[64] grid indices (4 elements each), per 32 elements a u32 of four 7-bit sign indices and
// the scale in the top 4 bits; value = d·(0.5 + s)·0.5 · grid · sign.
struct IQ3_XXSW {
    static constexpr int BS = 256, TS = 98;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 98;
        const int p = (8 * c) % 256, ib = p / 32, l = (p % 32) / 8;
        const unsigned char* a = b + 66 + 4 * ib;
        const u32 aux = (u32)a[0] | ((u32)a[1] << 8) | ((u32)a[2] << 16) | ((u32)a[3] << 24);
        const float db = __fmul_rn(__fmul_rn(f16_bits_to_f32(u16_at(b)), __fadd_rn(0.5f, (float)(aux >> 28))), 0.5f);
        const unsigned int signs = ksigns((aux >> (7 * l)) & 127);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const unsigned int grid = IQ3XXS_GRID[b[2 + 8 * ib + 2 * l + half]];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int k = 4 * half + j;
                w[k] = signed_by(__fmul_rn(db, (float)((grid >> (8 * j)) & 0xff)), (signs >> k) & 1);
            }
        }
    }
};

// IQ3_S: d, qs[64] (low 8 bits of 9-bit indices), qh[8] (their top bits, a byte per 32), signs[32] (a bit
// per element), scales[4] (a nibble per 32); value = d·(1 + 2s) · grid · sign.
struct IQ3_SW {
    static constexpr int BS = 256, TS = 110;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 256) * 110;
        const int p = (8 * c) % 256, ib = p / 32;
        const int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        const float db = __fmul_rn(f16_bits_to_f32(u16_at(b)), (float)(1 + 2 * s));
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int e = p + k, g = (e % 32) / 4, j = e % 4;
            const int idx = b[2 + 8 * ib + g] | (((b[66 + ib] >> g) & 1) << 8);
            const unsigned int grid = IQ3S_GRID[idx];
            w[k] = signed_by(__fmul_rn(db, (float)((grid >> (8 * j)) & 0xff)), (b[74 + e / 8] >> (e % 8)) & 1);
        }
    }
};

// Chunk c of a row dotted with the T inputs (x + t·x_stride): d[t] = the chunk's 8-fma sum.
template <typename W>
__device__ __forceinline__ void chunk_dots(const unsigned char* r, int c, const float* x, size_t x_stride, int T,
                                           float* d) {
    float w[8];
    W::chunk(r, c, w);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < T) {
            float xv[8];
            load8_f32(x + (size_t)t * x_stride + 8 * c, xv);
            d[t] = chunk_dot(w, xv);
        }
    }
}

// A block per row (per row and slot for the experts), its warps side by side over the row: in each round
// the block reads 32·warps consecutive chunks at once, thread (w, L) dotting chunk 32·w + L of the round with
// the T inputs; then lane L of warp 0 adds the round's chunks 32·w + L, w ascending, to its running total.
// Those are lane L's chunks of the contract in its order, so the sums are the contract's, with `warps` times
// the loads in flight of a warp alone. At most MATVEC_WARPS warps (the host's ROW_WARPS).
#define MATVEC_WARPS 4
template <typename W>
__device__ void matvec_row(const unsigned char* __restrict__ r, const float* __restrict__ x, size_t x_stride,
                           float* __restrict__ y, size_t y_stride, int cols, int T) {
    __shared__ float parts[8][MATVEC_WARPS][WARP];  // [t][warp][lane]
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    const int nch = cols / CHUNK;
    float acc[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t] = 0.0f;
    for (int c0 = 0; c0 < nch; c0 += WARP * warps) {
        const int c = c0 + threadIdx.x;
        if (c < nch) {
            float d[8];
            chunk_dots<W>(r, c, x, x_stride, T, d);
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                if (t < T) parts[t][warp][lane] = d[t];
            }
        }
        __syncthreads();
        if (warp == 0) {
            for (int w = 0; w < warps && c0 + WARP * w + lane < nch; ++w) {
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    if (t < T) acc[t] = __fadd_rn(acc[t], parts[t][w][lane]);
                }
            }
        }
        __syncthreads();
    }
    if (warp == 0) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < T) {
                const float v = warp_butterfly(acc[t]);
                if (lane == 0) y[(size_t)t * y_stride] = v;
            }
        }
    }
}

// y[t][row] = W[row]·x[t] for t < T; blockIdx.x = row.
template <typename W>
__device__ void matvec_rows(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                            float* __restrict__ y, int rows, int cols, int T) {
    const int row = blockIdx.x;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    matvec_row<W>(wbase + (size_t)row * row_bytes, x, cols, y + row, rows, cols, T);
}

// The experts' products: for each (token t, slot s) of the window (blockIdx.y = t·k + s), the `rows` rows
// of expert ids[t·k + s] (starting at row id·stride + offset of the stacked matrix) times the input at
// x + t·x_tok + s·x_slot; y[(t·k + s)·rows + row], blockIdx.x = row.
template <typename W>
__device__ void matvec_gather_rows(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                   float* __restrict__ y, int rows, int cols, const int* __restrict__ ids, int k,
                                   int stride, int offset, int x_tok, int x_slot) {
    const int row = blockIdx.x, ts = blockIdx.y, t = ts / k, s = ts % k;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + ((size_t)ids[ts] * stride + offset + row) * row_bytes;
    matvec_row<W>(r, x + (size_t)t * x_tok + (size_t)s * x_slot, 0, y + (size_t)ts * rows + row, 0, cols, 1);
}

// The warp layout (the plan picks it per type where it is faster): a warp per row, 8 rows a block, lane L
// adding its chunks L, L + 32, … in order, then the butterfly; the same sums as matvec_row.
template <typename W>
__device__ void matvec_rows_warp(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                 float* __restrict__ y, int rows, int cols, int T) {
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    const int row = blockIdx.x * warps + threadIdx.x / WARP;
    if (row >= rows) return;
    const unsigned char* r = wbase + (size_t)row * ((size_t)(cols / W::BS) * W::TS);
    float acc[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t] = 0.0f;
    for (int c = lane; c < cols / CHUNK; c += WARP) {
        float d[8];
        chunk_dots<W>(r, c, x, cols, T, d);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < T) acc[t] = __fadd_rn(acc[t], d[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < T) {
            const float v = warp_butterfly(acc[t]);
            if (lane == 0) y[(size_t)t * rows + row] = v;
        }
    }
}

// matvec_gather_rows in the warp layout: a warp per row of the slot's expert.
template <typename W>
__device__ void matvec_gather_rows_warp(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                        float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                        int k, int stride, int offset, int x_tok, int x_slot) {
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    const int row = blockIdx.x * warps + threadIdx.x / WARP, ts = blockIdx.y, t = ts / k, s = ts % k;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + ((size_t)ids[ts] * stride + offset + row) * row_bytes;
    const float* xv0 = x + (size_t)t * x_tok + (size_t)s * x_slot;
    float acc = 0.0f;
    for (int c = lane; c < cols / CHUNK; c += WARP) {
        float d[8];
        chunk_dots<W>(r, c, xv0, 0, 1, d);
        acc = __fadd_rn(acc, d[0]);
    }
    const float v = warp_butterfly(acc);
    if (lane == 0) y[(size_t)ts * rows + row] = v;
}

// Embedding rows: token t's row of W (cols values) dequantized and written hc times, the residual streams
// R = [e, e, …] (spec §2). One block per token.
template <typename W>
__device__ void embed_rows(const unsigned char* __restrict__ wbase, const int* __restrict__ ids,
                           float* __restrict__ out, int cols, int hc) {
    const int t = blockIdx.x;
    const unsigned char* r = wbase + (size_t)ids[t] * ((size_t)(cols / W::BS) * W::TS);
    for (int c = threadIdx.x; c < cols / CHUNK; c += blockDim.x) {
        float w[8];
        W::chunk(r, c, w);
        for (int s = 0; s < hc; ++s) {
#pragma unroll
            for (int e = 0; e < 8; ++e) out[((size_t)t * hc + s) * cols + CHUNK * c + e] = w[e];
        }
    }
}

#define MATVEC(NAME, W)                                                                                       \
    extern "C" __global__ void NAME(const unsigned char* __restrict__ w, const float* __restrict__ x,          \
                                    float* __restrict__ y, int rows, int cols, int T) {                       \
        matvec_rows<W>(w, x, y, rows, cols, T);                                                               \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather(const unsigned char* __restrict__ w, const float* __restrict__ x, \
                                             float* __restrict__ y, int rows, int cols, const int* ids, int k, \
                                             int stride, int offset, int x_tok, int x_slot) {                  \
        matvec_gather_rows<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot);                    \
    }                                                                                                         \
    extern "C" __global__ void NAME##_warp(const unsigned char* __restrict__ w, const float* __restrict__ x,     \
                                           float* __restrict__ y, int rows, int cols, int T) {                  \
        matvec_rows_warp<W>(w, x, y, rows, cols, T);                                                          \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_warp(const unsigned char* __restrict__ w,                          \
                                                  const float* __restrict__ x, float* __restrict__ y, int rows, \
                                                  int cols, const int* ids, int k, int stride, int offset,      \
                                                  int x_tok, int x_slot) {                                      \
        matvec_gather_rows_warp<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot);               \
    }                                                                                                         \
    extern "C" __global__ void NAME##_embed(const unsigned char* __restrict__ w, const int* __restrict__ ids,  \
                                            float* __restrict__ out, int cols, int hc) {                       \
        embed_rows<W>(w, ids, out, cols, hc);                                                                 \
    }

MATVEC(matvec_f32, F32W)
MATVEC(matvec_f16, F16W)
MATVEC(matvec_bf16, BF16W)
MATVEC(matvec_q8_0, Q8_0W)
MATVEC(matvec_q4_0, Q4_0W)
MATVEC(matvec_q2_0, Q2_0W)
MATVEC(matvec_q5_0, Q5_0W)
MATVEC(matvec_iq2_xs, IQ2_XSW)
MATVEC(matvec_iq3_xxs, IQ3_XXSW)
MATVEC(matvec_iq3_s, IQ3_SW)
MATVEC(matvec_q4_k, Q4_KW)
MATVEC(matvec_q5_k, Q5_KW)
MATVEC(matvec_q6_k, Q6_KW)
MATVEC(matvec_q3_k, Q3_KW)
MATVEC(matvec_iq4_nl, IQ4_NLW)
MATVEC(matvec_iq4_xs, IQ4_XSW)
