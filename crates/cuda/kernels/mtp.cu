// The MTP layer's input (spec §0.11, §9; docs/ARITHMETIC.md § mtp). Twin of the CPU back-end's mtp_input
// (crates/model/src/cpu.rs): per token t and stream s, the row [enorm(e_t) | hnorm_s(R_t[s])] that eh_proj
// then multiplies (a matrix-vector product on the host's side, kernels/matvec.cu).

// One block per row (t, s) = blockIdx.x: e (T rows of n, the next tokens' embedding rows), r (T rows of
// hc·n streams), cat (T·hc rows of 2n). The block's threads make the chunk sums of squares of both halves
// (any thread may make any chunk's sum: it depends on that chunk alone), then warp h adds half h's chunks
// L, L + 32, … in order in lane L and takes the butterfly (§ dot's order, so warp_rms_norm's bits), then
// every thread writes its chunks normed. A warp a row did the three passes alone, 26 µs a draft on an
// H100 for four rows. The embedding half is normed by each of its hc blocks alike (the same operations on
// the same values, so the same bits). Shared memory: 2·(n / 8) floats.
extern "C" __global__ void mtp_input(const float* __restrict__ e, const float* __restrict__ r,
                                     const float* __restrict__ enorm, const float* __restrict__ hnorm,
                                     float* __restrict__ cat, int n, int hc, int rows, float eps) {
    extern __shared__ float chunk_ss[];
    __shared__ float scale[2];
    grid_dep_wait();
    const int ts = blockIdx.x, nc = n / CHUNK;
    if (ts >= rows) return;
    const int t = ts / hc, s = ts % hc;
    const float* half[2] = {e + (size_t)t * n, r + ((size_t)t * hc + s) * n};
    const float* gamma[2] = {enorm, hnorm + (size_t)s * n};
    for (int c = threadIdx.x; c < 2 * nc; c += blockDim.x) {
        const float* v = half[c / nc] + CHUNK * (c % nc);
        chunk_ss[c] = chunk_dot(v, v);
    }
    __syncthreads();
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (w < 2) {
        float acc = 0.0f;
        for (int c = lane; c < nc; c += WARP) acc = __fadd_rn(acc, chunk_ss[w * nc + c]);
        const float ss = warp_butterfly(acc);
        if (lane == 0) scale[w] = rms_scale_of(ss, n, eps);
    }
    __syncthreads();
    float* row = cat + (size_t)ts * 2 * n;
    for (int c = threadIdx.x; c < 2 * nc; c += blockDim.x) {
        const int h = c / nc, at = CHUNK * (c % nc);
        const float rs = scale[h];
#pragma unroll
        for (int i = 0; i < CHUNK; ++i)
            row[h * n + at + i] = __fmul_rn(__fmul_rn(half[h][at + i], rs), gamma[h][at + i]);
    }
}
