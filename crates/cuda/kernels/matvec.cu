// Matrix-vector products over quantized weights (docs/ARITHMETIC.md § matvec) for a window of T = 1..8
// tokens: y[t][row] = dot(dequant(W[row]), x[t]). Twin of crates/model/src/ops/matvec.rs: each chunk of 8
// weights is dequantized exactly as the CPU codec does (the same operations, so the same bits), then the
// reduction contract: lane L owns chunks L, L + 32, …; each chunk's 8 fmas into a fresh +0, added to the
// lane's running total; the butterfly. One warp per row; the row's weights are read once for all T tokens.

// A weight row's chunk c (elements 8c .. 8c + 7) as f32, per type. `row` is the row's first byte.
// fp16 bits to f32 exactly as strata_gguf's f16_to_f32 (NaN payloads kept as they are, no quiet bit added).
__device__ __forceinline__ float f16_bits_to_f32(unsigned short hb) {
    const u32 h = hb, sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    if (em >= 0x7c00u) return __uint_as_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em >= 0x0400u) return __uint_as_float(sign | ((em << 13) + ((127u - 15u) << 23)));
    return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)em, 5.9604644775390625e-8f)));  // 2^-24
}

__device__ __forceinline__ unsigned short u16_at(const unsigned char* p) {
    return (unsigned short)(p[0] | (p[1] << 8));
}

struct F32W {
    static constexpr int BS = 1, TS = 4;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const float* r = reinterpret_cast<const float*>(row) + 8 * c;
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = r[e];
    }
};

struct F16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = f16_bits_to_f32(u16_at(row + 2 * (8 * c + e)));
    }
};

struct BF16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __uint_as_float(((u32)u16_at(row + 2 * (8 * c + e))) << 16);
    }
};

// Q8_0: blocks of 32 in 34 bytes: fp16 d, 32 int8 codes; value = q·d.
struct Q8_0W {
    static constexpr int BS = 32, TS = 34;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 34;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn((float)(signed char)b[2 + o + e], d);
    }
};

// Q4_0: blocks of 32 in 18 bytes: fp16 d, 16 bytes; element j < 16 is byte j's low nibble, j ≥ 16 byte
// j − 16's high nibble; value = (q − 8)·d.
struct Q4_0W {
    static constexpr int BS = 32, TS = 18;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 32) * 18;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 32;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int j = o + e;
            const int q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
            w[e] = __fmul_rn((float)(q - 8), d);
        }
    }
};

// Q2_0: blocks of 64 in 18 bytes: fp16 d, 16 bytes of 2-bit codes (element i: bits 2·(i%4) of byte i/4);
// value = (code − 1)·d.
struct Q2_0W {
    static constexpr int BS = 64, TS = 18;
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned char* b = row + (8 * c / 64) * 18;
        const float d = f16_bits_to_f32(u16_at(b));
        const int o = (8 * c) % 64;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int i = o + e;
            const int code = (b[2 + i / 4] >> (2 * (i % 4))) & 3;
            w[e] = __fmul_rn((float)(code - 1), d);
        }
    }
};

// One warp per row: the row's chunks dequantized once, dotted with each of the T tokens' x.
template <typename W>
__device__ void matvec_rows(const unsigned char* __restrict__ wbase, const float* __restrict__ x,
                            float* __restrict__ y, int rows, int cols, int T) {
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    const int row = blockIdx.x * warps + threadIdx.x / WARP;
    if (row >= rows) return;
    const size_t row_bytes = (size_t)(cols / W::BS) * W::TS;
    const unsigned char* r = wbase + (size_t)row * row_bytes;
    const int nch = cols / CHUNK;
    float acc[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t] = 0.0f;
    for (int c = lane; c < nch; c += WARP) {
        float w[8];
        W::chunk(r, c, w);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < T) {
                float xv[8];
                load8_f32(x + (size_t)t * cols + 8 * c, xv);
                acc[t] = __fadd_rn(acc[t], chunk_dot(w, xv));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < T) {
            const float v = warp_butterfly(acc[t]);
            if (lane == 0) y[(size_t)t * rows + row] = v;
        }
    }
}

#define MATVEC(NAME, W)                                                                                       \
    extern "C" __global__ void NAME(const unsigned char* __restrict__ w, const float* __restrict__ x,          \
                                    float* __restrict__ y, int rows, int cols, int T) {                       \
        matvec_rows<W>(w, x, y, rows, cols, T);                                                               \
    }

MATVEC(matvec_f32, F32W)
MATVEC(matvec_f16, F16W)
MATVEC(matvec_bf16, BF16W)
MATVEC(matvec_q8_0, Q8_0W)
MATVEC(matvec_q4_0, Q4_0W)
MATVEC(matvec_q2_0, Q2_0W)
