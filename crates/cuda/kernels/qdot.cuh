// Integer dot products over int8 inputs (docs/ARITHMETIC.md § qdot), the twin of
// crates/model/src/ops/qdot.rs, for the types whose blocks are one fp16 scale times small integers (Q8_0,
// Q4_0, Q2_0, IQ4_NL). Prepended to qdot.cu (after common.cuh and dequant.cuh); also compiled on the host
// by crates/cuda/tests/kernels_on_host.rs, which checks these functions against the CPU without a GPU.
//
// A piece is 32 consecutive elements of a row, the input's quantization block. For each type, `piece`
// unpacks a piece's integer weights into 8 words of 4 bytes in whatever order its bit layout gives
// cheaply, and `pos(i)` says at which byte of those 32 element i sits; the input's codes are laid out in
// the same order, so that four-way integer dot instructions (`__dp4a`) pair each weight with its input.
// Integer sums are exact in any order; only the float combination of the pieces has a fixed order.

#define QBLOCK 32
#define QMAX 127.0f

// An input element times 127/amax as its code: rounded half to even, clamped to ±127; NaN gives 0
// (ops/qdot.rs `code`). Clamping before rounding gives the same integer as after.
__device__ __forceinline__ int qd_code(float v) {
    if (v != v) return 0;
    return __float2int_rn(fminf(fmaxf(v, -QMAX), QMAX));
}

// A block's scale from its largest magnitude: sets d = amax/127 and returns id = 127/amax, or 0 when
// amax is 0 (every code is then 0, as x·0 is 0 or NaN).
__device__ __forceinline__ float qd_scale(float amax, float* d) {
    *d = __fdiv_rn(amax, QMAX);
    return amax == 0.0f ? 0.0f : __fdiv_rn(QMAX, amax);
}

// Four bytes at an even address (blocks are 2-byte aligned), read 16 bits at a time.
__device__ __forceinline__ int qd_word(const unsigned char* p) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// Q8_0: the 32 int8 codes in element order.
struct Q8_0Q {
    static constexpr int BS = 32, TS = 34, OFF = 0;
    __device__ static int pos(int i) { return i; }
    __device__ static void piece(const unsigned char* b, int, int* w) {
#pragma unroll
        for (int m = 0; m < 8; ++m) w[m] = qd_word(b + 2 + 4 * m);
    }
};

// Q4_0: byte j holds element j (low nibble) and j + 16 (high); the weight is the nibble − 8 (OFF), so
// word m is elements 4m .. 4m + 3 and word 4 + m elements 16 + 4m ..: element order.
struct Q4_0Q {
    static constexpr int BS = 32, TS = 18, OFF = 8;
    __device__ static int pos(int i) { return i; }
    __device__ static void piece(const unsigned char* b, int, int* w) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const u32 q = (u32)qd_word(b + 2 + 4 * m);
            w[m] = (int)(q & 0x0f0f0f0fu);
            w[4 + m] = (int)((q >> 4) & 0x0f0f0f0fu);
        }
    }
};

// Q2_0: a block of 64 is two pieces; piece h's 16 bytes of codes hold element 4k + s of byte k in bits
// 2s..2s + 1. Word 4g + s is (bytes 4g .. 4g + 3 >> 2s) & 3 in each byte: byte k of it is element
// 16g + 4k + s. The weight is the code − 1 (OFF).
struct Q2_0Q {
    static constexpr int BS = 64, TS = 18, OFF = 1;
    __device__ static int pos(int i) { return 4 * (4 * (i / 16) + i % 4) + (i % 16) / 4; }
    __device__ static void piece(const unsigned char* b, int h, int* w) {
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            const u32 c = (u32)qd_word(b + 2 + 8 * h + 4 * g);
#pragma unroll
            for (int s = 0; s < 4; ++s) w[4 * g + s] = (int)((c >> (2 * s)) & 0x03030303u);
        }
    }
};

// IQ4_NL: Q4_0's nibble layout, each nibble an index into the format's table of 16 int8 values. Four
// nibbles as they lie in 16 bits of the codes (low and high nibble of two bytes) are looked up by byte
// permutes: the low three bits of each pick a byte of the table's first or second half, the fourth bit
// picks the half. Word 2m + u (u = 0, 1: bits 16u.. of bytes 4m .. 4m + 3) is elements 4m + 2u,
// 16 + 4m + 2u, 4m + 2u + 1, 17 + 4m + 2u.
struct IQ4_NLQ {
    static constexpr int BS = 32, TS = 18, OFF = 0;
    __device__ static int pos(int i) {
        const int e = i % 16, r = e % 4;
        return 4 * (2 * (e / 4) + r / 2) + 2 * (r % 2) + i / 16;
    }
    __device__ static int lookup(u32 sel) {
        // IQ4_NL_W0..3: the table's 16 bytes as 4 little-endian words (compile.rs writes them from
        // strata_gguf's IQ4_NL_VALUES).
        const u32 lo = __byte_perm(IQ4_NL_W0, IQ4_NL_W1, sel), hi = __byte_perm(IQ4_NL_W2, IQ4_NL_W3, sel);
        return (int)__byte_perm(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1));
    }
    __device__ static void piece(const unsigned char* b, int, int* w) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const u32 q = (u32)qd_word(b + 2 + 4 * m);
            w[2 * m] = lookup(q & 0xffffu);
            w[2 * m + 1] = lookup(q >> 16);
        }
    }
};

// A piece's integer sum: the 8 words of weights against the 8 words of codes, less OFF times the codes'
// sum (the weights were stored as code + OFF). Exact.
template <typename Q>
__device__ __forceinline__ int qd_piece_sum(const int* w, const int* a, int asum) {
    int s = 0;
#pragma unroll
    for (int m = 0; m < 8; ++m) s = __dp4a(w[m], a[m], s);
    return s - Q::OFF * asum;
}

// The piece's value: (dw · da) · s, two rounded products (s is exact in f32).
__device__ __forceinline__ float qd_piece_value(float dw, float da, int s) {
    return __fmul_rn(__fmul_rn(dw, da), (float)s);
}
