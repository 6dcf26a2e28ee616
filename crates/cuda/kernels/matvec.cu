// Matrix-vector products over quantized weights (docs/ARITHMETIC.md § matvec) for a window of T = 1..8
// tokens: y[t][row] = dot(dequant(W[row]), x[t]). Twin of crates/model/src/ops/matvec.rs: each chunk of 8
// weights is dequantized exactly as the CPU codec does (the same operations, so the same bits), then the
// reduction contract: lane L owns chunks L, L + 32, …; each chunk's 8 fmas into a fresh +0, added to the
// lane's running total; the butterfly. One warp per row; the row's weights are read once for all T tokens.

// The weight decoders (F32W, …, IQ3_SW) are in dequant.cuh, prepended to this file.

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

// The experts' gathers in the warp layouts read a short span of bytes per warp (a row, or a few rows, of
// one expert: 720 bytes for a Q2_0 row of 2,560) in a loop of a few steps, each step's loads waiting for
// the last step's sums: a memory round trip per step. The warp first asks for every cache line of its span
// at once (common.cuh's prefetch_l2, a lane a line). MATVEC_PREFETCH: 1 into L1, 2 into L2 (+1.0% in
// decode at depth 1,024 against none, L1 −0.5%: bench/results/2026-12-01-h200-speed-8/), 0 none.
#ifndef MATVEC_PREFETCH
#define MATVEC_PREFETCH 2
#endif
__device__ __forceinline__ void prefetch_span(const unsigned char* p, size_t bytes, int lane) {
#if MATVEC_PREFETCH == 1
    const size_t end = (size_t)p + bytes;
    for (size_t a = ((size_t)p & ~(size_t)127) + 128u * lane; a < end; a += 128u * WARP) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
    }
#elif MATVEC_PREFETCH == 2
    prefetch_l2(p, bytes, lane, WARP);
#endif
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
                                   int stride, int offset, int x_tok, int x_slot, const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int row = blockIdx.x, t = ts / k, s = ts % k;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + ((size_t)id * stride + offset + row) * row_bytes;
    matvec_row<W>(r, x + (size_t)t * x_tok + (size_t)s * x_slot, 0, y + (size_t)ts * rows + row, 0, cols, 1);
}

// Lane `lane`'s chunks c = lane, lane + 32, … of a row lie at one offset p of blocks `step` bytes apart
// (every block size divides 256), so the decoders' offset arithmetic is made once, outside the loop.
template <typename W>
struct LaneChunks {
    const unsigned char* b;  // the block of chunk `lane`
    unsigned p;              // its offset in the block
    size_t step;             // bytes from a chunk's block to the block of the chunk 32 on
    __device__ __forceinline__ LaneChunks(const unsigned char* row, int lane)
        : b(row + (size_t)(8u * lane / W::BS) * W::TS), p((8u * lane) % W::BS), step((size_t)(256 / W::BS) * W::TS) {}
    // Chunk lane + 32·i.
    __device__ __forceinline__ void get(int i, float* w) const { W::at(b + (size_t)i * step, p, w); }
};

// One warp's row dotted with the T inputs (x + t·x_stride): lane L adds its chunks L, L + 32, … in order,
// then the butterfly; lane 0 writes y[t·y_tok]. The row may be in global or shared memory.
template <typename W>
__device__ __forceinline__ void warp_row_dots(const unsigned char* row, const float* __restrict__ x,
                                              size_t x_stride, float* __restrict__ y, size_t y_tok, int cols,
                                              int T, int lane) {
    const LaneChunks<W> lc(row, lane);
    float acc[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t] = 0.0f;
    for (int c = lane, i = 0; c < cols / CHUNK; c += WARP, ++i) {
        float w[8];
        lc.get(i, w);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < T) {
                float xv[8];
                load8_f32(x + (size_t)t * x_stride + CHUNK * c, xv);
                acc[t] = __fadd_rn(acc[t], chunk_dot(w, xv));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < T) {
            const float v = warp_butterfly(acc[t]);
            if (lane == 0) y[(size_t)t * y_tok] = v;
        }
    }
}

// One token's row dot, lane L's chunks L, L + 32, … two at a time: both decoded and both 8-fma chains in
// flight together (independent until they are added to the lane's total, in order). Every lane returns
// the row's sum, and lane 0 is to write it.
template <typename W>
__device__ __forceinline__ float row_dot_1(const unsigned char* row, const float* __restrict__ x, int nch) {
    const int lane = threadIdx.x % WARP;
    const LaneChunks<W> lc(row, lane);
    float acc = 0.0f;
    int c = lane, i = 0;
    for (; c + WARP < nch; c += 2 * WARP, i += 2) {
        float w0[8], w1[8], x0[8], x1[8];
        lc.get(i, w0);
        lc.get(i + 1, w1);
        load8_f32(x + CHUNK * c, x0);
        load8_f32(x + CHUNK * (c + WARP), x1);
        const float d0 = chunk_dot(w0, x0), d1 = chunk_dot(w1, x1);
        acc = __fadd_rn(__fadd_rn(acc, d0), d1);
    }
    if (c < nch) {
        float w0[8], x0[8];
        lc.get(i, w0);
        load8_f32(x + CHUNK * c, x0);
        acc = __fadd_rn(acc, chunk_dot(w0, x0));
    }
    return warp_butterfly(acc);
}

// One warp's row (in global or shared memory) dotted with the T inputs: y[t·y_tok] for t < T; a single
// token's with two chunks in flight. ONE: a kernel for a single token only, compiled without the window's
// code (whose registers would otherwise count for the single token too).
template <typename W, bool ONE = false>
__device__ __forceinline__ void warp_row(const unsigned char* row, const float* __restrict__ x,
                                                  size_t x_stride, float* __restrict__ y, size_t y_tok, int cols,
                                                  int T, int lane) {
    if (ONE || T == 1) {
        const float v = row_dot_1<W>(row, x, cols / CHUNK);
        if (lane == 0) y[0] = v;
    } else {
        warp_row_dots<W>(row, x, x_stride, y, y_tok, cols, T, lane);
    }
}

// A single token's dots with nv ≤ R consecutive rows (row_bytes apart) by one warp: each chunk of x is
// loaded once for all of them, and each row's sum is its own (lane L's chunks L, L + 32, … in order, then
// the butterfly). For short rows, where one row leaves a warp little to keep in flight.
template <typename W, int R>
__device__ __forceinline__ void warp_rows_1(const unsigned char* first, size_t row_bytes, int nv,
                                            const float* __restrict__ x, int nch, float* __restrict__ y) {
    const int lane = threadIdx.x % WARP;
    const LaneChunks<W> lc(first, lane);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    for (int c = lane, i = 0; c < nch; c += WARP, ++i) {
        float xv[8];
        load8_f32(x + CHUNK * c, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < nv) {
                float w[8];
                W::at(lc.b + (size_t)r * row_bytes + (size_t)i * lc.step, lc.p, w);
                acc[r] = __fadd_rn(acc[r], chunk_dot(w, xv));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r < nv) {
            const float v = warp_butterfly(acc[r]);
            if (lane == 0) y[r] = v;
        }
    }
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
    warp_row<W>(r, x, cols, y + row, rows, cols, T, lane);
}

// matvec_gather_rows in the warp layout: a warp per row of the slot's expert.
template <typename W>
__device__ void matvec_gather_rows_warp(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                        float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                        int k, int stride, int offset, int x_tok, int x_slot,
                                        const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    const int row = blockIdx.x * warps + threadIdx.x / WARP, t = ts / k, s = ts % k;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + ((size_t)id * stride + offset + row) * row_bytes;
    prefetch_span(r, row_bytes, lane);
    const float* xv0 = x + (size_t)t * x_tok + (size_t)s * x_slot;
    warp_row<W>(r, xv0, 0, y + (size_t)ts * rows + row, 0, cols, 1, lane);
}

// The experts' gate and up products with the activation (STRATA_GLU=1): a warp takes row i of slot ts's
// gate and up projections (each chunk of the token's input loaded once for both) and writes
// h = silu(g)·u, the product rounded, as moe_act does. Each of g and u is the contract's row sum (lane L's
// chunks L, L + 32, … in order, then the butterfly), as in any layout: the same bits as the two gathers
// and moe_act, without their g and u in memory and without the activation's launch.
template <typename W>
__device__ void matvec_gather_glu_rows(const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
                                       const float* __restrict__ x, float* __restrict__ h, int rows, int cols,
                                       const int* __restrict__ ids, int k, int stride, int off_g, int off_u,
                                       int x_tok, int x_slot, const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    const int row = blockIdx.x * warps + threadIdx.x / WARP, t = ts / k, s = ts % k;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS, e = (size_t)id * stride;
    const unsigned char *rg = wg + (e + off_g + row) * row_bytes, *ru = wu + (e + off_u + row) * row_bytes;
    prefetch_span(rg, row_bytes, lane);
    prefetch_span(ru, row_bytes, lane);
    const LaneChunks<W> g(rg, lane), u(ru, lane);
    const float* xs = x + (size_t)t * x_tok + (size_t)s * x_slot;
    float ag = 0.0f, au = 0.0f;
    for (int c = lane, i = 0; c < cols / CHUNK; c += WARP, ++i) {
        float xv[8], wv[8], uv[8];
        load8_f32(xs + CHUNK * c, xv);
        g.get(i, wv);
        u.get(i, uv);
        ag = __fadd_rn(ag, chunk_dot(wv, xv));
        au = __fadd_rn(au, chunk_dot(uv, xv));
    }
    ag = warp_butterfly(ag);
    au = warp_butterfly(au);
    if (lane == 0) h[(size_t)ts * rows + row] = __fmul_rn(s_silu(ag), au);
}

// The warp layout's kernels for a single token's short rows (the host uses them for rows of at most 1,024
// values): a warp takes SHORT_ROWS consecutive rows, 8 warps a block.
#define SHORT_ROWS 4
template <typename W>
__device__ void matvec_rows_short(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                  float* __restrict__ y, int rows, int cols) {
    const int row = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * SHORT_ROWS;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    warp_rows_1<W, SHORT_ROWS>(wbase + (size_t)row * row_bytes, row_bytes, min(SHORT_ROWS, rows - row), x,
                               cols / CHUNK, y + row);
}

template <typename W>
__device__ void matvec_gather_rows_short(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                         float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                         int k, int stride, int offset, int x_tok, int x_slot,
                                         const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int row = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * SHORT_ROWS;
    const int t = ts / k, s = ts % k;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + ((size_t)id * stride + offset + row) * row_bytes;
    const int nv = min(SHORT_ROWS, rows - row);
    prefetch_span(r, nv * row_bytes, threadIdx.x % WARP);
    warp_rows_1<W, SHORT_ROWS>(r, row_bytes, nv, x + (size_t)t * x_tok + (size_t)s * x_slot,
                               cols / CHUNK, y + (size_t)ts * rows + row);
}

// The experts' down products and the MoE combination in one launch (STRATA_DOWN_COMBINE=1): a block takes
// SHORT_ROWS output rows of one token (blockIdx.y) for all k slots, warp s making slot s's rows as
// matvec_gather_rows_short does (the same sums) into shared memory; then y[t][d] of those rows exactly as
// moe.cu's moe_combine: the fma chain over the slots in rank order of weight · slot output from +0, then
// fma(σ(shared gate), shared[t][d], ·). The slots' outputs never reach memory, and the combination is no
// launch of its own. At most 32 slots (a warp each).
template <typename W>
__device__ void matvec_gather_combine_rows(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                           float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                           int k, int stride, int offset, int x_tok, int x_slot,
                                           const float* __restrict__ weights, const float* __restrict__ shared,
                                           const float* __restrict__ sgate) {
    __shared__ float e[WARP][SHORT_ROWS];
    const int s = threadIdx.x / WARP, t = blockIdx.y, row = blockIdx.x * SHORT_ROWS;
    const int nv = min(SHORT_ROWS, rows - row);
    if (s < k && nv > 0) {
        const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
        const unsigned char* r = wbase + ((size_t)ids[t * k + s] * stride + offset + row) * row_bytes;
        prefetch_span(r, nv * row_bytes, threadIdx.x % WARP);
        warp_rows_1<W, SHORT_ROWS>(r, row_bytes, nv, x + (size_t)t * x_tok + (size_t)s * x_slot, cols / CHUNK, e[s]);
    }
    __syncthreads();
    if (threadIdx.x < nv) {
        const size_t i = (size_t)t * rows + row + threadIdx.x;
        float v = 0.0f;
        for (int q = 0; q < k; ++q) v = __fmaf_rn(weights[t * k + q], e[q][threadIdx.x], v);
        y[i] = __fmaf_rn(s_sigmoid(sgate[t]), shared[i], v);
    }
}

// The warp layout's kernels for a window (T > 1): a warp takes MULTI_ROWS consecutive rows, 8 warps a
// block, so each chunk of each token's input is loaded once for all of them (a warp per row would load the
// window's inputs again for every row, and at T = 8 those loads, not the weights, bound the product). Each
// (row, token) sum is lane L's chunks L, L + 32, … in order, then the butterfly: the contract's.
#define MULTI_ROWS 4
template <typename W>
__device__ void matvec_rows_multi(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                  float* __restrict__ y, int rows, int cols, int T) {
    const int row = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * MULTI_ROWS;
    if (row >= rows) return;
    const int nv = min(MULTI_ROWS, rows - row), lane = threadIdx.x % WARP;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const LaneChunks<W> lc(wbase + (size_t)row * row_bytes, lane);
    float acc[MULTI_ROWS][8];
#pragma unroll
    for (int r = 0; r < MULTI_ROWS; ++r) {
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[r][t] = 0.0f;
    }
    for (int c = lane, i = 0; c < cols / CHUNK; c += WARP, ++i) {
        float w[MULTI_ROWS][8];
#pragma unroll
        for (int r = 0; r < MULTI_ROWS; ++r) {
            if (r < nv) W::at(lc.b + (size_t)r * row_bytes + (size_t)i * lc.step, lc.p, w[r]);
        }
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < T) {
                float xv[8];
                load8_f32(x + (size_t)t * cols + CHUNK * c, xv);
#pragma unroll
                for (int r = 0; r < MULTI_ROWS; ++r) {
                    if (r < nv) acc[r][t] = __fadd_rn(acc[r][t], chunk_dot(w[r], xv));
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MULTI_ROWS; ++r) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (r < nv && t < T) {
                const float v = warp_butterfly(acc[r][t]);
                if (lane == 0) y[(size_t)t * rows + row + r] = v;
            }
        }
    }
}

// The staged layout: a block takes rpb consecutive rows (up to 32, with up to 8 warps), which are one span
// of bytes (of one slot's expert for the gathers). First the block copies the whole span into shared
// memory, 16 bytes a copy, so the card sees wide coalesced reads with many bytes in flight (a warp
// decoding its row from global memory keeps only a few small loads in flight). On sm_80+ the copies are
// asynchronous (cp.async): every thread issues all of its copies at once, so a block of few threads and
// long rows (Q8_0's 2 rows of 6,528 bytes on 64 threads) waits for memory once, not once per few loads;
// before sm_80, STAGE_LOADS loads a thread in flight at once, through registers. Then each warp decodes
// its rows from shared memory, lane L its chunks L, L + 32, … in order, and the butterfly: the contract's
// sums. The copy starts at the 16-byte boundary below the span and keeps each byte's address mod 16, so
// the decoders' aligned loads stay aligned; matrices are uploaded with 16 bytes of padding, so the copy's
// rounded-up end stays inside the allocation.
#define STAGE_LOADS 4
//
// `early`: the dense products' weights do not depend on the kernels before, so with programmatic launches
// (the default) the copy is issued before grid_dep_wait, while the kernel before finishes; only then are x read
// and y written. (A gather's rows depend on the routing's ids, so it waits first, at its top.)
template <typename W, bool ONE>
__device__ void matvec_staged(const unsigned char* __restrict__ w0, size_t row_bytes, const float* __restrict__ x,
                              size_t x_stride, float* __restrict__ y, size_t y_tok, int nr, int cols, int T,
                              bool early) {
    extern __shared__ uint4 stage[];
    const size_t a = (size_t)w0 & 15;
    const uint4* src = (const uint4*)(w0 - a);
    const int n16 = (int)((a + nr * row_bytes + 15) / 16);
#if __CUDA_ARCH__ >= 800
    for (int i = threadIdx.x; i < n16; i += blockDim.x) stage_copy16(stage + i, src + i);
    stage_commit();
    if (early) grid_dep_wait();
    stage_wait<0>();
#else
    for (int i0 = threadIdx.x; i0 < n16; i0 += STAGE_LOADS * blockDim.x) {
        uint4 v[STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; ++u) {
            const int i = i0 + u * blockDim.x;
            if (i < n16) v[u] = __ldcs(src + i);
        }
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; ++u) {
            const int i = i0 + u * blockDim.x;
            if (i < n16) stage[i] = v[u];
        }
    }
    if (early) grid_dep_wait();
#endif
    __syncthreads();
    const int lane = threadIdx.x % WARP;
    for (int r = threadIdx.x / WARP; r < nr; r += blockDim.x / WARP) {
        warp_row<W, ONE>((const unsigned char*)stage + a + (size_t)r * row_bytes, x, x_stride, y + r, y_tok,
                             cols, T, lane);
    }
}

// The stream layout: the staged layout's groups of rpb rows, `groups` consecutive ones a block, passed
// through two shared-memory buffers: while the warps decode group i from one buffer, group i + 1 is
// already being copied into the other. Each buffer holds a group as the staged layout's copy does (from
// the 16-byte boundary below it, each byte at its address mod 16), and each row is decoded by the same
// warp_row: the same sums. Fewer blocks than groups, so the card holds them all at once and each
// multiprocessor's copies and decoding overlap instead of taking turns. The first group's copy is
// issued before grid_dep_wait (the weights do not depend on the kernels before).
template <typename W>
__device__ void matvec_rows_stream(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                   float* __restrict__ y, int rows, int cols, int T, int rpb, int groups) {
    extern __shared__ uint4 stage[];
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const int buf16 = (int)((rpb * row_bytes + 32) / 16);  // one buffer, in 16-byte words (the host: twice)
    const int first = blockIdx.x * groups;
    const int ng = min(groups, (rows + rpb - 1) / rpb - first);
    // Group i's rows: the first, how many, and their bytes' offset from the 16-byte boundary below.
    const auto span = [&](int i, int* row0, int* nr) {
        *row0 = (first + i) * rpb;
        *nr = min(rpb, rows - *row0);
        return (size_t)(wbase + (size_t)*row0 * row_bytes) & 15;
    };
    const auto fetch = [&](int i) {
        int row0, nr;
        const size_t a = span(i, &row0, &nr);
        const uint4* src = reinterpret_cast<const uint4*>(wbase + (size_t)row0 * row_bytes - a);
        const int n16 = (int)((a + nr * row_bytes + 15) / 16);
        uint4* dst = stage + (i % 2) * buf16;
        for (int k = threadIdx.x; k < n16; k += blockDim.x) stage_copy16(dst + k, src + k);
        stage_commit();
    };
    if (ng > 0) fetch(0);
    grid_dep_wait();
    const int lane = threadIdx.x % WARP;
    for (int i = 0; i < ng; ++i) {
        if (i + 1 < ng) {
            fetch(i + 1);
            stage_wait<1>();
        } else {
            stage_wait<0>();
        }
        __syncthreads();  // group i's bytes, copied by every thread, visible to all
        int row0, nr;
        const size_t a = span(i, &row0, &nr);
        const unsigned char* s = reinterpret_cast<const unsigned char*>(stage + (i % 2) * buf16) + a;
        for (int r = threadIdx.x / WARP; r < nr; r += blockDim.x / WARP) {
            warp_row<W>(s + (size_t)r * row_bytes, x, cols, y + row0 + r, rows, cols, T, lane);
        }
        __syncthreads();  // buffer i % 2 read by every warp before group i + 2 is copied into it
    }
}

// Dense products in the staged layout: blockIdx.x takes rows rpb·x .. rpb·x + rpb − 1 (ONE: of a single
// token).
template <typename W, bool ONE>
__device__ void matvec_rows_staged(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                   float* __restrict__ y, int rows, int cols, int T, int rpb) {
    const int row0 = blockIdx.x * rpb, nr = min(rpb, rows - row0);
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    matvec_staged<W, ONE>(wbase + (size_t)row0 * row_bytes, row_bytes, x, cols, y + row0, rows, nr, cols, T, true);
}

// The experts' products in the staged layout: blockIdx.y = t·k + s as in matvec_gather_rows.
template <typename W>
__device__ void matvec_gather_rows_staged(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                                          float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                          int k, int stride, int offset, int x_tok, int x_slot, int rpb,
                                          const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int row0 = blockIdx.x * rpb, nr = min(rpb, rows - row0);
    const int t = ts / k, s = ts % k;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* w0 = wbase + ((size_t)id * stride + offset + row0) * row_bytes;
    const float* xs = x + (size_t)t * x_tok + (size_t)s * x_slot;
    matvec_staged<W, true>(w0, row_bytes, xs, 0, y + (size_t)ts * rows + row0, 0, nr, cols, 1, false);
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

// Every product kernel computes one product, or two of the same shape, type and input in one launch
// (blockIdx.z = 1 takes w2 and y2, and for the experts' gathers offset2): a layer's gate and up
// projections, say, at the cost of one launch. The sums are each product's own.
//
// MINB: the blocks of 256 threads a multiprocessor is to hold of the single-token dense staged kernel
// (`_one_staged`), which bounds its registers: 6 (40 registers, 48 warps) for the quantized types, whose
// single-token decode needs ~42 unbounded, against the 56 of the kernel that also serves windows (4
// blocks, 32 warps, for Q4_K); 1 (no bound) for F32, F16 and BF16, which spill below ~44. GMINB: the same
// for the experts' staged gathers, 7 (36 registers): their grid of 80 × 10 blocks (Q2_0's down product,
// 10 slots) fits in one wave at 7 blocks a multiprocessor (924), and 6 (792) would leave 8 blocks for a
// second. On sm_80–89 at most 6 (some decoders spill at 36 registers there); before sm_80 a
// multiprocessor holds 1,024 threads: no bound.
#if __CUDA_ARCH__ >= 900
#define ONE_TOKEN_BOUNDS(MINB) __launch_bounds__(256, MINB)
#elif __CUDA_ARCH__ >= 800  // sm_80–89 schedule some decoders into more registers: at most 6 blocks
#define ONE_TOKEN_BOUNDS(MINB) __launch_bounds__(256, (MINB) < 6 ? (MINB) : 6)
#else
#define ONE_TOKEN_BOUNDS(MINB) __launch_bounds__(256)
#endif
#define MATVEC(NAME, W, MINB, GMINB)                                                                          \
    extern "C" __global__ void NAME(const unsigned char* w, const float* __restrict__ x, float* y, int rows,  \
                                    int cols, int T, const unsigned char* w2, float* y2) { grid_dep_wait();   \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows<W>(w, x, y, rows, cols, T);                                                               \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather(const unsigned char* w, const float* __restrict__ x, float* y,   \
                                             int rows, int cols, const int* ids, int k, int stride,           \
                                             int offset, int x_tok, int x_slot, const unsigned char* w2,      \
                                             int offset2, float* y2, const int* list) { grid_dep_wait();      \
        if (blockIdx.z) { w = w2; offset = offset2; y = y2; }                                                 \
        matvec_gather_rows<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, list);              \
    }                                                                                                         \
    extern "C" __global__ void NAME##_warp(const unsigned char* w, const float* __restrict__ x, float* y,     \
                                           int rows, int cols, int T, const unsigned char* w2, float* y2) { grid_dep_wait(); \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_warp<W>(w, x, y, rows, cols, T);                                                          \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_warp(const unsigned char* w, const float* __restrict__ x,        \
                                                  float* y, int rows, int cols, const int* ids, int k,        \
                                                  int stride, int offset, int x_tok, int x_slot,              \
                                                  const unsigned char* w2, int offset2, float* y2,            \
                                                  const int* list) { grid_dep_wait();                         \
        if (blockIdx.z) { w = w2; offset = offset2; y = y2; }                                                 \
        matvec_gather_rows_warp<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, list);         \
    }                                                                                                         \
    extern "C" __global__ void NAME##_short_warp(const unsigned char* w, const float* __restrict__ x, float* y, \
                                                 int rows, int cols, int T, const unsigned char* w2, float* y2) { grid_dep_wait(); \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_short<W>(w, x, y, rows, cols);                                                            \
    }                                                                                                         \
    extern "C" __global__ void NAME##_multi_warp(const unsigned char* w, const float* __restrict__ x, float* y, \
                                                 int rows, int cols, int T, const unsigned char* w2, float* y2) { grid_dep_wait(); \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_multi<W>(w, x, y, rows, cols, T);                                                         \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_short_warp(const unsigned char* w, const float* __restrict__ x,  \
                                                        float* y, int rows, int cols, const int* ids, int k,  \
                                                        int stride, int offset, int x_tok, int x_slot,        \
                                                        const unsigned char* w2, int offset2, float* y2,      \
                                                        const int* list) { grid_dep_wait();                   \
        if (blockIdx.z) { w = w2; offset = offset2; y = y2; }                                                 \
        matvec_gather_rows_short<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, list);        \
    }                                                                                                         \
    extern "C" __global__ void NAME##_staged(const unsigned char* w, const float* __restrict__ x, float* y,   \
                                             int rows, int cols, int T, int rpb, const unsigned char* w2,     \
                                             float* y2) { /* grid_dep_wait after the weights' copy */         \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_staged<W, false>(w, x, y, rows, cols, T, rpb);                                            \
    }                                                                                                         \
    extern "C" __global__ void ONE_TOKEN_BOUNDS(MINB) NAME##_one_staged(                                      \
        const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T, int rpb,    \
        const unsigned char* w2, float* y2) { /* grid_dep_wait after the weights' copy */                     \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_staged<W, true>(w, x, y, rows, cols, 1, rpb);                                             \
    }                                                                                                         \
    extern "C" __global__ void NAME##_stream(const unsigned char* w, const float* __restrict__ x, float* y,   \
                                             int rows, int cols, int T, int rpb, int groups,                  \
                                             const unsigned char* w2, float* y2) { /* waits after a copy */   \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        matvec_rows_stream<W>(w, x, y, rows, cols, T, rpb, groups);                                           \
    }                                                                                                         \
    extern "C" __global__ void ONE_TOKEN_BOUNDS(GMINB) NAME##_gather_staged(const unsigned char* w,           \
                                                    const float* __restrict__ x,                              \
                                                    float* y, int rows, int cols, const int* ids, int k,      \
                                                    int stride, int offset, int x_tok, int x_slot, int rpb,   \
                                                    const unsigned char* w2, int offset2, float* y2,          \
                                                    const int* list) { grid_dep_wait();                       \
        if (blockIdx.z) { w = w2; offset = offset2; y = y2; }                                                 \
        matvec_gather_rows_staged<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, rpb, list);  \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_glu(const unsigned char* wg, const unsigned char* wu,            \
                                                 const float* __restrict__ x, float* h, int rows, int cols,   \
                                                 const int* ids, int k, int stride, int off_g, int off_u,     \
                                                 int x_tok, int x_slot, const int* list) { grid_dep_wait();   \
        matvec_gather_glu_rows<W>(wg, wu, x, h, rows, cols, ids, k, stride, off_g, off_u, x_tok, x_slot,      \
                                  list);                                                                      \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_combine(const unsigned char* w, const float* __restrict__ x,     \
                                                     float* y, int rows, int cols, const int* ids, int k,     \
                                                     int stride, int offset, int x_tok, int x_slot,           \
                                                     const float* weights, const float* shared,               \
                                                     const float* sgate) {                                    \
        grid_dep_wait();                                                                                      \
        matvec_gather_combine_rows<W>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, weights,    \
                                      shared, sgate);                                                         \
    }                                                                                                         \
    extern "C" __global__ void NAME##_embed(const unsigned char* __restrict__ w, const int* __restrict__ ids, \
                                            float* __restrict__ out, int cols, int hc) { grid_dep_wait();     \
        embed_rows<W>(w, ids, out, cols, hc);                                                                 \
    }

MATVEC(matvec_f32, F32W, 1, 1)
MATVEC(matvec_f16, F16W, 1, 1)
MATVEC(matvec_bf16, BF16W, 1, 1)
MATVEC(matvec_q8_0, Q8_0W, 6, 7)
MATVEC(matvec_q4_0, Q4_0W, 6, 7)
MATVEC(matvec_q2_0, Q2_0W, 6, 7)
MATVEC(matvec_q5_0, Q5_0W, 6, 7)
MATVEC(matvec_iq2_xs, IQ2_XSW, 6, 7)
MATVEC(matvec_iq3_xxs, IQ3_XXSW, 6, 7)
MATVEC(matvec_iq3_s, IQ3_SW, 6, 7)
MATVEC(matvec_q4_k, Q4_KW, 6, 7)
MATVEC(matvec_q5_k, Q5_KW, 6, 7)
MATVEC(matvec_q6_k, Q6_KW, 6, 7)
MATVEC(matvec_q3_k, Q3_KW, 6, 7)
MATVEC(matvec_iq4_nl, IQ4_NLW, 6, 7)
MATVEC(matvec_iq4_xs, IQ4_XSW, 6, 7)
