// The greedy token (docs/ARITHMETIC.md § topk; twin of ops/topk.rs argmax): the highest score_key, the
// lowest id among equals. Each candidate is the 64-bit number (key << 32) | ~id, so the largest number is
// the answer and any order of comparisons finds it.

// One block: each thread's largest over ids i, i + blockDim, …, then the warps' and the block's largest.
extern "C" __global__ void argmax(const float* __restrict__ v, int n, int* __restrict__ out) {
    __shared__ unsigned long long best_of[32];
    unsigned long long best = 0;  // below every candidate: a key is never 0
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        best = max(best, ((unsigned long long)score_key(v[i]) << 32) | (u32)(~i));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    if (lane == 0) best_of[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / WARP); ++w) best = max(best, best_of[w]);
        *out = n > 0 ? (int)(~(u32)(best & 0xffffffffu)) : 0;
    }
}
