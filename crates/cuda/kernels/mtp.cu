// The MTP layer's input (spec §0.11, §9; docs/ARITHMETIC.md § mtp). Twin of the CPU back-end's mtp_input
// (crates/model/src/cpu.rs): per token t and stream s, the row [enorm(e_t) | hnorm_s(R_t[s])] that eh_proj
// then multiplies (a matrix-vector product on the host's side, kernels/matvec.cu).

// One warp per (t, s) = blockIdx.x·warps + warp: e (T rows of n, the next tokens' embedding rows), r (T rows
// of hc·n streams), cat (T·hc rows of 2n). The embedding half is normed by each of its hc warps alike (the
// same operations on the same values, so the same bits).
extern "C" __global__ void mtp_input(const float* __restrict__ e, const float* __restrict__ r,
                                     const float* __restrict__ enorm, const float* __restrict__ hnorm,
                                     float* __restrict__ cat, int n, int hc, int rows, float eps) {
    grid_dep_wait();
    const int ts = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (ts >= rows) return;
    const int t = ts / hc, s = ts % hc;
    float* row = cat + (size_t)ts * 2 * n;
    for (int d = lane; d < n; d += WARP) {
        row[d] = e[(size_t)t * n + d];
        row[n + d] = r[((size_t)t * hc + s) * n + d];
    }
    __syncwarp();
    warp_rms_norm(row, enorm, n, eps);
    warp_rms_norm(row + n, hnorm + (size_t)s * n, n, eps);
}
