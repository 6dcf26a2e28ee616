// Weight decoding for the matrix-vector kernels (docs/ARITHMETIC.md § matvec): per ggml type, chunk c of a
// row (elements 8c .. 8c + 7) as f32, with the same operations as strata_gguf's codecs, so the same bits.
// Prepended to matvec.cu (after common.cuh and the IQ grids); also compiled on the host by
// crates/cuda/tests/kernels_on_host.rs, which checks every type against the codecs without a GPU.

// Per type, `at(b, p, w)`: the 8 elements p .. p + 7 of the block at b as f32 (p a multiple of 8 below the
// block size BS; blocks of TS bytes), and `chunk(row, c, w)`: a row's chunk c (elements 8c .. 8c + 7), the
// block and offset it lies in. A lane's chunks c, c + 32, … all sit at the same offset p of blocks 256/BS
// apart (every BS divides 256), so a loop over them keeps p and everything made from it out of the loop.
//
// Loads are as wide as the layout's alignment allows: every block size is even and rows start at a
// multiple of their block size from an aligned buffer, so any field at an even offset in its block may be
// read 16 bits at a time, and Q4_K's blocks of 144 bytes allow 32- and 64-bit loads.
__device__ __forceinline__ unsigned short u16_at(const unsigned char* p) {
    return *reinterpret_cast<const unsigned short*>(p);
}

// Eight bytes at an even address, read 16 bits at a time: bytes 0..3 in lo, 4..7 in hi.
struct Bytes8 {
    u32 lo, hi;
    __device__ __forceinline__ explicit Bytes8(const unsigned char* p) {
        const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
        lo = (u32)h[0] | ((u32)h[1] << 16);
        hi = (u32)h[2] | ((u32)h[3] << 16);
    }
    __device__ __forceinline__ Bytes8(u32 a, u32 b) : lo(a), hi(b) {}
    __device__ __forceinline__ u32 operator[](int e) const { return ((e < 4 ? lo : hi) >> (8 * (e & 3))) & 0xffu; }
};

// Each byte of `word` (each below 2^22 − bias) as the float byte − bias: the byte put into the low bits of
// 1.5·2^23's pattern by one byte permute, then 1.5·2^23 + bias taken off (both steps exact; the values
// small_int_f32 gives for byte − bias).
__device__ __forceinline__ void bytes_f32x4(u32 word, float bias, float* v) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        v[e] = __fsub_rn(__uint_as_float(__byte_perm(word, 0x4B400000u, 0x7640u | e)), __fadd_rn(12582912.0f, bias));
    }
}

// The 8 nibbles of q at `shift` (0: the low ones, 4: the high ones) as the floats nibble − bias.
__device__ __forceinline__ void nibbles_f32(const Bytes8& q, unsigned shift, float bias, float* v) {
    bytes_f32x4((q.lo >> shift) & 0x0f0f0f0fu, bias, v);
    bytes_f32x4((q.hi >> shift) & 0x0f0f0f0fu, bias, v + 4);
}

struct F32W {
    static constexpr int BS = 1, TS = 4;
    __device__ static void at(const unsigned char* b, unsigned, float* w) {
        load8_f32(reinterpret_cast<const float*>(b), w);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Eight 16-bit values in one 16-byte load (a row of 8k halves starts 16-byte aligned).
__device__ __forceinline__ void load8_u16(const unsigned char* p, u32* h) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        h[2 * i] = words[i] & 0xffffu;
        h[2 * i + 1] = words[i] >> 16;
    }
}

struct F16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void at(const unsigned char* b, unsigned, float* w) {
        u32 h[8];
        load8_u16(b, h);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = f16_bits_to_f32((unsigned short)h[e]);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

struct BF16W {
    static constexpr int BS = 1, TS = 2;
    __device__ static void at(const unsigned char* b, unsigned, float* w) {
        u32 h[8];
        load8_u16(b, h);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __uint_as_float(h[e] << 16);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q8_0: blocks of 32 in 34 bytes: fp16 d, 32 int8 codes; value = q·d.
struct Q8_0W {
    static constexpr int BS = 32, TS = 34;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const float d = f16_bits_to_f32(u16_at(b));
        const Bytes8 q(b + 2 + p);
        // Each code's sign bit flipped, four at a time: the byte read as unsigned is then code + 128, which
        // bytes_f32x4 turns into the float code (exactly small_int_f32's value, without a sign extension
        // and an add for each).
        float v[8];
        bytes_f32x4(q.lo ^ 0x80808080u, 128.0f, v);
        bytes_f32x4(q.hi ^ 0x80808080u, 128.0f, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(v[e], d);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q4_0: blocks of 32 in 18 bytes: fp16 d, 16 bytes; element j < 16 is byte j's low nibble, j ≥ 16 byte
// j − 16's high nibble; value = (q − 8)·d.
struct Q4_0W {
    static constexpr int BS = 32, TS = 18;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const float d = f16_bits_to_f32(u16_at(b));
        const unsigned o = p;
        float q[8];  // the chunk's 8 nibbles: low ones for o < 16, high ones after
        nibbles_f32(Bytes8(b + 2 + o % 16), o < 16 ? 0 : 4, 8.0f, q);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(q[e], d);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q5_0: blocks of 32 in 22 bytes: fp16 d, 32 high bits (u32, bit j for element j), 16 bytes of low
// nibbles as Q4_0; value = (q − 16)·d.
struct Q5_0W {
    static constexpr int BS = 32, TS = 22;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const float d = f16_bits_to_f32(u16_at(b));
        const u32 qh = (u32)u16_at(b + 2) | ((u32)u16_at(b + 4) << 16);
        const unsigned o = p;
        const Bytes8 lo(b + 6 + o % 16);  // Q4_0's nibble layout
        const unsigned shift = o < 16 ? 0 : 4;
        // Four codes a word: each byte's nibble, and elements e..e+3's high bits spread to bit 4 of
        // bytes 0..3 by one multiply (the four shifted copies do not overlap, so nothing carries).
        const auto codes = [shift](u32 q4, u32 h4) {
            return ((q4 >> shift) & 0x0f0f0f0fu) | (((h4 & 0xfu) * 0x02040810u) & 0x10101010u);
        };
        float v[8];
        bytes_f32x4(codes(lo.lo, qh >> o), 16.0f, v);
        bytes_f32x4(codes(lo.hi, qh >> (o + 4)), 16.0f, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(v[e], d);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q2_0: blocks of 64 in 18 bytes: fp16 d, 16 bytes of 2-bit codes (element i: bits 2·(i%4) of byte i/4);
// value = (code − 1)·d.
struct Q2_0W {
    static constexpr int BS = 64, TS = 18;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const float d = f16_bits_to_f32(u16_at(b));
        const u32 codes = u16_at(b + 2 + p / 4);  // the chunk's 8 codes, 2 bits each
        // Code e put into the low bits of 1.5·2^23's pattern by one logic op ((x & 3) | pattern), then
        // 1.5·2^23 + 1 taken off: the float code − 1, exactly small_int_f32's value (an add fewer).
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const float q = __fsub_rn(__uint_as_float(and_or(codes >> (2 * e), 3u, 0x4B400000u)), 12582913.0f);
            w[e] = __fmul_rn(q, d);
        }
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// The K-quants: super-blocks of 256. `p` is the chunk's first element within its super-block.
// Q4_K and Q5_K: sub-block j's 6-bit scale and min from the 12 bytes at b + 4, and the block's d and dmin
// (b + 0, one word): blocks of 144 and 176 bytes keep it 4-byte aligned.
__device__ __forceinline__ void scales_k4(const unsigned char* b, unsigned j, float* d1, float* m1) {
    // Sub-blocks 0..3: the low 6 bits of bytes j (scale) and j + 4 (min). 4..7: the nibbles of byte j + 4
    // with the top 2 bits of bytes j − 4 (scale) and j (min) above them. Written without a branch on j:
    // the byte offsets, shift and masks depend on j alone, which a loop over one lane's chunks keeps fixed.
    const unsigned char* q = b + 4;
    const bool lo = j < 4;
    const u32 ls = q[lo ? j : j + 4], lm = q[j + 4], hs = q[lo ? j : j - 4], hm = q[j];
    const u32 mask = lo ? 63u : 15u, top = lo ? 0u : 0x30u, mshift = lo ? 0u : 4u;
    const int s = (int)((ls & mask) | (((hs >> 6) << 4) & top));
    const int m = (int)(((lm >> mshift) & mask) | (((hm >> 6) << 4) & top));
    const u32 dm = *reinterpret_cast<const u32*>(b);
    *d1 = __fmul_rn(f16_bits_to_f32((unsigned short)(dm & 0xffffu)), small_int_f32(s));
    *m1 = __fmul_rn(f16_bits_to_f32((unsigned short)(dm >> 16)), small_int_f32(m));
}

// Q4_K's and Q5_K's value (d1·q) − m1, the codec's fsub(fmul(d1, q), m1), in one fma. The product is exact,
// so the fma's one rounding is the subtraction's: d1 = d·sc is an f16 (11 significant bits) times a 6-bit
// integer, at most 17 bits, and q < 32 adds at most 5, so d1·q has at most 22 significant bits and no f16
// scale can make it overflow or leave the normal range of f32. An instruction fewer a weight.
__device__ __forceinline__ float k_scaled(float d1, float q, float m1) { return __fmaf_rn(d1, q, -m1); }

// Eight bytes at an 8-byte aligned address, in one load.
__device__ __forceinline__ Bytes8 bytes8_a8(const unsigned char* p) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    return Bytes8(v.x, v.y);
}

// Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, qs[128]; value = (d·sc)·q − dmin·m.
struct Q4_KW {
    static constexpr int BS = 256, TS = 144;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned j = p / 32, l0 = p % 32;
        float d1, m1;
        scales_k4(b, j, &d1, &m1);
        float q[8];
        nibbles_f32(bytes8_a8(b + 16 + 32 * (j / 2) + l0), 4 * (j % 2), 0.0f, q);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = k_scaled(d1, q[e], m1);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q5_K: Q4_K plus qh[32] (element 32j + l takes bit j of qh[l] as its fifth bit); qs at 48.
struct Q5_KW {
    static constexpr int BS = 256, TS = 176;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned j = p / 32, l0 = p % 32;
        float d1, m1;
        scales_k4(b, j, &d1, &m1);
        const Bytes8 qh = bytes8_a8(b + 16 + l0), q = bytes8_a8(b + 48 + 32 * (j / 2) + l0);
        // Four codes a word: each byte's nibble with its fifth bit put above it, then floats by byte
        // permutes (bytes_f32x4).
        const unsigned s = 4 * (j % 2);
        const auto codes = [s, j](u32 q4, u32 h4) { return ((q4 >> s) & 0x0f0f0f0fu) | (((h4 >> j) & 0x01010101u) << 4); };
        float v[8];
        bytes_f32x4(codes(q.lo, qh.lo), 0.0f, v);
        bytes_f32x4(codes(q.hi, qh.hi), 0.0f, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = k_scaled(d1, v[e], m1);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q6_K: ql[128], qh[64], 16 int8 scales, d; value = (d·sc)·(q − 32).
struct Q6_KW {
    static constexpr int BS = 256, TS = 210;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned n = p / 128, k = (p % 128) / 32, l0 = p % 32;
        const float d = f16_bits_to_f32(u16_at(b + 208));
        const Bytes8 ql(b + n * 64 + (k % 2) * 32 + l0), qh(b + 128 + n * 32 + l0);
        // A chunk of 8 lies in one half of 16, under one scale.
        const float ds = __fmul_rn(d, small_int_f32((signed char)b[192 + n * 8 + 2 * k + l0 / 16]));
        // Per byte: the low nibble at 4·(k/2), two high bits at 2k above it; the code − 32.
        const unsigned sl = 4 * (k / 2), sh = 2 * k;
        float q[8];
        bytes_f32x4(((ql.lo >> sl) & 0x0f0f0f0fu) | (((qh.lo >> sh) & 0x03030303u) << 4), 32.0f, q);
        bytes_f32x4(((ql.hi >> sl) & 0x0f0f0f0fu) | (((qh.hi >> sh) & 0x03030303u) << 4), 32.0f, q + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(ds, q[e]);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// Q3_K: hmask[32], qs[64], 12 bytes of 16 six-bit scales, d; value = (d·(scale − 32))·(q − sub).
struct Q3_KW {
    static constexpr int BS = 256, TS = 110;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned n = p / 128, j = (p % 128) / 32, l0 = p % 32;
        const unsigned char* sc = b + 96;
        const int is = n * 8 + 2 * j + l0 / 16;  // a chunk of 8 lies in one half of 16
        const int lo = (sc[is % 8] >> (4 * (is / 8))) & 0xf, hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
        const float dl = __fmul_rn(f16_bits_to_f32(u16_at(b + 108)), small_int_f32((lo | (hi << 4)) - 32));
        const Bytes8 qs(b + 32 + n * 32 + l0), hm(b + l0);
        // q − sub with sub = 4 − 4·h is (q | h << 2) − 4: four a word, each byte's two bits with the mask's
        // bit above them, then floats by byte permutes (bytes_f32x4) less 4.
        const unsigned sq = 2 * j, sh = n * 4 + j;
        const auto codes = [sq, sh](u32 q4, u32 h4) {
            return ((q4 >> sq) & 0x03030303u) | (((h4 >> sh) & 0x01010101u) << 2);
        };
        float v[8];
        bytes_f32x4(codes(qs.lo, hm.lo), 4.0f, v);
        bytes_f32x4(codes(qs.hi, hm.hi), 4.0f, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(dl, v[e]);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// The IQ4 formats' 16 values, {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113},
// plus 128 (each then an unsigned byte), four to a word: entry i in byte i % 4 of word i / 4, for byte
// permutes (in registers: no table in memory).
#define IQ4_T0 0x3f2d1801u
#define IQ4_T1 0x766a5d4fu
#define IQ4_T2 0xa6998d81u
#define IQ4_T3 0xf1d9c5b5u

// Four table values at once, for the indices in the low nibbles of x's bytes (high nibbles 0), as floats:
// one byte permute looks each index up among entries 0–7 and another among 8–15, the index's bit 3 picks
// one, and the bytes (value + 128) become floats as bytes_f32x4 makes them: small_int_f32's values of
// the entries, in about nine integer operations for the four instead of a table load and more each.
__device__ __forceinline__ void iq4_values4(u32 x, float* v) {
    const u32 pairs = (x | (x >> 4)) & 0x77777777u;      // byte 0: i0, i1 (3 bits each); byte 2: i2, i3
    const u32 sel = __byte_perm(pairs, 0, 0x0020);       // the four 3-bit selectors, in its low 16 bits
    const u32 lo = __byte_perm(IQ4_T0, IQ4_T1, sel), hi = __byte_perm(IQ4_T2, IQ4_T3, sel);
    const u32 upper = ((x >> 3) & 0x01010101u) * 0xffu;  // 0xff in each byte whose index is 8 or more
    bytes_f32x4((hi & upper) | (lo & ~upper), 128.0f, v);
}

// IQ4_NL: blocks of 32 in 18 bytes, Q4_0's nibble layout; value = d·table[q].
struct IQ4_NLW {
    static constexpr int BS = 32, TS = 18;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const float d = f16_bits_to_f32(u16_at(b));
        const unsigned o = p;
        const Bytes8 q(b + 2 + o % 16);  // Q4_0's nibble layout
        const unsigned shift = o < 16 ? 0 : 4;
        float v[8];
        iq4_values4((q.lo >> shift) & 0x0f0f0f0fu, v);
        iq4_values4((q.hi >> shift) & 0x0f0f0f0fu, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(d, v[e]);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// IQ4_XS: d, scales_h (u16), scales_l[4], then 8 runs of 16 bytes; run ib: d·(scale − 32) times the table.
struct IQ4_XSW {
    static constexpr int BS = 256, TS = 136;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned ib = p / 32, o = p % 32;
        const int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf, hi = (u16_at(b + 2) >> (2 * ib)) & 3;
        const float dl = __fmul_rn(f16_bits_to_f32(u16_at(b)), small_int_f32((lo | (hi << 4)) - 32));
        const Bytes8 q = bytes8_a8(b + 8 + 16 * ib + o % 16);  // blocks of 136 bytes: 8-byte aligned
        const unsigned shift = o < 16 ? 0 : 4;
        float v[8];
        iq4_values4((q.lo >> shift) & 0x0f0f0f0fu, v);
        iq4_values4((q.hi >> shift) & 0x0f0f0f0fu, v + 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(dl, v[e]);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// The lattice formats (the experts' types): groups of 8 (IQ2_XS) or 4 (IQ3_*) magnitudes from a grid
// (IQ2XS_GRID, IQ3XXS_GRID, IQ3S_GRID, prepended from strata_gguf's tables), signs from a 7-bit index with
// even parity (IQ2_XS, IQ3_XXS) or a bit each (IQ3_S). A chunk of 8 is one IQ2 group, two IQ3 groups.
__device__ __forceinline__ unsigned int ksigns(unsigned int i) { return i | ((__popc(i) & 1u) << 7); }

// The grid bytes of 4 elements (one word of a grid entry) times db, each negated where its bit of
// `signs` (bits k .. k + 3) is set, by flipping the product's sign bit: the bytes become floats by one
// byte permute each (bytes_f32x4), and a sign bit is moved to the top and put in by one logic op.
__device__ __forceinline__ void grid4_signed(u32 grid, float db, u32 signs, int k, float* w) {
    float g[4];
    bytes_f32x4(grid, 0.0f, g);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 top = (signs << (31 - (k + j))) & 0x80000000u;
        w[j] = __uint_as_float(__float_as_uint(__fmul_rn(db, g[j])) ^ top);
    }
}

// IQ2_XS: d, qs[32] u16 (9-bit grid index | 7-bit sign index << 9), scales[8] (a nibble per 16);
// value = d·(0.5 + s)·0.25 · grid · sign.
struct IQ2_XSW {
    static constexpr int BS = 256, TS = 74;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned ib = p / 32, l = (p % 32) / 8;
        const int s = (b[66 + ib] >> (4 * (l / 2))) & 0xf;
        const float db = __fmul_rn(__fmul_rn(f16_bits_to_f32(u16_at(b)), __fadd_rn(0.5f, small_int_f32(s))), 0.25f);
        const unsigned int q = u16_at(b + 2 + 2 * (4 * ib + l));
        const unsigned long long grid = IQ2XS_GRID[q & 511];
        const unsigned int signs = ksigns(q >> 9);
        grid4_signed((u32)grid, db, signs, 0, w);
        grid4_signed((u32)(grid >> 32), db, signs, 4, w + 4);
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// IQ3_XXS: d, qs[64] grid indices (4 elements each), per 32 elements a u32 of four 7-bit sign indices and
// the scale in the top 4 bits; value = d·(0.5 + s)·0.5 · grid · sign.
struct IQ3_XXSW {
    static constexpr int BS = 256, TS = 98;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned ib = p / 32, l = (p % 32) / 8;
        const u32 aux = (u32)u16_at(b + 66 + 4 * ib) | ((u32)u16_at(b + 68 + 4 * ib) << 16);
        const float db = __fmul_rn(__fmul_rn(f16_bits_to_f32(u16_at(b)), __fadd_rn(0.5f, small_int_f32(aux >> 28))), 0.5f);
        const unsigned int signs = ksigns((aux >> (7 * l)) & 127);
        const u32 idx = u16_at(b + 2 + 8 * ib + 2 * l);  // the chunk's two grid indices
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            grid4_signed(IQ3XXS_GRID[(idx >> (8 * half)) & 0xff], db, signs, 4 * half, w + 4 * half);
        }
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};

// IQ3_S: d, qs[64] (low 8 bits of 9-bit indices), qh[8] (their top bits, a byte per 32), signs[32] (a bit
// per element), scales[4] (a nibble per 32); value = d·(1 + 2s) · grid · sign.
struct IQ3_SW {
    static constexpr int BS = 256, TS = 110;
    __device__ static void at(const unsigned char* b, unsigned p, float* w) {
        const unsigned ib = p / 32, g0 = (p % 32) / 4;  // the chunk's groups: g0, g0 + 1
        const int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        const float db = __fmul_rn(f16_bits_to_f32(u16_at(b)), small_int_f32(1 + 2 * s));
        const u32 qs = u16_at(b + 2 + 8 * ib + g0), qh = b[66 + ib], signs = b[74 + p / 8];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int g = g0 + half;
            const unsigned int grid = IQ3S_GRID[((qs >> (8 * half)) & 0xff) | (((qh >> g) & 1) << 8)];
            grid4_signed(grid, db, signs, 4 * half, w + 4 * half);
        }
    }
    __device__ static void chunk(const unsigned char* row, int c, float* w) {
        const unsigned e = 8u * (unsigned)c;
        at(row + (size_t)(e / BS) * TS, e % BS, w);
    }
};
