// The mixture of experts (spec §7; docs/ARITHMETIC.md § moe) for a window of T tokens: routing on the
// device (softmax, exact top-k, renormalised weights), the experts' products by matvec.cu's gather kernels,
// and the combination in rank order then the shared expert. Twin of crates/model/src/layers/moe.rs.

// One warp per token: p = softmax(logits) (max, e^(x − max), the sum by the reduction contract, each term
// over the sum), the k best by key (lower index first among equals), then w_i = p_i / max(Σ_rank p, 2^-14)
// with the sum taken in rank order. Lane L holds the contract's chunks L and L + 32 (elements 8L .. 8L + 7
// and 256 + 8L .. 256 + 8L + 7) in registers, so nothing is read twice from memory: at most 512 experts
// (the host checks). Every step is the contract's: the max is order-free, each chunk is summed in element
// order and the lanes' two chunks in ascending order, and the top-k takes the largest (key << 32) | ~id of
// the entries not yet taken (a taken one becomes 0, below every candidate), which no order changes.
#define ROUTE_CHUNKS 2
//
// A second warp makes the shared expert's gate logit meanwhile, dot(shexp_gate, xin) (xin: the block's input),
// by the reduction contract (the matvec's row dot: lane L's chunks L, L + 32, … in order, then the
// butterfly), when that one-row matrix is F32 (sg_kind 1) or BF16 (2): one launch fewer than a product of
// its own (sg_kind 0: the host runs that product).
// The largest of a lane's PER keys, as a tree (depth 4 at PER = 16, not a chain of 16).
template <int N>
__device__ __forceinline__ unsigned long long tree_max_key(const unsigned long long* key) {
    if constexpr (N == 1) {
        return key[0];
    } else {
        return max(tree_max_key<N / 2>(key), tree_max_key<N - N / 2>(key + N / 2));
    }
}
__device__ __forceinline__ unsigned long long lane_max_key(const unsigned long long (&key)[ROUTE_CHUNKS * CHUNK]) {
    return tree_max_key<ROUTE_CHUNKS * CHUNK>(key);
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

// One token's routing by one warp (moe_route's body): `x` its E logits, `ids` and `weights` its k slots.
__device__ void route_token(const float* x, int E, int k, int* __restrict__ ids, float* __restrict__ weights) {
    const int lane = threadIdx.x % WARP;
    constexpr int PER = ROUTE_CHUNKS * CHUNK;
    auto at = [&](int j) { return CHUNK * (lane + WARP * (j / CHUNK)) + j % CHUNK; };  // element of slot j
    float p[PER];
    float m = -__int_as_float(0x7f800000);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        p[j] = at(j) < E ? __ldcg(x + at(j)) : 0.0f;
        if (at(j) < E) m = fmaxf(m, p[j]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < ROUTE_CHUNKS; ++c) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) {
            const int j = c * CHUNK + e;
            if (at(j) < E) {
                p[j] = s_exp(__fsub_rn(p[j], m));
                s = __fadd_rn(s, p[j]);
            }
        }
        if (CHUNK * (lane + WARP * c) < E) acc = __fadd_rn(acc, s);
    }
    const float total = warp_butterfly(acc);
    unsigned long long key[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        p[j] = __fdiv_rn(p[j], total);
        key[j] = at(j) < E ? ((unsigned long long)score_key(p[j]) << 32) | (u32)(~at(j)) : 0ull;
    }
    // Each round takes the warp's largest key. A lane keeps the largest of its own (a tree of maxima),
    // the warp's is found from those (sm_80+: two warp reductions, the key's high word then its low word
    // among the lanes that hold that high word), and only the winner's lane, which marks its entry taken,
    // has a new one to find. One chain of 16 maxima and five 64-bit shuffles a round took ~200
    // instructions; the winners and their order are the same.
    unsigned long long mine_best = lane_max_key(key);
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) {
        const unsigned long long best = warp_max_key(mine_best);
        // The winner's lane marks it taken and hands its probability round.
        float mine = 0.0f;
        if (mine_best == best) {
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                if (key[j] == best) {
                    mine = p[j];
                    key[j] = 0;
                }
            }
            mine_best = lane_max_key(key);
        }
        const int i = (int)(~(u32)best), owner = (i / CHUNK) % WARP;
        const float v = __shfl_sync(0xffffffffu, mine, owner);
        sum = __fadd_rn(sum, v);
        if (lane == 0) {
            ids[r] = i;
            weights[r] = v;
        }
    }
    __syncwarp();
    const float denom = fmaxf(sum, __uint_as_float(0x38800000u));  // 2^-14
    for (int r = lane; r < k; r += WARP) weights[r] = __fdiv_rn(weights[r], denom);
}

// One warp's dot of the shared expert's gate row with the token's input x into *sg. The row is loaded
// before grid_dep_wait, so only the input's loads wait.
__device__ __forceinline__ void shared_gate_logit(const void* __restrict__ sg_w, int sg_kind,
                                                  const float* __restrict__ x, int n, float* __restrict__ sg) {
    EarlyRow row;
    row.fetch(sg_w, sg_kind, n);
    grid_dep_wait();
    const float dot = row.dot(sg_w, sg_kind, x, n);
    if (threadIdx.x % WARP == 0) *sg = dot;
}

extern "C" __global__ void moe_route(const float* __restrict__ logits, int* __restrict__ ids,
                                    float* __restrict__ weights, int E, int k, const void* __restrict__ sg_w,
                                    int sg_kind, const float* __restrict__ xin, int n, float* __restrict__ sg) {
    const int t = blockIdx.x;
    if (threadIdx.x >= WARP) {
        // A second warp (launched when sg_kind ≠ 0): the shared expert's gate logit, beside the routing.
        shared_gate_logit(sg_w, sg_kind, xin + (size_t)t * n, n, sg + t);
        return;
    }
    grid_dep_wait();
    route_token(logits + (size_t)t * E, E, k, ids + t * k, weights + t * k);
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
extern "C" __global__ void __launch_bounds__(ROUTE_THREADS + WARP)
    moe_route_block(const float* __restrict__ logits, int* __restrict__ ids, float* __restrict__ weights, int E, int k,
                    const void* __restrict__ sg_w, int sg_kind, const float* __restrict__ xin, int n,
                    float* __restrict__ sg) {
    constexpr int MAXE = 512, NCH = MAXE / CHUNK, PER = MAXE / WARP;
    __shared__ float pe[MAXE];  // e^(x − max), then p
    __shared__ float chunk_sum[NCH];
    __shared__ float red[ROUTE_WARPS + 1];  // each warp's maximum; then [0] the maximum, [ROUTE_WARPS] the total
    __shared__ unsigned long long cand[MAXE];
    const int t = blockIdx.x, i = threadIdx.x, lane = i % WARP, w = i / WARP;
    if (i >= ROUTE_THREADS) {
        shared_gate_logit(sg_w, sg_kind, xin + (size_t)t * n, n, sg + t);
        return;
    }
    grid_dep_wait();
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
        if (lane == 0) {
            ids[t * k + r] = id;
            weights[t * k + r] = v;
        }
    }
    __syncwarp();
    const float denom = fmaxf(sum, __uint_as_float(0x38800000u));  // 2^-14
    for (int r = lane; r < k; r += WARP) weights[t * k + r] = __fdiv_rn(weights[t * k + r], denom);
}

// h = silu(g)·u, the product rounded, for the routed slots' n values and then the shared expert's n2 (one
// launch for both).
extern "C" __global__ void moe_act(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ h,
                                  int n, const float* __restrict__ g2, const float* __restrict__ u2,
                                  float* __restrict__ h2, int n2) {
    grid_dep_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        i -= n;
        if (i >= n2) return;
        g = g2;
        u = u2;
        h = h2;
    }
    h[i] = __fmul_rn(s_silu(g[i]), u[i]);
}

// y[t][d] = fma chain over the slots in rank order of w·expert output, from +0, then
// fma(σ(shared gate), shared[t][d], y).
extern "C" __global__ void moe_combine(const float* __restrict__ eo, const float* __restrict__ weights,
                                      const float* __restrict__ shared, const float* __restrict__ sgate,
                                      float* __restrict__ y, int n, int k, int T) {
    grid_dep_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * n) return;
    const int t = i / n, d = i % n;
    float v = 0.0f;
    for (int s = 0; s < k; ++s) v = __fmaf_rn(weights[t * k + s], eo[((size_t)t * k + s) * n + d], v);
    y[i] = __fmaf_rn(s_sigmoid(sgate[t]), shared[i], v);
}

// A prompt window's slots grouped by expert for the grouped gathers (qdot.cu's `_g_grouped*`, ops/moe/
// grouped.rs): expert e's slots cut into groups of at most MG_GROUP, the experts' groups in expert order.
// Group g's expert in gexp[g] (−1 for the groups past the last, up to `bound`), its slots in
// gslots[MG_GROUP·g ..] (−1 past its last). One block: each expert's count by shared-memory atomics, the
// groups' offsets by a scan, then each slot takes its place in its expert's groups. Where a slot lands
// among its expert's (atomics give any order) changes no bit: each (row, slot) sum is made alone.
#define MG_GROUP 8
#define MG_MAX_E 1024
extern "C" __global__ void __launch_bounds__(1024) moe_group_plan(const int* __restrict__ ids, int m, int E,
                                                                  int bound, int* __restrict__ gexp,
                                                                  int* __restrict__ gslots) {
    __shared__ int count[MG_MAX_E], first[MG_MAX_E], total;
    const int tid = threadIdx.x, n = blockDim.x;
    grid_dep_wait();
    for (int e = tid; e < E; e += n) count[e] = 0;
    for (int i = tid; i < MG_GROUP * bound; i += n) gslots[i] = -1;
    __syncthreads();
    for (int s = tid; s < m; s += n) {
        const int e = ids[s];
        if (e >= 0 && e < E) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    // The groups before each expert: warp 0, each lane a run of consecutive experts, then the lanes'
    // totals scanned by shuffles.
    if (tid < WARP) {
        const int per = (E + WARP - 1) / WARP, lo = tid * per, hi = min(E, lo + per);
        int own = 0;
        for (int e = lo; e < hi; ++e) own += (count[e] + MG_GROUP - 1) / MG_GROUP;
        int incl = own;
        for (int o = 1; o < WARP; o *= 2) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (tid >= o) incl += v;
        }
        int at = incl - own;
        for (int e = lo; e < hi; ++e) {
            first[e] = at;
            at += (count[e] + MG_GROUP - 1) / MG_GROUP;
        }
        if (tid == WARP - 1) total = incl;
    }
    __syncthreads();
    const int groups = min(total, bound);
    for (int e = tid; e < E; e += n) {
        const int g0 = first[e], ng = (count[e] + MG_GROUP - 1) / MG_GROUP;
        for (int g = g0; g < g0 + ng && g < bound; ++g) gexp[g] = e;
        count[e] = 0;  // from here each expert's fill
    }
    for (int g = groups + tid; g < bound; g += n) gexp[g] = -1;
    __syncthreads();
    for (int s = tid; s < m; s += n) {
        const int e = ids[s];
        if (e < 0 || e >= E) continue;
        const int r = atomicAdd(&count[e], 1), g = first[e] + r / MG_GROUP;
        if (g < bound) gslots[MG_GROUP * g + r % MG_GROUP] = s;
    }
}
