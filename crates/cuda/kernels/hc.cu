// Hyper-connection read and write (spec §3; docs/ARITHMETIC.md § hc), for a window of T = 1..8 tokens.
// Twin of crates/model/src/layers/hc.rs: every output has the CPU's bits.
//
// The plain read is three launches:
//   gr_norm  one block per token, one warp per stream: the pending write of the previous half (if any),
//            the stream's sum of squares by the contract, xn = (R·rs)·w
//   gr_down  one warp per row of W_down (r rows) and of W_inject (hc rows): T dots per weight load;
//            lo = silu(dot/hc), inj = dot
//   gr_up    one warp per output d: the hc rows c·n + d of W_up, T dots each, the epilogue xn·σ(g), the
//            streams summed in order and divided by hc

#define MAXT 8

// The weights are BF16, or F32 (the `_f32` kernels: a file's F32 weights, or Q8_0 ones dequantized on
// upload, which is exact: each value is the f32 the CPU's dequantization gives). Each kernel's body is a
// template over the weight type; a macro below it makes the two entry points.
__device__ __forceinline__ void load8_w(const bf16_t* p, float* w) { load8_bf16(p, w); }
__device__ __forceinline__ void load8_w(const float* p, float* w) { load8_f32(p, w); }

extern "C" __global__ void gr_norm(const float* __restrict__ r_in, float* r_out, const float* __restrict__ y_prev,
                                   const float* __restrict__ inj_prev, int pending, const float* __restrict__ w_norm,
                                   float* __restrict__ xn, int n, int hc, float eps) {
    grid_dep_wait();
    const int t = blockIdx.x, c = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (c >= hc) return;
    const size_t base = (size_t)t * hc * n + (size_t)c * n;
    const float* r = r_in + base;
    float* ro = r_out + base;
    const float* y = y_prev + (size_t)t * n;
    const float f = pending ? __fmul_rn(2.0f, s_sigmoid(__fdiv_rn(inj_prev[t * hc + c], (float)hc))) : 0.0f;
    float acc = 0.0f;
    for (int ch = lane; ch < n / CHUNK; ch += WARP) {
        float v[CHUNK];
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) {
            v[e] = r[ch * CHUNK + e];
            if (pending) v[e] = __fadd_rn(v[e], __fmul_rn(y[ch * CHUNK + e], f));
            ro[ch * CHUNK + e] = v[e];
        }
        acc = __fadd_rn(acc, chunk_dot(v, v));
    }
    acc = warp_butterfly(acc);
    const float rs = rms_scale_of(acc, n, eps);
    const float* w = w_norm + (size_t)c * n;
    float* x = xn + base;
    for (int ch = lane; ch < n / CHUNK; ch += WARP) {
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) {
            const int d = ch * CHUNK + e;
            x[d] = __fmul_rn(__fmul_rn(ro[d], rs), w[d]);
        }
    }
}

template <typename WT>
__device__ void gr_down_body(const WT* __restrict__ w_down, const WT* __restrict__ w_inj,
                                   const float* __restrict__ xn, float* __restrict__ lo, float* __restrict__ inj,
                                   int K, int r, int n_inj, int hc, int T) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (row >= r + n_inj) return;
    const WT* w = row < r ? w_down + (size_t)row * K : w_inj + (size_t)(row - r) * K;
    float acc[MAXT];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) acc[t] = 0.0f;
    for (int ch = lane; ch < K / CHUNK; ch += WARP) {
        float wv[CHUNK];
        load8_w(w + ch * CHUNK, wv);
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            if (t < T) {
                float xv[CHUNK];
                load8_f32(xn + (size_t)t * K + ch * CHUNK, xv);
                acc[t] = __fadd_rn(acc[t], chunk_dot(wv, xv));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MAXT; ++t) {
        if (t < T) {
            const float s = warp_butterfly(acc[t]);
            if (lane == 0) {
                if (row < r) lo[t * r + row] = s_silu(__fdiv_rn(s, (float)hc));
                else inj[t * hc + (row - r)] = s;
            }
        }
    }
}
#define GR_DOWN(SUFFIX, WT)                                                                  \
    extern "C" __global__ void gr_down##SUFFIX(const WT* __restrict__ w_down,                \
        const WT* __restrict__ w_inj, const float* __restrict__ xn, float* __restrict__ lo,  \
        float* __restrict__ inj, int K, int r, int n_inj, int hc, int T) { grid_dep_wait();                  \
        gr_down_body<WT>(w_down, w_inj, xn, lo, inj, K, r, n_inj, hc, T);                    \
    }
GR_DOWN(, bf16_t)
GR_DOWN(_f32, float)

template <typename WT>
__device__ void gr_up_body(const WT* __restrict__ w_up, const float* __restrict__ lo,
                                 const float* __restrict__ xn, float* __restrict__ mixed, int r, int n, int hc, int T) {
    const int d = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (d >= n) return;
    float sum[MAXT];
    for (int c = 0; c < hc; ++c) {
        const WT* w = w_up + ((size_t)c * n + d) * r;
        float acc[MAXT];
#pragma unroll
        for (int t = 0; t < MAXT; ++t) acc[t] = 0.0f;
        for (int ch = lane; ch < r / CHUNK; ch += WARP) {
            float wv[CHUNK];
            load8_w(w + ch * CHUNK, wv);
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
                if (t < T) {
                    float xv[CHUNK];
                    load8_f32(lo + (size_t)t * r + ch * CHUNK, xv);
                    acc[t] = __fadd_rn(acc[t], chunk_dot(wv, xv));
                }
            }
        }
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            if (t < T) {
                const float g = warp_butterfly(acc[t]);
                const float term = __fmul_rn(xn[(size_t)t * hc * n + (size_t)c * n + d], s_sigmoid(g));
                sum[t] = c == 0 ? term : __fadd_rn(sum[t], term);
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < MAXT; ++t)
            if (t < T) mixed[(size_t)t * n + d] = __fdiv_rn(sum[t], (float)hc);
    }
}
#define GR_UP(SUFFIX, WT)                                                                                \
    extern "C" __global__ void gr_up##SUFFIX(const WT* __restrict__ w_up, const float* __restrict__ lo,  \
        const float* __restrict__ xn, float* __restrict__ mixed, int r, int n, int hc, int T) { grid_dep_wait(); \
        gr_up_body<WT>(w_up, lo, xn, mixed, r, n, hc, T);                                                \
    }
GR_UP(, bf16_t)
GR_UP(_f32, float)

// R[t][c][d] += y[t][d]·(2·σ(inj[t][c]/hc)): the write on its own (the last half of a window).
extern "C" __global__ void gr_write(float* r, const float* __restrict__ y, const float* __restrict__ inj, int n, int hc,
                                    int T) {
    grid_dep_wait();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * hc * n) return;
    const int t = (int)(i / ((size_t)hc * n)), c = (int)(i / n % hc), d = (int)(i % n);
    const float f = __fmul_rn(2.0f, s_sigmoid(__fdiv_rn(inj[t * hc + c], (float)hc)));
    r[i] = __fadd_rn(r[i], __fmul_rn(y[(size_t)t * n + d], f));
}

// ---- The split variant (STRATA_HC_SPLIT=1): the same sums, spread over many more threads.
// A chunk's sum depends only on its own 8 products, so chunk sums are computed by any thread, in
// parallel, into shared memory; then each lane adds its chunks' sums in ascending order exactly as the
// plain kernel does, and the butterfly finishes. Same operations, same order, same bits.

// One block per (stream, token) with a thread per chunk (n/8 ≤ 1024 threads): the chunk's values and gammas
// stay in registers from the load to the xn store.
extern "C" __global__ void gr_norm_split(const float* __restrict__ r_in, float* r_out, const float* __restrict__ y_prev,
                                         const float* __restrict__ inj_prev, int pending,
                                         const float* __restrict__ w_norm, float* __restrict__ xn, int n, int hc,
                                         float eps) {
    grid_dep_wait();
    extern __shared__ float part[];  // n/8 chunk sums, then rs
    const int c = blockIdx.x, t = blockIdx.y, ch = threadIdx.x;
    const size_t base = (size_t)t * hc * n + (size_t)c * n;
    const int nch = n / CHUNK;
    float v[CHUNK], w[CHUNK];
    if (ch < nch) {
        load8_f32(r_in + base + ch * CHUNK, v);
        load8_f32(w_norm + (size_t)c * n + ch * CHUNK, w);
        if (pending) {
            const float f = __fmul_rn(2.0f, s_sigmoid(__fdiv_rn(inj_prev[t * hc + c], (float)hc)));
            float yv[CHUNK];
            load8_f32(y_prev + (size_t)t * n + ch * CHUNK, yv);
#pragma unroll
            for (int e = 0; e < CHUNK; ++e) v[e] = __fadd_rn(v[e], __fmul_rn(yv[e], f));
        }
        store8_f32(r_out + base + ch * CHUNK, v);
        part[ch] = chunk_dot(v, v);
    }
    __syncthreads();
    if (ch < WARP) {
        float acc = 0.0f;
        for (int k = ch; k < nch; k += WARP) acc = __fadd_rn(acc, part[k]);
        acc = warp_butterfly(acc);
        if (ch == 0) part[nch] = rms_scale_of(acc, n, eps);
    }
    __syncthreads();
    if (ch < nch) {
        const float rs = part[nch];
        float x[CHUNK];
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) x[e] = __fmul_rn(__fmul_rn(v[e], rs), w[e]);
        store8_f32(xn + base + ch * CHUNK, x);
    }
}

// A chunk of 8 weights as loaded (one 16-byte load of BF16, two of F32), made floats only when used, so
// that a thread holds a batch of chunks in few registers.
template <typename WT> struct RawChunk;
template <> struct RawChunk<bf16_t> {
    uint4 q;
    __device__ __forceinline__ void load(const bf16_t* p) { q = *reinterpret_cast<const uint4*>(p); }
    __device__ __forceinline__ void get(float* w) const {
        const u32 v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[2 * i] = __uint_as_float(v[i] << 16);
            w[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
        }
    }
};
template <> struct RawChunk<float> {
    float4 a, b;
    __device__ __forceinline__ void load(const float* p) {
        a = reinterpret_cast<const float4*>(p)[0];
        b = reinterpret_cast<const float4*>(p)[1];
    }
    __device__ __forceinline__ void get(float* w) const {
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    }
};

// One block per row of W_down / W_inject; warp t adds token t's chunk sums (T ≤ warps per block).
// Token groups (STRATA_GR_DOWN_TG=g): blockIdx.y takes tokens [y·g, y·g + g), so a window runs on more
// blocks; every (row, token) is still one warp's ordered sum, as before. tg = 0: one group of all T.
// A thread's chunks go in batches of DOWN_B (all of them at the model's K = 10240 and 256 threads): the
// batch's weight loads are issued together, then per token the batch's activation loads, then the dots.
// A loop of one chunk at a time waited out a memory round trip per chunk (the compiler did not hoist the
// next chunk's loads over the shared-memory stores). F32 weights take twice the registers: batches of 3.
// Three blocks of 256 threads a multiprocessor (the bounds below), so the 324 rows run in one wave.
//
// HC_EARLY (STRATA_DEFINES; 1 by default): 1 or more, the split down kernel
// loads its first batch of weights into registers before grid_dep_wait, so with programmatic launches those
// loads (at the model's shapes, the whole of W_down across the grid) run while the norm kernel before it
// does, and after the wait only xn (from the L2) is read; 2 also the split up kernel's first batch, before
// it waits for lo; 0 neither. A weight is no kernel's output; every thread still waits once, and the sums
// are untouched. (HC_PREFETCH, which asked for both kernels' rows into the L2 instead, measured 1.2% slower.
// On the H200, speed-11: 2 −3.0%; speed-14: 1 189.1 against 0's 185.9 tok/s, three interleaved rounds.)
#ifndef HC_EARLY
#define HC_EARLY 1
#endif
template <typename WT> struct DownBatch { static constexpr int n = 5; };
template <> struct DownBatch<float> { static constexpr int n = 3; };
template <typename WT>
__device__ void gr_down_split_body(const WT* __restrict__ w_down, const WT* __restrict__ w_inj,
                                         const float* __restrict__ xn, float* __restrict__ lo,
                                         float* __restrict__ inj, int K, int r, int n_inj, int hc, int T, int tg) {
    extern __shared__ float part[];  // [tokens of the group][K/8]
    const int row = blockIdx.x, tid = threadIdx.x;
    bool waited = HC_EARLY < 1;  // else this thread waits after its first batch's weight loads
    if (row >= r + n_inj) {
        if (!waited) grid_dep_wait();
        return;
    }
    const int t0 = tg > 0 ? blockIdx.y * tg : 0;
    const int nt = tg > 0 ? min(tg, T - t0) : T;
    const WT* w = row < r ? w_down + (size_t)row * K : w_inj + (size_t)(row - r) * K;
    const int nch = K / CHUNK;
    constexpr int DOWN_B = DownBatch<WT>::n;
    for (int c0 = tid; c0 < nch; c0 += DOWN_B * blockDim.x) {
        RawChunk<WT> raw[DOWN_B];
#pragma unroll
        for (int b = 0; b < DOWN_B; ++b) {
            const int ch = c0 + b * blockDim.x;
            if (ch < nch) raw[b].load(w + ch * CHUNK);
        }
        if (!waited) {
            grid_dep_wait();
            waited = true;
        }
#pragma unroll
        for (int k = 0; k < MAXT; ++k) {
            if (k >= nt) break;
            const float* x = xn + (size_t)(t0 + k) * K;
            float xv[DOWN_B][CHUNK];
#pragma unroll
            for (int b = 0; b < DOWN_B; ++b) {
                const int ch = c0 + b * blockDim.x;
                if (ch < nch) load8_f32(x + ch * CHUNK, xv[b]);
            }
#pragma unroll
            for (int b = 0; b < DOWN_B; ++b) {
                const int ch = c0 + b * blockDim.x;
                if (ch < nch) {
                    float wv[CHUNK];
                    raw[b].get(wv);
                    part[k * nch + ch] = chunk_dot(wv, xv[b]);
                }
            }
        }
    }
    if (!waited) grid_dep_wait();  // a thread with no chunk
    __syncthreads();
    const int k = tid / WARP, lane = tid % WARP, t = t0 + k;
    if (k < nt) {
        float acc = 0.0f;
        for (int ch = lane; ch < nch; ch += WARP) acc = __fadd_rn(acc, part[k * nch + ch]);
        acc = warp_butterfly(acc);
        if (lane == 0) {
            if (row < r) lo[t * r + row] = s_silu(__fdiv_rn(acc, (float)hc));
            else inj[t * hc + (row - r)] = acc;
        }
    }
}
#define GR_DOWN_SPLIT(SUFFIX, WT)                                                            \
    extern "C" __global__ void __launch_bounds__(256, 3) gr_down_split##SUFFIX(const WT* __restrict__ w_down, \
        const WT* __restrict__ w_inj, const float* __restrict__ xn, float* __restrict__ lo,  \
        float* __restrict__ inj, int K, int r, int n_inj, int hc, int T, int tg) {           \
        if (HC_EARLY < 1) grid_dep_wait();                                                   \
        gr_down_split_body<WT>(w_down, w_inj, xn, lo, inj, K, r, n_inj, hc, T, tg);          \
    }
GR_DOWN_SPLIT(, bf16_t)
GR_DOWN_SPLIT(_f32, float)

// The row-batched up kernel (STRATA_GR_UP75): a warp per output d as gr_up, but lo is staged in shared
// memory once per block and every weight chunk of the hc rows is loaded before the dots (more loads in
// flight). Lane L owns chunks L, L + 32, ... of each row, summed in order; the same butterflies and epilogue.
#define UP75_MAXC 2  // chunks per lane per row: r ≤ 512
template <typename WT>
__device__ void gr_up75_body(const WT* __restrict__ w_up, const float* __restrict__ lo,
                                   const float* __restrict__ xn, float* __restrict__ mixed, int r, int n, int hc,
                                   int T) {
    extern __shared__ float slo[];  // [T][r]
    for (int i = threadIdx.x; i < T * r; i += blockDim.x) slo[i] = lo[i];
    __syncthreads();
    const int d = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (d >= n) return;
    const int nch = r / CHUNK;
    float wv[4][UP75_MAXC][CHUNK];
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int j = 0; j < UP75_MAXC; ++j)
            if (c < hc && lane + j * WARP < nch) load8_w(w_up + ((size_t)c * n + d) * r + (lane + j * WARP) * CHUNK, wv[c][j]);
    float sum[MAXT];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        if (c >= hc) break;
        float acc[MAXT];
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            acc[t] = 0.0f;
            if (t < T) {
#pragma unroll
                for (int j = 0; j < UP75_MAXC; ++j) {
                    const int ch = lane + j * WARP;
                    if (ch < nch) {
                        float xv[CHUNK];
                        load8_f32(slo + t * r + ch * CHUNK, xv);
                        acc[t] = __fadd_rn(acc[t], chunk_dot(wv[c][j], xv));
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            if (t < T) {
                const float g = warp_butterfly(acc[t]);
                const float term = __fmul_rn(xn[(size_t)t * hc * n + (size_t)c * n + d], s_sigmoid(g));
                sum[t] = c == 0 ? term : __fadd_rn(sum[t], term);
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < MAXT; ++t)
            if (t < T) mixed[(size_t)t * n + d] = __fdiv_rn(sum[t], (float)hc);
    }
}
#define GR_UP75(SUFFIX, WT)                                                                     \
    extern "C" __global__ void gr_up75##SUFFIX(const WT* __restrict__ w_up,                     \
        const float* __restrict__ lo, const float* __restrict__ xn, float* __restrict__ mixed,  \
        int r, int n, int hc, int T) { grid_dep_wait();                                                      \
        gr_up75_body<WT>(w_up, lo, xn, mixed, r, n, hc, T);                                     \
    }
GR_UP75(, bf16_t)
GR_UP75(_f32, float)

// One block per UP_D outputs d (their hc rows c·n + d each): lo staged in shared memory, every chunk sum of
// the block's rows in parallel, then per (row, token) the lanes add their chunks in order, the butterfly,
// and the epilogue summing the streams in order.
#define UP_D 4
#define UP_B 3  // tasks a thread loads at once
#define UP_HC 4  // streams whose epilogue values a thread loads early (the model's hc)
template <typename WT>
__device__ void gr_up_split_body(const WT* __restrict__ w_up, const float* __restrict__ lo,
                                       const float* __restrict__ xn, float* __restrict__ mixed, int r, int n, int hc,
                                       int T) {
    extern __shared__ float sm[];
    const int tid = threadIdx.x, d0 = blockIdx.x * UP_D, nch = r / CHUNK, rows = UP_D * hc;
#if HC_EARLY >= 2  // (#if, so that the code without it is the one measured before)
    // The first batch of weights (the loop's k0 = tid), loaded before grid_dep_wait.
    RawChunk<WT> early[UP_B];
#pragma unroll
    for (int b = 0; b < UP_B; ++b) {
        const int k = tid + b * blockDim.x, row = k / nch, d = d0 + row % UP_D;
        if (k < rows * nch && d < n) early[b].load(w_up + ((size_t)(row / UP_D) * n + d) * r + (k % nch) * CHUNK);
    }
    grid_dep_wait();
#endif
    float* slo = sm;                      // [T][r]
    float* part = sm + T * r;             // [rows][T][nch]
    float* g = part + rows * T * nch;     // [rows][T]
    // lo as float4s (r is a multiple of 8; lo is the scratch buffer's start): one load a thread at r = 320.
    for (int i = tid; i < T * r / 4; i += blockDim.x)
        reinterpret_cast<float4*>(slo)[i] = reinterpret_cast<const float4*>(lo)[i];
    __syncthreads();
    // A thread's tasks go in batches of UP_B (all of them at the model's 16 rows of r = 320 and 256
    // threads): the batch's weight loads issued together, then the dots. One task at a time waited out a
    // memory round trip per task. (Issuing the weight loads before lo is staged measured slower on the
    // H200: 8.30 against 7.73 µs, timed alone: HC_EARLY=2 is that order where the kernel before overlaps.)
    const int tasks = rows * nch;
    for (int k0 = tid; k0 < tasks; k0 += UP_B * blockDim.x) {
        RawChunk<WT> raw[UP_B];
#if HC_EARLY >= 2
        if (k0 == tid) {
#pragma unroll
            for (int b = 0; b < UP_B; ++b) raw[b] = early[b];
        } else {
#endif
#pragma unroll
        for (int b = 0; b < UP_B; ++b) {
            const int k = k0 + b * blockDim.x, row = k / nch, d = d0 + row % UP_D;
            if (k < tasks && d < n) raw[b].load(w_up + ((size_t)(row / UP_D) * n + d) * r + (k % nch) * CHUNK);
        }
#if HC_EARLY >= 2
        }
#endif
#pragma unroll
        for (int b = 0; b < UP_B; ++b) {
            const int k = k0 + b * blockDim.x, row = k / nch, ch = k % nch;  // row = c·UP_D + dd
            if (k >= tasks || d0 + row % UP_D >= n) continue;
            float wv[CHUNK];
            raw[b].get(wv);
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
                if (t < T) {
                    float xv[CHUNK];
                    load8_f32(slo + t * r + ch * CHUNK, xv);
                    part[(row * T + t) * nch + ch] = chunk_dot(wv, xv);
                }
            }
        }
    }
    // The epilogue's xn values (thread p < UP_D·T takes output d0 + p % UP_D of token p / UP_D, its hc
    // streams), asked for now so that they arrive during the chunk sums' reduction: in the epilogue's loop
    // each waited out a round trip, one stream after another. (Asked for before the dots, their registers
    // cost the kernel a block a multiprocessor.)
    float xe[UP_HC];
    const bool early_xn = hc <= UP_HC && tid < UP_D * T && d0 + tid % UP_D < n;
    if (early_xn) {
#pragma unroll
        for (int c = 0; c < UP_HC; ++c)
            if (c < hc) xe[c] = xn[(size_t)(tid / UP_D) * hc * n + (size_t)c * n + d0 + tid % UP_D];
    }
    __syncthreads();
    const int warp = tid / WARP, lane = tid % WARP, warps = blockDim.x / WARP;
    for (int p = warp; p < rows * T; p += warps) {
        const float* q = part + p * nch;
        float acc = 0.0f;
        for (int ch = lane; ch < nch; ch += WARP) acc = __fadd_rn(acc, q[ch]);
        acc = warp_butterfly(acc);
        if (lane == 0) g[p] = acc;
    }
    __syncthreads();
    for (int p = tid; p < UP_D * T; p += blockDim.x) {
        const int dd = p % UP_D, t = p / UP_D, d = d0 + dd;
        if (d >= n) continue;
        // Stream c's term, the streams summed in order from the first.
        float s = 0.0f;
        auto add = [&](int c, float x) {
            const float term = __fmul_rn(x, s_sigmoid(g[(c * UP_D + dd) * T + t]));
            s = c == 0 ? term : __fadd_rn(s, term);
        };
        if (early_xn && p == tid) {
#pragma unroll
            for (int c = 0; c < UP_HC; ++c)
                if (c < hc) add(c, xe[c]);
        } else {
            for (int c = 0; c < hc; ++c) add(c, xn[(size_t)t * hc * n + (size_t)c * n + d]);
        }
        mixed[(size_t)t * n + d] = __fdiv_rn(s, (float)hc);
    }
}
#define GR_UP_SPLIT(SUFFIX, WT)                                                                 \
    extern "C" __global__ void gr_up_split##SUFFIX(const WT* __restrict__ w_up,                 \
        const float* __restrict__ lo, const float* __restrict__ xn, float* __restrict__ mixed,  \
        int r, int n, int hc, int T) {                                                          \
        if (HC_EARLY < 2) grid_dep_wait();                                                      \
        gr_up_split_body<WT>(w_up, lo, xn, mixed, r, n, hc, T);                                 \
    }
GR_UP_SPLIT(, bf16_t)
GR_UP_SPLIT(_f32, float)

// ---- The staged down kernel (STRATA_HC_SPLIT=2): one block per row; xn and the row's weights pass through
// shared memory in tiles of STAGE_CH chunks, double-buffered: while a tile's chunk sums are computed from
// one buffer, the next tile's activations and weights are already loaded into registers, then stored into
// the other buffer. Each chunk sum is the same 8 fmas; the lanes then add them in the contract's order.
#define STAGE_CH 64
extern "C" __global__ void gr_down_staged(const bf16_t* __restrict__ w_down, const bf16_t* __restrict__ w_inj,
                                          const float* __restrict__ xn, float* __restrict__ lo,
                                          float* __restrict__ inj, int K, int r, int n_inj, int hc, int T) {
    grid_dep_wait();
    extern __shared__ float sm[];
    const int nch = K / CHUNK, tid = threadIdx.x, nt = blockDim.x, row = blockIdx.x;
    if (row >= r + n_inj) return;
    float* part = sm;                              // [T][nch]
    float* sx = part + T * nch;                    // [2][T][STAGE_CH·8]
    uint4* sw = reinterpret_cast<uint4*>(sx + 2 * T * STAGE_CH * CHUNK);  // [2][STAGE_CH] weight chunks
    const bf16_t* w = row < r ? w_down + (size_t)row * K : w_inj + (size_t)(row - r) * K;
    const int tiles = nch / STAGE_CH;              // the host checks nch is a multiple
    const int xv4 = T * STAGE_CH * CHUNK / 4;      // float4s of activations per tile
    // Registers for one tile's share: activations (up to 4 float4 a thread at 256 threads, T ≤ 8) and a weight chunk.
    float4 rx[4];
    uint4 rw = make_uint4(0, 0, 0, 0);
    auto fetch = [&](int tile) {
        for (int j = 0; j < 4; ++j) {
            const int i = tid + j * nt;
            if (i < xv4) {
                const int t = i / (STAGE_CH * 2), c4 = i % (STAGE_CH * 2);
                rx[j] = reinterpret_cast<const float4*>(xn + (size_t)t * K + tile * STAGE_CH * CHUNK)[c4];
            }
        }
        if (tid < STAGE_CH) rw = reinterpret_cast<const uint4*>(w + tile * STAGE_CH * CHUNK)[tid];
    };
    auto stash = [&](int buf) {
        float4* bx = reinterpret_cast<float4*>(sx + buf * T * STAGE_CH * CHUNK);
        for (int j = 0; j < 4; ++j) {
            const int i = tid + j * nt;
            if (i < xv4) bx[i] = rx[j];
        }
        if (tid < STAGE_CH) sw[buf * STAGE_CH + tid] = rw;
    };
    fetch(0);
    stash(0);
    for (int tile = 0; tile < tiles; ++tile) {
        __syncthreads();
        if (tile + 1 < tiles) fetch(tile + 1);  // the next tile's loads in flight during this tile's dots
        const int buf = tile & 1;
        for (int task = tid; task < STAGE_CH * T; task += nt) {
            const int c = task % STAGE_CH, t = task / STAGE_CH;
            float wv[CHUNK];
            const uint4 q = sw[buf * STAGE_CH + c];
            const u32 v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                wv[2 * i] = __uint_as_float(v[i] << 16);
                wv[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
            }
            float xv[CHUNK];
            load8_f32(sx + (buf * T + t) * STAGE_CH * CHUNK + c * CHUNK, xv);
            part[t * nch + tile * STAGE_CH + c] = chunk_dot(wv, xv);
        }
        __syncthreads();
        if (tile + 1 < tiles) stash(buf ^ 1);
    }
    __syncthreads();
    const int t = tid / WARP, lane = tid % WARP;
    if (t < T) {
        float acc = 0.0f;
        for (int ch = lane; ch < nch; ch += WARP) acc = __fadd_rn(acc, part[t * nch + ch]);
        acc = warp_butterfly(acc);
        if (lane == 0) {
            if (row < r) lo[t * r + row] = s_silu(__fdiv_rn(acc, (float)hc));
            else inj[t * hc + (row - r)] = acc;
        }
    }
}

// ---- Long windows (STRATA_HC_LONG; a prompt window past 8 tokens, backend/forward.rs): the down and up
// products of any number of tokens, each weight chunk read once for 32 of them. A warp's lane is a
// token, and each lane makes its (row, token) sums itself: lane class L's chunks L, L + 32, … summed in
// order from +0 (each chunk's 8 fmas by chunk_dot), the 32 classes taken in the butterfly's leaf order by
// qd_tree_push, which gives the warp butterfly's bits (common.cuh). The lanes of a warp read the same
// weight chunk at once (one load for all) and each its own token's activations. Lanes past the window's
// last token read the last one's and write nothing.

// gr_down_long: a block of LD_WARPS warps takes LD_ROWS rows (of W_down, then W_inject) and 32 tokens;
// warp w the classes of leaves LD_LEAVES·w .. + LD_LEAVES − 1 (a whole subtree) of every row, and warp 0
// then adds the warps' subtrees as the tree's top levels.
#define LD_ROWS 8
#define LD_WARPS 8
#define LD_LEAVES (WARP / LD_WARPS)
// HC_LONG_PIPE (STRATA_DEFINES; 0 by default): gr_down_long's lanes load the next chunk of their class
// (its 8 rows' weights and their token's activations) before they sum the current one, so a chunk's trip
// to the L2 overlaps the one before's fmas; twice the chunks in registers, so one block a multiprocessor.
// The same sums in the same order.
#ifndef HC_LONG_PIPE
#define HC_LONG_PIPE 0
#endif
#define LD_BLOCKS (HC_LONG_PIPE ? 1 : 2)
template <typename WT>
__device__ void gr_down_long_body(const WT* __restrict__ w_down, const WT* __restrict__ w_inj,
                                  const float* __restrict__ xn, float* __restrict__ lo, float* __restrict__ inj,
                                  int K, int r, int n_inj, int hc, int T) {
    __shared__ float part[LD_WARPS][LD_ROWS][WARP];
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP, rows = r + n_inj;
    const int row0 = blockIdx.x * LD_ROWS, t = blockIdx.y * WARP + lane, nch = K / CHUNK;
    const WT* w[LD_ROWS];
#pragma unroll
    for (int i = 0; i < LD_ROWS; ++i) {
        const int row = min(row0 + i, rows - 1);
        w[i] = row < r ? w_down + (size_t)row * K : w_inj + (size_t)(row - r) * K;
    }
    grid_dep_wait();
    const float* x = xn + (size_t)min(t, T - 1) * K;
    float lv[LD_ROWS][5], sub[LD_ROWS];
#pragma unroll
    for (int k = 0; k < LD_LEAVES; ++k) {
        float acc[LD_ROWS];
#pragma unroll
        for (int i = 0; i < LD_ROWS; ++i) acc[i] = 0.0f;
#if HC_LONG_PIPE
        RawChunk<WT> cw[LD_ROWS];
        float4 cx[2];
        const auto fetch = [&](int ch, RawChunk<WT>* rw, float4* rx) {
            rx[0] = reinterpret_cast<const float4*>(x + ch * CHUNK)[0];
            rx[1] = reinterpret_cast<const float4*>(x + ch * CHUNK)[1];
#pragma unroll
            for (int i = 0; i < LD_ROWS; ++i) rw[i].load(w[i] + ch * CHUNK);
        };
        int ch = qd_tree_lane(wi * LD_LEAVES + k);
        if (ch < nch) fetch(ch, cw, cx);
        for (; ch < nch; ch += WARP) {
            RawChunk<WT> nw[LD_ROWS];
            float4 nx[2];
            const bool more = ch + WARP < nch;
            if (more) fetch(ch + WARP, nw, nx);
            const float xv[CHUNK] = {cx[0].x, cx[0].y, cx[0].z, cx[0].w, cx[1].x, cx[1].y, cx[1].z, cx[1].w};
#pragma unroll
            for (int i = 0; i < LD_ROWS; ++i) {
                float wv[CHUNK];
                cw[i].get(wv);
                acc[i] = __fadd_rn(acc[i], chunk_dot(wv, xv));
            }
            if (more) {
#pragma unroll
                for (int i = 0; i < LD_ROWS; ++i) cw[i] = nw[i];
                cx[0] = nx[0];
                cx[1] = nx[1];
            }
        }
#else
        for (int ch = qd_tree_lane(wi * LD_LEAVES + k); ch < nch; ch += WARP) {
            float xv[CHUNK];
            load8_f32(x + ch * CHUNK, xv);
#pragma unroll
            for (int i = 0; i < LD_ROWS; ++i) {
                float wv[CHUNK];
                load8_w(w[i] + ch * CHUNK, wv);
                acc[i] = __fadd_rn(acc[i], chunk_dot(wv, xv));
            }
        }
#endif
#pragma unroll
        for (int i = 0; i < LD_ROWS; ++i) sub[i] = qd_tree_push(lv[i], k, acc[i]);
    }
#pragma unroll
    for (int i = 0; i < LD_ROWS; ++i) part[wi][i][lane] = sub[i];
    __syncthreads();
    if (wi != 0 || t >= T) return;
#pragma unroll 1
    for (int i = 0; i < LD_ROWS; ++i) {
        const int row = row0 + i;
        if (row >= rows) break;
        float top[5], out = 0.0f;
#pragma unroll
        for (int v = 0; v < LD_WARPS; ++v) out = qd_tree_push(top, v, part[v][i][lane]);
        if (row < r) lo[(size_t)t * r + row] = s_silu(__fdiv_rn(out, (float)hc));
        else inj[(size_t)t * hc + (row - r)] = out;
    }
}
#define GR_DOWN_LONG(SUFFIX, WT)                                                                        \
    extern "C" __global__ void __launch_bounds__(LD_WARPS * WARP, LD_BLOCKS) gr_down_long##SUFFIX(                \
        const WT* __restrict__ w_down, const WT* __restrict__ w_inj, const float* __restrict__ xn,      \
        float* __restrict__ lo, float* __restrict__ inj, int K, int r, int n_inj, int hc, int T) {     \
        gr_down_long_body<WT>(w_down, w_inj, xn, lo, inj, K, r, n_inj, hc, T);                          \
    }
GR_DOWN_LONG(, bf16_t)
GR_DOWN_LONG(_f32, float)

// gr_up_long: a block of LU_WARPS warps takes 32 tokens and LU_WARPS·LU_D outputs d, LU_D a warp. Into
// shared memory first: the tokens' lo (each token's row padded by 4 floats, so that the eight lanes of a
// 16-byte read's phase fall in distinct banks), then the block's hc·LU_WARPS·LU_D weight rows c·n + d as
// stored (every lane of a warp reads the same chunk: one broadcast, not a trip to the L2 a chunk). Then for
// each d its hc rows, each (row, token) sum by its lane (all 32 classes in leaf order), and gr_up's
// epilogue: the streams' terms xn·σ(g) summed in order from the first, divided by hc.
#define LU_WARPS 8
#define LU_D 2
template <typename WT>
__device__ void gr_up_long_body(const WT* __restrict__ w_up, const float* __restrict__ lo,
                                const float* __restrict__ xn, float* __restrict__ mixed, int r, int n, int hc, int T) {
    extern __shared__ float4 slo4[];  // [WARP][r + 4] floats, then [hc][LU_WARPS·LU_D][r] weights
    constexpr int D = LU_WARPS * LU_D;
    float* slo = reinterpret_cast<float*>(slo4);
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP, stride = r + 4, d0 = blockIdx.x * D;
    const int t0 = blockIdx.y * WARP, t = t0 + lane, nch = r / CHUNK, q4 = r / 4;
    WT* sw = reinterpret_cast<WT*>(slo + WARP * stride);
    // The weights first (no kernel's output: before grid_dep_wait), 16 bytes at a time.
    const int words = r * (int)sizeof(WT) / 16;
    uint4* sw4 = reinterpret_cast<uint4*>(sw);
    for (int i = threadIdx.x; i < hc * D * words; i += blockDim.x) {
        const int row = i / words, j = i % words, c = row / D, d = d0 + row % D;
        if (d < n) sw4[i] = reinterpret_cast<const uint4*>(w_up + ((size_t)c * n + d) * r)[j];
    }
    grid_dep_wait();
    for (int i = threadIdx.x; i < WARP * q4; i += blockDim.x) {
        const int tt = i / q4, j = i % q4;
        slo4[(tt * stride) / 4 + j] = reinterpret_cast<const float4*>(lo + (size_t)min(t0 + tt, T - 1) * r)[j];
    }
    __syncthreads();
    const float* my = slo + lane * stride;
#pragma unroll 1
    for (int dd = 0; dd < LU_D; ++dd) {
        const int d = d0 + wi * LU_D + dd;
        if (d >= n) return;  // the same for the whole warp
        float s = 0.0f;
#pragma unroll 1
        for (int c = 0; c < hc; ++c) {
            const WT* row = sw + (size_t)(c * D + wi * LU_D + dd) * r;
            float lv[5], g = 0.0f;
#pragma unroll 1
            for (int k = 0; k < WARP; ++k) {
                float acc = 0.0f;
                for (int ch = qd_tree_lane(k); ch < nch; ch += WARP) {
                    float wv[CHUNK], xv[CHUNK];
                    load8_w(row + ch * CHUNK, wv);
                    load8_f32(my + ch * CHUNK, xv);
                    acc = __fadd_rn(acc, chunk_dot(wv, xv));
                }
                g = qd_tree_push_at(lv, k, acc);
            }
            if (t < T) {
                const float term = __fmul_rn(xn[(size_t)t * hc * n + (size_t)c * n + d], s_sigmoid(g));
                s = c == 0 ? term : __fadd_rn(s, term);
            }
        }
        if (t < T) mixed[(size_t)t * n + d] = __fdiv_rn(s, (float)hc);
    }
}
#define GR_UP_LONG(SUFFIX, WT)                                                                          \
    extern "C" __global__ void __launch_bounds__(LU_WARPS * WARP, 2) gr_up_long##SUFFIX(                  \
        const WT* __restrict__ w_up, const float* __restrict__ lo, const float* __restrict__ xn,        \
        float* __restrict__ mixed, int r, int n, int hc, int T) {                                       \
        gr_up_long_body<WT>(w_up, lo, xn, mixed, r, n, hc, T);                                          \
    }
GR_UP_LONG(, bf16_t)
GR_UP_LONG(_f32, float)
