// The greedy token (docs/ARITHMETIC.md § topk; twin of ops/topk.rs argmax): the highest score_key, the
// lowest id among equals. Each candidate is the 64-bit number (key << 32) | ~id, so the largest number is
// the answer and any order of comparisons finds it: every block takes its largest into *best by an atomic
// maximum (*best starts at 0, below every candidate, since a key is never 0).
extern "C" __global__ void argmax(const float* __restrict__ v, int n, unsigned long long* __restrict__ best_out) {
    grid_dep_wait();
    __shared__ unsigned long long best_of[32];
    unsigned long long best = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        best = max(best, ((unsigned long long)score_key(v[i]) << 32) | (u32)(~i));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    if (lane == 0) best_of[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / WARP); ++w) best = max(best, best_of[w]);
        atomicMax(best_out, best);
    }
}

// The id in the word an argmax wrote, put at ids[at] on the device (a draft chain's next input token, a
// verify window's choices): ~low word, 0 where the word stayed 0 (no values).
extern "C" __global__ void argmax_put(const unsigned long long* __restrict__ best, int* __restrict__ ids, int at) {
    grid_dep_wait();
    if (threadIdx.x == 0) ids[at] = *best == 0 ? 0 : (int)(~(u32)*best);
}
