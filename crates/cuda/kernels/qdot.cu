// The products of docs/ARITHMETIC.md § qdot (Q8_0, Q4_0, Q2_0, IQ4_NL, Q4_K, Q6_K weights; the twin of
// crates/model/src/ops/qdot.rs), for a window of T = 1..8 tokens and for the experts' gathers. The inputs
// are quantized 8 lanes a piece of 32: the piece's amax by a butterfly of maxima (exact, so any order
// gives the CPU's), the codes laid out in the type's order (Q::pos) and their sum. By default one small
// kernel (NAME_quantize) does that once before each product, whose _g kernels read the pieces from global
// memory; with STRATA_QDOT_ONCE=0 each block of the product quantizes the inputs it needs into its shared
// memory. Then each warp takes rows: lane L its pieces L, L + 32, … in order, each piece's value by
// __dp4a sums (qdot.cuh's Q::value), added to the lane's total from +0; then the butterfly. qdot.cuh
// (prepended, after common.cuh and dequant.cuh) holds the per-type unpacking.

#define FULL 0xffffffffu
// QDOT_ROW_AHEAD (STRATA_DEFINES; 1 by default since speed-18, ahead in four of five interleaved
// comparisons at depth 1,024: −0.7% and +1.2% in speed-14, +2.0% and +0.4% in speed-16, +1.0% in
// speed-18; alone the head 184 against 238 µs): a dense kernel whose warps take several rows (rpw > 1: the
// head) asks for each warp's next row into the L2 while it reads the current one, instead of the block's
// whole span at its start (0). The head's span is 56 rows (118 KB) a block, and the blocks resident at
// once would ask for more than the L2 holds, so lines could be pushed out before they are read and
// fetched twice. The sums are untouched.
#ifndef QDOT_ROW_AHEAD
#define QDOT_ROW_AHEAD 1
#endif
// QDOT_WINDOW_SMEM (set by STRATA_QDOT_WINDOW_SMEM=1; 0 by default): a window's dense products copy
// its quantized inputs into shared memory where the host gave room (qd_window_shared).
#ifndef QDOT_WINDOW_SMEM
#define QDOT_WINDOW_SMEM 0
#endif
// Blocks a multiprocessor the narrow window kernels are bounded to (their registers: 65,536 / (256·n)).
#ifndef QD_W2_BLOCKS
#if QDOT_WINDOW_SMEM || !QDOT_ROW_AHEAD
#define QD_W2_BLOCKS 4  // these variants' addressing takes the registers a fifth block would need (spills)
#else
#define QD_W2_BLOCKS 5
#endif
#endif
#ifndef QD_W4_BLOCKS
#define QD_W4_BLOCKS 4
#endif
// ROUTER_ONE_PASS (STRATA_DEFINES; 1 by default): the MoE router's row dotted with a window's T tokens in
// one pass over it (T sums side by side); 0: one token after another, each a pass over the row. The
// same sums either way.
#ifndef ROUTER_ONE_PASS
#define ROUTER_ONE_PASS 1
#endif
// The most tokens a launch takes (a verify or prompt window).
#define QD_MAX_T 8
// Warps a block in the dense and gather kernels: a warp a row.
#define QD_WARPS 8
// The most output rows a block of the fused down product and combination takes (all k slots of one
// token); the host says how many (rpb): more rows a block spread the quantization of its k inputs.
#define QD_COMBINE_ROWS 16

// Quantized inputs, in a block's shared memory or (made once by the _quantize kernel) in global memory:
// n vectors of P pieces, as codes [n][P][8 words], then the codes' sums over each piece's halves [n][P]
// (8-byte aligned after the codes' 32 bytes a piece), then the scales d [n][P]. 44 bytes a piece.
struct QIn {
    int* codes;
    int2* sum;
    float* d;
    int P;
    __device__ QIn(int4* base, int n, int pieces)
        : codes(reinterpret_cast<int*>(base)), sum(reinterpret_cast<int2*>(codes + 8 * n * pieces)),
          d(reinterpret_cast<float*>(sum + n * pieces)), P(pieces) {}
};

// Where input vector v lies: x + (v / kd)·tok + (v % kd)·slot (a gather's slot ts = t·k + s reads its
// token's row, kd = k, or its own).
struct QSrc {
    const float* x;
    size_t tok, slot;
    int kd;
    __device__ const float* at(int v) const { return x + (size_t)(v / kd) * tok + (size_t)(v % kd) * slot; }
};

// Pieces begin .. end − 1 of the vectors at src (P pieces of 32 values each) quantized into q by the
// block (ops/qdot.rs quantize_input): 8 lanes a piece, lane l of a group its elements 4l .. 4l + 3, so a
// warp takes 4 pieces at once. The pieces of all vectors are one list (piece f is vector f / P's piece
// f % P), and a group takes QD_ROUNDS of them at a time, their loads issued together and their chains of
// shuffles interleaved: the block's inputs are ready after a few memory round trips, not one a piece.
// The piece's amax and the codes' sums by butterflies inside the group of 8 (lanes 8g .. 8g + 7:
// offsets 4, 2, 1 stay inside it); the maxima are exact, so any order gives the CPU's.
#define QD_ROUNDS 4
// CG: the inputs read past the L1 (__ldcg), for values other blocks of the same kernel wrote. R: pieces
// a group takes at a time.
template <typename Q, bool CG = false, int R = QD_ROUNDS>
__device__ void qd_quantize(const QSrc& src, int begin, int total, const QIn& q) {
    const int g = threadIdx.x / 8, l = threadIdx.x % 8, groups = blockDim.x / 8;
    for (int f0 = begin; f0 < total; f0 += R * groups) {  // every lane of a warp in each round
        float e[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int f = f0 + r * groups + g;
            const float* at = src.at(f / q.P) + QBLOCK * (f % q.P) + 4 * l;
#pragma unroll
            for (int i = 0; i < 4; ++i) e[r][i] = f < total ? (CG ? __ldcg(at + i) : at[i]) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int f = f0 + r * groups + g;
            float amax = 0.0f;  // from +0; a NaN is passed over
#pragma unroll
            for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(e[r][i]));
#pragma unroll
            for (int o = 4; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, o));
            float d;
            const float id = qd_scale(amax, &d);
            int s = 0;
            signed char* codes = reinterpret_cast<signed char*>(q.codes + 8 * f);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = qd_code(__fmul_rn(e[r][i], id));
                if (f < total) codes[Q::pos(4 * l + i)] = (signed char)c;
                s += c;
            }
            // The halves' sums: lanes 0..3 of the group hold elements 0..15, lanes 4..7 the rest.
#pragma unroll
            for (int o = 2; o > 0; o /= 2) s += __shfl_xor_sync(FULL, s, o);
            const int other = __shfl_xor_sync(FULL, s, 4);
            if (f < total && l == 0) {
                q.d[f] = d;
                q.sum[f] = make_int2(s, other);
            }
        }
    }
}

// One warp's row (bytes at r) against the quantized vectors v0 .. v0 + T − 1 (T ≤ TMAX): lane L adds its
// pieces L, L + 32, … in order, then the butterfly; every lane gets out[t].
template <typename Q, int TMAX>
__device__ __forceinline__ void qd_row(const unsigned char* __restrict__ r, const QIn& q, int v0, int T, float* out) {
    const int lane = threadIdx.x % WARP;
    float acc[TMAX];
#pragma unroll
    for (int t = 0; t < TMAX; ++t) acc[t] = 0.0f;
    for (int j = lane; j < q.P; j += WARP) {
        const unsigned char* b = r + (size_t)(QBLOCK * j / Q::BS) * Q::TS;
        const int p = QBLOCK * j % Q::BS / QBLOCK;
        // A window's tokens share one unpacking of the piece (Q::load); a single token's kernels keep
        // Q::value, whose code the one-token kernels were tuned and checked with.
        QdW W;
        if constexpr (TMAX > 1) W = Q::load(b, p);
#pragma unroll
        for (int t = 0; t < TMAX; ++t) {
            if (t < T) {
                const int i = (v0 + t) * q.P + j;
                const int4* a4 = reinterpret_cast<const int4*>(q.codes + 8 * i);
                const int4 c0 = a4[0], c1 = a4[1];
                const int a[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
                const int2 h = q.sum[i];
                const float v = TMAX > 1 ? Q::apply(W, a, h.x, h.y, q.d[i]) : Q::value(b, p, a, h.x, h.y, q.d[i]);
                acc[t] = __fadd_rn(acc[t], v);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < TMAX; ++t) {
        if (t < T) out[t] = warp_butterfly(acc[t]);
    }
}

// Two rows' sums with one quantized vector v (a slot's gate and up rows): each piece's codes read once for
// both, and both rows' loads in flight together; each sum is qd_row's.
template <typename Q>
__device__ __forceinline__ void qd_row2(const unsigned char* __restrict__ r1, const unsigned char* __restrict__ r2,
                                        const QIn& q, int v, float* o1, float* o2) {
    float a1 = 0.0f, a2 = 0.0f;
    for (int j = threadIdx.x % WARP; j < q.P; j += WARP) {
        const size_t at = (size_t)(QBLOCK * j / Q::BS) * Q::TS;
        const int p = QBLOCK * j % Q::BS / QBLOCK, i = v * q.P + j;
        const int4* a4 = reinterpret_cast<const int4*>(q.codes + 8 * i);
        const int4 c0 = a4[0], c1 = a4[1];
        const int a[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        const int2 h = q.sum[i];
        const float v1 = Q::value(r1 + at, p, a, h.x, h.y, q.d[i]), v2 = Q::value(r2 + at, p, a, h.x, h.y, q.d[i]);
        a1 = __fadd_rn(a1, v1);
        a2 = __fadd_rn(a2, v2);
    }
    *o1 = warp_butterfly(a1);
    *o2 = warp_butterfly(a2);
}

// The block's inputs: with G (the _g kernels) x is already quantized (n vectors, made once by the
// _quantize kernel before the product), else the block quantizes the n vectors at src into its shared
// memory. The same codes, sums and scales either way.
template <typename Q, bool G>
__device__ QIn qd_inputs(const float* x, const QSrc& src, int n, int cols) {
    if (G) return QIn(reinterpret_cast<int4*>(const_cast<float*>(x)), n, cols / QBLOCK);
    extern __shared__ int4 qd_smem[];
    const QIn q(qd_smem, n, cols / QBLOCK);
    qd_quantize<Q>(src, 0, n * q.P, q);
    __syncthreads();
    return q;
}

// A window's inputs quantized once (QIn's layout in global memory, n vectors) copied into the block's
// shared memory when the host gave it room for them (STRATA_QDOT_WINDOW_SMEM), so each warp's reads of
// the codes, sums and scales of its pieces wait on shared memory, not the L2; otherwise q itself. The
// same values either way.
__device__ QIn qd_window_shared(const QIn& q, int n) {
    extern __shared__ int4 qd_smem[];
    unsigned room;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(room));
    const int words = n * q.P * 11;  // 44 bytes a piece
    if (room < 4u * words) return q;
    const int* src = q.codes;  // the layout's start
    int* dst = reinterpret_cast<int*>(qd_smem);
    const int n16 = words / 4;
    for (int i = threadIdx.x; i < n16; i += blockDim.x)
        stage_copy16(reinterpret_cast<uint4*>(dst) + i, reinterpret_cast<const uint4*>(src) + i);
    stage_commit();
    for (int i = 4 * n16 + threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
    stage_wait<0>();
    __syncthreads();
    return QIn(qd_smem, n, q.P);
}

// Dense: y[t·rows + row] = W[row]·x[t] for t < T. A block takes QD_WARPS·rpw rows, warp w its rows
// base + w, base + w + QD_WARPS, …: more rows a block spread the quantization of the inputs (the head's
// 248,320 rows would otherwise quantize the same input in 31,040 blocks).
// ONE: a kernel for a single token, compiled without the window's code, whose registers (eight sums a
// lane) would otherwise bound the single token's occupancy too.
// CONV (the `_conv` kernels, where gdn.rs fuses the conv; one row a warp): the rows are the GDN conv's channels and
// each warp's lane 0 runs its channel's K = 4 taps over the kept frames and the window's outputs in order
// (common.cuh's ConvFrames, as gdn_conv_norm does), writing silu(conv) to y and the newest frames to the
// tail instead of the raw product. The channel's frames and taps are read before grid_dep_wait: the tail is
// this kernel's own from the step before, the taps a weight.
struct QdConv {
    float* tail;
    const float* taps;
    float* slots;  // a verify window's rewind slots (ConvFrames::keep_slot), or none
};
// TMAX: the most tokens a window kernel takes (2 and 4 for the narrow `_g_w2`/`_g_w4` kernels, whose
// fewer sums a lane leave registers for more blocks a multiprocessor; the same sums in the same order).
template <typename Q, bool ONE, bool G, bool CONV = false, int TMAX = 8>
__device__ void qdot_rows(const unsigned char* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                          int rows, int cols, int T, int rpw, QdConv cv = {}) {
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    ConvFrames<4> cf;
    if constexpr (CONV) {
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;  // rpw = 1
        if (threadIdx.x % WARP == 0 && row < rows) cf.load(cv.tail, cv.taps, rows, 4, row);
    }
    // The block's rows (one span: QD_WARPS·rpw rows from its first) asked for into the L2, so that their
    // fetch overlaps the inputs' quantization, right after grid_dep_wait.
    const auto fetch = [&] {
        if (QDOT_ROW_AHEAD && rpw > 1) {  // the warp's first row only; the loop asks for each next one
            const int row = blockIdx.x * rpw * (blockDim.x / WARP) + threadIdx.x / WARP;
            if (row < rows) prefetch_l2(w + (size_t)row * row_bytes, row_bytes, threadIdx.x % WARP, WARP);
            return;
        }
        const size_t first = (size_t)blockIdx.x * rpw * (blockDim.x / WARP);
        if (first < (size_t)rows) {
            const size_t n = min((size_t)rpw * (blockDim.x / WARP), (size_t)rows - first);
            prefetch_l2(w + first * row_bytes, n * row_bytes, threadIdx.x, blockDim.x);
        }
    };
    grid_dep_wait();
    fetch();
    QIn q = qd_inputs<Q, G>(x, QSrc{x, (size_t)cols, 0, 1}, T, cols);
#if QDOT_WINDOW_SMEM
    if constexpr (G && !ONE) {
        if (T > 1) q = qd_window_shared(q, T);
    }
#endif
    const int warps = blockDim.x / WARP;
    for (int i = 0; i < rpw; ++i) {
        const int row = (blockIdx.x * rpw + i) * warps + threadIdx.x / WARP;
        if (row >= rows) return;
        if (QDOT_ROW_AHEAD && rpw > 1 && i + 1 < rpw && row + warps < rows)
            prefetch_l2(w + (size_t)(row + warps) * row_bytes, row_bytes, threadIdx.x % WARP, WARP);
        float s[8];
        if (ONE || T == 1) {
            qd_row<Q, 1>(w + (size_t)row * row_bytes, q, 0, 1, s);
        } else {
            qd_row<Q, TMAX>(w + (size_t)row * row_bytes, q, 0, T, s);
        }
        if (threadIdx.x % WARP == 0) {
            if constexpr (CONV) {
                cf.run_vals(s, cv.tail, y, rows, 4, T, row, cv.slots);
            } else {
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    if (t < T) y[(size_t)t * rows + row] = s[t];  // unrolled: s stays in registers
                }
            }
        }
    }
}

// The inputs of piece j of tokens t0 .. t0 + N − 1 (those below T): codes, sums and scale, for
// qdot_rows_share.
template <int N>
__device__ __forceinline__ void qd_piece_inputs(const QIn& q, int j, int t0, int T, int (&a)[N][8], int2 (&h)[N],
                                                float (&d)[N]) {
#pragma unroll
    for (int t = 0; t < N; ++t) {
        if (t0 + t < T) {
            const int i = (t0 + t) * q.P + j;
            const int4* a4 = reinterpret_cast<const int4*>(q.codes + 8 * i);
            const int4 c0 = a4[0], c1 = a4[1];
            a[t][0] = c0.x, a[t][1] = c0.y, a[t][2] = c0.z, a[t][3] = c0.w;
            a[t][4] = c1.x, a[t][5] = c1.y, a[t][6] = c1.z, a[t][7] = c1.w;
            h[t] = q.sum[i];
            d[t] = q.d[i];
        }
    }
}

// A window's rows R at a time (`_g_s<TMAX>r<R>`, `_g_s<TMAX>r<R>_conv`; by default, STRATA_QDOT_SHARE=0 for
// qdot_rows): warp w of block b takes rows (8b + w)·R .. + R − 1, and lane L, for each of its pieces L,
// L + 32, … in order, loads the window's inputs of that piece once and puts them against the piece of each
// of its R rows. A row's pieces are as many bytes as 1–2 tokens' inputs of them (a piece's 32 codes, sums
// and scale are 44 bytes a token, the weights 18–34), so a warp a row reads its inputs' bytes several
// times its weights'. Each (row, token) sum is qd_row's: Q::apply of each piece added from +0 in the
// lane's order, then the butterfly. Missing rows of the last warp are neither read nor written. CONV:
// lane i < R of a warp runs its row i's channel (QdConv; lane 0 alone in qdot_rows). TG < TMAX
// (`_g_s8r2`, windows of 5..8 tokens): the R rows' pieces loaded first and the window's inputs a group of
// TG tokens at a time against them, so that eight tokens' inputs need not be held at once; the same
// Q::apply of each piece in the same order.
template <typename Q, int TMAX, int R, bool CONV = false, int TG = TMAX>
__device__ void qdot_rows_share(const unsigned char* __restrict__ w, const float* __restrict__ x,
                                float* __restrict__ y, int rows, int cols, int T, QdConv cv = {}) {
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    const int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    const int row0 = (blockIdx.x * warps + threadIdx.x / WARP) * R, nr = min(R, rows - row0);
    ConvFrames<4> cf;
    if constexpr (CONV) {
        if (lane < nr) cf.load(cv.tail, cv.taps, rows, 4, row0 + lane);
    }
    grid_dep_wait();
    {  // the block's span of rows asked for into the L2, as qdot_rows does for one row a warp
        const size_t first = (size_t)blockIdx.x * warps * R;
        if (first < (size_t)rows) {
            const size_t n = min((size_t)warps * R, (size_t)rows - first);
            prefetch_l2(w + first * row_bytes, n * row_bytes, threadIdx.x, blockDim.x);
        }
    }
    const QIn q(reinterpret_cast<int4*>(const_cast<float*>(x)), T, cols / QBLOCK);
    if (nr <= 0) return;
    float acc[R][TMAX];
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
        for (int t = 0; t < TMAX; ++t) acc[i][t] = 0.0f;
    }
    if constexpr (TG < TMAX) {
        for (int j = lane; j < q.P; j += WARP) {
            const size_t at = (size_t)(QBLOCK * j / Q::BS) * Q::TS;
            const int p = QBLOCK * j % Q::BS / QBLOCK;
            QdW W[R];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (i < nr) W[i] = Q::load(w + (size_t)(row0 + i) * row_bytes + at, p);
            }
#pragma unroll
            for (int g = 0; g < TMAX; g += TG) {
                if (g >= T) break;
                int a[TG][8];
                int2 h[TG];
                float d[TG];
                qd_piece_inputs<TG>(q, j, g, T, a, h, d);
#pragma unroll
                for (int i = 0; i < R; ++i) {
#pragma unroll
                    for (int t = 0; t < TG; ++t) {
                        if (i < nr && g + t < T)
                            acc[i][g + t] = __fadd_rn(acc[i][g + t], Q::apply(W[i], a[t], h[t].x, h[t].y, d[t]));
                    }
                }
            }
        }
    } else {
        for (int j = lane; j < q.P; j += WARP) {
            const size_t at = (size_t)(QBLOCK * j / Q::BS) * Q::TS;
            const int p = QBLOCK * j % Q::BS / QBLOCK;
            int a[TMAX][8];
            int2 h[TMAX];
            float d[TMAX];
            qd_piece_inputs<TMAX>(q, j, 0, T, a, h, d);
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (i < nr) {
                    const QdW W = Q::load(w + (size_t)(row0 + i) * row_bytes + at, p);
#pragma unroll
                    for (int t = 0; t < TMAX; ++t) {
                        if (t < T) acc[i][t] = __fadd_rn(acc[i][t], Q::apply(W, a[t], h[t].x, h[t].y, d[t]));
                    }
                }
            }
        }
    }
    float s[TMAX];  // this lane's row's outputs (CONV), else lane 0 writes every row's
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
        for (int t = 0; t < TMAX; ++t) {
            const float v = warp_butterfly(acc[i][t]);
            if (CONV && lane == i) s[t] = v;
            if (!CONV && lane == 0 && i < nr && t < T) y[(size_t)t * rows + row0 + i] = v;
        }
    }
    if constexpr (CONV) {
        if (lane < nr) cf.run_vals(s, cv.tail, y, rows, 4, T, row0 + lane, cv.slots);
    }
}

// The staged kernels (`_g_one_st`, `_g_one_conv_st`; the default, STRATA_QDOT_STAGE=0 for `_g_one`):
// one token, inputs quantized once, a row a warp. The block's rows, one span of bytes, are copied into
// shared memory before grid_dep_wait (a weight is no kernel's output), so with programmatic launches the
// copy runs while the kernel before does, as HC_EARLY's weight loads do; after the wait each warp decodes
// its row from there. The copy starts at the 16-byte boundary below the span and keeps each byte's address
// mod 16 (matvec.cu's staged layout); the host gives 16 bytes more than it, for qd_words' word past a row's
// end. The same qd_row, and for CONV the same epilogue as qdot_rows: the same sums.
template <typename Q, bool CONV>
__device__ void qdot_rows_staged(const unsigned char* __restrict__ w, const float* __restrict__ x,
                                 float* __restrict__ y, int rows, int cols, QdConv cv = {}) {
    extern __shared__ uint4 qd_stage[];
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    const int warps = blockDim.x / WARP, first = blockIdx.x * warps, nr = min(warps, rows - first);
    const int row = first + threadIdx.x / WARP;
    ConvFrames<4> cf;
    if constexpr (CONV) {
        if (threadIdx.x % WARP == 0 && row < rows) cf.load(cv.tail, cv.taps, rows, 4, row);
    }
    const unsigned char* w0 = w + (size_t)first * row_bytes;
    const size_t a = (size_t)w0 & 15;
    const uint4* src = reinterpret_cast<const uint4*>(w0 - a);
    const int n16 = (int)((a + nr * row_bytes + 15) / 16);
    for (int i = threadIdx.x; i < n16; i += blockDim.x) stage_copy16(qd_stage + i, src + i);
    stage_commit();
    grid_dep_wait();
    const QIn q = qd_inputs<Q, true>(x, QSrc{}, 1, cols);
    stage_wait<0>();
    __syncthreads();
    if (row >= rows) return;
    float s[8];
    qd_row<Q, 1>(reinterpret_cast<const unsigned char*>(qd_stage) + a + (size_t)(row - first) * row_bytes, q, 0, 1, s);
    if (threadIdx.x % WARP == 0) {
        if constexpr (CONV) {
            cf.run_vals(s, cv.tail, y, rows, 4, 1, row);
        } else {
            y[row] = s[0];
        }
    }
}

// The int8 tensor-core window product (`_g_mma`, STRATA_QDOT_MMA=1; sm_75+): y[t·rows + row] = W[row]·x[t]
// for t < T ≤ 8, inputs quantized once. A block takes 8 rows and the window's 8 token columns as one
// m8n8k16 tile: lane (g, c) = (lane / 4, lane % 4) gives words c and c + 4 of row g's piece (Q::word2)
// and of token g's codes, and gets back the integer sums of row g, tokens 2c and 2c + 1, one MMA per half
// piece, never added across pieces: exact. Its float combination is § qdot's: each piece's value by
// Q::finish, a lane class's pieces (j ≡ L mod 32) in order from +0, and the classes taken in the
// butterfly's leaf order by qd_tree_push (docs/ARITHMETIC.md § qdot, "the same values from sums made
// elsewhere"). The block's warps split the 32 leaves into runs of 32 / QD_WARPS, each run a whole
// subtree; warp 0 then adds the runs' sums as the tree's top levels. So a tile of 8 rows keeps as many
// warps at work as a row a warp does. Missing rows of a last tile read the last row and are not written;
// missing tokens are zero codes.
__device__ __forceinline__ void qd_mma16(int& c0, int& c1, int a, int b) {
#if __CUDA_ARCH__ >= 750
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+r"(c0), "+r"(c1)
                 : "r"(a), "r"(b));
#endif
}

template <typename Q>
__device__ void qdot_rows_mma(const unsigned char* __restrict__ w, const float* __restrict__ x,
                              float* __restrict__ y, int rows, int cols, int T) {
    constexpr int RUN = WARP / QD_WARPS;  // leaves a warp
    __shared__ float part[2][QD_WARPS][WARP];
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP, g = lane / 4, c = lane % 4;
    const int first = blockIdx.x * 8, row = first + g;
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    grid_dep_wait();
    const QIn q = qd_inputs<Q, true>(x, QSrc{}, T, cols);
    if (first >= rows) return;  // the whole block
    const unsigned char* r = w + (size_t)min(row, rows - 1) * row_bytes;
    const int t0 = 2 * c, t1 = 2 * c + 1;
    float lv0[5], lv1[5], sub0 = 0.0f, sub1 = 0.0f;
#pragma unroll
    for (int k = 0; k < RUN; ++k) {
        float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 1
        for (int j = qd_tree_lane(wi * RUN + k); j < q.P; j += WARP) {  // the same for all 32 lanes
            const unsigned char* b = r + (size_t)(QBLOCK * j / Q::BS) * Q::TS;
            const int p = QBLOCK * j % Q::BS / QBLOCK;
            const int2 wd = Q::word2(b, p, c);
            int a0 = 0, a1 = 0;
            if (g < T) {
                const int* codes = q.codes + 8 * (g * q.P + j);
                a0 = codes[c];
                a1 = codes[4 + c];
            }
            int s00 = 0, s01 = 0, s10 = 0, s11 = 0;  // half, then token t0 / t1
            qd_mma16(s00, s01, wd.x, a0);
            qd_mma16(s10, s11, wd.y, a1);
            const QdW W = Q::scales(b, p);
            if (t0 < T) {
                const int i = t0 * q.P + j;
                const int2 h = q.sum[i];
                acc0 = __fadd_rn(acc0, Q::finish(W, s00, s10, h.x, h.y, q.d[i]));
            }
            if (t1 < T) {
                const int i = t1 * q.P + j;
                const int2 h = q.sum[i];
                acc1 = __fadd_rn(acc1, Q::finish(W, s01, s11, h.x, h.y, q.d[i]));
            }
        }
        // A run of RUN leaves from a multiple of RUN is a whole subtree, summed as leaves 0 .. RUN − 1.
        sub0 = qd_tree_push(lv0, k, acc0);
        sub1 = qd_tree_push(lv1, k, acc1);
    }
    part[0][wi][lane] = sub0;
    part[1][wi][lane] = sub1;
    __syncthreads();
    if (wi != 0 || row >= rows) return;
    float out0 = 0.0f, out1 = 0.0f;
#pragma unroll
    for (int v = 0; v < QD_WARPS; ++v) {
        out0 = qd_tree_push(lv0, v, part[0][v][lane]);
        out1 = qd_tree_push(lv1, v, part[1][v][lane]);
    }
    if (t0 < T) y[(size_t)t0 * rows + row] = out0;
    if (t1 < T) y[(size_t)t1 * rows + row] = out1;
}

// An m16n8k16 int8 tile: rows g and g + 8 (a0, a1: words of k = 4c .. 4c + 3) against column g (b),
// sums of rows g and g + 8, columns 2c and 2c + 1 added into c[0..1] and c[2..3]. Before sm_80, as two
// m8n8k16 tiles (the rows' halves), the same exact integer sums.
__device__ __forceinline__ void qd_mma16x8(int (&c)[4], int a0, int a1, int b) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b));
#else
    qd_mma16(c[0], c[1], a0, b);
    qd_mma16(c[2], c[3], a1, b);
#endif
}

// Warps a block of the grouped gathers: 16 rows each.
#define QG_WARPS 4
// Slots a group (moe.cu's MG_GROUP): the tile's 8 columns.
#define QG_GROUP 8

// The experts' products over a prompt window's slots grouped by expert (`_g_grouped`, `_g_grouped_glu`;
// ops/moe/grouped.rs): group blockIdx.y is expert gexp[g] with up to 8 slots gslots[8g ..] (−1 past its
// last; moe.cu's moe_group_plan), so each piece of the expert's rows is unpacked once for all of them. A
// warp takes 16 rows and the group's slots as int8 tensor-core tiles, one a half piece (qd_mma16x8):
// lane (g, c) = (lane / 4, lane % 4) gives words c and c + 4 of rows g and g + 8 (Q::word2) and of slot
// g's codes, and gets back the integer sums of rows g and g + 8 against slots 2c and 2c + 1, exact. Each
// (row, slot) value is then § qdot's, as qdot_rows_mma makes it: a piece's value by Q::finish, a lane
// class's pieces (j ≡ L mod 32) in order from +0, the 32 classes in the butterfly's leaf order by
// qd_tree_push_at, all in the one warp. So a slot's sums are its gather's (qd_row, qd_row2) whichever slots
// share its tile. GLU: the gate rows (w, from row off) and the up rows (w2, from off2) and
// y = silu(gate)·up, the product rounded; else w's rows and y the product. Slot ts reads quantized
// vector ts / x_tok (x_tok = k where the slots read their token's input, 1 where each has its own) of
// the nvec at x, and writes y[ts·rows + row]. Rows past the last of a tile read the last and are not
// written.
template <typename Q, bool GLU>
__device__ void qdot_grouped_rows(const unsigned char* __restrict__ w, const unsigned char* __restrict__ w2,
                                  const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int stride,
                                  int off, int off2, int x_tok, int nvec, const int* __restrict__ gexp,
                                  const int* __restrict__ gslots) {
    constexpr int NP = GLU ? 2 : 1;  // projections
    const int lane = threadIdx.x % WARP, g = lane / 4, c = lane % 4;
    const int row0 = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * 16;
    grid_dep_wait();
    const int e = gexp[blockIdx.y];
    if (e < 0 || row0 >= rows) return;
    const QIn q(reinterpret_cast<int4*>(const_cast<float*>(x)), nvec, cols / QBLOCK);
    const int* gs = gslots + QG_GROUP * blockIdx.y;
    const int sb = gs[g], so[2] = {gs[2 * c], gs[2 * c + 1]};  // the slot this lane gives; its sums' slots
    const int vb = sb >= 0 ? sb / x_tok : -1, vo[2] = {so[0] >= 0 ? so[0] / x_tok : -1, so[1] >= 0 ? so[1] / x_tok : -1};
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    const int ra = min(row0 + g, rows - 1), rb = min(row0 + g + 8, rows - 1);
    const unsigned char* r[NP][2];
#pragma unroll
    for (int pr = 0; pr < NP; ++pr) {
        const unsigned char* base = pr == 0 ? w : w2;
        const size_t first = (size_t)e * stride + (pr == 0 ? off : off2);
        r[pr][0] = base + (first + ra) * row_bytes;
        r[pr][1] = base + (first + rb) * row_bytes;
    }
    float lv[NP][4][5], out[NP][4];  // output o: row a (o < 2) or b, slot so[o % 2]
#pragma unroll 1
    for (int kk = 0; kk < WARP; ++kk) {
        float acc[NP][4];
#pragma unroll
        for (int pr = 0; pr < NP; ++pr) {
#pragma unroll
            for (int o = 0; o < 4; ++o) acc[pr][o] = 0.0f;
        }
#pragma unroll 1
        for (int j = qd_tree_lane(kk); j < q.P; j += WARP) {  // the same for all 32 lanes
            const size_t at = (size_t)(QBLOCK * j / Q::BS) * Q::TS;
            const int p = QBLOCK * j % Q::BS / QBLOCK;
            int b0 = 0, b1 = 0;
            if (vb >= 0) {
                const int* codes = q.codes + 8 * (vb * q.P + j);
                b0 = codes[c];
                b1 = codes[4 + c];
            }
            int2 hs[2] = {make_int2(0, 0), make_int2(0, 0)};
            float da[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                if (vo[i] >= 0) {
                    hs[i] = q.sum[vo[i] * q.P + j];
                    da[i] = q.d[vo[i] * q.P + j];
                }
            }
#pragma unroll
            for (int pr = 0; pr < NP; ++pr) {
                const int2 wa = Q::word2(r[pr][0] + at, p, c), wb = Q::word2(r[pr][1] + at, p, c);
                int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                qd_mma16x8(lo, wa.x, wb.x, b0);
                qd_mma16x8(hi, wa.y, wb.y, b1);
                const QdW Wa = Q::scales(r[pr][0] + at, p), Wb = Q::scales(r[pr][1] + at, p);
#pragma unroll
                for (int o = 0; o < 4; ++o) {
                    const int i = o % 2;
                    if (vo[i] >= 0)
                        acc[pr][o] = __fadd_rn(acc[pr][o], Q::finish(o < 2 ? Wa : Wb, lo[o], hi[o], hs[i].x, hs[i].y, da[i]));
                }
            }
        }
#pragma unroll
        for (int pr = 0; pr < NP; ++pr) {
#pragma unroll
            for (int o = 0; o < 4; ++o) out[pr][o] = qd_tree_push_at(lv[pr][o], kk, acc[pr][o]);
        }
    }
#pragma unroll
    for (int o = 0; o < 4; ++o) {
        const int i = o % 2, row = row0 + g + (o < 2 ? 0 : 8);
        if (so[i] >= 0 && row < rows) {
            const size_t at = (size_t)so[i] * rows + row;
            if constexpr (GLU) {
                y[at] = __fmul_rn(s_silu(out[0][o]), out[1][o]);
            } else {
                y[at] = out[0][o];
            }
        }
    }
}

// The input of slot ts = t·k + s (token t, slot s), at x + t·x_tok + s·x_slot, quantized into shared
// memory by the block; with G, x holds the quantized vectors of the grid's slots (blockIdx.y = ts) and
// x_tok says how many slots share one (k where the slots read their token's input, else 1).
template <typename Q, bool G>
__device__ QIn qd_slot_input(const float* x, int cols, int k, int x_tok, int x_slot, int ts) {
    if (G) {
        QIn q = qd_inputs<Q, true>(x, QSrc{}, gridDim.y / x_tok, cols);
        const int v = ts / x_tok;  // the slot's vector first: qd_row reads vector 0
        q.codes += 8 * v * q.P;
        q.sum += v * q.P;
        q.d += v * q.P;
        return q;
    }
    return qd_inputs<Q, false>(x, QSrc{x + (size_t)(ts / k) * x_tok + (size_t)(ts % k) * x_slot, 0, 0, 1}, 1, cols);
}

// The experts' products: for slot ts = t·k + s (blockIdx.y, or a list's entry: gather_slot), the `rows`
// rows of expert id (from row id·stride + offset of the stacked matrix) times the slot's input, to
// y[ts·rows + row]. A list takes the block's own quantization (G reads the grid's slots' vectors).
template <typename Q, bool G>
__device__ void qdot_gather_rows(const unsigned char* __restrict__ w, const float* __restrict__ x,
                                 float* __restrict__ y, int rows, int cols, const int* __restrict__ ids, int k,
                                 int stride, int offset, int x_tok, int x_slot, const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    const unsigned char* r = w + ((size_t)id * stride + offset + row) * row_bytes;
    // The row's lines asked for before the input is quantized, so that their fetch overlaps it.
    if (row < rows) prefetch_l2(r, row_bytes, threadIdx.x % WARP, WARP);
    const QIn q = qd_slot_input<Q, G>(x, cols, k, x_tok, x_slot, ts);
    if (row >= rows) return;
    float v;
    qd_row<Q, 1>(r, q, 0, 1, &v);
    if (threadIdx.x % WARP == 0) y[(size_t)ts * rows + row] = v;
}

// The experts' gate and up products with the activation: h[ts·rows + row] = silu(g)·u, the product
// rounded (matvec.cu's _gather_glu, moe.cu's moe_act).
template <typename Q, bool G>
__device__ void qdot_gather_glu_rows(const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
                                     const float* __restrict__ x, float* __restrict__ h, int rows, int cols,
                                     const int* __restrict__ ids, int k, int stride, int off_g, int off_u, int x_tok,
                                     int x_slot, const int* __restrict__ list) {
    int ts, id;
    if (!gather_slot(ids, list, ts, id)) return;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS, e = (size_t)id * stride;
    const unsigned char *rg = wg + (e + off_g + row) * row_bytes, *ru = wu + (e + off_u + row) * row_bytes;
    if (row < rows) {  // the rows' lines asked for before the input is quantized
        prefetch_l2(rg, row_bytes, threadIdx.x % WARP, WARP);
        prefetch_l2(ru, row_bytes, threadIdx.x % WARP, WARP);
    }
    const QIn q = qd_slot_input<Q, G>(x, cols, k, x_tok, x_slot, ts);
    if (row >= rows) return;
    float g, u;
    qd_row2<Q>(rg, ru, q, 0, &g, &u);
    if (threadIdx.x % WARP == 0) h[(size_t)ts * rows + row] = __fmul_rn(s_silu(g), u);
}

// The MoE combination of a block's nv output rows (from row) of token t, once every slot's outputs are in
// e[slot][d]: y[t][d] = the fma chain over the slots in rank order of weight · slot output from +0, then
// fma(σ(shared gate), shared[t][d], ·), as moe.cu's moe_combine.
__device__ __forceinline__ void qd_combine(const float (*e)[QD_COMBINE_ROWS], int nv, int t, int k, int row, int rows,
                                           const float* __restrict__ weights, const float* __restrict__ shared,
                                           const float* __restrict__ sgate, float* __restrict__ y) {
    for (int d = threadIdx.x; d < nv; d += blockDim.x) {
        const size_t i = (size_t)t * rows + row + d;
        float o = 0.0f;
        for (int p = 0; p < k; ++p) o = __fmaf_rn(weights[t * k + p], e[p][d], o);
        y[i] = __fmaf_rn(s_sigmoid(sgate[t]), shared[i], o);
    }
}

// The experts' down products and the MoE combination (matvec.cu's _gather_combine): a block of k warps
// takes rpb ≤ QD_COMBINE_ROWS output rows of token t = blockIdx.y; warp s makes slot s's rows into shared
// memory, then y[t][d] = the fma chain over the slots in rank order of weight · slot output from +0, then
// fma(σ(shared gate), shared[t][d], ·), as moe.cu's moe_combine. With G, x holds the quantized inputs of
// every slot (t·k + s). ST (`_g_gather_combine_st`, the default where the rows fit; STRATA_COMBINE_STAGE=0
// for the plain form): the warps copy their slot's rows into the block's shared memory (cp.async, every
// line of them in flight at once) while the inputs are set up, and read them there, instead of asking for
// them into the L2 and reading them in rounds of two rows.
template <typename Q, bool G, bool ST = false>
__device__ void qdot_gather_combine_rows(const unsigned char* __restrict__ w, const float* __restrict__ x,
                                         float* __restrict__ y, int rows, int cols, const int* __restrict__ ids,
                                         int k, int stride, int offset, int x_tok, int x_slot,
                                         const float* __restrict__ weights, const float* __restrict__ shared,
                                         const float* __restrict__ sgate, int rpb) {
    __shared__ float e[WARP][QD_COMBINE_ROWS];
    const int s = threadIdx.x / WARP, t = blockIdx.y, row = blockIdx.x * rpb;
    const int nv = min(rpb, rows - row);
    const size_t row_bytes = (size_t)(cols / Q::BS) * Q::TS;
    const unsigned char* r = w + ((size_t)ids[t * k + s] * stride + offset + row) * row_bytes;
    // With ST (inputs quantized once: the block's shared memory is free for the rows), slot s's rows (one
    // span) are copied to its part of the shared memory (rpb rows' bytes and 32 more, for their start's
    // offset from a 16-byte boundary and qd_words' word past the end; the host gives k parts), kept mod
    // 16; otherwise asked for into the L2 before the inputs are quantized.
    static_assert(G || !ST, "staged rows need the block's shared memory free of inputs");
    extern __shared__ uint4 qd_stage[];
    const size_t part = ((size_t)rpb * row_bytes + 15) / 16 + 2;  // 16-byte words a slot
    const size_t a = (size_t)r & 15;
    if constexpr (ST) {
        if (s < k && nv > 0) {
            const uint4* src = reinterpret_cast<const uint4*>(r - a);
            const int n16 = (int)((a + nv * row_bytes + 15) / 16);
            for (int i = threadIdx.x % WARP; i < n16; i += WARP) stage_copy16(qd_stage + s * part + i, src + i);
        }
        stage_commit();
    } else {
        if (s < k && nv > 0) prefetch_l2(r, nv * row_bytes, threadIdx.x % WARP, WARP);
    }
    const QIn q = G ? qd_inputs<Q, true>(x, QSrc{}, gridDim.y * k, cols)
                    : qd_inputs<Q, false>(x, QSrc{x + (size_t)t * x_tok, (size_t)x_slot, 0, 1}, k, cols);
    if constexpr (ST) {
        stage_wait<0>();
        __syncwarp();  // each warp reads only the rows it copied
        r = reinterpret_cast<const unsigned char*>(qd_stage + s * part) + a;
    }
    const int v = G ? t * k + s : s;
    if (s < k) {
        int i = 0;
        for (; i + 1 < nv; i += 2) {  // two rows at a time, their loads in flight together
            float v1, v2;
            qd_row2<Q>(r + (size_t)i * row_bytes, r + (size_t)(i + 1) * row_bytes, q, v, &v1, &v2);
            if (threadIdx.x % WARP == 0) {
                e[s][i] = v1;
                e[s][i + 1] = v2;
            }
        }
        if (i < nv) {
            float o;
            qd_row<Q, 1>(r + (size_t)i * row_bytes, q, v, 1, &o);
            if (threadIdx.x % WARP == 0) e[s][i] = o;
        }
    }
    __syncthreads();
    qd_combine(e, nv, t, k, row, rows, weights, shared, sgate, y);
}

// The inputs quantized once for the _g kernels: pieces of the n vectors at x (vector v at
// x + (v / kd)·tok + (v % kd)·slot, P pieces each) into q (44 bytes a piece, QIn's layout), a block
// QD_ROUNDS pieces a group of 8 lanes.
template <typename Q>
__device__ void qdot_quantize_pieces(const float* __restrict__ x, int tok, int slot, int kd, int n, int P,
                                     int4* __restrict__ out) {
    grid_dep_wait();
    const QIn q(out, n, P);
    const int span = QD_ROUNDS * (blockDim.x / 8), begin = blockIdx.x * span;
    qd_quantize<Q>(QSrc{x, (size_t)tok, (size_t)slot, kd}, begin, min(n * P, begin + span), q);
}

// The MoE router's logits and the experts' input quantized for their gate and up products, in one launch
// (`NAME_router`, STRATA_ROUTER_QUANTIZE=1): blocks 0 .. qb − 1 quantize the T inputs as the _quantize
// kernel does, the others take the router's rows (F32, kind 1, or BF16), a warp a row: lane L dots its
// chunks L, L + 32, … (8 fmas each from +0) and adds them in order, then the butterfly, matvec.cu's sums
// for those types (as common.cuh's EarlyRow). The row is asked for into the L2 before grid_dep_wait. So no
// launch of its own sits between the routing and the experts' products.
template <typename Q>
__device__ void qdot_router_rows(const void* __restrict__ wr, int kind, const float* __restrict__ x,
                                 float* __restrict__ logits, int E, int n, int T, int qb, int4* __restrict__ out) {
    if ((int)blockIdx.x < qb) {
        qdot_quantize_pieces<Q>(x, n, 0, 1, T, n / QBLOCK, out);
        return;
    }
    const int r = ((int)blockIdx.x - qb) * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const size_t row_bytes = (size_t)n * (kind == 1 ? 4 : 2);
    const unsigned char* row = reinterpret_cast<const unsigned char*>(wr) + (size_t)r * row_bytes;
    if (r < E) prefetch_l2(row, row_bytes, lane, WARP);
    grid_dep_wait();
    if (r >= E) return;
#if ROUTER_ONE_PASS
    // Every token's sum in one pass over the row: each chunk of weights loaded once and put against the
    // T tokens, whose chains run side by side (a token's chain is the same fadds in the same order as
    // one token at a time, which waited out the row's round trips once a token).
    float acc[QD_MAX_T];
#pragma unroll
    for (int t = 0; t < QD_MAX_T; ++t) acc[t] = 0.0f;
#pragma unroll 2
    for (int c = lane; c < n / CHUNK; c += WARP) {
        float w8[CHUNK];
        if (kind == 1) load8_f32(reinterpret_cast<const float*>(row) + CHUNK * c, w8);
        else load8_bf16(reinterpret_cast<const bf16_t*>(row) + CHUNK * c, w8);
#pragma unroll
        for (int t = 0; t < QD_MAX_T; ++t) {
            if (t < T) {
                float x8[CHUNK];
                load8_f32(x + (size_t)t * n + CHUNK * c, x8);
                acc[t] = __fadd_rn(acc[t], chunk_dot(w8, x8));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < QD_MAX_T; ++t) {
        if (t < T) {
            const float s = warp_butterfly(acc[t]);
            if (lane == 0) logits[(size_t)t * E + r] = s;
        }
    }
#else
    for (int t = 0; t < T; ++t) {
        const float* xt = x + (size_t)t * n;
        float acc = 0.0f;
#pragma unroll 4
        for (int c = lane; c < n / CHUNK; c += WARP) {
            float w8[CHUNK], x8[CHUNK];
            if (kind == 1) load8_f32(reinterpret_cast<const float*>(row) + CHUNK * c, w8);
            else load8_bf16(reinterpret_cast<const bf16_t*>(row) + CHUNK * c, w8);
            load8_f32(xt + CHUNK * c, x8);
            acc = __fadd_rn(acc, chunk_dot(w8, x8));
        }
        acc = warp_butterfly(acc);
        if (lane == 0) logits[(size_t)t * E + r] = acc;
    }
#endif
}

// Each dense and gather kernel makes one product, or two of the same shape, type and input in one launch
// (blockIdx.z = 1 takes w2 and y2, and for the gathers offset2). The shared memory is the host's: 44 bytes
// a piece of each quantized input (none for the _g kernels, whose inputs were quantized once before them).
#define QDOT_KERNELS(NAME, Q, G)                                                                              \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2) /* ptxas's own pick spilled */           \
        NAME(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T,        \
             int rpw, const unsigned char* w2, float* y2) { /* grid_dep_wait in qdot_rows */                   \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows<Q, false, G>(w, x, y, rows, cols, T, rpw);                                                  \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_one(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T,  \
                   int rpw, const unsigned char* w2, float* y2) { /* grid_dep_wait in qdot_rows */             \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows<Q, true, G>(w, x, y, rows, cols, 1, rpw);                                                   \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_gather(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,      \
                      const int* ids, int k, int stride, int offset, int x_tok, int x_slot,                   \
                      const unsigned char* w2, int offset2, float* y2, const int* list) {                     \
        grid_dep_wait();                                                                                      \
        if (blockIdx.z) { w = w2; offset = offset2; y = y2; }                                                 \
        qdot_gather_rows<Q, G>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, list);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_gather_glu(const unsigned char* wg, const unsigned char* wu, const float* __restrict__ x,       \
                          float* h, int rows, int cols, const int* ids, int k, int stride, int off_g,         \
                          int off_u, int x_tok, int x_slot, const int* list) {                                \
        grid_dep_wait();                                                                                      \
        qdot_gather_glu_rows<Q, G>(wg, wu, x, h, rows, cols, ids, k, stride, off_g, off_u, x_tok, x_slot,     \
                                   list);                                                                     \
    }                                                                                                         \
    extern "C" __global__ void NAME##_gather_combine(const unsigned char* w, const float* __restrict__ x,     \
                                                     float* y, int rows, int cols, const int* ids, int k,     \
                                                     int stride, int offset, int x_tok, int x_slot,           \
                                                     const float* weights, const float* shared,               \
                                                     const float* sgate, int rpb) {                           \
        grid_dep_wait();                                                                                      \
        qdot_gather_combine_rows<Q, G>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot, weights,   \
                                       shared, sgate, rpb);                                                   \
    }

// The shared-input window kernels for TMAX tokens and R rows a warp: plain and with the GDN conv.
#define QDOT_SHARE(NAME, Q, TM, R)                                                                            \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2)                                          \
        NAME##_g_s##TM##r##R(const unsigned char* w, const float* __restrict__ x, float* y, int rows,         \
                             int cols, int T, const unsigned char* w2, float* y2) {                           \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows_share<Q, TM, R>(w, x, y, rows, cols, T);                                                    \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2)                                          \
        NAME##_g_s##TM##r##R##_conv(const unsigned char* w, const float* __restrict__ x, float* y, int rows,  \
                                    int cols, int T, float* tail, const float* taps, float* slots) {          \
        qdot_rows_share<Q, TM, R, true>(w, x, y, rows, cols, T, QdConv{tail, taps, slots});                   \
    }

#define QDOT(NAME, Q)                                                                                         \
    QDOT_KERNELS(NAME, Q, false)                                                                              \
    QDOT_KERNELS(NAME##_g, Q, true)                                                                           \
    /* the GDN conv in the epilogue (QdConv; inputs quantized once; rpw = 1) */                              \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_g_one_conv(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,  \
                          int T, float* tail, const float* taps) {                                            \
        qdot_rows<Q, true, true, true>(w, x, y, rows, cols, 1, 1, QdConv{tail, taps, nullptr});               \
    }                                                                                                         \
    /* the experts' down product and combination with the slots' rows staged (STRATA_COMBINE_STAGE) */      \
    extern "C" __global__ void NAME##_g_gather_combine_st(                                                    \
        const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, const int* ids,    \
        int k, int stride, int offset, int x_tok, int x_slot, const float* weights, const float* shared,      \
        const float* sgate, int rpb) {                                                                        \
        grid_dep_wait();                                                                                      \
        qdot_gather_combine_rows<Q, true, true>(w, x, y, rows, cols, ids, k, stride, offset, x_tok, x_slot,   \
                                                weights, shared, sgate, rpb);                                 \
    }                                                                                                         \
    /* the staged forms (qdot_rows_staged; T = 1, rpw = 1) */                                                \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_g_one_st(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,    \
                        const unsigned char* w2, float* y2) {                                                 \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows_staged<Q, false>(w, x, y, rows, cols);                                                      \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_g_one_conv_st(const unsigned char* w, const float* __restrict__ x, float* y, int rows,         \
                             int cols, float* tail, const float* taps) {                                      \
        qdot_rows_staged<Q, true>(w, x, y, rows, cols, QdConv{tail, taps, nullptr});                          \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2)                                          \
        NAME##_g_conv(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,      \
                      int T, float* tail, const float* taps, float* slots) {                                  \
        qdot_rows<Q, false, true, true>(w, x, y, rows, cols, T, 1, QdConv{tail, taps, slots});                \
    }                                                                                                         \
    /* the narrow window kernels (STRATA_QDOT_NARROW): T <= 2 and T <= 4, bounded to more blocks */         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, QD_W2_BLOCKS)                               \
        NAME##_g_w2(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T, \
                    int rpw, const unsigned char* w2, float* y2) {                                            \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows<Q, false, true, false, 2>(w, x, y, rows, cols, T, rpw);                                     \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, QD_W4_BLOCKS)                               \
        NAME##_g_w4(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T, \
                    int rpw, const unsigned char* w2, float* y2) {                                            \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows<Q, false, true, false, 4>(w, x, y, rows, cols, T, rpw);                                     \
    }                                                                                                         \
    /* T <= 8, two rows a warp, inputs four tokens at a time (STRATA_QDOT_SHARE) */                               \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2)                                          \
        NAME##_g_s8r2(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,      \
                      int T, const unsigned char* w2, float* y2) {                                            \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows_share<Q, 8, 2, false, 4>(w, x, y, rows, cols, T);                                           \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2)                                          \
        NAME##_g_s8r2_conv(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, \
                           int T, float* tail, const float* taps, float* slots) {                             \
        qdot_rows_share<Q, 8, 2, true, 4>(w, x, y, rows, cols, T, QdConv{tail, taps, slots});                 \
    }                                                                                                         \
    /* a window's rows R a warp over inputs loaded once a piece (qdot_rows_share; STRATA_QDOT_SHARE) */       \
    QDOT_SHARE(NAME, Q, 2, 2)                                                                                 \
    QDOT_SHARE(NAME, Q, 2, 4)                                                                                 \
    QDOT_SHARE(NAME, Q, 4, 2)                                                                                 \
    QDOT_SHARE(NAME, Q, 4, 4)                                                                                 \
    /* the window's product by int8 tensor-core sums (qdot_rows_mma; STRATA_QDOT_MMA=1) */                    \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_g_mma(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols, int T, \
                     const unsigned char* w2, float* y2) {                                                    \
        if (blockIdx.z) { w = w2; y = y2; }                                                                   \
        qdot_rows_mma<Q>(w, x, y, rows, cols, T);                                                             \
    }                                                                                                         \
    /* the experts' products over a prompt window's slots grouped by expert (qdot_grouped_rows) */          \
    extern "C" __global__ void __launch_bounds__(QG_WARPS * WARP)                                             \
        NAME##_g_grouped(const unsigned char* w, const float* __restrict__ x, float* y, int rows, int cols,   \
                         int stride, int off, int x_tok, int nvec, const int* gexp, const int* gslots) {      \
        qdot_grouped_rows<Q, false>(w, nullptr, x, y, rows, cols, stride, off, 0, x_tok, nvec, gexp, gslots); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QG_WARPS * WARP)                                             \
        NAME##_g_grouped_glu(const unsigned char* wg, const unsigned char* wu, const float* __restrict__ x,    \
                             float* h, int rows, int cols, int stride, int off_g, int off_u, int x_tok,        \
                             int nvec, const int* gexp, const int* gslots) {                                  \
        qdot_grouped_rows<Q, true>(wg, wu, x, h, rows, cols, stride, off_g, off_u, x_tok, nvec, gexp, gslots); \
    }                                                                                                         \
    /* the MoE router's product and the experts' input quantized in one launch (STRATA_ROUTER_QUANTIZE=1) */  \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP, 2) /* ptxas's own pick spilled */           \
        NAME##_router(const void* wr, int kind, const float* x, float* logits, int E, int n, int T, int qb,    \
                      int4* out) {                                                                            \
        qdot_router_rows<Q>(wr, kind, x, logits, E, n, T, qb, out);                                           \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(QD_WARPS * WARP)                                             \
        NAME##_quantize(const float* x, int tok, int slot, int kd, int n, int P, int4* out) {                 \
        qdot_quantize_pieces<Q>(x, tok, slot, kd, n, P, out);                                                 \
    }

QDOT(qdot_q8_0, Q8_0Q)
QDOT(qdot_q4_0, Q4_0Q)
QDOT(qdot_q2_0, Q2_0Q)
QDOT(qdot_iq4_nl, IQ4_NLQ)
QDOT(qdot_q4_k, Q4_KQ)
QDOT(qdot_q6_k, Q6_KQ)
QDOT(qdot_q2_0p, Q2_0PQ)
