//! Host side of kernels/matvec.cu: `y = W·x` for a window of T = 1..8 tokens over a weight matrix of a
//! supported type, the twin of strata_model::ops::matvec (the same bits). The products of the § qdot types
//! (int8 inputs) go to qdot.rs from each entry point here, whatever the layout asked for.

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;

use crate::ops::layout::{kernel, Layout, WARP_ROWS};
pub use crate::ops::matrix::{Gather, MatrixGpu, MAX_T};
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The name of a type's kernel of one kind (`""` the dense products, `"_gather"` the experts') in a
/// layout: made once and kept, since a step launches ~600 of them.
fn kernel_name(ty: GgmlType, kind: &'static str, layout: Layout) -> &'static str {
    crate::runtime::device::kernel_name([kernel(ty).expect("checked at upload"), kind, layout.suffix()])
}

/// `y[t·rows + r] = W[r]·x[t·cols ..]` for t < T, in the layout for the weight's shape and type.
pub fn matvec(gpu: &Gpu, w: &MatrixGpu, x: &Buf<f32>, y: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    matvec_with(gpu, w.layout(t), w, x, y, t)
}

/// [`matvec`] in a given layout.
pub fn matvec_with(
    gpu: &Gpu,
    layout: Layout,
    w: &MatrixGpu,
    x: &Buf<f32>,
    y: &Buf<f32>,
    t: usize,
) -> Result<(), CudaError> {
    matvec_ptrs(gpu, layout, w, x.ptr(gpu), y.ptr(gpu), t)
}

/// [`matvec`] on rows inside larger buffers: `t` inputs of `w.cols` values from device address `x`,
/// `t` outputs of `w.rows` values to `y` (the caller keeps both ranges inside their buffers).
pub fn matvec_at(gpu: &Gpu, w: &MatrixGpu, x: u64, y: u64, t: usize) -> Result<(), CudaError> {
    matvec_ptrs(gpu, w.layout(t), w, x, y, t)
}

fn matvec_ptrs(gpu: &Gpu, layout: Layout, w: &MatrixGpu, x: u64, y: u64, t: usize) -> Result<(), CudaError> {
    matvec_launch(gpu, layout, w, x, (y, None), t)
}

/// `y_a = A·x` and `y_b = B·x` for t tokens: one launch when A and B have the same type and shape (a
/// layer's gate and up, say), else two. The sums are each product's own.
pub fn matvec_two(
    gpu: &Gpu,
    a: (&MatrixGpu, &Buf<f32>),
    b: (&MatrixGpu, &Buf<f32>),
    x: &Buf<f32>,
    t: usize,
) -> Result<(), CudaError> {
    matvec_two_with(gpu, a.0.layout(t), a, b, x, t)
}

/// [`matvec`], or with `second` [`matvec_two`], where `xq` may hold x already quantized in element order
/// once for several products (attn.rs, `STRATA_QKV_ONCE`): § qdot products that take it read those pieces
/// instead of quantizing x again (`qdot::dense_quantized`); the same bits either way.
pub fn matvec_pre(
    gpu: &Gpu,
    (x, xq): (&Buf<f32>, Option<&Buf<i32>>),
    (w, y): (&MatrixGpu, &Buf<f32>),
    second: Option<(&MatrixGpu, &Buf<f32>)>,
    t: usize,
) -> Result<(), CudaError> {
    // Two products of different types or shapes over pieces made before: each takes them on its own.
    if let (Some(_), Some((b, yb))) = (xq, second.filter(|(b, _)| !w.same_shape(b))) {
        matvec_pre(gpu, (x, xq), (w, y), None, t)?;
        return matvec_pre(gpu, (x, xq), (b, yb), None, t);
    }
    let pair = second.is_none_or(|(b, _)| w.same_shape(b));
    match (xq.filter(|_| pair && crate::ops::qdot::takes_element_order(gpu, w.ty)), second) {
        (Some(q), _) => {
            crate::ops::qdot::dense_quantized(gpu, w, q, (y.ptr(gpu), second.map(|(b, yb)| (b, yb.ptr(gpu)))), t)
        }
        (None, Some(b)) => matvec_two(gpu, (w, y), b, x, t),
        (None, None) => matvec(gpu, w, x, y, t),
    }
}

/// [`matvec_two`] in a given layout.
pub fn matvec_two_with(
    gpu: &Gpu,
    layout: Layout,
    (a, y_a): (&MatrixGpu, &Buf<f32>),
    (b, y_b): (&MatrixGpu, &Buf<f32>),
    x: &Buf<f32>,
    t: usize,
) -> Result<(), CudaError> {
    if a.same_shape(b) {
        matvec_launch(gpu, layout, a, x.ptr(gpu), (y_a.ptr(gpu), Some((b, y_b.ptr(gpu)))), t)
    } else {
        matvec_with(gpu, layout, a, x, y_a, t)?;
        matvec_with(gpu, layout, b, x, y_b, t)
    }
}

/// One product, or two in one launch (`second`: the other matrix, of the same type and shape, and its
/// output; blockIdx.z picks).
fn matvec_launch(
    gpu: &Gpu,
    layout: Layout,
    w: &MatrixGpu,
    x: u64,
    (y, second): (u64, Option<(&MatrixGpu, u64)>),
    t: usize,
) -> Result<(), CudaError> {
    if !(1..=MAX_T).contains(&t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens (1..=8)")));
    }
    if crate::ops::qdot::uses(w.ty) {
        return crate::ops::qdot::dense(gpu, w, x, (y, second), t);
    }
    let layout = layout.usable(w.row_bytes());
    let (kind, named) = layout.kernel(t, w.cols, false);
    let name = kernel_name(w.ty, kind, named);
    let f = gpu.function(&crate::ops::sources::MATVEC_FILE, name)?;
    let (mut cfg, rpb) = layout.config(w.rows, w.cols, w.row_bytes(), (t, 1), gpu.sm_count as usize);
    let (w2, y2) = second.map_or((w.ptr(gpu), y), |(b, y2)| (b.ptr(gpu), y2));
    cfg.grid_dim.2 = if second.is_some() { 2 } else { 1 };
    let mut args = vec![
        Arg::Ptr(w.ptr(gpu)),
        Arg::Ptr(x),
        Arg::Ptr(y),
        Arg::I32(w.rows as i32),
        Arg::I32(w.cols as i32),
        Arg::I32(t as i32),
    ];
    if layout.staged() {
        args.push(Arg::I32(rpb as i32));
    }
    if layout == Layout::Stream {
        args.push(Arg::I32(Layout::stream_groups(w.rows, rpb, gpu.sm_count as usize) as i32));
    }
    args.extend([Arg::Ptr(w2), Arg::Ptr(y2)]);
    launch(gpu, &f, name, cfg, &args)
}

/// The kernels take at most MAX_T tokens a launch. A longer window (a prompt's: `STRATA_PROMPT_WINDOW`)
/// runs each op over its tiles of MAX_T tokens in order, the ops a run of windows of MAX_T would make in
/// each layer, so the same bits; its layers still run one after another over the whole window, as the
/// CPU's do (docs/DETAILS.md, "Prompt windows"). Each tile's (first token, tokens).
pub fn tiles(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t).step_by(MAX_T).map(move |first| (first, (t - first).min(MAX_T)))
}

/// For each token t < T and slot s < k: `y[(t·k + s)·rows ..] = W[expert ids[t·k + s]]·x[t·x_tok + s·x_slot ..]`,
/// in the plan's layout for the experts' type.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    x: &Buf<f32>,
    strides: (usize, usize),
    y: &Buf<f32>,
    ids: &Buf<i32>,
    tk: (usize, usize),
) -> Result<(), CudaError> {
    let layout = w.layouts.gather;
    matvec_gather_with(gpu, layout, w, g, x, strides, y, ids, tk)
}

/// [`matvec_gather`] in a given layout.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_with(
    gpu: &Gpu,
    layout: Layout,
    w: &MatrixGpu,
    g: Gather,
    x: &Buf<f32>,
    (x_tok, x_slot): (usize, usize),
    y: &Buf<f32>,
    ids: &Buf<i32>,
    (t, k): (usize, usize),
) -> Result<(), CudaError> {
    gather_launch(gpu, layout, (w, g, y), None, x, (x_tok, x_slot), (ids, None), (t * k, k))
}

/// A gather over the entries of `list` (a placed prompt window's chunk, ops/moe/window.rs): entry i takes
/// slot `list[i]` (t·k + s: its input and output as [`matvec_gather`]'s) with expert row block `ids[i]`;
/// a negative slot or id is skipped. Each block quantizes its own input where the type is § qdot's.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_list(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    x: &Buf<f32>,
    strides: (usize, usize),
    y: &Buf<f32>,
    (ids, list): (&Buf<i32>, &Buf<i32>),
    k: usize,
) -> Result<(), CudaError> {
    let layout = w.layouts.gather;
    gather_launch(gpu, layout, (w, g, y), None, x, strides, (ids, Some(list)), (list.len(), k))
}

/// Two gathers of the same input and experts, `a` and `b` (matrix, rows, output): one launch when the
/// matrices have the same type, shape and expert stride (a layer's gate and up, fused in one tensor or
/// not), else two. The sums are each product's own.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_two(
    gpu: &Gpu,
    a: (&MatrixGpu, Gather, &Buf<f32>),
    b: (&MatrixGpu, Gather, &Buf<f32>),
    x: &Buf<f32>,
    strides: (usize, usize),
    ids: &Buf<i32>,
    tk: (usize, usize),
) -> Result<(), CudaError> {
    let layout = a.0.layouts.gather;
    let slots = (tk.0 * tk.1, tk.1);
    if a.0.same_shape(b.0) && a.1.stride == b.1.stride && a.1.rows == b.1.rows {
        gather_launch(gpu, layout, a, Some(b), x, strides, (ids, None), slots)
    } else {
        gather_launch(gpu, layout, a, None, x, strides, (ids, None), slots)?;
        gather_launch(gpu, layout, b, None, x, strides, (ids, None), slots)
    }
}

/// For each slot (t·k + s) of the gathers' ids: `h[(t·k + s)·rows ..] = silu(gate·x)·(up·x)`, the gate and
/// up rows of the slot's expert dotted with the token's input by one warp, the product rounded: the bits of
/// [`matvec_gather_two`] then the activation kernel (moe.cu's `moe_act`). `false` (nothing launched) when
/// the two matrices differ in type, shape or expert stride. `xq`: each token's input already quantized for
/// a § qdot type's products (qdot.rs `router_quantize`).
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_glu(
    gpu: &Gpu,
    (wg, gg): (&MatrixGpu, Gather),
    (wu, gu): (&MatrixGpu, Gather),
    (x, xq): (&Buf<f32>, Option<&Buf<i32>>),
    (x_tok, x_slot): (usize, usize),
    h: &Buf<f32>,
    ids: &Buf<i32>,
    (t, k): (usize, usize),
) -> Result<bool, CudaError> {
    glu_launch(gpu, (wg, gg), (wu, gu), (x, xq), (x_tok, x_slot), h, (ids, None), (t * k, k))
}

/// [`matvec_gather_glu`] over the entries of `list`, as [`matvec_gather_list`] takes them.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_glu_list(
    gpu: &Gpu,
    gate: (&MatrixGpu, Gather),
    up: (&MatrixGpu, Gather),
    x: &Buf<f32>,
    strides: (usize, usize),
    h: &Buf<f32>,
    (ids, list): (&Buf<i32>, &Buf<i32>),
    k: usize,
) -> Result<bool, CudaError> {
    glu_launch(gpu, gate, up, (x, None), strides, h, (ids, Some(list)), (list.len(), k))
}

/// The GLU gather's launch over `slots` blocks (every slot's, or a list's entries).
#[allow(clippy::too_many_arguments)]
fn glu_launch(
    gpu: &Gpu,
    (wg, gg): (&MatrixGpu, Gather),
    (wu, gu): (&MatrixGpu, Gather),
    (x, xq): (&Buf<f32>, Option<&Buf<i32>>),
    (x_tok, x_slot): (usize, usize),
    h: &Buf<f32>,
    (ids, list): (&Buf<i32>, Option<&Buf<i32>>),
    (slots, k): (usize, usize),
) -> Result<bool, CudaError> {
    if !(wg.same_shape(wu) && gg.stride == gu.stride && gg.rows == gu.rows) {
        return Ok(false);
    }
    let i = |v: usize| Arg::I32(v as i32);
    let args = [
        Arg::Ptr(wg.ptr(gpu)),
        Arg::Ptr(wu.ptr(gpu)),
        Arg::Ptr(x.ptr(gpu)),
        Arg::Ptr(h.ptr(gpu)),
        i(gg.rows),
        i(wg.cols),
        Arg::Ptr(ids.ptr(gpu)),
        i(k),
        i(gg.stride),
        i(gg.offset),
        i(gu.offset),
        i(x_tok),
        i(x_slot),
        Arg::Ptr(list.map_or(0, |l| l.ptr(gpu))),
    ];
    if crate::ops::qdot::uses(wg.ty) {
        crate::ops::qdot::gather_glu(gpu, wg, gg, slots, &args, xq, list.is_some())?;
        return Ok(true);
    }
    if xq.is_some() {
        return Err(CudaError::Shape(format!("{} gate and up products take no quantized vectors", wg.ty)));
    }
    let name = kernel_name(wg.ty, "_gather_glu", Layout::Block);
    let f = gpu.function(&crate::ops::sources::MATVEC_FILE, name)?;
    let cfg = LaunchConfig {
        grid_dim: ((gg.rows as u32).div_ceil(WARP_ROWS), slots as u32, 1),
        block_dim: (32 * WARP_ROWS, 1, 1),
        shared_mem_bytes: 0,
    };
    launch(gpu, &f, name, cfg, &args)?;
    Ok(true)
}

/// The routed experts' down products and the MoE combination in one launch (matvec.cu's
/// `_gather_combine`): `y[t][d] = fma chain over the slots s < k of weights[t·k + s]·(W[ids[t·k + s]]·x)[d]`
/// from +0, then `fma(σ(sg[t]), shared[t][d], ·)`, the bits of [`matvec_gather`] then moe.cu's
/// `moe_combine`. A block of k warps takes four output rows of one token.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather_combine(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    x: &Buf<f32>,
    (x_tok, x_slot): (usize, usize),
    ids: &Buf<i32>,
    (t, k): (usize, usize),
    (weights, shared, sg): (&Buf<f32>, &Buf<f32>, &Buf<f32>),
    y: &Buf<f32>,
) -> Result<(), CudaError> {
    if k == 0 || k > 32 {
        return Err(CudaError::Shape(format!("the fused down product and combination take 1..=32 slots, not {k}")));
    }
    let mut args = gather_args(gpu, (w, g), x, y, ids, k, (x_tok, x_slot));
    args.extend([weights, shared, sg].map(|b| Arg::Ptr(b.ptr(gpu))));
    if crate::ops::qdot::uses(w.ty) {
        return crate::ops::qdot::gather_combine(gpu, w, g, (t, k), &args);
    }
    let name = kernel_name(w.ty, "_gather_combine", Layout::Block);
    let f = gpu.function(&crate::ops::sources::MATVEC_FILE, name)?;
    // SHORT_ROWS = 4 rows a block (kernels/matvec.cu).
    let cfg = LaunchConfig {
        grid_dim: (g.rows.div_ceil(4) as u32, t as u32, 1),
        block_dim: (32 * k as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    launch(gpu, &f, name, cfg, &args)
}

/// One gather, or two in one launch (blockIdx.z picks).
#[allow(clippy::too_many_arguments)]
fn gather_launch(
    gpu: &Gpu,
    layout: Layout,
    (w, g, y): (&MatrixGpu, Gather, &Buf<f32>),
    second: Option<(&MatrixGpu, Gather, &Buf<f32>)>,
    x: &Buf<f32>,
    (x_tok, x_slot): (usize, usize),
    (ids, list): (&Buf<i32>, Option<&Buf<i32>>),
    (slots, k): (usize, usize),
) -> Result<(), CudaError> {
    let (w2, g2, y2) = second.unwrap_or((w, g, y));
    let i = |v: usize| Arg::I32(v as i32);
    let mut args = gather_args(gpu, (w, g), x, y, ids, k, (x_tok, x_slot));
    let tail = [Arg::Ptr(w2.ptr(gpu)), i(g2.offset), Arg::Ptr(y2.ptr(gpu)), Arg::Ptr(list.map_or(0, |l| l.ptr(gpu)))];
    if crate::ops::qdot::uses(w.ty) {
        args.extend(tail);
        return crate::ops::qdot::gather(gpu, w, g, (slots, list.is_some()), second.is_some(), &args);
    }
    // Each slot's rows are one token's.
    let layout = layout.for_gather().usable(w.row_bytes());
    let (kind, named) = layout.kernel(1, w.cols, true);
    let name = kernel_name(w.ty, kind, named);
    let f = gpu.function(&crate::ops::sources::MATVEC_FILE, name)?;
    let (mut cfg, rpb) = layout.config(g.rows, w.cols, w.row_bytes(), (1, slots), gpu.sm_count as usize);
    cfg.grid_dim.2 = if second.is_some() { 2 } else { 1 };
    if layout.staged() {
        args.push(i(rpb));
    }
    args.extend(tail);
    launch(gpu, &f, name, cfg, &args)
}

/// The gather kernels' leading arguments: the stacked matrix, the input, the output, the rows and columns
/// of one expert, the ids and slots, the expert stride and offset, and the input's token and slot strides.
fn gather_args(
    gpu: &Gpu,
    (w, g): (&MatrixGpu, Gather),
    x: &Buf<f32>,
    y: &Buf<f32>,
    ids: &Buf<i32>,
    k: usize,
    (x_tok, x_slot): (usize, usize),
) -> Vec<Arg> {
    let i = |v: usize| Arg::I32(v as i32);
    vec![
        Arg::Ptr(w.ptr(gpu)),
        Arg::Ptr(x.ptr(gpu)),
        Arg::Ptr(y.ptr(gpu)),
        i(g.rows),
        i(w.cols),
        Arg::Ptr(ids.ptr(gpu)),
        i(k),
        i(g.stride),
        i(g.offset),
        i(x_tok),
        i(x_slot),
    ]
}

/// The residual streams of each token: its row of `w` (the embedding) repeated `hc` times.
pub fn embed(gpu: &Gpu, w: &MatrixGpu, ids: &Buf<i32>, out: &Buf<f32>, t: usize, hc: usize) -> Result<(), CudaError> {
    let name = crate::runtime::device::kernel_name([kernel(w.ty).expect("checked at upload"), "_embed", ""]);
    let f = gpu.function(&crate::ops::sources::MATVEC_FILE, name)?;
    let cfg = LaunchConfig { grid_dim: (t as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    let args = [
        Arg::Ptr(w.ptr(gpu)),
        Arg::Ptr(ids.ptr(gpu)),
        Arg::Ptr(out.ptr(gpu)),
        Arg::I32(w.cols as i32),
        Arg::I32(hc as i32),
    ];
    launch(gpu, &f, name, cfg, &args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::layout::*;

    #[test]
    fn layouts_name_and_parse_are_inverse_and_the_rest_is_refused() {
        use GgmlType::*;
        for l in [
            Layouts::default(),
            Layouts::all(Layout::Warp),
            Layouts::all(Layout::Staged),
            Layouts {
                dense: vec![(Q6_K, Layout::Warp), (Q4_K, Layout::Staged)],
                gather: vec![(Q2_0, Layout::Staged)],
                window: vec![(Q4_K, Layout::Block), (Q8_0, Layout::Warp)],
            },
        ] {
            assert_eq!(Layouts::parse(&l.name()), Some(l.clone()), "{}", l.name());
        }
        let l = Layouts { dense: vec![(Q6_K, Layout::Warp)], gather: vec![], window: vec![(Q6_K, Layout::Staged)] };
        assert_eq!((l.dense(Q6_K), l.dense(Q8_0), l.gather(Q6_K)), (Layout::Warp, Layout::Block, Layout::Block));
        assert_eq!(
            (l.dense_for(Q6_K, 1), l.dense_for(Q6_K, 2), l.dense_for(Q8_0, 8)),
            (Layout::Warp, Layout::Staged, Layout::Block)
        );
        for bad in [
            "",
            "dense=Q6_K",
            "dense=Q6_K,gather=-",
            "dense=-,gather=-",
            "dense=Q7_K:warp,gather=-,window=-",
            "dense=TQ1_0:warp,gather=-,window=-",
        ] {
            assert_eq!(Layouts::parse(bad), None, "{bad}");
        }
        assert_eq!(Layouts::parse("dense=Q6_K:fast,gather=-,window=-"), None);
        assert!(TYPES.iter().all(|&t| supported(t)));
    }

    #[test]
    fn kernel_names_are_made_once() {
        let a = kernel_name(GgmlType::Q6_K, "", Layout::Staged);
        assert_eq!(a, "matvec_q6_k_staged");
        assert_eq!(kernel_name(GgmlType::Q2_0, "_gather", Layout::Block), "matvec_q2_0_gather");
        assert!(std::ptr::eq(a, kernel_name(GgmlType::Q6_K, "", Layout::Staged)));
    }

    #[test]
    fn the_staged_layout_fits_its_shared_memory_or_gives_way() {
        // Q6_K at 2,560 columns: 2,100 bytes a row, 7 rows fill 16 KB; Q8_0 at 6,144: 6,528 bytes, 2 rows.
        assert_eq!(Layout::Staged.staged_rows(2100), Some((7, 7 * 2100 + 32)));
        assert_eq!(Layout::Staged.staged_rows(6528), Some((2, 2 * 6528 + 32)));
        assert_eq!(Layout::Staged.staged_rows(100), Some((32, 3232)));
        assert_eq!(Layout::Staged.staged_rows(180), Some((32, 32 * 180 + 32))); // Q2_0 at 640 columns
        assert_eq!(Layout::Staged.staged_rows(720), Some((16, 16 * 720 + 32))); // 22 fit: two rounds of the 8 warps
        assert_eq!(Layout::Staged.staged_rows(1440), Some((8, 8 * 1440 + 32))); // 11 fit: one round
        assert_eq!(Layout::Staged.staged_rows(48 << 10), None); // F32 at 12,288 columns: the block layout runs
        assert_eq!(Layout::Staged.usable(48 << 10), Layout::Block);
        assert_eq!(Layout::Staged.usable(40 << 10), Layout::Staged);
        let (cfg, rpb) = Layout::Staged.config(1000, 2560, 2100, (1, 3), 132);
        assert_eq!((cfg.grid_dim, cfg.block_dim.0, cfg.shared_mem_bytes, rpb), ((143, 3, 1), 7 * 32, 7 * 2100 + 32, 7));
        let (cfg, rpb) = Layout::Staged.config(2560, 640, 180, (1, 10), 132);
        assert_eq!((cfg.grid_dim, cfg.block_dim.0, rpb), ((80, 10, 1), 8 * 32, 32));
    }

    #[test]
    fn each_layout_runs_its_kernel() {
        let name = |l: Layout, t, cols, gather| {
            let (kind, named) = l.kernel(t, cols, gather);
            kernel_name(GgmlType::Q4_K, kind, named)
        };
        assert_eq!(name(Layout::Warp, 1, 2560, true), "matvec_q4_k_gather_warp");
        assert_eq!(name(Layout::Warp, 1, 512, true), "matvec_q4_k_gather_short_warp");
        assert_eq!(name(Layout::Warp, 1, 2560, false), "matvec_q4_k_warp");
        // Windows: the warp layout takes four rows a warp.
        assert_eq!(name(Layout::Warp, 8, 2560, false), "matvec_q4_k_multi_warp");
        assert_eq!(name(Layout::Wide, 8, 2560, false), "matvec_q4_k_staged");
        assert_eq!(name(Layout::Wide, 1, 2560, false), "matvec_q4_k_one_staged");
        assert_eq!(name(Layout::Staged, 1, 2560, false), "matvec_q4_k_one_staged");
        assert_eq!(name(Layout::Staged, 2, 2560, false), "matvec_q4_k_staged");
        assert_eq!(name(Layout::Stream, 1, 2560, false), "matvec_q4_k_stream");
        assert_eq!(name(Layout::Wide, 1, 2560, true), "matvec_q4_k_gather_staged");
        assert_eq!(name(Layout::Block, 8, 2560, false), "matvec_q4_k");
    }

    #[test]
    fn the_wide_layout_takes_twice_the_rows_a_block() {
        // The GDN qkv product (Q4_K, 10,240 rows of 1,440 bytes): 16 rows a block, 640 blocks, not 1,280.
        assert_eq!(Layout::Wide.staged_rows(1440), Some((16, 16 * 1440 + 32)));
        let (cfg, rpb) = Layout::Wide.config(10240, 2560, 1440, (1, 1), 132);
        assert_eq!((cfg.grid_dim.0, cfg.block_dim.0, rpb), (640, 8 * 32, 16));
        // Q8_0 at 6,144 columns: 5 rows fill 32 KB; a row of 40 KB still fits alone; 48 KB does not.
        assert_eq!(Layout::Wide.staged_rows(6528), Some((5, 5 * 6528 + 32)));
        assert_eq!(Layout::Wide.usable(40 << 10), Layout::Wide);
        assert_eq!(Layout::Wide.usable(48 << 10), Layout::Block);
        assert_eq!(kernel_name(GgmlType::Q4_K, "", Layout::Wide), "matvec_q4_k_staged");
        assert!(Layout::Wide.staged() && Layout::Staged.staged() && !Layout::Warp.staged());
    }

    #[test]
    fn the_stream_layout_gives_each_block_several_groups() {
        // The GDN qkv product: groups of 8 rows (11.5 KB), two buffers of whole 16-byte words; 1,280 groups
        // over 4 blocks of 8 warps a multiprocessor on 132: 3 groups a block, 427 blocks, one wave.
        assert_eq!(Layout::Stream.staged_rows(1440), Some((8, 2 * (8 * 1440 + 32))));
        assert_eq!(Layout::stream_groups(10240, 8, 132), 3);
        let (cfg, rpb) = Layout::Stream.config(10240, 2560, 1440, (1, 1), 132);
        assert_eq!((cfg.grid_dim.0, cfg.block_dim.0, cfg.shared_mem_bytes, rpb), (427, 256, 2 * 11552, 8));
        // The head (Q6_K, 248,320 rows of 2,100 bytes, 7 a group): 68 groups a block.
        assert_eq!(Layout::stream_groups(248_320, 7, 132), 68);
        assert_eq!(Layout::Stream.config(248_320, 2560, 2100, (1, 1), 132).0.grid_dim.0, 522);
        // The GDN output product (Q8_0, 2 rows of 6,528 bytes a group, 2 warps): 16 blocks a multiprocessor,
        // one group each. A few rows: one group a block. A row of 24 KB does not fit twice: the block
        // layout runs.
        assert_eq!(Layout::stream_groups(2560, 2, 132), 1);
        assert_eq!(Layout::stream_groups(64, 8, 132), 1);
        assert_eq!(Layout::Stream.usable(24 << 10), Layout::Block);
        assert_eq!(Layout::Stream.usable(20 << 10), Layout::Stream);
        // Its kernels: the stream one for dense products at any T, the staged gathers for the experts.
        assert_eq!(kernel_name(GgmlType::Q4_K, "", Layout::Stream), "matvec_q4_k_stream");
        assert_eq!(Layout::Stream.kernel(8, 2560, false), ("", Layout::Stream));
        assert_eq!(Layout::Stream.for_gather(), Layout::Staged);
        assert_eq!(Layout::Wide.for_gather(), Layout::Wide);
        assert!(Layout::Stream.staged());
        assert_eq!(Layout::from_name("stream"), Some(Layout::Stream));
    }

    #[test]
    fn a_plan_of_layouts_reads_in_one_line() {
        let l = Layouts {
            dense: vec![(GgmlType::Q4_K, Layout::Staged)],
            gather: vec![],
            window: vec![(GgmlType::Q4_K, Layout::Wide), (GgmlType::Q8_0, Layout::Warp)],
        };
        assert_eq!(l.summary(), "dense: Q4_K staged; experts: block for all; windows: Q4_K wide, Q8_0 warp");
    }

    #[test]
    fn the_warp_layout_gives_each_warp_its_rows() {
        // One row a warp for a token's long rows; 4 for short rows (≤ 1,024 values) and for any window.
        let grid = |rows, cols, t| Layout::Warp.config(rows, cols, 0, (t, 1), 132).0.grid_dim.0;
        assert_eq!(grid(1000, 2560, 1), 125);
        assert_eq!(grid(1000, 640, 1), 32); // 250 warps
        assert_eq!(grid(1000, 2560, 8), 32);
        assert_eq!(grid(1001, 2560, 2), 32); // 251 warps, the last with one row
        assert_eq!(grid(1025, 2560, 2), 33);
        assert_eq!(kernel_name(GgmlType::Q4_K, "_multi", Layout::Warp), "matvec_q4_k_multi_warp");
    }
}
