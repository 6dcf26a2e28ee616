// The PLE block (spec §6; docs/ARITHMETIC.md § ple) for one token on the device; the host reads the table
// rows (they never leave the memory-mapped file whole) and runs the tokens of a window in order. Twin of
// crates/model/src/layers/ple.rs.

// Warp c, per stream c of n: key = rms_norm(key_c, norm_key_c), query = rms_norm(R_c, norm_query_c) (into
// `query`), s = dot(key, query)/√n, gate = σ(sign(s)·√max(|s|, 1e-6)), gated_c = value·gate, and
// z_c = rms_norm(gated_c, norm_conv_c). `key` is normed in place. The norms take the file's eps; the gate's
// clamp 1e-6 is a constant of the model (transformers' `clamp_min(1e-6)`).
extern "C" __global__ void ple_gate_z(float* __restrict__ key, const float* __restrict__ r, float* __restrict__ query,
                                     const float* __restrict__ value, const float* __restrict__ nk,
                                     const float* __restrict__ nq, const float* __restrict__ nc,
                                     float* __restrict__ gated, float* __restrict__ z, int n, int hc,
                                     float eps) {
    grid_dep_wait();
    const int c = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (c >= hc) return;
    const size_t o = (size_t)c * n;
    for (int d = lane; d < n; d += WARP) query[o + d] = r[o + d];
    __syncwarp();
    warp_rms_norm(key + o, nk + o, n, eps);
    warp_rms_norm(query + o, nq + o, n, eps);
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
    warp_rms_norm(z + o, nc + o, n, eps);
}

// The sum of the block's chunk sums by the reduction contract (warp_sum_squares's order): thread ch holds
// chunk ch's sum `v` (ch < nch); warp 0's lane L adds chunks L, L + 32, … in ascending order from +0, then
// the butterfly. Every thread gets the total.
__device__ float block_chunk_sum(float v, float* part, int nch) {
    const int ch = threadIdx.x;
    if (ch < nch) part[ch] = v;
    __syncthreads();
    if (ch < WARP) {
        float acc = 0.0f;
        for (int k = ch; k < nch; k += WARP) acc = __fadd_rn(acc, part[k]);
        acc = warp_butterfly(acc);
        if (ch == 0) part[nch] = acc;
    }
    __syncthreads();
    const float total = part[nch];
    __syncthreads();  // part is written again by the next sum
    return total;
}

// ple_gate_z with a block per stream c and a thread per chunk of 8 values (n/8 ≤ 1024 threads;
// the default; STRATA_PLE_SPLIT=0 for ple_gate_z). ple_gate_z's warp walks each stream's n values seven
// times, a load waited out at each step; here each chunk's sums of 8 are its own thread's, in parallel, and
// block_chunk_sum adds them in the contract's order. The values stay in registers from step to step. The
// same operations in the same order: the same bits.
extern "C" __global__ void ple_gate_z_split(float* __restrict__ key, const float* __restrict__ r,
                                           float* __restrict__ query, const float* __restrict__ value,
                                           const float* __restrict__ nk, const float* __restrict__ nq,
                                           const float* __restrict__ nc, float* __restrict__ gated,
                                           float* __restrict__ z, int n, int hc, float eps) {
    extern __shared__ float part[];  // n/8 chunk sums, then their total
    grid_dep_wait();
    const int ch = threadIdx.x, nch = n / CHUNK;
    const bool mine = ch < nch;
    const size_t o = (size_t)blockIdx.x * n + (size_t)ch * CHUNK;
    const auto rms_scale = [&](const float* x) {
        const float ss = block_chunk_sum(mine ? chunk_dot(x, x) : 0.0f, part, nch);
        return rms_scale_of(ss, n, eps);
    };
    float k8[CHUNK], q8[CHUNK], w8[CHUNK];
    if (mine) {
        load8_f32(key + o, k8);
        load8_f32(r + o, q8);
    }
    const float rs_k = rms_scale(k8), rs_q = rms_scale(q8);
    if (mine) {
        load8_f32(nk + o, w8);
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) k8[e] = __fmul_rn(__fmul_rn(k8[e], rs_k), w8[e]);
        store8_f32(key + o, k8);
        load8_f32(nq + o, w8);
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) q8[e] = __fmul_rn(__fmul_rn(q8[e], rs_q), w8[e]);
        store8_f32(query + o, q8);
    }
    const float s = __fdiv_rn(block_chunk_sum(mine ? chunk_dot(k8, q8) : 0.0f, part, nch), __fsqrt_rn((float)n));
    const float sign = s > 0.0f ? 1.0f : (s < 0.0f ? -1.0f : 0.0f);
    const float gate = s_sigmoid(__fmul_rn(sign, __fsqrt_rn(fmaxf(fabsf(s), 1e-6f))));
    float g8[CHUNK];
    if (mine) {
        load8_f32(value + (size_t)ch * CHUNK, g8);
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) g8[e] = __fmul_rn(g8[e], gate);
        store8_f32(gated + o, g8);
    }
    const float rs_z = rms_scale(g8);
    if (mine) {
        load8_f32(nc + o, w8);
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) g8[e] = __fmul_rn(__fmul_rn(g8[e], rs_z), w8[e]);
        store8_f32(z + o, g8);
    }
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
