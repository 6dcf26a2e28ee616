// The mixture of experts (spec §7; docs/ARITHMETIC.md § moe) for a window of T tokens: routing on the
// device (softmax, exact top-k, renormalised weights), the experts' products by matvec.cu's gather kernels,
// and the combination in rank order then the shared expert. Twin of crates/model/src/layers/moe.rs.

// One warp per token: p = softmax(logits) (max, e^(x − max), the sum by the reduction contract, each term
// over the sum), the k best by key (lower index first among equals), then w_i = p_i / max(Σ_rank p, 2^-14)
// with the sum taken in rank order. `e` is scratch of T·E floats (overwritten).
extern "C" __global__ void moe_route(const float* __restrict__ logits, float* __restrict__ e, int* __restrict__ ids,
                                    float* __restrict__ weights, int E, int k) {
    const int t = blockIdx.x, lane = threadIdx.x;
    const float* x = logits + (size_t)t * E;
    float* p = e + (size_t)t * E;
    float m = -__int_as_float(0x7f800000);
    for (int i = lane; i < E; i += WARP) m = fmaxf(m, x[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    for (int i = lane; i < E; i += WARP) p[i] = s_exp(__fsub_rn(x[i], m));
    __syncwarp();
    float acc = 0.0f;
    for (int c = lane; c < (E + CHUNK - 1) / CHUNK; c += WARP) {
        float s = 0.0f;
        for (int j = CHUNK * c; j < min(E, CHUNK * c + CHUNK); ++j) s = __fadd_rn(s, p[j]);
        acc = __fadd_rn(acc, s);
    }
    const float total = warp_butterfly(acc);
    __syncwarp();
    for (int i = lane; i < E; i += WARP) p[i] = __fdiv_rn(p[i], total);
    __syncwarp();
    // Top-k, one rank per round: the warp's best (key, then lower index) of those not yet taken; a taken
    // entry is set to −1, whose key is below that of every probability (and of NaN, ordered as 0).
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) {
        unsigned long long best = 0;
        for (int i = lane; i < E; i += WARP) {
            best = max(best, ((unsigned long long)score_key(p[i]) << 32) | (u32)(~i));
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
        const int i = (int)(~(u32)best);
        const float v = p[i];
        sum = __fadd_rn(sum, v);
        __syncwarp();
        if (lane == 0) {
            ids[t * k + r] = i;
            weights[t * k + r] = v;
            p[i] = -1.0f;
        }
        __syncwarp();
    }
    const float denom = fmaxf(sum, __uint_as_float(0x38800000u));  // 2^-14
    for (int r = lane; r < k; r += WARP) weights[t * k + r] = __fdiv_rn(weights[t * k + r], denom);
}

// h = silu(g)·u, the product rounded.
extern "C" __global__ void moe_act(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ h,
                                  int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = __fmul_rn(s_silu(g[i]), u[i]);
}

// y[t][d] = fma chain over the slots in rank order of w·expert output, from +0, then
// fma(σ(shared gate), shared[t][d], y).
extern "C" __global__ void moe_combine(const float* __restrict__ eo, const float* __restrict__ weights,
                                      const float* __restrict__ shared, const float* __restrict__ sgate,
                                      float* __restrict__ y, int n, int k, int T) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * n) return;
    const int t = i / n, d = i % n;
    float v = 0.0f;
    for (int s = 0; s < k; ++s) v = __fmaf_rn(weights[t * k + s], eo[((size_t)t * k + s) * n + d], v);
    y[i] = __fmaf_rn(s_sigmoid(sgate[t]), shared[i], v);
}
