// The PLE block (spec §6; docs/ARITHMETIC.md § ple) for one token on the device; the host reads the table
// rows (they never leave the memory-mapped file whole) and runs the tokens of a window in order. Twin of
// crates/model/src/layers/ple.rs.

// Warp c, per stream c of n: key = rms_norm(key_c, norm_key_c), query = rms_norm(R_c, norm_query_c) (into
// `query`), s = dot(key, query)/√n, gate = σ(sign(s)·√max(|s|, 1e-6)), gated_c = value·gate, and
// z_c = rms_norm(gated_c, norm_conv_c). `key` is normed in place.
extern "C" __global__ void ple_gate_z(float* __restrict__ key, const float* __restrict__ r, float* __restrict__ query,
                                     const float* __restrict__ value, const float* __restrict__ nk,
                                     const float* __restrict__ nq, const float* __restrict__ nc,
                                     float* __restrict__ gated, float* __restrict__ z, int n, int hc) {
    grid_dep_wait();
    const int c = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (c >= hc) return;
    const size_t o = (size_t)c * n;
    for (int d = lane; d < n; d += WARP) query[o + d] = r[o + d];
    __syncwarp();
    warp_rms_norm(key + o, nk + o, n);
    warp_rms_norm(query + o, nq + o, n);
    float acc = 0.0f;
    for (int ch = lane; ch < n / CHUNK; ch += WARP) acc = __fadd_rn(acc, chunk_dot(key + o + CHUNK * ch, query + o + CHUNK * ch));
    const float s = __fdiv_rn(warp_butterfly(acc), __fsqrt_rn((float)n));
    const float sign = s > 0.0f ? 1.0f : (s < 0.0f ? -1.0f : 0.0f);
    const float gate = s_sigmoid(__fmul_rn(sign, __fsqrt_rn(fmaxf(fabsf(s), 1e-6f))));
    for (int d = lane; d < n; d += WARP) {
        const float g = __fmul_rn(value[d], gate);
        gated[o + d] = g;
        z[o + d] = g;
    }
    __syncwarp();
    warp_rms_norm(z + o, nc + o, n);
}

// R += gated + silu(conv): conv of K taps at dilation d over the history frames (oldest first, H = (K−1)·d of
// them) and this z, by fma from the oldest; then the history moves on by one frame. A thread per value.
extern "C" __global__ void ple_conv(float* __restrict__ r, const float* __restrict__ gated, const float* __restrict__ z,
                                   float* __restrict__ hist, const float* __restrict__ w, int width, int K, int dil) {
    grid_dep_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width) return;
    const int H = (K - 1) * dil;
    float s = 0.0f;
    for (int tap = 0; tap < K - 1; ++tap) s = __fmaf_rn(w[(size_t)K * i + tap], hist[(size_t)dil * tap * width + i], s);
    s = __fmaf_rn(w[(size_t)K * i + K - 1], z[i], s);
    r[i] = __fadd_rn(r[i], __fadd_rn(gated[i], s_silu(s)));
    for (int f = 0; f + 1 < H; ++f) hist[(size_t)f * width + i] = hist[(size_t)(f + 1) * width + i];
    if (H > 0) hist[(size_t)(H - 1) * width + i] = z[i];
}
