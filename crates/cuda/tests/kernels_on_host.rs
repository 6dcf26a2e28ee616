//! The kernels' arithmetic on the host, without a GPU: common.cuh (the contract's functions) and
//! dequant.cuh (every weight type's chunk decoder) are compiled by the host's C++ compiler with the CUDA
//! intrinsics mapped to their IEEE host twins (`__fmul_rn` is a rounded product, `__fmaf_rn` is `fmaf`,
//! contraction off), then checked bit for bit against strata_gguf's codecs and strata_model's ops. CI
//! always runs it; elsewhere it is skipped, with a message, when there is no C++ compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_cuda::ops::sources::{grid_tables, COMMON, DEQUANT, QDOT};
use strata_gguf::{quant, SplitMix64};
use strata_model::ops::{act, qdot};

/// The intrinsics the two files use, as host functions. Those that need a warp or a block
/// (`__shfl_xor_sync`, `__syncwarp`, `__syncthreads`, the thread indices) are never called here and only
/// let the file compile.
const SHIM: &str = r#"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <string>
#include <vector>
#define __device__
#define __forceinline__ inline
#define __constant__
#define __restrict__
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
inline int2 make_int2(int a, int b) { return int2{a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __float2int_rn(float v) { return (int)nearbyintf(v); }  // round half to even, the default mode
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
// The plain byte selection (selector nibbles 0..7; the sign-replicating mode is not used by the kernels).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31));
}
inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
inline int __shfl_xor_sync(unsigned, int v, int) { return v; }
inline void __syncwarp(unsigned = 0xffffffffu) {}
#define __shared__ static
inline void __syncthreads() {}
inline void __threadfence() {}
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned o = *p; *p += v; return o; }
struct HostDim3 { unsigned x, y, z; };
static const HostDim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim{1, 1, 1};
"#;

/// `main`: `decode TYPE COLS IN OUT` writes every chunk of every row of IN (rows of COLS weights) as f32;
/// `math IN OUT` writes s_exp, s_ln, s_ln1p, s_sigmoid, s_silu, s_softplus, s_rsqrt of each f32 of IN.
const MAIN: &str = r#"
static std::vector<unsigned char> slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    std::vector<unsigned char> v;
    if (!f) return v;
    int c;
    while ((c = fgetc(f)) != EOF) v.push_back((unsigned char)c);
    fclose(f);
    return v;
}

template <typename W> static int decode(const std::vector<unsigned char>& in, int cols, FILE* out) {
    const size_t rb = (size_t)(cols / W::BS) * W::TS;
    for (size_t r = 0; r * rb < in.size(); ++r) {
        for (int c = 0; c < cols / 8; ++c) {
            float w[8];
            W::chunk(in.data() + r * rb, c, w);
            fwrite(w, 4, 8, out);
        }
    }
    return 0;
}

// A piece's value as a tensor-core product makes it (SPLIT): words m and m + 4 of the weights by Q::word2
// (checked against Q::load's), the halves' integer sums against the input's words, then Q::finish of
// Q::scales; else Q::value. Returns false where word2 and load disagree.
template <typename Q, bool SPLIT>
static bool qdot_piece(const unsigned char* blk, int p, const int* a, int lo, int hi, float d, float* v) {
    if (!SPLIT) {
        *v = Q::value(blk, p, a, lo, hi, d);
        return true;
    }
    const QdW W = Q::load(blk, p);
    int s0 = 0, s1 = 0;
    for (int m = 0; m < 4; ++m) {
        const int2 w2 = Q::word2(blk, p, m);
        if (w2.x != W.w[m] || w2.y != W.w[m + 4]) return false;
        s0 = __dp4a(w2.x, a[m], s0);
        s1 = __dp4a(w2.y, a[m + 4], s1);
    }
    *v = Q::finish(Q::scales(blk, p), s0, s1, lo, hi, d);
    return true;
}

// A row's § qdot sum on the host: the input quantized piece by piece (qd_scale, qd_code, the codes laid
// out by Q::pos, the halves' sums), each piece's value by qdot_piece, lane j mod 32's total in piece
// order, the butterfly; with SPLIT, the lanes' totals taken in the tree's order by qd_tree_push instead,
// in runs as the `_g_mma` kernels take them (QD_WARPS = 8 warps, 4 leaves each), and checked against all
// 32 leaves in one run by qd_tree_push_at.
template <typename Q, bool SPLIT = false>
static int qdot_rows(const std::vector<unsigned char>& w, size_t wsize, const std::vector<unsigned char>& xb, int cols, FILE* out) {
    const int P = cols / QBLOCK;
    std::vector<int> codes(8 * P), lo(P), hi(P);
    std::vector<float> d(P), x(cols);
    memcpy(x.data(), xb.data(), 4 * (size_t)cols);
    for (int j = 0; j < P; ++j) {
        float amax = 0.0f;
        for (int i = 0; i < QBLOCK; ++i) amax = fmaxf(amax, fabsf(x[QBLOCK * j + i]));
        const float id = qd_scale(amax, &d[j]);
        unsigned char* cb = reinterpret_cast<unsigned char*>(&codes[8 * j]);
        lo[j] = hi[j] = 0;
        for (int i = 0; i < QBLOCK; ++i) {
            const int c = qd_code(__fmul_rn(x[QBLOCK * j + i], id));
            cb[Q::pos(i)] = (unsigned char)(signed char)c;
            (i < 16 ? lo[j] : hi[j]) += c;
        }
    }
    const size_t rb = (size_t)(cols / Q::BS) * Q::TS;
    for (size_t r = 0; (r + 1) * rb <= wsize; ++r) {
        float lane[WARP] = {};
        for (int j = 0; j < P; ++j) {
            const unsigned char* blk = w.data() + r * rb + (size_t)(QBLOCK * j / Q::BS) * Q::TS;
            float v;
            if (!qdot_piece<Q, SPLIT>(blk, QBLOCK * j % Q::BS / QBLOCK, &codes[8 * j], lo[j], hi[j], d[j], &v)) return 3;
            lane[j % WARP] = __fadd_rn(lane[j % WARP], v);
        }
        if (SPLIT) {  // as qdot.cu's _g_mma adds them: 8 warps a run of 4 leaves each, then the 8 runs
            float part[8], total = 0.0f;
            for (int v = 0; v < 8; ++v) {
                float lv[5];
                for (int k = 0; k < 4; ++k) part[v] = qd_tree_push(lv, k, lane[qd_tree_lane(4 * v + k)]);
            }
            float lv[5];
            for (int v = 0; v < 8; ++v) total = qd_tree_push(lv, v, part[v]);
            // And all 32 leaves in one run by qd_tree_push_at (the grouped gathers', the long HC reads'):
            // the same bits.
            float whole = 0.0f, la[5];
            for (int k = 0; k < WARP; ++k) whole = qd_tree_push_at(la, k, lane[qd_tree_lane(k)]);
            if (memcmp(&whole, &total, 4) != 0 && !(whole != whole && total != total)) return 5;
            fwrite(&total, 4, 1, out);
            continue;
        }
        for (int off = 16; off > 0; off /= 2) {
            float next[WARP];
            for (int l = 0; l < WARP; ++l) next[l] = __fadd_rn(lane[l], lane[l ^ off]);
            memcpy(lane, next, sizeof lane);
        }
        fwrite(lane, 4, 1, out);
    }
    return 0;
}

int main(int argc, char** argv) {
    const std::string mode = argv[1];
    if (mode == "qdot" || mode == "qdot_split") {  // qdot TYPE COLS W X OUT
        const std::string ty = argv[2];
        const int cols = atoi(argv[3]);
        std::vector<unsigned char> w = slurp(argv[4]), x = slurp(argv[5]);
        const size_t wsize = w.size();
        w.resize(wsize + 16);  // the device matrix's padding: a piece's last aligned load may reach into it
        FILE* out = fopen(argv[6], "wb");
        const bool split = mode == "qdot_split";
        int rc = 2;
        if (ty == "Q8_0") rc = split ? qdot_rows<Q8_0Q, true>(w, wsize, x, cols, out) : qdot_rows<Q8_0Q>(w, wsize, x, cols, out);
        if (ty == "Q4_0") rc = split ? qdot_rows<Q4_0Q, true>(w, wsize, x, cols, out) : qdot_rows<Q4_0Q>(w, wsize, x, cols, out);
        if (ty == "Q2_0") rc = split ? qdot_rows<Q2_0Q, true>(w, wsize, x, cols, out) : qdot_rows<Q2_0Q>(w, wsize, x, cols, out);
        if (ty == "IQ4_NL") rc = split ? qdot_rows<IQ4_NLQ, true>(w, wsize, x, cols, out) : qdot_rows<IQ4_NLQ>(w, wsize, x, cols, out);
        if (ty == "Q4_K") rc = split ? qdot_rows<Q4_KQ, true>(w, wsize, x, cols, out) : qdot_rows<Q4_KQ>(w, wsize, x, cols, out);
        if (ty == "Q6_K") rc = split ? qdot_rows<Q6_KQ, true>(w, wsize, x, cols, out) : qdot_rows<Q6_KQ>(w, wsize, x, cols, out);
        fclose(out);
        return rc;
    }
    if (mode == "conv") {  // conv T C TAIL TAPS U OUT: every channel through ConvFrames<4>'s run and run_vals
        const int T = atoi(argv[2]), C = atoi(argv[3]);
        const std::vector<unsigned char> tb = slurp(argv[4]), wb = slurp(argv[5]), ub = slurp(argv[6]);
        std::vector<float> tail(3 * C), w(4 * C), u(T * C), out(T * C), out2(T * C);
        memcpy(tail.data(), tb.data(), 4 * tail.size());
        memcpy(w.data(), wb.data(), 4 * w.size());
        memcpy(u.data(), ub.data(), 4 * u.size());
        std::vector<float> tail2 = tail;
        for (int ch = 0; ch < C; ++ch) {
            ConvFrames<4> f, g;
            f.load(tail.data(), w.data(), C, 4, ch);
            f.run(u.data(), tail.data(), out.data(), C, 4, T, ch);
            float vals[8] = {};
            for (int t = 0; t < T; ++t) vals[t] = u[(size_t)t * C + ch];
            g.load(tail2.data(), w.data(), C, 4, ch);
            g.run_vals(vals, tail2.data(), out2.data(), C, 4, T, ch);
        }
        FILE* o = fopen(argv[7], "wb");
        for (const std::vector<float>* v : {&out, &tail, &out2, &tail2}) fwrite(v->data(), 4, v->size(), o);
        fclose(o);
        return 0;
    }
    if (mode == "math") {
        std::vector<unsigned char> in = slurp(argv[2]);
        FILE* out = fopen(argv[3], "wb");
        for (size_t i = 0; i + 4 <= in.size(); i += 4) {
            float x;
            memcpy(&x, in.data() + i, 4);
            const float y[7] = {s_exp(x), s_ln(x), s_ln1p(x), s_sigmoid(x), s_silu(x), s_softplus(x), s_rsqrt(x)};
            fwrite(y, 4, 7, out);
        }
        fclose(out);
        return 0;
    }
    const std::string ty = argv[2];
    const int cols = atoi(argv[3]);
    std::vector<unsigned char> in = slurp(argv[4]);
    FILE* out = fopen(argv[5], "wb");
    int rc = 2;
#define TYPE(NAME, W) if (ty == NAME) rc = decode<W>(in, cols, out);
    TYPE("F32", F32W) TYPE("F16", F16W) TYPE("BF16", BF16W) TYPE("Q8_0", Q8_0W) TYPE("Q4_0", Q4_0W)
    TYPE("Q5_0", Q5_0W) TYPE("Q2_0", Q2_0W) TYPE("Q4_K", Q4_KW) TYPE("Q5_K", Q5_KW) TYPE("Q6_K", Q6_KW)
    TYPE("Q3_K", Q3_KW) TYPE("IQ4_NL", IQ4_NLW) TYPE("IQ4_XS", IQ4_XSW) TYPE("IQ2_XS", IQ2_XSW)
    TYPE("IQ3_XXS", IQ3_XXSW) TYPE("IQ3_S", IQ3_SW)
    fclose(out);
    return rc;
}
"#;

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// The host program, built once per test run into `dir`; `None` when there is no C++ compiler.
fn build(dir: &Path) -> Option<PathBuf> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if Command::new(&cxx).arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        assert!(!ci(), "CI must have a C++ compiler ({cxx}) for the host build of the kernels");
        eprintln!("SKIPPED: no C++ compiler ({cxx}; set CXX)");
        return None;
    }
    let src = dir.join("kernels_on_host.cpp");
    let text = format!("{SHIM}\n{COMMON}\n{}\n{DEQUANT}\n{QDOT}\n{MAIN}", grid_tables());
    std::fs::write(&src, text).unwrap();
    let exe = dir.join("kernels_on_host");
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-Wno-unknown-pragmas", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "the host build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A folder of this test's own (the tests run in parallel, each building its own program).
fn scratch(test: &str) -> strata_scratch::Scratch {
    strata_scratch::Scratch::new(&format!("host-kernels-{test}"))
}

#[test]
fn every_chunk_decoder_gives_the_codecs_bits() {
    let dir = scratch("decoders");
    let Some(exe) = build(&dir) else { return };
    let mut rng = SplitMix64::new(0xdec0de);
    let (rows, cols) = (48, 768);
    for ty in strata_cuda::ops::layout::TYPES {
        let blocks = rows * cols / ty.block_size();
        let bytes = quant::random_blocks(ty, blocks, &mut rng);
        let (input, output) = (dir.join(format!("{ty}.in")), dir.join(format!("{ty}.out")));
        std::fs::write(&input, &bytes).unwrap();
        let mut run = Command::new(&exe);
        run.args(["decode", &ty.to_string(), &cols.to_string()]).arg(&input).arg(&output);
        assert!(run.status().unwrap().success(), "{ty}: the host program failed");
        let got = floats(&std::fs::read(&output).unwrap());
        let mut want = vec![0f32; rows * cols];
        quant::dequantize(ty, &bytes, &mut want).unwrap();
        assert_eq!(got.len(), want.len(), "{ty}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{ty}: element {i} (row {}, col {}): {g} vs {w}", i / cols, i % cols);
        }
    }
}

#[test]
fn the_contract_functions_give_the_cpu_ops_bits() {
    let dir = scratch("math");
    let Some(exe) = build(&dir) else { return };
    // Every edge the functions branch on, a sweep of each range they serve, and random bit patterns.
    let mut xs: Vec<f32> = vec![0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE];
    xs.extend([88.7, 88.8, 88.9, -103.9, -104.0, -104.1, 20.0, 20.001, 1e-30, -1e-30, f32::MAX, -f32::MAX]);
    xs.extend((-4000..=4000).map(|i| i as f32 * 0.03125));
    let mut rng = SplitMix64::new(7);
    xs.extend((0..20000).map(|_| f32::from_bits(rng.next_u64() as u32)));
    let (input, output) = (dir.join("math.in"), dir.join("math.out"));
    std::fs::write(&input, xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    assert!(Command::new(&exe).arg("math").arg(&input).arg(&output).status().unwrap().success());
    let got = floats(&std::fs::read(&output).unwrap());
    let names = ["exp", "ln", "ln1p", "sigmoid", "silu", "softplus", "rsqrt"];
    let ops: [fn(f32) -> f32; 7] = [act::exp, act::ln, act::ln1p, act::sigmoid, act::silu, act::softplus, act::rsqrt];
    for (i, &x) in xs.iter().enumerate() {
        for (k, op) in ops.iter().enumerate() {
            let (g, w) = (got[7 * i + k], op(x));
            // A NaN's sign and payload follow each machine's propagation rules (a GPU returns its one
            // canonical NaN), so a NaN need only be a NaN.
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(same, "{}({x:e} = {:#x}): host kernel {g:e}, CPU {w:e}", names[k], x.to_bits());
        }
    }
}

#[test]
fn every_qdot_row_gives_the_cpu_ops_bits() {
    let dir = scratch("qdot");
    let Some(exe) = build(&dir) else { return };
    let mut rng = SplitMix64::new(0x9d07);
    let cols = 2560;
    // The input: roughly normal, with an all-zero piece, a NaN, a huge value's piece, a negative amax,
    // values on rounding boundaries (amax 127: each code is its own rounding) and a subnormal piece.
    let mut x: Vec<f32> = (0..cols).map(|_| (0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0).collect();
    x[32..64].fill(0.0);
    x[70] = f32::NAN;
    x[100] = 1e6;
    x[130] = -9.0;
    for (i, v) in x[160..192].iter_mut().enumerate() {
        *v = i as f32 - 16.5 + if i == 0 { -110.0 } else { 0.0 };
    }
    x[192..224].fill(1e-40);
    let want_q = qdot::quantize_input(&x);
    for ty in strata_gguf::GgmlType::ALL.into_iter().filter(|&t| qdot::uses_qdot(t)) {
        let rows = 24;
        let bytes = quant::random_blocks(ty, rows * cols / ty.block_size(), &mut rng);
        let (w_in, x_in, out) =
            (dir.join(format!("{ty}.w")), dir.join(format!("{ty}.x")), dir.join(format!("{ty}.out")));
        std::fs::write(&w_in, &bytes).unwrap();
        std::fs::write(&x_in, x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        // The pieces as the dp4a kernels make them, and as a tensor-core product does (qdot.cuh's word2,
        // scales and finish, the lanes' totals in qd_tree_push's order).
        for mode in ["qdot", "qdot_split"] {
            let status =
                Command::new(&exe).args([mode, &ty.to_string(), &cols.to_string()]).args([&w_in, &x_in, &out]).status();
            assert!(status.unwrap().success(), "{ty} {mode}: the host program failed (3: word2 is not load's)");
            let got = floats(&std::fs::read(&out).unwrap());
            assert_eq!(got.len(), rows, "{ty} {mode}");
            let rb = cols / ty.block_size() * ty.type_size();
            for (r, g) in got.iter().enumerate() {
                let w = qdot::qdot_row(ty, &bytes[r * rb..(r + 1) * rb], &want_q);
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{ty} {mode} row {r}: host kernel {g:e}, CPU {w:e}"
                );
            }
            // Numbers, so that the comparison means something.
            assert!(got.iter().all(|v| v.is_finite()), "{ty} {mode}: {got:?}");
        }
    }
}

#[test]
fn the_conv_frames_give_the_cpu_conv_bits() {
    use strata_model::layers::gdn::causal_conv;
    let dir = scratch("conv");
    let Some(exe) = build(&dir) else { return };
    let mut rng = SplitMix64::new(0xc0);
    let c = 64;
    for t in 1..=8 {
        let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| 2.0 * rng.uniform() - 1.0).collect() };
        let (tail, w, u) = (draw(3 * c), draw(4 * c), draw(t * c));
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let paths = ["tail", "taps", "u", "out"].map(|n| dir.join(format!("{n}-{t}")));
        for (p, v) in paths.iter().zip([&tail, &w, &u]) {
            std::fs::write(p, bytes(v)).unwrap();
        }
        let mut run = Command::new(&exe);
        run.args(["conv", &t.to_string(), &c.to_string()]).args(&paths);
        assert!(run.status().unwrap().success(), "T = {t}: the host program failed");
        let got = floats(&std::fs::read(&paths[3]).unwrap());
        // The CPU: each token through causal_conv, then silu.
        let (mut cpu_tail, mut want) = (tail.clone(), Vec::new());
        for k in 0..t {
            want.extend(causal_conv(&mut cpu_tail, &u[k * c..(k + 1) * c], &w).into_iter().map(act::silu));
        }
        let n = t * c;
        for (what, at) in [("run", 0), ("run_vals", n + 3 * c)] {
            let (out, kept) = (&got[at..at + n], &got[at + n..at + n + 3 * c]);
            assert!(out.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "T = {t}: {what}'s outputs");
            assert!(kept.iter().zip(&cpu_tail).all(|(a, b)| a.to_bits() == b.to_bits()), "T = {t}: {what}'s tail");
        }
    }
}
