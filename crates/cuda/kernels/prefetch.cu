// Weights asked into the L2 ahead of the kernels that read them (STRATA_AHEAD; crates/cuda/src/prefetch.rs).
// A decode step's kernels each wait out a few dependent memory round trips and leave the memory mostly
// idle, so bytes that a later kernel will read can come from memory meanwhile: this kernel, launched on
// the step's chain, asks for up to six spans of weights (address, bytes), its threads taking the spans'
// 128-byte lines in turn, before grid_dep_wait, so the requests leave while the kernel before it still
// runs. With `keep` (sm_80+) the lines are marked evict_last, so streamed weights do not push them out
// first. A prefetch changes no value, and the kernel reads nothing a kernel wrote; it waits like every
// kernel so the chain's order holds.

__device__ __forceinline__ void prefetch_span(const unsigned char* p, int bytes, int keep, int i, int n) {
    for (long a = 128L * i; a < bytes; a += 128L * n) {
#if __CUDA_ARCH__ >= 800
        if (keep) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p + a));
        else asm volatile("prefetch.global.L2 [%0];" ::"l"(p + a));
#else
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + a));
#endif
    }
}

extern "C" __global__ void prefetch_spans(const unsigned char* p0, int n0, const unsigned char* p1, int n1,
                                          const unsigned char* p2, int n2, const unsigned char* p3, int n3,
                                          const unsigned char* p4, int n4, const unsigned char* p5, int n5,
                                          int keep) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, n = gridDim.x * blockDim.x;
    prefetch_span(p0, n0, keep, i, n);
    prefetch_span(p1, n1, keep, i, n);
    prefetch_span(p2, n2, keep, i, n);
    prefetch_span(p3, n3, keep, i, n);
    prefetch_span(p4, n4, keep, i, n);
    prefetch_span(p5, n5, keep, i, n);
    grid_dep_wait();
}

// The routed experts' rows of a stacked matrix asked for once the routing has chosen them: slot
// blockIdx.y's expert ids[slot], its `rows` rows from row ids[slot]·stride + offset, `row_bytes` each.
extern "C" __global__ void prefetch_experts(const unsigned char* w, const int* __restrict__ ids, int stride,
                                            int offset, int rows, int row_bytes) {
    grid_dep_wait();  // the ids are the routing's
    const unsigned char* p = w + ((size_t)ids[blockIdx.y] * stride + offset) * row_bytes;
    prefetch_span(p, rows * row_bytes, 0, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}
