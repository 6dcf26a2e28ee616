// QSA selection for a window of Q = 1..8 queries (spec §5.4-5.5; docs/ARITHMETIC.md § qsa, § topk).
// Twin of crates/model/src/layers/qsa.rs (block_score) and ops/topk.rs (select_cells).

#define MAXQ 8

// Block scores: s[q][b] = Σ_h relu(dot(Q[q][h], K[b])) for b < n_scored[q], heads in order from +0.
// One warp per key block; the warp's lanes own the key's chunks (the reduction contract), so each head's
// dot is the CPU's, and the butterfly leaves it in every lane.
extern "C" __global__ void qsa_scores(const float* __restrict__ keys, const float* __restrict__ queries,
                                      float* __restrict__ scores, const int* __restrict__ n_scored, int n_blocks,
                                      int di, int hi, int Q, int stride) {
    const int b = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (b >= n_blocks) return;
    const float* k = keys + (size_t)b * di;
    const int nch = di / CHUNK;
    for (int q = 0; q < Q; ++q) {
        if (b >= n_scored[q]) continue;
        float s = 0.0f;
        for (int h = 0; h < hi; ++h) {
            const float* qv = queries + ((size_t)q * hi + h) * di;
            float acc = 0.0f;
            for (int ch = lane; ch < nch; ch += WARP) acc = __fadd_rn(acc, chunk_dot(k + ch * CHUNK, qv + ch * CHUNK));
            acc = warp_butterfly(acc);
            if (acc > 0.0f) s = __fadd_rn(s, acc);
        }
        if (lane == 0) scores[(size_t)q * stride + b] = s;
    }
}

// The order key of a score: s + 0 (−0 → +0), NaN ranks as 0; unsigned order is numeric order.
__device__ __forceinline__ u32 score_key(float s) {
    if (isnan(s)) s = 0.0f;
    u32 b = __float_as_uint(__fadd_rn(s, 0.0f));
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive prefix sum over the block's threads, in thread order (integers: exact). Also returns the total.
__device__ int block_exclusive_scan(int v, int* total) {
    __shared__ int warp_sums[32];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = (blockDim.x + WARP - 1) / WARP;
    int x = v;
#pragma unroll
    for (int off = 1; off < WARP; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    if (lane == WARP - 1) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
        for (int off = 1; off < WARP; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += y;
        }
        if (lane < warps) warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
    *total = warp_sums[warps - 1];
    __syncthreads();
    return before;
}

// Exact selection (spec §5.5) for query q = blockIdx.x: the ascending ids of its selected cells, written to
// out[q·out_stride ..], their number to count[q]. Radix select over the scores' keys finds the threshold
// key τ with its tie budget; every decision is a function of integer counts, so the ids are the CPU's.
extern "C" __global__ void qsa_topk_wide(const float* __restrict__ scores, int stride, const int* __restrict__ n_cells_q,
                                         int top_k, int kpool, u32* __restrict__ out, int out_stride,
                                         int* __restrict__ count) {
    __shared__ u32 hist[256];
    __shared__ u32 prefix, mask;
    __shared__ int need;
    const int q = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const int n_cells = n_cells_q[q];
    const int width = min(n_cells, top_k + kpool - 1);
    u32* o = out + (size_t)q * out_stride;
    if (n_cells <= width) {
        for (int i = tid; i < n_cells; i += nt) o[i] = (u32)i;
        if (tid == 0) count[q] = n_cells;
        return;
    }
    const int tail = (n_cells - 1) / kpool;
    const int budget = width - (n_cells - tail * kpool);
    const float* s = scores + (size_t)q * stride;
    if (tid == 0) { prefix = 0; mask = 0; need = budget; }
    __syncthreads();
    for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        for (int i = tid; i < 256; i += nt) hist[i] = 0;
        __syncthreads();
        const u32 p = prefix, m = mask;
        for (int b = tid; b < tail; b += nt) {
            const u32 k = score_key(s[b]);
            if ((k & m) == p) atomicAdd(&hist[(k >> shift) & 255u], (u32)kpool);
        }
        __syncthreads();
        if (tid == 0) {
            u32 cum = 0;
            int d = 255;
            for (; d > 0; --d) {
                if (cum + hist[d] >= (u32)need) break;
                cum += hist[d];
            }
            need -= (int)cum;
            prefix = p | ((u32)d << shift);
            mask = m | (255u << shift);
        }
        __syncthreads();
    }
    const u32 tau = prefix;
    const int tie_cells = need;  // cells taken from blocks whose key is τ, lowest block first
    // Each thread owns a contiguous run of blocks, so thread order is block order.
    const int per = (tail + nt - 1) / nt, lo = min(tid * per, tail), hi = min(lo + per, tail);
    int n_tie = 0;
    for (int b = lo; b < hi; ++b) n_tie += score_key(s[b]) == tau;
    int total;
    const int tie_before = block_exclusive_scan(n_tie, &total);
    int kept = 0, j = tie_before;
    for (int b = lo; b < hi; ++b) {
        const u32 k = score_key(s[b]);
        if (k > tau) kept += kpool;
        else if (k == tau) kept += max(0, min(kpool, tie_cells - (j++) * kpool));
    }
    int pos = block_exclusive_scan(kept, &total);
    j = tie_before;
    for (int b = lo; b < hi; ++b) {
        const u32 k = score_key(s[b]);
        int take = 0;
        if (k > tau) take = kpool;
        else if (k == tau) take = max(0, min(kpool, tie_cells - (j++) * kpool));
        for (int c = 0; c < take; ++c) o[pos++] = (u32)(b * kpool + c);
    }
    // The tail block's cells close the list.
    for (int i = tid; i < n_cells - tail * kpool; i += nt) o[budget + i] = (u32)(tail * kpool + i);
    if (tid == 0) count[q] = width;
}
