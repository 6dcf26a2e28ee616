// Gated DeltaNet (spec §4; docs/ARITHMETIC.md § gdn) for a window of T tokens in order. Twin of
// crates/model/src/layers/gdn.rs: the projections are matvec.cu's; these kernels do the rest with the CPU's
// operations in the CPU's order, carrying the conv tail and the S×S state from token to token.

// ConvFrames (the causal conv of a channel) is in common.cuh: qdot.cu's conv epilogue runs it too.

template <int KC>
__device__ __forceinline__ void conv_channel(const float* __restrict__ u, float* __restrict__ tail,
                                             const float* __restrict__ w, float* __restrict__ out, int C, int Kr,
                                             int T, int ch, float* __restrict__ slots) {
    ConvFrames<KC> f;
    const int K = KC > 0 ? KC : Kr;
    f.load(tail, w, C, K, ch);
    f.run(u, tail, out, C, K, T, ch, slots);
}

// A warp's S channels from channel `first` on (lane L: first + L, first + L + 32, …).
template <int KC>
__device__ __forceinline__ void conv_head(const float* __restrict__ u, float* __restrict__ tail,
                                          const float* __restrict__ w, float* __restrict__ out, int C, int K,
                                          int T, int S, int first, float* __restrict__ slots) {
#pragma unroll 4
    for (int c = threadIdx.x % WARP; c < S; c += WARP) conv_channel<KC>(u, tail, w, out, C, K, T, first + c, slots);
}

// conv_head for K = 4 and S ≤ 128 (the model's 128) with every channel's frames and taps read before
// grid_dep_wait, so those loads overlap the kernel before; only the input's wait. The same fmas.
#define CONV_EARLY_CH 4  // channels a lane: S ≤ 128
__device__ __forceinline__ void conv_head_early(const float* __restrict__ u, float* __restrict__ tail,
                                                const float* __restrict__ w, float* __restrict__ out, int C, int T,
                                                int S, int first, float* __restrict__ slots) {
    const int lane = threadIdx.x % WARP;
    ConvFrames<4> f[CONV_EARLY_CH];
#pragma unroll
    for (int i = 0; i < CONV_EARLY_CH; ++i) {
        if (lane + i * WARP < S) f[i].load(tail, w, C, 4, first + lane + i * WARP);
    }
    grid_dep_wait();
#pragma unroll
    for (int i = 0; i < CONV_EARLY_CH; ++i) {
        if (lane + i * WARP < S) f[i].run(u, tail, out, C, 4, T, first + lane + i * WARP, slots);
    }
}

// The gates of (token, value head) i = t·hv + j from its α and β logits: β = σ(b), decay =
// exp(softplus(α + dt_bias)·a).
__device__ __forceinline__ void gdn_gates(float alpha, float beta, const float* __restrict__ dt_bias,
                                          const float* __restrict__ a, float* __restrict__ decay,
                                          float* __restrict__ betas, int hv, int i) {
    const int j = i % hv;
    betas[i] = s_sigmoid(beta);
    decay[i] = s_exp(__fmul_rn(s_softplus(__fadd_rn(alpha, dt_bias[j])), a[j]));
}

// A q or k head's S values L2-normalised in place by one warp (x·(1/√(Σx² + 1e-6))), then a q head's
// scaled by `qscale` (= rsqrt(S), from the host). The 1e-6 is the model's own constant (transformers'
// `l2norm(…, eps=1e-6)`), not the file's rms epsilon: ops/norm.rs's L2_EPS.
__device__ __forceinline__ void qk_norm_head(float* v, int S, bool is_q, float qscale) {
    const int lane = threadIdx.x % WARP;
    const float rs = s_rsqrt(__fadd_rn(warp_sum_squares(v, S), 1e-6f));
    __syncwarp();
    for (int d = lane; d < S; d += WARP) {
        float x = __fmul_rn(v[d], rs);
        if (is_q) x = __fmul_rn(x, qscale);
        v[d] = x;
    }
    __syncwarp();
}

// A gate warp of gdn_conv_norm: the gates of (token, value head) i = t·hv + j. A warp each, so a
// window's tokens are made side by side, not one after another.
__device__ __forceinline__ void gate_warp(const float* __restrict__ alpha, const float* __restrict__ beta,
                                          const float* __restrict__ dt_bias, const float* __restrict__ a,
                                          float* __restrict__ decay, float* __restrict__ betas, int hv,
                                          const unsigned char* __restrict__ w_alpha,
                                          const unsigned char* __restrict__ w_beta, int ab_kind,
                                          const float* __restrict__ x, int n, int T, int i) {
    if (i >= T * hv) return;
    const int t = i / hv, j = i % hv;
    const size_t row = (size_t)j * n * (ab_kind == 1 ? 4 : 2);
    float al = 0.0f, be = 0.0f;
    if (ab_kind == 0) {
        al = alpha[i];
        be = beta[i];
    } else {
        warp_row_dot2(w_alpha + row, w_beta + row, ab_kind, x + (size_t)t * n, n, &al, &be);
    }
    if (threadIdx.x % WARP == 0) gdn_gates(al, be, dt_bias, a, decay, betas, hv, i);
}

// The conv, the q/k norms and the gates in one launch. Warp h < 2·Hk + Hv takes head h of the conv's
// channels (the 2·Hk q and k heads, then the Hv v heads, S channels each): the conv of its channels over
// the window, then, for a q or k head, each token's norm of them. Warp 2·Hk + Hv + t·Hv + j makes the
// gates of token t and value head j: from the α and β logits the host's products left in `alpha` and `beta`
// (ab_kind 0), or from its own dots of the input x (n values a token) with row j of W_α and W_β when
// those are F32 (ab_kind 1) or BF16 (2), by the reduction contract, as the products would. Warps h0 ..
// h_end − 1 of that numbering run: all of them in one launch, or the conv's and the gates' in two (the
// gates then on a step graph's side lane, beside the products: they read only x). The same warps either
// way, so the same bits.
extern "C" __global__ void gdn_conv_norm(const float* __restrict__ u, float* __restrict__ tail,
                                        const float* __restrict__ w, float* __restrict__ out, int C, int K, int T,
                                        int hk, int S, float qscale, const float* __restrict__ alpha,
                                        const float* __restrict__ beta, const float* __restrict__ dt_bias,
                                        const float* __restrict__ a, float* __restrict__ decay,
                                        float* __restrict__ betas, int hv, const unsigned char* __restrict__ w_alpha,
                                        const unsigned char* __restrict__ w_beta, int ab_kind,
                                        const float* __restrict__ x, int n, int h0, int h_end,
                                        float* __restrict__ slots) {
    const int h = h0 + (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    if (h >= h_end) return;
    if (h < 2 * hk + hv && K == 4 && S <= CONV_EARLY_CH * WARP) {
        conv_head_early(u, tail, w, out, C, T, S, h * S, slots);  // waits inside, after its early loads
    } else {
        grid_dep_wait();
        if (h >= 2 * hk + hv) {
            gate_warp(alpha, beta, dt_bias, a, decay, betas, hv, w_alpha, w_beta, ab_kind, x, n, T, h - (2 * hk + hv));
            return;
        }
        if (K == 4) conv_head<4>(u, tail, w, out, C, K, T, S, h * S, slots);
        else conv_head<0>(u, tail, w, out, C, K, T, S, h * S, slots);
    }
    if (h >= 2 * hk) return;
    __syncwarp();  // the lanes' conv outputs, before each norm reads them all
    for (int t = 0; t < T; ++t) qk_norm_head(out + (size_t)t * C + (size_t)h * S, S, h < hk, qscale);
}

// y_j = rms_norm(o_j, ssm_norm)·σ(z_j) for value head j of every token of the window, (o·rs)·w then ·σ(z):
// the block's warps take a token each, after the block has written its o rows (the caller syncs first).
// With yq (QY, S a multiple of 32), y is also quantized for the output product (§ qdot, the codes in
// element order: Q8_0, Q4_0, Q4_K, Q6_K): each round of the warp's lanes is one piece of 32, quantized
// in the lanes (common.cuh's warp_quantize_piece) into QIn's layout (qdot.cu) for T vectors of hv·S/32 pieces.
#define NORM_HELD 4  // a lane's values of a head held through its output norm (S ≤ 128)
template <bool QY>
__device__ void gdn_out_norm_rows(const float* __restrict__ o, const float* __restrict__ z,
                                  const float* __restrict__ w, float* __restrict__ y, float eps, int hv, int S, int T,
                                  int j, int4* __restrict__ yq = nullptr, int cta = 0, int ctas = 1) {
    // Warp w of CTA `cta` of the head's `ctas` takes tokens cta·warps + w, then every ctas·warps on.
    const int warps = blockDim.x / WARP, warp = cta * warps + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    for (int t = warp; t < T; t += ctas * warps) {
        const size_t base = ((size_t)t * hv + j) * S;
        // A lane's values d = lane, lane + 32, … (S ≤ 32·NORM_HELD), their gammas and gates, asked for before
        // the norm's sum, so that the loop below waits on none of them: in it each round waited out a round
        // trip for its gate.
        const bool held = S <= WARP * NORM_HELD;
        float ov[NORM_HELD], wv[NORM_HELD], zv[NORM_HELD];
        if (held) {
#pragma unroll
            for (int i = 0; i < NORM_HELD; ++i) {
                const int d = lane + WARP * i;
                if (d < S) {
                    ov[i] = o[base + d];
                    wv[i] = w[d];
                    zv[i] = z[base + d];
                }
            }
        }
        const float rs = warp_rms_scale(o + base, S, eps);
        // y_d, and with QY the warp's piece quantized (lane i element i).
        auto put = [&](int d, float od, float wd, float zd) {
            const float v = __fmul_rn(__fmul_rn(__fmul_rn(od, rs), wd), s_sigmoid(zd));
            y[base + d] = v;
            if (QY) warp_quantize_piece(v, yq, T, hv * S / QBLOCK, t, (j * S + d - lane) / QBLOCK);
        };
        if (held) {
#pragma unroll
            for (int i = 0; i < NORM_HELD; ++i)
                if (lane + WARP * i < S) put(lane + WARP * i, ov[i], wv[i], zv[i]);
        } else {
            for (int d = lane; d < S; d += WARP) put(d, o[base + d], w[d], z[base + d]);
        }
    }
}

// The gated delta rule, one block per value head j (key head j mod Hk), thread b owning column b of the
// S×S state M[a][b]: M ← decay·M; p[b] = Σ_a M[a][b]·k[a] (fma chain, a ascending, from +0);
// δ = β·(v[b] − p[b]); M[a][b] = fma(k[a], δ, M[a][b]); o[b] = Σ_a M[a][b]·q[a]. Tokens in order; then
// the head's output norm (gdn_out_norm_rows) in the same launch.
// GDN_FETCH_NEXT (STRATA_DEFINES; 1 by default): the register kernels (gdn_delta_cols) ask for token
// t + 1's q, k, v, decay and beta while token t runs; 0: after its barrier.
#ifndef GDN_FETCH_NEXT
#define GDN_FETCH_NEXT 1
#endif
extern "C" __global__ void gdn_delta(float* __restrict__ M, const float* __restrict__ conv,
                                    const float* __restrict__ decay, const float* __restrict__ betas,
                                    float* __restrict__ o, int C, int hk, int hv, int S, int T,
                                    const float* __restrict__ z, const float* __restrict__ wn, float* __restrict__ y,
                                    float eps, float* __restrict__ slots) {
    grid_dep_wait();
    extern __shared__ float qk[];  // q then k of the head's key head, S each
    const int j = blockIdx.x, b = threadIdx.x, i = j % hk;
    float* m = M + (size_t)j * S * S;
    for (int t = 0; t < T; ++t) {
        const float* row = conv + (size_t)t * C;
        __syncthreads();
        for (int a = b; a < S; a += blockDim.x) {
            qk[a] = row[(size_t)i * S + a];
            qk[S + a] = row[(size_t)hk * S + (size_t)i * S + a];
        }
        __syncthreads();
        if (b < S) {
            const float dec = decay[(size_t)t * hv + j], beta = betas[(size_t)t * hv + j];
            const float v = row[(size_t)2 * hk * S + (size_t)j * S + b];
            float p = 0.0f;
            for (int a = 0; a < S; ++a) {
                const float x = __fmul_rn(m[(size_t)a * S + b], dec);
                m[(size_t)a * S + b] = x;
                p = __fmaf_rn(x, qk[S + a], p);
            }
            const float delta = __fmul_rn(beta, __fsub_rn(v, p));
            float out = 0.0f;
            for (int a = 0; a < S; ++a) {
                const float x = __fmaf_rn(qk[S + a], delta, m[(size_t)a * S + b]);
                m[(size_t)a * S + b] = x;
                out = __fmaf_rn(x, qk[a], out);
            }
            o[(size_t)t * hv * S + (size_t)j * S + b] = out;
            if (slots != nullptr && t + 1 < T) {
                float* kept = slots + ((size_t)t * hv + j) * S * S;
                for (int a = 0; a < S; ++a) kept[(size_t)a * S + b] = m[(size_t)a * S + b];
            }
        }
    }
    __syncthreads();  // the block's o rows written
    gdn_out_norm_rows<false>(o, z, wn, y, eps, hv, S, T, j);
}

// The same rule with M's column b held in registers for the window (S a compile-time 32, 64 or 128): the
// column is read once and written once, all its loads in flight together. P threads share a column, each
// holding S/P of its rows (P = 2 at S = 128 keeps to 64 registers); a chain over a runs through them in
// order, its running value handed on by a shuffle, so every sum is the one fma chain of the contract.
// The column is read before grid_dep_wait: M is written only by this kernel, and with programmatic
// launches every kernel before the one this follows (the conv) has completed when it starts early, so
// the state's read (3 MB a layer at the model's 48 heads) overlaps the conv instead of following it.
// NORM (the `_n` kernels, where gdn.rs fuses the conv: qdot.cu's conv epilogue made `conv` without the norms):
// each token's q and k are L2-normalised in shared memory after they are loaded, by qk_norm_head as
// gdn_conv_norm does (q then scaled by qscale). QY (the `_nq` kernels, STRATA_GDN_QUANTIZE=1): y is also
// quantized into yq for the output product (gdn_out_norm_rows), which then needs no `_quantize` launch.
template <int S, int P, bool NORM = false, bool QY = false, int G = 1>
__device__ void gdn_delta_cols(float* __restrict__ M, const float* __restrict__ conv, const float* __restrict__ decay,
                               const float* __restrict__ betas, float* __restrict__ o, int C, int hk, int hv, int T,
                               const float* __restrict__ z, const float* __restrict__ wn, float* __restrict__ y,
                               float eps, float qscale = 0.0f, int4* __restrict__ yq = nullptr,
                               float* __restrict__ slots = nullptr) {
    constexpr int R = S / P, SB = S / G, NT = SB * P;  // rows a thread, columns and threads a CTA
    constexpr int QN = (S + NT - 1) / NT;               // q and k values a thread loads
    __shared__ float qk[2 * S];
    const int j = blockIdx.x / G, g = blockIdx.x % G, i = j % hk;
    const int b = g * SB + threadIdx.x / P, part = threadIdx.x % P;
    const int lane0 = (threadIdx.x % WARP) - part;  // the column's first thread, as a lane
    float* m = M + (size_t)j * S * S + (size_t)part * R * S;
    float col[R];
#pragma unroll
    for (int a = 0; a < R; ++a) col[a] = m[(size_t)a * S + b];
    grid_dep_wait();
#if GDN_FETCH_NEXT
    // Token t + 1's inputs asked for while token t runs (q and k values a = threadIdx.x, + NT, …, every
    // thread its column's v, the head's decay and beta), so that no token waits out their round trip.
    float nq[QN], nk[QN], nv, ndec, nbeta;
    const auto fetch = [&](int t) {
        const float* row = conv + (size_t)t * C;
#pragma unroll
        for (int e = 0; e < QN; ++e) {
            const int a = threadIdx.x + e * NT;
            if (a < S) {
                nq[e] = row[(size_t)i * S + a];
                nk[e] = row[(size_t)hk * S + (size_t)i * S + a];
            }
        }
        nv = row[(size_t)2 * hk * S + (size_t)j * S + b];
        ndec = decay[(size_t)t * hv + j];
        nbeta = betas[(size_t)t * hv + j];
    };
    fetch(0);
#endif
    for (int t = 0; t < T; ++t) {
        __syncthreads();
#if GDN_FETCH_NEXT
#pragma unroll
        for (int e = 0; e < QN; ++e) {
            const int a = threadIdx.x + e * NT;
            if (a < S) {
                qk[a] = nq[e];
                qk[S + a] = nk[e];
            }
        }
        const float dec = ndec, beta = nbeta, v = nv;
        if (t + 1 < T) fetch(t + 1);
#else
        const float* row = conv + (size_t)t * C;
        for (int a = threadIdx.x; a < S; a += NT) {
            qk[a] = row[(size_t)i * S + a];
            qk[S + a] = row[(size_t)hk * S + (size_t)i * S + a];
        }
#endif
        __syncthreads();
        if constexpr (NORM) {
            const int warp = threadIdx.x / WARP, last = NT / WARP - 1;
            if (warp == 0) qk_norm_head(qk, S, true, qscale);
            if (warp == min(1, last)) qk_norm_head(qk + S, S, false, qscale);
            __syncthreads();
        }
        const float* q = qk + part * R;
        const float* k = qk + S + part * R;
#if !GDN_FETCH_NEXT
        const float dec = decay[(size_t)t * hv + j], beta = betas[(size_t)t * hv + j];
        const float v = row[(size_t)2 * hk * S + (size_t)j * S + b];
#endif
#pragma unroll
        for (int a = 0; a < R; ++a) col[a] = __fmul_rn(col[a], dec);
        float p = 0.0f;
#pragma unroll
        for (int turn = 0; turn < P; ++turn) {
            if (part == turn) {
#pragma unroll
                for (int a = 0; a < R; ++a) p = __fmaf_rn(col[a], k[a], p);
            }
            if (P > 1) p = __shfl_sync(0xffffffffu, p, lane0 + turn);
        }
        const float delta = __fmul_rn(beta, __fsub_rn(v, p));
#pragma unroll
        for (int a = 0; a < R; ++a) col[a] = __fmaf_rn(k[a], delta, col[a]);
        if (slots != nullptr && t + 1 < T) {  // a verify window's rewind slot t: the state after token t
            float* kept = slots + ((size_t)t * hv + j) * S * S + (size_t)part * R * S;
#pragma unroll
            for (int a = 0; a < R; ++a) kept[(size_t)a * S + b] = col[a];
        }
        float out = 0.0f;
#pragma unroll
        for (int turn = 0; turn < P; ++turn) {
            if (part == turn) {
#pragma unroll
                for (int a = 0; a < R; ++a) out = __fmaf_rn(col[a], q[a], out);
            }
            if (P > 1) out = __shfl_sync(0xffffffffu, out, lane0 + turn);
        }
        if (part == 0) o[(size_t)t * hv * S + (size_t)j * S + b] = out;
    }
#pragma unroll
    for (int a = 0; a < R; ++a) m[(size_t)a * S + b] = col[a];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (G > 1) {
        cluster_sync();  // the head's o rows written by all its CTAs, and seen by each
        gdn_out_norm_rows<QY>(o, z, wn, y, eps, hv, S, T, j, yq, g, G);
        return;
    }
#endif
    __syncthreads();  // the block's o rows written
    gdn_out_norm_rows<QY>(o, z, wn, y, eps, hv, S, T, j, yq);
}

// The three entry points of a register kernel: plain, `_n` (q and k normalised here: the fused conv made
// them without the norms) and `_nq` (y also quantized for the output product, STRATA_GDN_QUANTIZE=1), for
// G CTAs a head (ATTR the cluster's, SUF the names' suffix).
#define GDN_DELTA_KERNELS(S, P, G, ATTR, SUF)                                                                  \
    extern "C" __global__ void ATTR __launch_bounds__(S / G * P) gdn_delta_##S##SUF(                           \
        float* __restrict__ M, const float* __restrict__ conv, const float* __restrict__ decay,                \
        const float* __restrict__ betas, float* __restrict__ o, int C, int hk, int hv, int S_, int T,          \
        const float* __restrict__ z, const float* __restrict__ wn, float* __restrict__ y, float eps,          \
        float* slots) {                                                                                        \
        gdn_delta_cols<S, P, false, false, G>(M, conv, decay, betas, o, C, hk, hv, T, z, wn, y, eps, 0.0f,     \
                                              nullptr, slots);                                                 \
    }                                                                                                          \
    extern "C" __global__ void ATTR __launch_bounds__(S / G * P) gdn_delta_##S##_n##SUF(                       \
        float* __restrict__ M, const float* __restrict__ conv, const float* __restrict__ decay,                \
        const float* __restrict__ betas, float* __restrict__ o, int C, int hk, int hv, int S_, int T,          \
        const float* __restrict__ z, const float* __restrict__ wn, float* __restrict__ y, float eps,          \
        float qscale, float* slots) {                                                                          \
        gdn_delta_cols<S, P, true, false, G>(M, conv, decay, betas, o, C, hk, hv, T, z, wn, y, eps, qscale,    \
                                             nullptr, slots);                                                  \
    }                                                                                                          \
    extern "C" __global__ void ATTR __launch_bounds__(S / G * P) gdn_delta_##S##_nq##SUF(                      \
        float* __restrict__ M, const float* __restrict__ conv, const float* __restrict__ decay,                \
        const float* __restrict__ betas, float* __restrict__ o, int C, int hk, int hv, int S_, int T,          \
        const float* __restrict__ z, const float* __restrict__ wn, float* __restrict__ y, float eps,          \
        float qscale, int4* yq, float* slots) {                                                                \
        gdn_delta_cols<S, P, true, true, G>(M, conv, decay, betas, o, C, hk, hv, T, z, wn, y, eps, qscale, yq, \
                                            slots);                                                            \
    }
GDN_DELTA_KERNELS(32, 1, 1, , )
GDN_DELTA_KERNELS(64, 1, 1, , )
GDN_DELTA_KERNELS(128, 2, 1, , )

// The rule split over a head's columns (STRATA_GDN_SPLIT=G, 2 by default on sm_90 and later): a cluster
// of G CTAs a value head, CTA g taking columns g·S/G .. (g + 1)·S/G − 1 with the same threads a column, so
// a window's tokens run on G times the multiprocessors and each writes 1/G of the state and its rewind
// slots. A column's chains need only its own column, q, k and v: the same operations in the same order.
// The head's output norm reads all its columns' o, so the cluster meets at a barrier first, then CTA g's
// warps take their share of the tokens (gdn_out_norm_rows' cta, ctas).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
GDN_DELTA_KERNELS(128, 2, 2, __cluster_dims__(2, 1, 1), _c2)
GDN_DELTA_KERNELS(128, 2, 4, __cluster_dims__(4, 1, 1), _c4)
#endif
