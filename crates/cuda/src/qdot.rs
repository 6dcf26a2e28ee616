//! Host side of kernels/qdot.cu: the products of Q8_0, Q4_0, Q2_0, IQ4_NL, Q4_K and Q6_K weights, which take their
//! input quantized to int8 (docs/ARITHMETIC.md § qdot; the twin of strata_model::ops::qdot). matvec.rs
//! sends those types here whatever the plan's layout: one layout serves them, so the plan does not time
//! them.

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;

use crate::buf::{launch, Arg, Buf};
use crate::device::Gpu;
use crate::error::{Check, CudaError};
use crate::matvec::{Gather, MatrixGpu};

const SRC: &str = crate::compile::QDOT_CU;
/// Warps a block of the dense and gather kernels, a row each (QD_WARPS in qdot.cu).
const WARPS: u32 = 8;
/// Output rows a block of the fused down product and combination (at most QD_COMBINE_ROWS = 16): each
/// block quantizes its token's k inputs, so more rows a block spread that work; 8 keeps 320 blocks a token
/// at the full model's 2,560 rows.
const COMBINE_ROWS: usize = 8;
/// Pieces a block of 256 threads of the `_quantize` kernel takes: QD_ROUNDS (4) a group of 8 lanes.
const QUANTIZE_BLOCK_PIECES: usize = 128;
/// Shared memory a piece of 32 inputs takes: 32 codes, the scale and the codes' sums over its halves.
const PIECE_BYTES: usize = 44;

/// Whether each product's input is quantized once, by a kernel of its own before it (the `_g` kernels read
/// those pieces from global memory): the default, +6.8% at depth 1,024 on the H200
/// (bench/results/2026-12-01-h200-speed-12/). `STRATA_QDOT_ONCE=0`: every block of the product quantizes
/// the inputs it needs into its shared memory; `dense` (opt-in until run on a card): so do the experts'
/// gathers' blocks, while the dense products' inputs are quantized once (or, with `STRATA_QDOT_STAGE=own`,
/// by each staged block). The same codes, sums and bits every way.
fn once_value() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| std::env::var("STRATA_QDOT_ONCE").unwrap_or_default())
}

/// Whether a value of `STRATA_QDOT_ONCE` quantizes once the dense products' inputs and the gathers'.
fn once_for(v: &str) -> (bool, bool) {
    (v != "0", !matches!(v, "0" | "dense"))
}

/// The dense products' inputs quantized once ([`once_value`]).
pub fn once() -> bool {
    once_for(once_value()).0
}

/// The experts' gathers' inputs quantized once ([`once_value`]).
fn once_gathers() -> bool {
    once_for(once_value()).1
}

/// How a one-token product with inputs quantized once and a row a warp reads its rows
/// (`STRATA_QDOT_STAGE`); the same bits every way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// `0`: from global memory after it waits for the kernel before (`_g_one`).
    Off,
    /// The default: copied into shared memory before the wait (`_g_one_st`), so the copy runs while the
    /// kernel before does; +0.8% at depth 1,024 on the H200, every round ahead
    /// (bench/results/2026-12-02-h200-speed-15/).
    Once,
    /// `own` (`own:W`): staged as by default, and the block of W warps (8 unless given; 8 or 16, the GDN conv
    /// form 8) quantizes
    /// the input itself while the copy is in flight (`_one_st`), with no `_quantize` launch before it.
    /// Leaving every `_quantize` launch out of a step's graph (timing only) made it 10.3% faster in
    /// speed-15, but `own` with 8 warps was not faster than the default in speed-16 (192.0 against
    /// 192.5 tok/s): by events each block's quantizing cost about what the launch did, every block of a
    /// product reading the whole input from the L2 (1,280 blocks for GDN's qkv). Wider blocks read it
    /// fewer times. (A cluster of 8 blocks sharing the quantized shares through distributed shared
    /// memory, 54462e6, was 8.6% slower than the default.)
    Own(u32),
}

/// The most warps a block of the `_one_st` kernels on a card of compute capability `major` (QD_OWN_WARPS in
/// qdot.cu, their launch bound); the `_one_conv_st` ones take WARPS.
fn own_warps_max(major: i32) -> u32 {
    if major >= 9 {
        16
    } else {
        WARPS
    }
}

impl Stage {
    fn from_value(v: Option<&str>) -> Stage {
        match v {
            Some("0") => Stage::Off,
            Some("own") => Stage::Own(WARPS),
            Some(v) => match v.strip_prefix("own:").and_then(|w| w.parse().ok()) {
                Some(w @ (8 | 16)) => Stage::Own(w),
                _ => Stage::Once,
            },
            None => Stage::Once,
        }
    }

    fn get() -> Stage {
        static MODE: std::sync::OnceLock<Stage> = std::sync::OnceLock::new();
        *MODE.get_or_init(|| Stage::from_value(std::env::var("STRATA_QDOT_STAGE").ok().as_deref()))
    }
}

/// The staged kernels' shared memory for a block of `warps` rows of `cols` values of `ty`: the span from
/// the 16-byte boundary below it, rounded up to 16 bytes, and 16 more (qdot_rows_staged).
fn stage_bytes(ty: GgmlType, cols: usize, warps: u32) -> usize {
    let row_bytes = cols / ty.block_size() * ty.type_size();
    (15 + warps as usize * row_bytes).div_ceil(16) * 16 + 16
}

/// A staged kernel's launch ([`stage`]).
struct Staged {
    name: &'static str,
    /// Shared memory: for a block quantizing its input, that input first (rounded to 16 bytes:
    /// qd_own_bytes), then the rows.
    smem: usize,
    /// Whether the input must be quantized before the launch (the `_g` kernels).
    quantized: bool,
    /// Warps a block, a row each.
    warps: u32,
}

impl Staged {
    /// The launch's grid (blockIdx.z: the second matrix when `z` is 2) and threads for `rows` rows.
    fn shape(&self, rows: usize, z: u32) -> ((u32, u32, u32), u32) {
        ((rows.div_ceil(self.warps as usize) as u32, 1, z), 32 * self.warps)
    }
}

/// A staged kernel's launch for a one-token product over `w` where the mode stages it and the card has
/// the shared memory: `_g_one_st`, or `_one_st` for a block quantizing its own input (with `conv`, the
/// `_conv` forms). None: the plain kernels.
fn stage(gpu: &Gpu, w: &MatrixGpu, conv: bool) -> Option<Staged> {
    let (kind, own, warps) = match (Stage::get(), conv) {
        (Stage::Off, _) => return None,
        (Stage::Once, false) => ("_g_one_st", 0, WARPS),
        (Stage::Once, true) => ("_g_one_conv_st", 0, WARPS),
        (Stage::Own(n), false) => ("_one_st", own_bytes(w.cols), n.min(own_warps_max(gpu.arch.0))),
        (Stage::Own(_), true) => ("_one_conv_st", own_bytes(w.cols), WARPS),
    };
    let smem = own + stage_bytes(w.ty, w.cols, warps);
    (smem <= gpu.smem_optin as usize).then_some(Staged { name: name(w.ty, kind), smem, quantized: own == 0, warps })
}

/// The `_one_st` kernels' share of shared memory for the input they quantize, before their rows' copy:
/// one vector's pieces rounded up to 16 bytes, so the copy keeps its alignment (qdot.cu's qd_own_bytes).
fn own_bytes(cols: usize) -> usize {
    inputs_bytes(1, cols).div_ceil(16) * 16
}

/// Shared memory for `vectors` inputs of `cols` values quantized by the block itself (none for the `_g`
/// kernels, whose inputs were quantized before them).
fn inputs_bytes(vectors: usize, cols: usize) -> usize {
    vectors * cols / 32 * PIECE_BYTES
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
    let f = gpu.function("qdot.cu", SRC, name)?;
    let blocks = pieces.div_ceil(QUANTIZE_BLOCK_PIECES) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS, 1, 1), shared_mem_bytes: 0 };
    let i = |v: usize| Arg::I32(v as i32);
    let args = [Arg::Ptr(src.x), i(src.tok), i(src.slot), i(src.kd), i(n), i(cols / 32), Arg::Ptr(q.ptr(gpu))];
    launch(gpu, &f, name, cfg, &args)?;
    Ok(q)
}

/// The 32-bit words of `n` quantized input vectors of `cols` values (44 bytes a piece of 32).
fn quantized_words(n: usize, cols: usize) -> usize {
    n * cols / 32 * PIECE_BYTES / 4
}

/// The t input rows of a dense product over `w` at `x` quantized once ([`quantize`]).
fn quantize_rows(gpu: &Gpu, w: &MatrixGpu, x: u64, t: usize) -> Result<Buf<i32>, CudaError> {
    quantize(gpu, w.ty, Src { x, tok: w.cols, slot: 0, kd: 1 }, t, w.cols)
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
    crate::device::kernel_name([base(ty), kind, ""])
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
    let f = gpu.function("qdot.cu", SRC, name)?;
    if smem > 48 << 10 {
        use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
        f.set_attribute(MAX_SMEM, smem as i32).check("allowing a qdot kernel its shared memory")?;
    }
    Ok((f, LaunchConfig { grid_dim: grid, block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 }))
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
    let g = once();
    let z = if second.is_some() { 2 } else { 1 };
    let rpw = rows_per_warp(w.rows, gpu.sm_count as usize);
    let blocks = w.rows.div_ceil(WARPS as usize * rpw) as u32;
    let (w2, y2) = second.map_or((w.ptr(gpu), y), |(b, y2)| (b.ptr(gpu), y2));
    let i = |v: usize| Arg::I32(v as i32);
    if let Some(st) = stage(gpu, w, false).filter(|_| g && t == 1 && rpw == 1) {
        let q = st.quantized.then(|| quantize_rows(gpu, w, x, t)).transpose()?;
        let x = q.as_ref().map_or(x, |q| q.ptr(gpu));
        let (grid, threads) = st.shape(w.rows, z);
        let (f, cfg) = prepare(gpu, st.name, grid, threads, st.smem, w.cols)?;
        let args = [Arg::Ptr(w.ptr(gpu)), Arg::Ptr(x), Arg::Ptr(y), i(w.rows), i(w.cols), Arg::Ptr(w2), Arg::Ptr(y2)];
        return launch(gpu, &f, st.name, cfg, &args);
    }
    let q = g.then(|| quantize_rows(gpu, w, x, t)).transpose()?;
    let x = q.as_ref().map_or(x, |q| q.ptr(gpu));
    let name = name(w.ty, if t == 1 { ["_one", "_g_one"][g as usize] } else { ["", "_g"][g as usize] });
    let (f, cfg) = prepare(gpu, name, (blocks, 1, z), 32 * WARPS, inputs_bytes(if g { 0 } else { t }, w.cols), w.cols)?;
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
    uses(w.ty) && once() && rows_per_warp(w.rows, gpu.sm_count as usize) == 1
}

/// The GDN qkv product with the conv in its epilogue (qdot.cu's `_conv` kernels): for each channel (row)
/// silu of the K = 4 taps over its kept frames (`tail`, updated) and the window's outputs, into `conv`
/// (t rows of `w.rows`), instead of the raw product. See [`can_conv`].
pub fn dense_conv(
    gpu: &Gpu,
    w: &MatrixGpu,
    x: u64,
    (conv, tail, taps): (u64, u64, u64),
    t: usize,
) -> Result<(), CudaError> {
    let blocks = w.rows.div_ceil(WARPS as usize) as u32;
    let i = |v: usize| Arg::I32(v as i32);
    let w_ = Arg::Ptr(w.ptr(gpu));
    if let Some(st) = stage(gpu, w, true).filter(|_| t == 1) {
        let q = st.quantized.then(|| quantize_rows(gpu, w, x, t)).transpose()?;
        let x = Arg::Ptr(q.as_ref().map_or(x, |q| q.ptr(gpu)));
        let (grid, threads) = st.shape(w.rows, 1);
        let (f, cfg) = prepare(gpu, st.name, grid, threads, st.smem, w.cols)?;
        let args = [w_, x, Arg::Ptr(conv), i(w.rows), i(w.cols), Arg::Ptr(tail), Arg::Ptr(taps)];
        return launch(gpu, &f, st.name, cfg, &args);
    }
    let q = quantize_rows(gpu, w, x, t)?;
    let name = name(w.ty, if t == 1 { "_g_one_conv" } else { "_g_conv" });
    let (f, cfg) = prepare(gpu, name, (blocks, 1, 1), 32 * WARPS, 0, w.cols)?;
    let args = [w_, Arg::Ptr(q.ptr(gpu)), Arg::Ptr(conv), i(w.rows), i(w.cols), i(t), Arg::Ptr(tail), Arg::Ptr(taps)];
    launch(gpu, &f, name, cfg, &args)
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

/// With [`once_gathers`], a gather's inputs quantized before it, its arguments pointed at them: one vector a token
/// where its slots all read the token's input (slot stride 0) and `per_token`, the kernel told so through
/// the token stride (k slots a vector, else 1); else one a slot. `None` without [`once_gathers`].
fn gather_input(
    gpu: &Gpu,
    ty: GgmlType,
    (args, at): (&mut [Arg], GatherArgs),
    slots: usize,
    cols: usize,
    per_token: bool,
) -> Result<Option<Buf<i32>>, CudaError> {
    if !once_gathers() {
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

/// The experts' gathers (matvec.rs `gather_launch`'s arguments: `args` are the kernels' leading ones, then
/// the second product's matrix, offset and output).
pub fn gather(gpu: &Gpu, w: &MatrixGpu, g: Gather, slots: usize, second: bool, args: &[Arg]) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let q = gather_input(gpu, w.ty, (&mut args, GATHER), slots, w.cols, true)?;
    let name = name(w.ty, ["_gather", "_g_gather"][q.is_some() as usize]);
    let grid = ((g.rows as u32).div_ceil(WARPS), slots as u32, if second { 2 } else { 1 });
    let (f, cfg) = prepare(gpu, name, grid, 32 * WARPS, inputs_bytes(q.is_none() as usize, w.cols), w.cols)?;
    launch(gpu, &f, name, cfg, &args)
}

/// The experts' gate and up products with the activation (matvec.rs `matvec_gather_glu`'s arguments).
pub fn gather_glu(gpu: &Gpu, w: &MatrixGpu, g: Gather, slots: usize, args: &[Arg]) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let q = gather_input(gpu, w.ty, (&mut args, GLU), slots, w.cols, true)?;
    let name = name(w.ty, ["_gather_glu", "_g_gather_glu"][q.is_some() as usize]);
    let grid = ((g.rows as u32).div_ceil(WARPS), slots as u32, 1);
    let (f, cfg) = prepare(gpu, name, grid, 32 * WARPS, inputs_bytes(q.is_none() as usize, w.cols), w.cols)?;
    launch(gpu, &f, name, cfg, &args)
}

/// The experts' down products and the combination (matvec.rs `matvec_gather_combine`'s arguments): a
/// block of k warps takes COMBINE_ROWS output rows of one token and quantizes its k inputs (with
/// [`once_gathers`], reads them: every slot's, quantized before it).
pub fn gather_combine(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    (t, k): (usize, usize),
    args: &[Arg],
) -> Result<(), CudaError> {
    let mut args = args.to_vec();
    let q = gather_input(gpu, w.ty, (&mut args, GATHER), t * k, w.cols, false)?;
    let name = name(w.ty, ["_gather_combine", "_g_gather_combine"][q.is_some() as usize]);
    let vectors = if q.is_some() { 0 } else { k };
    let (f, cfg) = prepare(
        gpu,
        name,
        (g.rows.div_ceil(COMBINE_ROWS) as u32, t as u32, 1),
        32 * k as u32,
        inputs_bytes(vectors, w.cols),
        w.cols,
    )?;
    args.push(Arg::I32(COMBINE_ROWS as i32));
    launch(gpu, &f, name, cfg, &args)
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

    /// qdot_rows_staged copies n16 words of 16 bytes from the boundary below its rows (a = 0..15 bytes
    /// before them), and qd_words may read one 4-byte word past the last row: all inside the buffer.
    #[test]
    fn the_staged_buffer_holds_every_alignment_of_the_rows() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q2_0, GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::Q6_K] {
            for cols in [256, 2560, 6144] {
                let row_bytes = cols / ty.block_size() * ty.type_size();
                let bytes = stage_bytes(ty, cols, WARPS);
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
        assert_eq!(stage_bytes(GgmlType::Q8_0, 6144, WARPS), 52_256);
    }

    #[test]
    fn the_once_switch_parts_dense_products_from_gathers() {
        assert_eq!(once_for(""), (true, true));
        assert_eq!(once_for("1"), (true, true));
        assert_eq!(once_for("0"), (false, false));
        assert_eq!(once_for("dense"), (true, false));
    }

    #[test]
    fn the_stage_switch_reads_its_values() {
        assert_eq!(Stage::from_value(None), Stage::Once);
        assert_eq!(Stage::from_value(Some("1")), Stage::Once);
        assert_eq!(Stage::from_value(Some("0")), Stage::Off);
        assert_eq!(Stage::from_value(Some("own")), Stage::Own(WARPS));
        for w in [8, 16] {
            assert_eq!(Stage::from_value(Some(&format!("own:{w}"))), Stage::Own(w));
        }
        // Anything else is the default, not a block past the kernels' launch bound.
        for v in ["own:32", "own:12", "own:", "cluster"] {
            assert_eq!(Stage::from_value(Some(v)), Stage::Once, "{v}");
        }
        // 16 warps only where the kernels were compiled for them (sm_90 on).
        assert_eq!((own_warps_max(8), own_warps_max(9), own_warps_max(10)), (8, 16, 16));
    }

    /// `_one_st` puts its quantized input first and the rows' copy after it, at qd_own_bytes(cols): the
    /// host's share for the input must be that many bytes, a multiple of 16 so the copy keeps its
    /// alignment, and hold the piece layout (44 bytes a piece).
    #[test]
    fn a_block_quantizing_its_own_input_keeps_the_copy_aligned() {
        for cols in [32, 256, 2560, 6144] {
            let own = own_bytes(cols);
            assert_eq!(own, (cols / 32 * 44 + 15) / 16 * 16, "{cols}: qd_own_bytes");
            assert_eq!(own % 16, 0);
            assert!(own >= cols / 32 * PIECE_BYTES);
        }
        // GDN out's staged product quantizing its own 6,144 inputs: 60.7 KB, under the H200's 227 KB.
        assert_eq!(own_bytes(6144) + stage_bytes(GgmlType::Q8_0, 6144, WARPS), 60_704);
    }

    /// A staged launch takes a row a warp: every row in a block, no block without one.
    #[test]
    fn a_staged_grid_covers_each_row_once() {
        for warps in [8, 16, 32] {
            let st = Staged { name: "", smem: 0, quantized: false, warps };
            for rows in [1, 7, 8, 9, 2560, 10_240, 10_241] {
                let ((g, _, z), threads) = st.shape(rows, 2);
                assert_eq!((threads, z), (32 * warps, 2));
                assert!(g as usize * warps as usize >= rows && (g as usize - 1) * (warps as usize) < rows);
            }
        }
    }
}
