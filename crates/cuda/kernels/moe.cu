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
__device__ __forceinline__ unsigned long long lane_max_key(const unsigned long long (&key)[ROUTE_CHUNKS * CHUNK]) {
    return tree_max_key<ROUTE_CHUNKS * CHUNK>(key);
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

// The shared expert's gate logit alone, one warp a token: with the routing in the experts' gate and up
// launch (STRATA_ROUTE=glu, qdot.cu's _g_gather_glu_r) no routing launch makes it.
extern "C" __global__ void moe_shared_gate(const void* __restrict__ sg_w, int sg_kind, const float* __restrict__ xin,
                                          int n, float* __restrict__ sg) {
    shared_gate_logit(sg_w, sg_kind, xin + (size_t)blockIdx.x * n, n, sg + blockIdx.x);
}

// moe_route's block layout (the default; STRATA_ROUTE=warp for moe_route): route.cuh's route_block_token,
// and one more warp for the shared expert's gate logit as moe_route's.
extern "C" __global__ void __launch_bounds__(ROUTE_THREADS + WARP)
    moe_route_block(const float* __restrict__ logits, int* __restrict__ ids, float* __restrict__ weights, int E, int k,
                    const void* __restrict__ sg_w, int sg_kind, const float* __restrict__ xin, int n,
                    float* __restrict__ sg) {
    const int t = blockIdx.x, i = threadIdx.x;
    if (i >= ROUTE_THREADS) {
        shared_gate_logit(sg_w, sg_kind, xin + (size_t)t * n, n, sg + t);
        return;
    }
    grid_dep_wait();
    route_block_token<false>(logits, ids, weights, E, k, t);
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
