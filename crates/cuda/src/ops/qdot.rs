//! Host side of kernels/qdot.cu: the products of Q8_0, Q4_0, Q2_0, IQ4_NL, Q4_K and Q6_K weights, which take their
//! input quantized to int8 (docs/ARITHMETIC.md § qdot; the twin of strata_model::ops::qdot). matvec.rs
//! sends those types here whatever the plan's layout: one layout serves them, so the plan does not time
//! them.

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;

use crate::ops::matrix::{Gather, MatrixGpu, MAX_T};
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};

/// Warps a block of the dense and gather kernels, a row each (QD_WARPS in qdot.cu).
const WARPS: u32 = 8;
/// Output rows a block of the fused down product and combination (at most QD_COMBINE_ROWS = 16): each
/// block quantizes its token's k inputs, so more rows a block spread that work; 8 keeps 320 blocks a token
/// at the full model's 2,560 rows.
const COMBINE_ROWS: usize = 8;
/// Pieces a block of 256 threads of the `_quantize` kernel (and the `_router` kernel's quantizing blocks)
/// takes: QD_ROUNDS (4) a group of 8 lanes.
const QUANTIZE_BLOCK_PIECES: usize = 128;
/// Shared memory a piece of 32 inputs takes: 32 codes, the scale and the codes' sums over its halves.
const PIECE_BYTES: usize = 44;

/// Whether each product's input is quantized once, by a kernel of its own before it (the `_g` kernels read
/// those pieces from global memory): the default, +6.8% at depth 1,024 on the H200
/// (bench/results/2026-12-01-h200-speed-12/). `STRATA_QDOT_ONCE=0`: every block of the product quantizes
/// the inputs it needs into its shared memory. The same codes, sums and bits either way.
pub fn once(gpu: &Gpu) -> bool {
    gpu.settings.qdot_once
}

/// Whether a one-token product with inputs quantized once and a row a warp copies its block's rows into
/// shared memory before it waits for the kernel before (the `_st` kernels): the default, +0.8% at depth
/// 1,024 on the H200, every round ahead (bench/results/2026-12-02-h200-speed-15/).
/// `STRATA_QDOT_STAGE=0`: the plain `_g_one` kernels. The same bits either way.
fn staged(gpu: &Gpu) -> bool {
    gpu.settings.qdot_stage
}

/// Whether a window's dense products over inputs quantized once make their pieces' integer sums by int8
/// tensor-core MMA (qdot.cu's `_g_mma`: the same values, docs/ARITHMETIC.md § qdot): `STRATA_QDOT_MMA=1`
/// on sm_75 or later. Off by default: exact on the H200, but slower than the `__dp4a` rows for windows of
/// up to 8 tokens (bench/results/2026-12-04-h200-spec/spec_bench-0f5b07c-mma-ab.log).
fn mma(gpu: &Gpu, t: usize) -> bool {
    gpu.settings.qdot_mma && t > 1 && gpu.arch >= (7, 5)
}

/// The staged kernels' shared memory for a block of WARPS rows of `cols` values of `ty`: the span from the
/// 16-byte boundary below it, rounded up to 16 bytes, and 16 more (qdot_rows_staged).
fn stage_bytes(ty: GgmlType, cols: usize) -> usize {
    let row_bytes = cols / ty.block_size() * ty.type_size();
    (15 + WARPS as usize * row_bytes).div_ceil(16) * 16 + 16
}

/// The staged kernels' shared memory for a product over `w` when staging is on and the card
/// has it; None otherwise (the plain kernels).
fn stage(gpu: &Gpu, w: &MatrixGpu) -> Option<usize> {
    let bytes = stage_bytes(w.ty, w.cols);
    (staged(gpu) && bytes <= gpu.smem_optin as usize).then_some(bytes)
}

/// Shared memory for `vectors` inputs of `cols` values quantized by the block itself (none for the `_g`
/// kernels, whose inputs were quantized before them).
fn inputs_bytes(vectors: usize, cols: usize) -> usize {
    vectors * cols / 32 * PIECE_BYTES
}

/// The shared memory a window's product over inputs quantized once is given for copying them in
/// (qdot.cu's qd_window_shared; `STRATA_QDOT_WINDOW_SMEM=1`): none for one token or without the
/// setting, where the kernel reads them from global memory. The same bits either way.
fn window_smem(gpu: &Gpu, t: usize, cols: usize) -> usize {
    if gpu.settings.qdot_window_smem && t > 1 {
        inputs_bytes(t, cols)
    } else {
        0
    }
}

/// Whether the router's product over `router` rows and the quantization of the experts' input for their
/// `experts` products go in one launch ([`router_quantize`]): F32 or BF16 router rows, § qdot experts whose
/// inputs are quantized once. The default since speed-18, ahead of the separate `_quantize` launch in three
/// calls' interleaved rounds at depth 1,024 (+0.75%, +1.5%, +1.8%); `STRATA_ROUTER_QUANTIZE=0` turns it
/// off. The same bits either way.
pub fn can_router_quantize(gpu: &Gpu, router: GgmlType, experts: GgmlType) -> bool {
    gpu.settings.router_quantize && once(gpu) && uses(experts) && matches!(router, GgmlType::F32 | GgmlType::BF16)
}

/// The router's logits (`logits[t·E + e]`) and the t inputs at `x` quantized for `ty`'s products, in one
/// launch (qdot.cu's `_router`): the quantized inputs, for [`gather_glu`].
pub fn router_quantize(
    gpu: &Gpu,
    router: &MatrixGpu,
    x: &Buf<f32>,
    logits: &Buf<f32>,
    t: usize,
    ty: GgmlType,
) -> Result<Buf<i32>, CudaError> {
    let n = router.cols;
    if t == 0 || t > MAX_T {
        return Err(CudaError::Shape(format!("the router takes 1 to {MAX_T} tokens a launch, not {t}")));
    }
    let kind = match router.ty {
        GgmlType::F32 => 1,
        GgmlType::BF16 => 2,
        other => return Err(CudaError::Shape(format!("a router of {other} rows is not fused with the quantization"))),
    };
    let q = Buf::<i32>::uninit(gpu, quantized_words(t, n))?;
    // The quantizing blocks first, then a warp a router row.
    let qb = (t * n / 32).div_ceil(QUANTIZE_BLOCK_PIECES);
    let grid = (qb + router.rows.div_ceil(WARPS as usize)) as u32;
    let name = name(ty, "_router");
    let (f, cfg) = prepare(gpu, name, (grid, 1, 1), 32 * WARPS, 0, n)?;
    let i = |v: usize| Arg::I32(v as i32);
    let args = [
        Arg::Ptr(router.ptr(gpu)),
        i(kind),
        Arg::Ptr(x.ptr(gpu)),
        Arg::Ptr(logits.ptr(gpu)),
        i(router.rows),
        i(n),
        i(t),
        i(qb),
        Arg::Ptr(q.ptr(gpu)),
    ];
    launch(gpu, &f, name, cfg, &args)?;
    Ok(q)
}

/// Where a product's input vectors lie: vector v at `x + (v / kd)·tok + (v % kd)·slot` (floats).
#[derive(Clone, Copy)]
struct Src {
    x: u64,
    tok: usize,
    slot: usize,
    kd: usize,
}

/// The `n` input vectors of `cols` values at `src` quantized once (qdot.cu's `_quantize`, the layout of
/// `ty`'s products): a buffer of 44 bytes a piece for the `_g` kernels.
fn quantize(gpu: &Gpu, ty: GgmlType, src: Src, n: usize, cols: usize) -> Result<Buf<i32>, CudaError> {
    let pieces = n * cols / 32;
    let q = Buf::<i32>::uninit(gpu, quantized_words(n, cols))?;
    let name = name(ty, "_quantize");
    let f = gpu.function(&crate::ops::sources::QDOT_FILE, name)?;
    let blocks = pieces.div_ceil(QUANTIZE_BLOCK_PIECES) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS, 1, 1), shared_mem_bytes: 0 };
    let i = |v: usize| Arg::I32(v as i32);
    let args = [Arg::Ptr(src.x), i(src.tok), i(src.slot), i(src.kd), i(n), i(cols / 32), Arg::Ptr(q.ptr(gpu))];
    launch(gpu, &f, name, cfg, &args)?;
    Ok(q)
}

/// The 32-bit words of `n` quantized input vectors of `cols` values (44 bytes a piece of 32).
pub fn quantized_words(n: usize, cols: usize) -> usize {
    n * cols / 32 * PIECE_BYTES / 4
}

/// The t input rows of a dense product over `w` at `x` quantized once ([`quantize`]).
fn quantize_rows(gpu: &Gpu, w: &MatrixGpu, x: u64, t: usize) -> Result<Buf<i32>, CudaError> {
    quantize(gpu, w.ty, Src { x, tok: w.cols, slot: 0, kd: 1 }, t, w.cols)
}

/// Whether products over `tys` that read one input take it quantized once, by one `_quantize` launch
/// before them all ([`quantize_shared`]), instead of a launch each: the attention's q, k and v products
/// (on by default; `STRATA_QKV_ONCE=0` gives each product its own launch). Every type must take the codes
/// in element order; each product's own launch would have made the same pieces, so the same bits.
pub fn can_share_input(gpu: &Gpu, tys: &[GgmlType]) -> bool {
    gpu.settings.qkv_once && tys.iter().all(|&ty| takes_element_order(gpu, ty))
}

/// The t rows of `w.cols` values at `x` quantized once in element order, for [`dense_quantized`] over `w`
/// and over any other matrix of that width whose type [`takes_element_order`].
pub fn quantize_shared(gpu: &Gpu, w: &MatrixGpu, x: &Buf<f32>, t: usize) -> Result<Buf<i32>, CudaError> {
    if !takes_element_order(gpu, w.ty) {
        return Err(CudaError::Shape(format!("{} inputs are not quantized in element order", w.ty)));
    }
    quantize_rows(gpu, w, x.ptr(gpu), t)
}

/// Whether products over `ty` take the § qdot kernels.
pub fn uses(ty: GgmlType) -> bool {
    strata_model::ops::qdot::uses_qdot(ty)
}

fn base(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q8_0 => "qdot_q8_0",
        GgmlType::Q4_0 => "qdot_q4_0",
        GgmlType::Q2_0 => "qdot_q2_0",
        GgmlType::IQ4_NL => "qdot_iq4_nl",
        GgmlType::Q4_K => "qdot_q4_k",
        GgmlType::Q6_K => "qdot_q6_k",
        _ => unreachable!("{ty} is not a qdot type"),
    }
}

/// A kernel's name (`device::kernel_name`).
fn name(ty: GgmlType, kind: &'static str) -> &'static str {
    crate::runtime::device::kernel_name([base(ty), kind, ""])
}

/// The name of `w`'s product kernel of `kind`: its type's, or for Q2_0 in the pair layout (ops/matrix.rs
/// `pair_q2_0_blocks`) `qdot_q2_0p`'s. Its input is quantized as Q2_0's (the same codes order).
fn name_of(w: &MatrixGpu, kind: &'static str) -> &'static str {
    match w.pairs {
        true => crate::runtime::device::kernel_name(["qdot_q2_0p", kind, ""]),
        false => name(w.ty, kind),
    }
}

/// The kernel and its launch shape with `smem` bytes of shared memory (inputs quantized by the block, or
/// staged rows), allowed past the default 48 KB where the card has it.
fn prepare(
    gpu: &Gpu,
    name: &'static str,
    grid: (u32, u32, u32),
    threads: u32,
    smem: usize,
    cols: usize,
) -> Result<(cudarc::driver::CudaFunction, LaunchConfig), CudaError> {
    if !cols.is_multiple_of(32) {
        return Err(CudaError::Shape(format!("{name}: rows of {cols} values are not whole pieces of 32")));
    }
    if smem > gpu.smem_optin as usize {
        return Err(CudaError::Shape(format!(
            "{name}: rows of {cols} values need {smem} bytes of shared memory; the card has {}",
            gpu.smem_optin
        )));
    }
    let f = gpu.function(&crate::ops::sources::QDOT_FILE, name)?;
    if smem > 48 << 10 {
        use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
        f.set_attribute(MAX_SMEM, smem as i32).check("allowing a qdot kernel its shared memory")?;
    }
    Ok((f, LaunchConfig { grid_dim: grid, block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 }))
}

/// The dense window kernel for `t` tokens over inputs quantized once: the one compiled for T ≤ 2 or
/// T ≤ 4 with `STRATA_QDOT_NARROW=1`, else the T ≤ 8 one. The same sums in the same order.
fn window_kind(gpu: &Gpu, t: usize) -> &'static str {
    match t {
        _ if !gpu.settings.qdot_narrow => "_g",
        0..=2 => "_g_w2",
        3..=4 => "_g_w4",
        _ => "_g",
    }
}

/// The shared-input window kernel for `t` tokens over `rows` rows (the default; `STRATA_QDOT_SHARE=0`
/// turns it off; qdot.cu's qdot_rows_share): its name's suffix and rows a warp, 4 or 2 where the product
/// has rows for that many with two blocks a multiprocessor, for windows of 2..8 tokens; None otherwise.
fn share(gpu: &Gpu, rows: usize, t: usize, conv: bool) -> Option<(&'static str, usize)> {
    share_kind(gpu.settings.qdot_share, rows, t, conv, gpu.sm_count as usize)
}

/// [`share`] on a card of `sms` multiprocessors, the setting `on` or off.
fn share_kind(on: bool, rows: usize, t: usize, conv: bool, sms: usize) -> Option<(&'static str, usize)> {
    if !on || !(2..=MAX_T).contains(&t) {
        return None;
    }
    let fit = rows / (WARPS as usize * 2 * sms.max(1));
    if fit < 2 {
        return None;
    }
    // Four rows a warp where they still fill the card, for up to 4 tokens (8 tokens' sums hold only 2).
    let r = if fit >= 4 && t <= 4 { 4 } else { 2 };
    let names = match (t, r) {
        (..=2, 2) => ["_g_s2r2", "_g_s2r2_conv"],
        (..=2, _) => ["_g_s2r4", "_g_s2r4_conv"],
        (..=4, 2) => ["_g_s4r2", "_g_s4r2_conv"],
        (..=4, _) => ["_g_s4r4", "_g_s4r4_conv"],
        _ => ["_g_s8r2", "_g_s8r2_conv"],
    };
    Some((names[conv as usize], r))
}

/// Rows a warp of the dense kernel takes: one, unless the product has rows for more than 32 blocks a
/// multiprocessor, then up to 8 (each block quantizes the input, so fewer blocks do that less often).
fn rows_per_warp(rows: usize, sms: usize) -> usize {
    (rows / (WARPS as usize * 32 * sms.max(1))).clamp(1, 8)
}

/// `y[t·rows + r] = W[r]·x[t·cols ..]` for t < T, and the same for a second matrix of the same type and
/// shape into its own output when given (blockIdx.z picks).
pub fn dense(
    gpu: &Gpu,
    w: &MatrixGpu,
    x: u64,
    (y, second): (u64, Option<(&MatrixGpu, u64)>),
    t: usize,
) -> Result<(), CudaError> {
    if once(gpu) {
        let q = quantize_rows(gpu, w, x, t)?;
        return dense_launch(gpu, w, (q.ptr(gpu), true), (y, second), t);
    }
    dense_launch(gpu, w, (x, false), (y, second), t)
}

/// [`dense`] over inputs already quantized for `w`'s type (`xq`: t vectors of `w.cols` values, made by
/// the kernel that wrote them: gdn.cu's `_nq` delta kernels; attn.rs's input shared by q, k and v).
pub fn dense_quantized(
    gpu: &Gpu,
    w: &MatrixGpu,
    xq: &Buf<i32>,
    (y, second): (u64, Option<(&MatrixGpu, u64)>),
    t: usize,
) -> Result<(), CudaError> {
    check_quantized(xq, t, w.cols)?;
    if second.is_some_and(|(b, _)| !w.same_shape(b)) {
        return Err(CudaError::Shape("two products in one launch of different types or shapes".into()));
    }
    dense_launch(gpu, w, (xq.ptr(gpu), true), (y, second), t)
}

/// The dense kernel over `x`: floats, or (`g`) pieces quantized for the `_g` kernels.
fn dense_launch(
    gpu: &Gpu,
    w: &MatrixGpu,
    (x, g): (u64, bool),
    (y, second): (u64, Option<(&MatrixGpu, u64)>),
    t: usize,
) -> Result<(), CudaError> {
    let z = if second.is_some() { 2 } else { 1 };
    let rpw = rows_per_warp(w.rows, gpu.sm_count as usize);
    let blocks = w.rows.div_ceil(WARPS as usize * rpw) as u32;
    let (w2, y2) = second.map_or((w.ptr(gpu), y), |(b, y2)| (b.ptr(gpu), y2));
    let i = |v: usize| Arg::I32(v as i32);
    if g && mma(gpu, t) {
        // A block a tile of 8 rows.
        let name = name_of(w, "_g_mma");
        let blocks = w.rows.div_ceil(8) as u32;
        let (f, cfg) = prepare(gpu, name, (blocks, 1, z), 32 * WARPS, 0, w.cols)?;
        let args =
            [Arg::Ptr(w.ptr(gpu)), Arg::Ptr(x), Arg::Ptr(y), i(w.rows), i(w.cols), i(t), Arg::Ptr(w2), Arg::Ptr(y2)];
        return launch(gpu, &f, name, cfg, &args);
    }
    if let Some((kind, r)) = share(gpu, w.rows, t, false).filter(|_| g) {
        let name = name_of(w, kind);
        let blocks = w.rows.div_ceil(WARPS as usize * r) as u32;
        let (f, cfg) = prepare(gpu, name, (blocks, 1, z), 32 * WARPS, 0, w.cols)?;
        let args =
            [Arg::Ptr(w.ptr(gpu)), Arg::Ptr(x), Arg::Ptr(y), i(w.rows), i(w.cols), i(t), Arg::Ptr(w2), Arg::Ptr(y2)];
        return launch(gpu, &f, name, cfg, &args);
    }
    if let Some(smem) = stage(gpu, w).filter(|_| g && t == 1 && rpw == 1) {
        let name = name_of(w, "_g_one_st");
        let (f, cfg) = prepare(gpu, name, (blocks, 1, z), 32 * WARPS, smem, w.cols)?;
        let args = [Arg::Ptr(w.ptr(gpu)), Arg::Ptr(x), Arg::Ptr(y), i(w.rows), i(w.cols), Arg::Ptr(w2), Arg::Ptr(y2)];
        return launch(gpu, &f, name, cfg, &args);
    }
    let name = match (t, g) {
        (1, g) => name_of(w, ["_one", "_g_one"][g as usize]),
        (_, false) => name_of(w, ""),
        (t, true) => name_of(w, window_kind(gpu, t)),
    };
    let smem = if g { window_smem(gpu, t, w.cols) } else { inputs_bytes(t, w.cols) };
    let (f, cfg) = prepare(gpu, name, (blocks, 1, z), 32 * WARPS, smem, w.cols)?;
    let args = [
        Arg::Ptr(w.ptr(gpu)),
        Arg::Ptr(x),
        Arg::Ptr(y),
        i(w.rows),
        i(w.cols),
        i(t),
        i(rpw),
        Arg::Ptr(w2),
        Arg::Ptr(y2),
    ];
    launch(gpu, &f, name, cfg, &args)
}

/// Whether a product over `w` can run the GDN conv in its epilogue ([`dense_conv`]): a § qdot type with
/// inputs quantized once and one row a warp.
pub fn can_conv(gpu: &Gpu, w: &MatrixGpu) -> bool {
    uses(w.ty) && once(gpu) && rows_per_warp(w.rows, gpu.sm_count as usize) == 1
}

/// The GDN qkv product with the conv in its epilogue (qdot.cu's `_conv` kernels): for each channel (row)
/// silu of the K = 4 taps over its kept frames (`tail`, updated) and the window's outputs, into `conv`
/// (t rows of `w.rows`), instead of the raw product; at a non-zero `slots`, a verify window's rewind slots
/// of the tail (gdn.rs `GdnSlots`). See [`can_conv`].
pub fn dense_conv(
    gpu: &Gpu,
    w: &MatrixGpu,
    x: u64,
    (conv, tail, taps): (u64, u64, u64),
    slots: u64,
    t: usize,
) -> Result<(), CudaError> {
    let q = quantize_rows(gpu, w, x, t)?;
    dense_conv_launch(gpu, w, q.ptr(gpu), (conv, tail, taps), slots, t)
}

/// That `xq` holds t quantized vectors of `cols` values.
fn check_quantized(xq: &Buf<i32>, t: usize, cols: usize) -> Result<(), CudaError> {
    if xq.len() < quantized_words(t, cols) {
        return Err(CudaError::Shape(format!("{t} quantized inputs of {cols} values in {} words", xq.len())));
    }
    Ok(())
}

/// The conv products' kernel over the quantized inputs at `q`.
fn dense_conv_launch(
    gpu: &Gpu,
    w: &MatrixGpu,
    q: u64,
    (conv, tail, taps): (u64, u64, u64),
    slots: u64,
    t: usize,
) -> Result<(), CudaError> {
    let blocks = w.rows.div_ceil(WARPS as usize) as u32;
    let i = |v: usize| Arg::I32(v as i32);
    let (w_, q_) = (Arg::Ptr(w.ptr(gpu)), Arg::Ptr(q));
    if let Some(smem) = stage(gpu, w).filter(|_| t == 1) {
        let name = name_of(w, "_g_one_conv_st");
        let (f, cfg) = prepare(gpu, name, (blocks, 1, 1), 32 * WARPS, smem, w.cols)?;
        let args = [w_, q_, Arg::Ptr(conv), i(w.rows), i(w.cols), Arg::Ptr(tail), Arg::Ptr(taps)];
        return launch(gpu, &f, name, cfg, &args);
    }
    if let Some((kind, r)) = share(gpu, w.rows, t, true) {
        let name = name_of(w, kind);
        let blocks = w.rows.div_ceil(WARPS as usize * r) as u32;
        let (f, cfg) = prepare(gpu, name, (blocks, 1, 1), 32 * WARPS, 0, w.cols)?;
        let args =
            [w_, q_, Arg::Ptr(conv), i(w.rows), i(w.cols), i(t), Arg::Ptr(tail), Arg::Ptr(taps), Arg::Ptr(slots)];
        return launch(gpu, &f, name, cfg, &args);
    }
    let name = name_of(w, if t == 1 { "_g_one_conv" } else { "_g_conv" });
    let (f, cfg) = prepare(gpu, name, (blocks, 1, 1), 32 * WARPS, window_smem(gpu, t, w.cols), w.cols)?;
    let args = [w_, q_, Arg::Ptr(conv), i(w.rows), i(w.cols), i(t), Arg::Ptr(tail), Arg::Ptr(taps)];
    // A window's slots (T > 1 only: a single token's state is the tail itself).
    let slots = (t > 1).then_some(Arg::Ptr(slots));
    launch(gpu, &f, name, cfg, &[&args[..], slots.as_slice()].concat())
}

/// Whether the GDN delta kernel also quantizes its output for the output product over `out` (gdn.cu's
/// `_nq` kernels): a § qdot type that wants the codes in element order, inputs quantized once, and a head
/// width the register kernels take (32, 64, 128). The default since speed-18 (+0.8% at depth 1,024 in
/// speed-17 and again in speed-18, +1.9% with `QDOT_ROW_AHEAD` there, ahead in each of five rounds);
/// `STRATA_GDN_QUANTIZE=0` turns it off. The same bits either way.
pub fn can_gdn_quantize(gpu: &Gpu, out: GgmlType, s: usize) -> bool {
    gpu.settings.gdn_quantize && takes_element_order(gpu, out) && matches!(s, 32 | 64 | 128)
}

/// Whether products over `ty` can take inputs quantized in element order by the kernel that made them
/// ([`dense_quantized`]): a § qdot type wanting that order, inputs quantized once.
pub fn takes_element_order(gpu: &Gpu, ty: GgmlType) -> bool {
    uses(ty) && layout(ty) == 0 && once(gpu)
}

/// The order a type's products want the input codes in (qdot.cuh's `Q::pos`): element order (0), Q2_0's
/// (1), IQ4_NL's (2).
fn layout(ty: GgmlType) -> u8 {
    match ty {
        GgmlType::Q2_0 => 1,
        GgmlType::IQ4_NL => 2,
        _ => 0,
    }
}

/// Where a gather kernel's arguments hold its input, k, and the input's token and slot strides.
struct GatherArgs {
    x: usize,
    k: usize,
    tok: usize,
    slot: usize,
}

/// matvec.rs `gather_args` (the plain and fused down gathers).
const GATHER: GatherArgs = GatherArgs { x: 1, k: 6, tok: 9, slot: 10 };
/// matvec.rs `matvec_gather_glu`'s arguments.
const GLU: GatherArgs = GatherArgs { x: 2, k: 7, tok: 11, slot: 12 };

/// With [`once`], a gather's inputs quantized before it, its arguments pointed at them: one vector a token
/// where its slots all read the token's input (slot stride 0) and `per_token`, the kernel told so through
/// the token stride (k slots a vector, else 1); else one a slot. `None` without [`once`].
fn gather_input(
    gpu: &Gpu,
    ty: GgmlType,
    (args, at): (&mut [Arg], GatherArgs),
    slots: usize,
    cols: usize,
    per_token: bool,
) -> Result<Option<Buf<i32>>, CudaError> {
    if !once(gpu) {
        return Ok(None);
    }
    let int = |a: Arg| match a {
        Arg::I32(v) => v as usize,
        _ => unreachable!("a gather's integer argument"),
    };
    let Arg::Ptr(x) = args[at.x] else { unreachable!("a gather's input pointer") };
    let (k, tok, slot) = (int(args[at.k]), int(args[at.tok]), int(args[at.slot]));
    let (n, src, vdiv) = if per_token && slot == 0 {
        (slots / k, Src { x, tok, slot: 0, kd: 1 }, k)
    } else {
        (slots, Src { x, tok, slot, kd: k }, 1)
    };
    let q = quantize(gpu, ty, src, n, cols)?;
    args[at.x] = Arg::Ptr(q.ptr(gpu));
    args[at.tok] = Arg::I32(vdiv as i32);
    Ok(Some(q))
}

/// A gather's input: `xq` when the kernel that made it also quantized it (`per_token`: one vector a token,
/// which the kernel is told through the token stride; else one a slot), or else [`gather_input`]. The
/// buffer made here, if any, and whether the `_g` kernels take the input.
fn gather_input_or(
    gpu: &Gpu,
    ty: GgmlType,
    (args, at): (&mut [Arg], GatherArgs),
    (slots, cols, per_token): (usize, usize, bool),
    xq: Option<&Buf<i32>>,
) -> Result<(Option<Buf<i32>>, bool), CudaError> {
    match xq {
        Some(_) if !once(gpu) => Err(CudaError::Shape("an input quantized before without STRATA_QDOT_ONCE".into())),
        Some(xq) => {
            args[at.x] = Arg::Ptr(xq.ptr(gpu));
            if per_token {
                args[at.tok] = args[at.k];
            }
            Ok((None, true))
        }
        None => {
            let q = gather_input(gpu, ty, (args, at), slots, cols, per_token)?;
            let g = q.is_some();
            Ok((q, g))
        }
    }
}

/// The experts' gathers (matvec.rs `gather_launch`'s arguments: `args` are the kernels' leading ones, then
/// the second product's matrix, offset and output).
/// `listed`: the blocks take a list's entries (matvec.rs `matvec_gather_list`), each quantizing its own
/// input (the `_g` kernels read the vectors of the grid's slots in order).
pub fn gather(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    (slots, listed): (usize, bool),
    second: bool,
    args: &[Arg],
) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let q = match listed {
        true => None,
        false => gather_input(gpu, w.ty, (&mut args, GATHER), slots, w.cols, true)?,
    };
    let name = name_of(w, ["_gather", "_g_gather"][q.is_some() as usize]);
    let grid = ((g.rows as u32).div_ceil(WARPS), slots as u32, if second { 2 } else { 1 });
    let (f, cfg) = prepare(gpu, name, grid, 32 * WARPS, inputs_bytes(q.is_none() as usize, w.cols), w.cols)?;
    launch(gpu, &f, name, cfg, &args)
}

/// The experts' gate and up products with the activation (matvec.rs `matvec_gather_glu`'s arguments); `xq`:
/// each token's input already quantized ([`router_quantize`]).
pub fn gather_glu(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    slots: usize,
    args: &[Arg],
    xq: Option<&Buf<i32>>,
    listed: bool,
) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let (_q, g_kernel) = match listed {
        true if xq.is_some() => return Err(CudaError::Shape("a listed gather takes no quantized vectors".into())),
        true => (None, false),
        false => gather_input_or(gpu, w.ty, (&mut args, GLU), (slots, w.cols, true), xq)?,
    };
    let name = name_of(w, ["_gather_glu", "_g_gather_glu"][g_kernel as usize]);
    let grid = ((g.rows as u32).div_ceil(WARPS), slots as u32, 1);
    let (f, cfg) = prepare(gpu, name, grid, 32 * WARPS, inputs_bytes((!g_kernel) as usize, w.cols), w.cols)?;
    launch(gpu, &f, name, cfg, &args)
}

/// The experts' down products and the combination (matvec.rs `matvec_gather_combine`'s arguments): a
/// block of k warps takes COMBINE_ROWS output rows of one token and quantizes its k inputs (with
/// [`once`], reads them: every slot's, quantized before it).
pub fn gather_combine(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    (t, k): (usize, usize),
    args: &[Arg],
) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let (_q, g_kernel) = gather_input_or(gpu, w.ty, (&mut args, GATHER), (t * k, w.cols, false), None)?;
    // Over inputs quantized once, the slots' rows staged in k parts of the shared memory where they fit
    // (STRATA_COMBINE_STAGE, the default); else the block's own quantized inputs there, or none.
    let staged = k * combine_stage_part(w.ty, w.cols);
    let (kind, smem) = match g_kernel {
        true if gpu.settings.combine_stage && staged <= gpu.smem_optin as usize => ("_g_gather_combine_st", staged),
        true => ("_g_gather_combine", 0),
        false => ("_gather_combine", inputs_bytes(k, w.cols)),
    };
    let name = name_of(w, kind);
    let (f, cfg) =
        prepare(gpu, name, (g.rows.div_ceil(COMBINE_ROWS) as u32, t as u32, 1), 32 * k as u32, smem, w.cols)?;
    args.push(Arg::I32(COMBINE_ROWS as i32));
    launch(gpu, &f, name, cfg, &args)
}

/// Warps a block of the grouped gathers, 16 rows each (QG_WARPS in qdot.cu).
const GROUPED_WARPS: u32 = 4;

/// The `n` vectors of `w.cols` values at `x` (one after another) quantized once for products over `w`
/// ([`grouped`]).
pub fn quantize_vectors(gpu: &Gpu, w: &MatrixGpu, x: &Buf<f32>, n: usize) -> Result<Buf<i32>, CudaError> {
    check_len(x, n * w.cols)?;
    quantize_rows(gpu, w, x.ptr(gpu), n)
}

fn check_len(x: &Buf<f32>, want: usize) -> Result<(), CudaError> {
    match x.len() >= want {
        true => Ok(()),
        false => Err(CudaError::Shape(format!("{want} input values asked of a buffer of {}", x.len()))),
    }
}

/// Whether the grouped gathers can take `w`'s experts here: a § qdot type, inputs quantized once, int8
/// tensor-core tiles (sm_75+).
pub fn can_group(gpu: &Gpu, w: &MatrixGpu) -> bool {
    uses(w.ty) && once(gpu) && gpu.arch >= (7, 5) && w.cols.is_multiple_of(32)
}

/// The experts' products over a window's slots grouped by expert (qdot.cu's `_g_grouped` and, with a
/// second matrix, `_g_grouped_glu`): for each of `groups` groups (`plan`: each group's expert and its up
/// to 8 slots, moe.cu's `moe_group_plan`), the `g.rows` rows of its expert against each slot's vector of
/// `xq` (`nvec` vectors quantized once; slot ts reads vector ts / x_tok), into `y[ts·rows + row]`; with
/// `up`, y = silu(w's)·(up's).
pub fn grouped(
    gpu: &Gpu,
    (w, g): (&MatrixGpu, Gather),
    up: Option<(&MatrixGpu, Gather)>,
    (xq, nvec, x_tok): (&Buf<i32>, usize, usize),
    (gexp, gslots, groups): (&Buf<i32>, &Buf<i32>, usize),
    y: &Buf<f32>,
) -> Result<(), CudaError> {
    if !can_group(gpu, w) || up.is_some_and(|(u, ug)| !u.same_shape(w) || ug.stride != g.stride || ug.rows != g.rows) {
        return Err(CudaError::Shape(format!("no grouped gathers for {} experts of {} columns", w.ty, w.cols)));
    }
    if xq.len() < quantized_words(nvec, w.cols) || gexp.len() < groups || gslots.len() < 8 * groups {
        return Err(CudaError::Shape(format!("grouped gathers: {groups} groups over {nvec} vectors")));
    }
    let i = |v: usize| Arg::I32(v as i32);
    let p = |b: u64| Arg::Ptr(b);
    let rows_per_block = 16 * GROUPED_WARPS as usize;
    let grid = (g.rows.div_ceil(rows_per_block) as u32, groups as u32, 1);
    let (kind, weights) = match up {
        Some((u, ug)) => {
            let mats = [p(w.ptr(gpu)), p(u.ptr(gpu)), p(xq.ptr(gpu)), p(y.ptr(gpu))];
            ("_g_grouped_glu", [&mats[..], &[i(g.rows), i(w.cols), i(g.stride), i(g.offset), i(ug.offset)]].concat())
        }
        None => {
            let mats = [p(w.ptr(gpu)), p(xq.ptr(gpu)), p(y.ptr(gpu))];
            ("_g_grouped", [&mats[..], &[i(g.rows), i(w.cols), i(g.stride), i(g.offset)]].concat())
        }
    };
    let args = [&weights[..], &[i(x_tok), i(nvec), p(gexp.ptr(gpu)), p(gslots.ptr(gpu))]].concat();
    let name = name_of(w, kind);
    let (f, cfg) = prepare(gpu, name, grid, 32 * GROUPED_WARPS, 0, w.cols)?;
    launch(gpu, &f, name, cfg, &args)
}

/// Bytes of a slot's part of the staged combination's shared memory (qdot.cu's `part`, in 16-byte words
/// there): COMBINE_ROWS rows' bytes, and 32 more, for where they start past a 16-byte boundary (up to 15
/// bytes) and the word qd_words reads past their end.
fn combine_stage_part(ty: GgmlType, cols: usize) -> usize {
    let row_bytes = cols / ty.block_size() * ty.type_size();
    ((COMBINE_ROWS * row_bytes).div_ceil(16) + 2) * 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_takes_several_rows_a_warp_and_a_layer_one() {
        assert_eq!(rows_per_warp(248_320, 132), 7);
        assert_eq!(rows_per_warp(1_000_000, 132), 8);
        assert_eq!(rows_per_warp(2560, 132), 1);
        assert_eq!(rows_per_warp(12_288, 0), 8);
    }

    /// The shared-input window kernels: only for 2..8 tokens, only where the rows fill two blocks of
    /// 8 warps a multiprocessor at 2 (or 4) rows a warp, 4 only up to 4 tokens, and named for T and R (the
    /// parity tool's shapes of 4,301 and 8,501 rows take R = 2 and 4 on a card of 132 multiprocessors).
    #[test]
    fn windows_take_rows_several_a_warp_where_they_fill_the_card() {
        assert_eq!(share_kind(true, 10_240, 2, true, 132), Some(("_g_s2r4_conv", 4)));
        assert_eq!(share_kind(true, 6_144, 4, false, 132), Some(("_g_s4r2", 2)));
        assert_eq!(share_kind(true, 4_301, 3, false, 132), Some(("_g_s4r2", 2)));
        assert_eq!(share_kind(true, 8_501, 2, false, 132), Some(("_g_s2r4", 4)));
        assert_eq!(share_kind(true, 2_560, 2, false, 132), None, "a GDN out product: too few rows");
        assert_eq!(share_kind(true, 10_240, 1, false, 132), None);
        assert_eq!(share_kind(true, 10_240, 9, false, 132), None);
        assert_eq!(share_kind(false, 10_240, 2, false, 132), None);
        assert_eq!(share_kind(true, 100, 2, false, 0), Some(("_g_s2r4", 4)), "no count: as one multiprocessor");
        // Windows of 5..8: 2 rows a warp, the inputs 4 tokens at a time.
        assert_eq!(share_kind(true, 10_240, 8, true, 132), Some(("_g_s8r2_conv", 2)));
        assert_eq!(share_kind(true, 4_301, 5, false, 132), Some(("_g_s8r2", 2)));
        assert_eq!(share_kind(true, 8_501, 5, false, 132), Some(("_g_s8r2", 2)));
        assert_eq!(share_kind(true, 2_560, 8, false, 132), None);
    }

    /// qdot_rows_staged copies n16 words of 16 bytes from the boundary below its rows (a = 0..15 bytes
    /// before them), and qd_words may read one 4-byte word past the last row: all inside the buffer.
    #[test]
    fn the_staged_buffer_holds_every_alignment_of_the_rows() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q2_0, GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::Q6_K] {
            for cols in [256, 2560, 6144] {
                let row_bytes = cols / ty.block_size() * ty.type_size();
                let bytes = stage_bytes(ty, cols);
                assert_eq!(bytes % 16, 0, "{ty} {cols}");
                for a in 0..16 {
                    let n16 = (a + WARPS as usize * row_bytes).div_ceil(16);
                    assert!(n16 * 16 <= bytes, "{ty} {cols}: the copy of {n16} words at offset {a}");
                    assert!(a + WARPS as usize * row_bytes + 4 <= bytes, "{ty} {cols}: the word past the rows");
                }
            }
        }
        // The full model's largest staged product, GDN out (Q8_0, 6,144 columns), wants 52 KB: past the
        // default 48 KB, so prepare allows it where the card has it.
        assert_eq!(stage_bytes(GgmlType::Q8_0, 6144), 52_256);
    }
}
