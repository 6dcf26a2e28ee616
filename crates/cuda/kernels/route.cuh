// The MoE routing by a block (moe.cu's moe_route_block, and the experts' gate and up launch that routes
// its own slot, qdot.cu's _g_gather_glu_r): prepended to moe.cu and qdot.cu.

// The largest of a lane's PER keys, as a tree (depth 4 at PER = 16, not a chain of 16).
template <int N>
__device__ __forceinline__ unsigned long long tree_max_key(const unsigned long long* key) {
    if constexpr (N == 1) {
        return key[0];
    } else {
        return max(tree_max_key<N / 2>(key), tree_max_key<N - N / 2>(key + N / 2));
    }
}
// The warp's largest 64-bit key. sm_80+: the high words' maximum by one warp reduction, then the low
// words' among the lanes holding it (the others give 0, below any low word that can win: keys are
// distinct); before sm_80, five shuffles of the whole key.
__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long v) {
#if __CUDA_ARCH__ >= 800
    const u32 hi = __reduce_max_sync(0xffffffffu, (u32)(v >> 32));
    const u32 lo = __reduce_max_sync(0xffffffffu, (u32)(v >> 32) == hi ? (u32)v : 0u);
    return ((unsigned long long)hi << 32) | lo;
#else
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
#endif
}

// moe_route's block layout (the default; STRATA_ROUTE=warp for moe_route): the same routing by ROUTE_WARPS
// warps, ROUTE_EPT experts a thread (i, i + ROUTE_THREADS, …: E ≤ 512 as above), instead of one warp holding
// 16 a lane, so each step is a short chain: each thread's e^(x − max) and p; the chunk sums by a thread per
// chunk, in element order; warp 0 adds chunks L and L + 32 in order and the butterfly; then each warp's
// kk = min(k, 32·ROUTE_EPT) best keys by rounds of the warp's maximum (the k best overall are among
// those), and warp 0 takes the k best of the candidates as route_token does. Every value and its order
// are route_token's: the same ids and weights. One more warp makes the shared expert's gate logit as
// moe_route's does; 8 warps in all keep ptxas's register cap at 255 (a ninth would put three warps on a
// scheduler and cap it at 168, and the gate's early row spills there).
#define ROUTE_WARPS 7
#define ROUTE_THREADS (ROUTE_WARPS * WARP)
#define ROUTE_EPT 3
//
// route_block_token is that routing for token t (every thread below ROUTE_THREADS calls it, after
// grid_dep_wait; warps 1.. return from it once their candidates are in). SLOT: the block also keeps the
// expert of its rank `slot` in *slot_expert (shared memory, written by warp 0's lane 0), and writes ids
// and weights only when `write` (one block of the launch per token does).
template <bool SLOT>
__device__ __forceinline__ void route_block_token(const float* __restrict__ logits, int* __restrict__ ids,
                                                  float* __restrict__ weights, int E, int k, int t, int slot = 0,
                                                  int* slot_expert = nullptr, bool write = true) {
    constexpr int MAXE = 512, NCH = MAXE / CHUNK, PER = MAXE / WARP;
    __shared__ float pe[MAXE];  // e^(x − max), then p
    __shared__ float chunk_sum[NCH];
    __shared__ float red[ROUTE_WARPS + 1];  // each warp's maximum; then [0] the maximum, [ROUTE_WARPS] the total
    __shared__ unsigned long long cand[MAXE];
    const int i = threadIdx.x, lane = i % WARP, w = i / WARP;
    const float inf = __int_as_float(0x7f800000);
    auto at = [&](int h) { return i + ROUTE_THREADS * h; };  // this thread's expert h
    float x[ROUTE_EPT], m = -inf;
#pragma unroll
    for (int h = 0; h < ROUTE_EPT; ++h) {
        x[h] = at(h) < E ? __ldcg(logits + (size_t)t * E + at(h)) : 0.0f;
        if (at(h) < E) m = fmaxf(m, x[h]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[w] = m;
    __syncthreads();
    if (w == 0) {
        m = lane < ROUTE_WARPS ? red[lane] : -inf;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    }
    __syncthreads();  // every warp has read red before it is written again
    if (i == 0) red[0] = m;
    __syncthreads();
    float e[ROUTE_EPT];
#pragma unroll
    for (int h = 0; h < ROUTE_EPT; ++h) {
        e[h] = at(h) < E ? s_exp(__fsub_rn(x[h], red[0])) : 0.0f;
        if (at(h) < MAXE) pe[at(h)] = e[h];
    }
    __syncthreads();
    if (i < NCH && CHUNK * i < E) {
        float s = 0.0f;
        for (int j = CHUNK * i; j < min(CHUNK * i + CHUNK, E); ++j) s = __fadd_rn(s, pe[j]);
        chunk_sum[i] = s;
    }
    __syncthreads();
    if (w == 0) {
        float acc = 0.0f;
        if (CHUNK * lane < E) acc = __fadd_rn(acc, chunk_sum[lane]);
        if (CHUNK * (lane + WARP) < E) acc = __fadd_rn(acc, chunk_sum[lane + WARP]);
        acc = warp_butterfly(acc);
        if (lane == 0) red[ROUTE_WARPS] = acc;
    }
    __syncthreads();
    unsigned long long key[ROUTE_EPT];
#pragma unroll
    for (int h = 0; h < ROUTE_EPT; ++h) {
        const float p = __fdiv_rn(e[h], red[ROUTE_WARPS]);
        if (at(h) < MAXE) pe[at(h)] = p;
        key[h] = at(h) < E ? ((unsigned long long)score_key(p) << 32) | (u32)(~at(h)) : 0ull;
    }
    // Each warp's kk best (keys are distinct: one lane holds the round's best; 0 once none is left).
    const int kk = min(k, ROUTE_EPT * WARP);
    for (int r = 0; r < kk; ++r) {
        const unsigned long long best = warp_max_key(tree_max_key<ROUTE_EPT>(key));
#pragma unroll
        for (int h = 0; h < ROUTE_EPT; ++h) {
            if (key[h] == best) key[h] = 0;
        }
        if (lane == 0) cand[w * kk + r] = best;
    }
    __syncthreads();
    if (w != 0) return;
    unsigned long long mine[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) mine[j] = lane + WARP * j < ROUTE_WARPS * kk ? cand[lane + WARP * j] : 0ull;
    unsigned long long mine_best = tree_max_key<PER>(mine);
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) {
        const unsigned long long best = warp_max_key(mine_best);
        if (mine_best == best) {
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                if (mine[j] == best) mine[j] = 0;
            }
            mine_best = tree_max_key<PER>(mine);
        }
        const int id = (int)(~(u32)best);
        const float v = pe[id];
        sum = __fadd_rn(sum, v);
        if constexpr (SLOT) {
            if (lane == 0 && r == slot) *slot_expert = id;
            if (!write) continue;
        }
        if (lane == 0) {
            ids[t * k + r] = id;
            weights[t * k + r] = v;
        }
    }
    if (SLOT && !write) return;
    __syncwarp();
    const float denom = fmaxf(sum, __uint_as_float(0x38800000u));  // 2^-14
    for (int r = lane; r < k; r += WARP) weights[t * k + r] = __fdiv_rn(weights[t * k + r], denom);
}
