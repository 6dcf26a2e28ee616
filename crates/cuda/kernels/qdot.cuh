// Integer dot products over int8 inputs (docs/ARITHMETIC.md § qdot), the twin of
// crates/model/src/ops/qdot.rs, for the types whose blocks are scales times small integers (Q8_0, Q4_0,
// Q2_0, IQ4_NL, Q4_K, Q6_K). Prepended to qdot.cu (after common.cuh and dequant.cuh); also compiled on the host
// by crates/cuda/tests/kernels_on_host.rs, which checks these functions against the CPU without a GPU.
//
// A piece is 32 consecutive elements of a row, the input's quantization block. For each type,
// `value(b, p, a, lo, hi, da)` is piece p of the block at b against the input's codes a (8 words of 4
// bytes, laid out in the type's order: `pos(i)` is the byte of element i), whose sums over the piece's
// elements 0..15 and 16..31 are lo and hi and whose scale is da: ops/qdot.rs block_values. The weights
// are unpacked into 8 words in whatever order their bit layout gives cheaply, so that four-way integer
// dot instructions (`__dp4a`) pair each weight with its input. Integer sums are exact in any order; only
// the float combination has a fixed order.

// QBLOCK, QMAX, qd_code and qd_scale (the input's quantization) are in common.cuh, which other kernel
// files that quantize their outputs for these products share.

// N words of 4 bytes from p, an even address (blocks are 2-byte aligned): the N + 1 aligned words
// around them loaded, each word then cut out by a funnel shift (a 32-bit load a word, not two 16-bit
// ones). When p is 4-aligned the last load is not needed; it stays inside the matrix's buffer, which
// has 16 bytes of padding (matvec.rs MatrixGpu::upload).
template <int N>
__device__ __forceinline__ void qd_words(const unsigned char* p, u32* out) {
    const u32* a = reinterpret_cast<const u32*>((size_t)p & ~(size_t)3);
    const unsigned sh = 8u * (unsigned)((size_t)p & 3);
    u32 w[N + 1];
#pragma unroll
    for (int i = 0; i <= N; ++i) w[i] = a[i];
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

// The piece's value: (dw · da) · s, two rounded products (s is exact in f32).
__device__ __forceinline__ float qd_piece_value(float dw, float da, int s) {
    return __fmul_rn(__fmul_rn(dw, da), (float)s);
}

// A piece taken apart, for products whose integer sums another unit makes (int8 tensor-core MMA): words m
// and m + 4 of its unpacked weights (`Q::word2`, the words `Q::load` gives there), the scales alone
// (`Q::scales`), and the value from the two halves' integer sums, words 0..3 (s0) and 4..7 (s1) against the
// input's same words (`Q::finish`). `Q::apply` is `finish` of its own sums (s1 = 0 where a type needs
// only the whole), so the values are the same bits however the sums were made.

// A piece's weights unpacked from its block once (`Q::load`), then put against each input (`Q::apply`):
// a window's tokens share one unpacking. The 8 words of integer weights and the type's scales: f0, f1
// and i0, i1 as each type says. `Q::value` is `apply(load(…), …)`: the same operations either way.
struct QdW {
    int w[8];
    float f0, f1;
    int i0, i1;
};

// A type of one scale dw (the block's first two bytes, f0) and integer weights (Q8_0, Q4_0, Q2_0, IQ4_NL).
template <typename Q>
__device__ __forceinline__ QdW qd_one_scale_load(const unsigned char* b, int p) {
    QdW W;
    Q::piece(b, p, W.w);
    W.f0 = f16_bits_to_f32(u16_at(b));
    return W;
}

// The piece's integer sum is the weights against the codes, less OFF times the codes' sum (the weights
// were stored as code + OFF): exact.
template <typename Q>
__device__ __forceinline__ float qd_one_scale_finish(const QdW& W, int s0, int s1, int lo, int hi, float da) {
    return qd_piece_value(W.f0, da, s0 + s1 - Q::OFF * (lo + hi));
}

template <typename Q>
__device__ __forceinline__ float qd_one_scale_apply(const QdW& W, const int* a, int lo, int hi, float da) {
    int s = 0;
#pragma unroll
    for (int m = 0; m < 8; ++m) s = __dp4a(W.w[m], a[m], s);
    return qd_one_scale_finish<Q>(W, s, 0, lo, hi, da);
}

// The members every type of one scale has: load, apply and value from its `piece`; scales and finish.
#define QD_ONE_SCALE(Q)                                                                                      \
    __device__ static QdW load(const unsigned char* b, int p) { return qd_one_scale_load<Q>(b, p); }         \
    __device__ static QdW scales(const unsigned char* b, int) {                                              \
        QdW W;                                                                                               \
        W.f0 = f16_bits_to_f32(u16_at(b));                                                                   \
        return W;                                                                                            \
    }                                                                                                        \
    __device__ static float finish(const QdW& W, int s0, int s1, int lo, int hi, float da) {                 \
        return qd_one_scale_finish<Q>(W, s0, s1, lo, hi, da);                                                \
    }                                                                                                        \
    __device__ static float apply(const QdW& W, const int* a, int lo, int hi, float da) {                    \
        return qd_one_scale_apply<Q>(W, a, lo, hi, da);                                                      \
    }                                                                                                        \
    __device__ static float value(const unsigned char* b, int p, const int* a, int lo, int hi, float da) {   \
        return apply(load(b, p), a, lo, hi, da);                                                             \
    }

// Q8_0: the 32 int8 codes in element order.
struct Q8_0Q {
    static constexpr int BS = 32, TS = 34, OFF = 0;
    __device__ static int pos(int i) { return i; }
    __device__ static void piece(const unsigned char* b, int, int* w) {
        qd_words<8>(b + 2, reinterpret_cast<u32*>(w));
    }
    __device__ static int2 word2(const unsigned char* b, int, int m) {
        u32 lo, hi;
        qd_words<1>(b + 2 + 4 * m, &lo);
        qd_words<1>(b + 18 + 4 * m, &hi);
        return make_int2((int)lo, (int)hi);
    }
    QD_ONE_SCALE(Q8_0Q)
};

// Q4_0: byte j holds element j (low nibble) and j + 16 (high); the weight is the nibble − 8 (OFF), so
// word m is elements 4m .. 4m + 3 and word 4 + m elements 16 + 4m ..: element order.
struct Q4_0Q {
    static constexpr int BS = 32, TS = 18, OFF = 8;
    __device__ static int pos(int i) { return i; }
    __device__ static void piece(const unsigned char* b, int, int* w) {
        u32 c[4];
        qd_words<4>(b + 2, c);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const u32 q = c[m];
            w[m] = (int)(q & 0x0f0f0f0fu);
            w[4 + m] = (int)((q >> 4) & 0x0f0f0f0fu);
        }
    }
    __device__ static int2 word2(const unsigned char* b, int, int m) {
        u32 q;
        qd_words<1>(b + 2 + 4 * m, &q);
        return make_int2((int)(q & 0x0f0f0f0fu), (int)((q >> 4) & 0x0f0f0f0fu));
    }
    QD_ONE_SCALE(Q4_0Q)
};

// Q2_0: a block of 64 is two pieces; its 16 bytes of codes hold element 4k + s in bits 2s..2s + 1 of
// byte k, piece h in bytes 8h .. 8h + 7. Word 4g + s is (the piece's bytes 4g .. 4g + 3 >> 2s) & 3 in
// each byte: byte k of it is the piece's element 16g + 4k + s. The weight is the code − 1 (OFF).
struct Q2_0Q {
    static constexpr int BS = 64, TS = 18, OFF = 1;
    __device__ static int pos(int i) { return 4 * (4 * (i / 16) + i % 4) + (i % 16) / 4; }
    __device__ static void piece(const unsigned char* b, int h, int* w) {
        u32 cw[2];
        qd_words<2>(b + 2 + 8 * h, cw);
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            const u32 c = cw[g];
#pragma unroll
            for (int s = 0; s < 4; ++s) w[4 * g + s] = (int)((c >> (2 * s)) & 0x03030303u);
        }
    }
    __device__ static int2 word2(const unsigned char* b, int h, int m) {
        u32 cw[2];
        qd_words<2>(b + 2 + 8 * h, cw);
        return make_int2((int)((cw[0] >> (2 * m)) & 0x03030303u), (int)((cw[1] >> (2 * m)) & 0x03030303u));
    }
    QD_ONE_SCALE(Q2_0Q)
};

// Q2_0 in the device's pair layout (STRATA_Q2_0_PAIRS, ops/matrix.rs `pair_q2_0_blocks`): two blocks of
// 64 as 36 bytes, their two scales first, then their 16-byte code runs, so piece p (0..3) of a pair has
// its codes at 4 + 8p, 4-byte aligned wherever the pair is: two word loads, where a block of 18 bytes
// is only 2-byte aligned (three loads and two funnel shifts). The same codes and scales as Q2_0's, so
// the same values.
struct Q2_0PQ {
    static constexpr int BS = 128, TS = 36, OFF = Q2_0Q::OFF;
    __device__ static int pos(int i) { return Q2_0Q::pos(i); }
    __device__ static void words(const unsigned char* b, int p, u32 (&cw)[2]) {
        const u32* c = reinterpret_cast<const u32*>(b + 4 + 8 * p);
        cw[0] = c[0];
        cw[1] = c[1];
    }
    __device__ static void piece(const unsigned char* b, int p, int* w) {
        u32 cw[2];
        words(b, p, cw);
#pragma unroll
        for (int g = 0; g < 2; ++g) {
#pragma unroll
            for (int s = 0; s < 4; ++s) w[4 * g + s] = (int)((cw[g] >> (2 * s)) & 0x03030303u);
        }
    }
    __device__ static int2 word2(const unsigned char* b, int p, int m) {
        u32 cw[2];
        words(b, p, cw);
        return make_int2((int)((cw[0] >> (2 * m)) & 0x03030303u), (int)((cw[1] >> (2 * m)) & 0x03030303u));
    }
    __device__ static QdW scales(const unsigned char* b, int p) {
        QdW W;
        W.f0 = f16_bits_to_f32(u16_at(b + 2 * (p / 2)));
        return W;
    }
    __device__ static QdW load(const unsigned char* b, int p) {
        QdW W = scales(b, p);
        piece(b, p, W.w);
        return W;
    }
    __device__ static float finish(const QdW& W, int s0, int s1, int lo, int hi, float da) {
        return qd_one_scale_finish<Q2_0PQ>(W, s0, s1, lo, hi, da);
    }
    __device__ static float apply(const QdW& W, const int* a, int lo, int hi, float da) {
        return qd_one_scale_apply<Q2_0PQ>(W, a, lo, hi, da);
    }
    __device__ static float value(const unsigned char* b, int p, const int* a, int lo, int hi, float da) {
        return apply(load(b, p), a, lo, hi, da);
    }
};

// IQ4_NL: Q4_0's nibble layout, each nibble an index into the format's table of 16 int8 values. Four
// nibbles as they lie in 16 bits of the codes (low and high nibble of two bytes) are looked up by byte
// permutes: the low three bits of each pick a byte of the table's first or second half, the fourth bit
// picks the half. Word 2m + u (u = 0, 1: bits 16u.. of bytes 4m .. 4m + 3) is elements 4m + 2u,
// 16 + 4m + 2u, 4m + 2u + 1, 17 + 4m + 2u.
struct IQ4_NLQ {
    static constexpr int BS = 32, TS = 18, OFF = 0;
    __device__ static int pos(int i) { return qd_pos_iq4_nl(i); }
    __device__ static int lookup(u32 sel) {
        // IQ4_NL_W0..3: the table's 16 bytes as 4 little-endian words (compile.rs writes them from
        // strata_gguf's IQ4_NL_VALUES).
        const u32 lo = __byte_perm(IQ4_NL_W0, IQ4_NL_W1, sel), hi = __byte_perm(IQ4_NL_W2, IQ4_NL_W3, sel);
        return (int)__byte_perm(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1));
    }
    __device__ static void piece(const unsigned char* b, int, int* w) {
        u32 c[4];
        qd_words<4>(b + 2, c);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const u32 q = c[m];
            w[2 * m] = lookup(q & 0xffffu);
            w[2 * m + 1] = lookup(q >> 16);
        }
    }
    // Word m is word m / 2's half m % 2 of the codes; word m + 4 the same of word m / 2 + 2.
    __device__ static int2 word2(const unsigned char* b, int, int m) {
        u32 c[3];
        qd_words<3>(b + 2 + 4 * (m / 2), c);
        const unsigned sh = 16u * (unsigned)(m % 2);
        return make_int2(lookup((c[0] >> sh) & 0xffffu), lookup((c[2] >> sh) & 0xffffu));
    }
    QD_ONE_SCALE(IQ4_NLQ)
};

// Q4_K: blocks of 256 in 144 bytes: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles;
// piece p's codes are the nibbles (p odd: high) of bytes 32·(p/2) .. + 31 of the nibbles, in element
// order, with a scale sc and a min m: v = fma((d·sc)·da, Σ w·q, −(((dmin·m)·da)·Σ q)). A row is a whole
// number of 144-byte blocks from a 16-byte aligned start, so each block is 16-byte aligned: the header
// and the piece's 32 bytes of nibbles are three 16-byte loads.
struct Q4_KQ {
    static constexpr int BS = 256, TS = 144;
    __device__ static int pos(int i) { return i; }
    // The piece's d and dmin (f0, f1), its scale and min (i0, i1).
    __device__ static QdW scales(const unsigned char* b, int p) {
        const uint4 h = *reinterpret_cast<const uint4*>(b);
        // Scale bytes sc[0..11] are h.y, h.z, h.w; byte q of a word by a shift.
        const unsigned q8 = 8u * (unsigned)(p % 4);
        const u32 s0 = (h.y >> q8) & 0xffu, s4 = (h.z >> q8) & 0xffu, s8 = (h.w >> q8) & 0xffu;
        QdW W;
        if (p < 4) {
            W.i0 = (int)(s0 & 63);  // sc[p]
            W.i1 = (int)(s4 & 63);  // sc[p + 4]
        } else {
            W.i0 = (int)((s8 & 0xf) | ((s0 >> 6) << 4));  // sc[p + 4], sc[p − 4]
            W.i1 = (int)((s8 >> 4) | ((s4 >> 6) << 4));   // sc[p + 4], sc[p]
        }
        W.f0 = f16_bits_to_f32((unsigned short)(h.x & 0xffffu));
        W.f1 = f16_bits_to_f32((unsigned short)(h.x >> 16));
        return W;
    }
    // The piece's nibbles (w) and scales.
    __device__ static QdW load(const unsigned char* b, int p) {
        QdW W = scales(b, p);
        const uint4* n = reinterpret_cast<const uint4*>(b + 16 + 32 * (p / 2));
        const uint4 n0 = n[0], n1 = n[1];
        const unsigned shift = 4 * (p % 2);
        const u32 c[8] = {n0.x, n0.y, n0.z, n0.w, n1.x, n1.y, n1.z, n1.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) W.w[k] = (int)((c[k] >> shift) & 0x0f0f0f0fu);
        return W;
    }
    __device__ static int2 word2(const unsigned char* b, int p, int m) {
        const u32* n = reinterpret_cast<const u32*>(b + 16 + 32 * (p / 2));
        const unsigned shift = 4 * (p % 2);
        return make_int2((int)((n[m] >> shift) & 0x0f0f0f0fu), (int)((n[m + 4] >> shift) & 0x0f0f0f0fu));
    }
    __device__ static float finish(const QdW& W, int s0, int s1, int lo, int hi, float da) {
        const float x = __fmul_rn(__fmul_rn(W.f0, (float)W.i0), da), y = __fmul_rn(__fmul_rn(W.f1, (float)W.i1), da);
        return __fmaf_rn(x, (float)(s0 + s1), -__fmul_rn(y, (float)(lo + hi)));
    }
    __device__ static float apply(const QdW& W, const int* a, int lo, int hi, float da) {
        int S = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) S = __dp4a(W.w[k], a[k], S);
        return finish(W, S, 0, lo, hi, da);
    }
    __device__ static float value(const unsigned char* b, int p, const int* a, int lo, int hi, float da) {
        return apply(load(b, p), a, lo, hi, da);
    }
};

// Q6_K: blocks of 256 in 210 bytes: ql[128] (low nibbles), qh[64] (two high bits each), 16 int8 scales,
// d last. Piece p = 4n + k is elements 128n + 32k .. + 31: the low nibbles of ql[64n + 32(k % 2) + l]
// (high nibble for k ≥ 2) and bits 2k of qh[32n + l], in element order; the weight is the code − 32,
// with scale sc[8n + 2k] for its first 16 elements and sc[8n + 2k + 1] for the rest:
// v = (d·da) · (sc_a·(Σ_a q·w − 32·lo) + sc_b·(Σ_b q·w − 32·hi)).
struct Q6_KQ {
    static constexpr int BS = 256, TS = 210;
    __device__ static int pos(int i) { return i; }
    // The piece's two int8 scales (i0, i1) and d (f0).
    __device__ static QdW scales(const unsigned char* b, int p) {
        const int n = p / 4, k = p % 4;
        const unsigned short sc = u16_at(b + 192 + 8 * n + 2 * k);  // the two int8 scales, one load
        QdW W;
        W.i0 = (int)(signed char)(sc & 0xff);
        W.i1 = (int)(signed char)(sc >> 8);
        W.f0 = f16_bits_to_f32(u16_at(b + 208));
        return W;
    }
    // Where piece p's low nibbles (ql) and high bits (qh) lie, and their shifts.
    __device__ static void at(const unsigned char* b, int p, const unsigned char** ql, const unsigned char** qh,
                              unsigned* ls, unsigned* hs) {
        const int n = p / 4, k = p % 4;
        *ql = b + 64 * n + 32 * (k % 2);
        *qh = b + 128 + 32 * n;
        *ls = 4 * (k / 2);
        *hs = 2 * k;
    }
    __device__ static int code(u32 l, u32 h, unsigned ls, unsigned hs) {
        return (int)(((l >> ls) & 0x0f0f0f0fu) | (((h >> hs) & 0x03030303u) << 4));
    }
    // The piece's 6-bit codes (w) and scales.
    __device__ static QdW load(const unsigned char* b, int p) {
        const unsigned char *ql, *qh;
        unsigned ls, hs;
        at(b, p, &ql, &qh, &ls, &hs);
        u32 L[8], H[8];
        qd_words<8>(ql, L);
        qd_words<8>(qh, H);
        QdW W = scales(b, p);
#pragma unroll
        for (int m = 0; m < 8; ++m) W.w[m] = code(L[m], H[m], ls, hs);
        return W;
    }
    __device__ static int2 word2(const unsigned char* b, int p, int m) {
        const unsigned char *ql, *qh;
        unsigned ls, hs;
        at(b, p, &ql, &qh, &ls, &hs);
        u32 l0, l1, h0, h1;
        qd_words<1>(ql + 4 * m, &l0);
        qd_words<1>(ql + 16 + 4 * m, &l1);
        qd_words<1>(qh + 4 * m, &h0);
        qd_words<1>(qh + 16 + 4 * m, &h1);
        return make_int2(code(l0, h0, ls, hs), code(l1, h1, ls, hs));
    }
    __device__ static float finish(const QdW& W, int s0, int s1, int lo, int hi, float da) {
        const int I = W.i0 * (s0 - 32 * lo) + W.i1 * (s1 - 32 * hi);
        return __fmul_rn(__fmul_rn(W.f0, da), (float)I);
    }
    __device__ static float apply(const QdW& W, const int* a, int lo, int hi, float da) {
        int S[2] = {0, 0};
#pragma unroll
        for (int m = 0; m < 8; ++m) S[m / 4] = __dp4a(W.w[m], a[m], S[m / 4]);
        return finish(W, S[0], S[1], lo, hi, da);
    }
    __device__ static float value(const unsigned char* b, int p, const int* a, int lo, int hi, float da) {
        return apply(load(b, p), a, lo, hi, da);
    }
};
