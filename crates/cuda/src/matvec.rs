//! Host side of kernels/matvec.cu: `y = W·x` for a window of T = 1..8 tokens over a weight matrix of a
//! supported type, the twin of strata_model::ops::matvec (the same bits).

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;
use strata_model::ops::matvec::Matrix;

use crate::buf::{launch, Arg, Buf};
use crate::device::Gpu;
use crate::error::CudaError;

const SRC: &str = crate::compile::MATVEC;
pub const MAX_T: usize = 8;
/// The most warps that share a row (kernels/matvec.cu: a block per row).
const ROW_WARPS: usize = 4;
/// Rows per block in the warp layout.
const WARP_ROWS: u32 = 8;

/// How a product's rows are spread over the card; both give the same sums (kernels/matvec.cu), and the
/// plan picks the faster per weight type, for the dense products and the experts' apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A block per row, its warps side by side over the row.
    Block,
    /// A warp per row, 8 rows a block.
    Warp,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::Block, Layout::Warp];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Block => "block",
            Layout::Warp => "warp",
        }
    }

    /// `STRATA_MATVEC=block|warp` forces one layout for every type.
    pub fn from_env() -> Option<Layout> {
        match std::env::var("STRATA_MATVEC").ok()?.as_str() {
            "block" => Some(Layout::Block),
            "warp" => Some(Layout::Warp),
            _ => None,
        }
    }

    /// The kernel's name suffix.
    fn suffix(self) -> &'static str {
        match self {
            Layout::Block => "",
            Layout::Warp => "_warp",
        }
    }

    /// The launch of `rows` rows (times `slots` for the experts) of `cols` columns.
    fn config(self, rows: usize, cols: usize, slots: usize) -> LaunchConfig {
        let (grid_x, threads) = match self {
            Layout::Block => (rows as u32, 32 * cols.div_ceil(8 * 32).clamp(1, ROW_WARPS) as u32),
            Layout::Warp => ((rows as u32).div_ceil(WARP_ROWS), 32 * WARP_ROWS),
        };
        LaunchConfig { grid_dim: (grid_x, slots as u32, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
    }
}

/// The weight types with a GPU matrix-vector kernel.
pub const TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q2_0,
    GgmlType::Q5_0,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// The kernel for a weight type, or `None` where there is none yet.
fn kernel(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F32 => "matvec_f32",
        GgmlType::F16 => "matvec_f16",
        GgmlType::BF16 => "matvec_bf16",
        GgmlType::Q8_0 => "matvec_q8_0",
        GgmlType::Q4_0 => "matvec_q4_0",
        GgmlType::Q2_0 => "matvec_q2_0",
        GgmlType::Q5_0 => "matvec_q5_0",
        GgmlType::IQ2_XS => "matvec_iq2_xs",
        GgmlType::IQ3_XXS => "matvec_iq3_xxs",
        GgmlType::IQ3_S => "matvec_iq3_s",
        GgmlType::Q3_K => "matvec_q3_k",
        GgmlType::Q4_K => "matvec_q4_k",
        GgmlType::Q5_K => "matvec_q5_k",
        GgmlType::Q6_K => "matvec_q6_k",
        GgmlType::IQ4_NL => "matvec_iq4_nl",
        GgmlType::IQ4_XS => "matvec_iq4_xs",
        _ => return None,
    })
}

/// The layout of each type's products, dense and experts' apart (the plan's choice): the types listed
/// run in the warp layout, the others in the block layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layouts {
    pub warp_dense: Vec<GgmlType>,
    pub warp_gather: Vec<GgmlType>,
}

impl Layouts {
    /// Every type in one layout.
    pub fn all(layout: Layout) -> Layouts {
        match layout {
            Layout::Block => Layouts::default(),
            Layout::Warp => Layouts { warp_dense: TYPES.to_vec(), warp_gather: TYPES.to_vec() },
        }
    }

    pub fn dense(&self, ty: GgmlType) -> Layout {
        if self.warp_dense.contains(&ty) {
            Layout::Warp
        } else {
            Layout::Block
        }
    }

    pub fn gather(&self, ty: GgmlType) -> Layout {
        if self.warp_gather.contains(&ty) {
            Layout::Warp
        } else {
            Layout::Block
        }
    }

    /// `warp-dense=Q6_K+Q4_K,warp-gather=Q2_0` (`-` for an empty list): one word, for the kept plan.
    pub fn name(&self) -> String {
        let list = |v: &[GgmlType]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter().map(|t| t.to_string()).collect::<Vec<_>>().join("+")
            }
        };
        format!("warp-dense={},warp-gather={}", list(&self.warp_dense), list(&self.warp_gather))
    }

    /// The inverse of [`Layouts::name`]; `None` for anything else.
    pub fn parse(name: &str) -> Option<Layouts> {
        let (dense, gather) = name.split_once(',')?;
        let list = |s: &str, key: &str| -> Option<Vec<GgmlType>> {
            let v = s.strip_prefix(key)?;
            if v == "-" {
                return Some(Vec::new());
            }
            v.split('+').map(|t| GgmlType::from_name(t).filter(|t| supported(*t))).collect()
        };
        Some(Layouts { warp_dense: list(dense, "warp-dense=")?, warp_gather: list(gather, "warp-gather=")? })
    }
}

/// The types with a GPU matrix-vector kernel.
pub fn supported(ty: GgmlType) -> bool {
    kernel(ty).is_some()
}

/// A weight matrix on the device.
pub struct MatrixGpu {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    bytes: Buf<u8>,
}

impl MatrixGpu {
    pub fn upload(gpu: &Gpu, m: &Matrix) -> Result<MatrixGpu, CudaError> {
        if !supported(m.ty) {
            return Err(CudaError::Shape(format!("no GPU matrix-vector kernel for {} weights yet", m.ty)));
        }
        if !m.cols.is_multiple_of(8) || m.cols > i32::MAX as usize || m.rows > i32::MAX as usize {
            return Err(CudaError::Shape(format!(
                "matrix of {} × {}: columns must be a multiple of 8",
                m.rows, m.cols
            )));
        }
        Ok(MatrixGpu { ty: m.ty, rows: m.rows, cols: m.cols, bytes: Buf::from_host(gpu, &m.bytes)? })
    }
}

/// `y[t·rows + r] = W[r]·x[t·cols ..]` for t < T, in the plan's layout for the weight type.
pub fn matvec(gpu: &Gpu, w: &MatrixGpu, x: &Buf<f32>, y: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    matvec_with(gpu, crate::plan::plan(gpu).matvec.variant.dense(w.ty), w, x, y, t)
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
    if !(1..=MAX_T).contains(&t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens (1..=8)")));
    }
    let name = format!("{}{}", kernel(w.ty).expect("checked at upload"), layout.suffix());
    let f = gpu.function("matvec.cu", SRC, &name)?;
    let args = [
        Arg::Ptr(w.bytes.ptr(gpu)),
        Arg::Ptr(x.ptr(gpu)),
        Arg::Ptr(y.ptr(gpu)),
        Arg::I32(w.rows as i32),
        Arg::I32(w.cols as i32),
        Arg::I32(t as i32),
    ];
    launch(gpu, &f, &name, layout.config(w.rows, w.cols, 1), &args)
}

/// Where the experts' rows start in a stacked matrix: expert e's first row is `e·stride + offset`.
#[derive(Clone, Copy)]
pub struct Gather {
    pub stride: usize,
    pub offset: usize,
    /// Rows of one expert's projection.
    pub rows: usize,
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
    let layout = crate::plan::plan(gpu).matvec.variant.gather(w.ty);
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
    let name = format!("{}_gather{}", kernel(w.ty).expect("checked at upload"), layout.suffix());
    let f = gpu.function("matvec.cu", SRC, &name)?;
    let i = |v: usize| Arg::I32(v as i32);
    let args = [
        Arg::Ptr(w.bytes.ptr(gpu)),
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
    ];
    launch(gpu, &f, &name, layout.config(g.rows, w.cols, t * k), &args)
}

/// The residual streams of each token: its row of `w` (the embedding) repeated `hc` times.
pub fn embed(gpu: &Gpu, w: &MatrixGpu, ids: &Buf<i32>, out: &Buf<f32>, t: usize, hc: usize) -> Result<(), CudaError> {
    let name = format!("{}_embed", kernel(w.ty).expect("checked at upload"));
    let f = gpu.function("matvec.cu", SRC, &name)?;
    let cfg = LaunchConfig { grid_dim: (t as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    let args = [
        Arg::Ptr(w.bytes.ptr(gpu)),
        Arg::Ptr(ids.ptr(gpu)),
        Arg::Ptr(out.ptr(gpu)),
        Arg::I32(w.cols as i32),
        Arg::I32(hc as i32),
    ];
    launch(gpu, &f, &name, cfg, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_name_and_parse_are_inverse_and_the_rest_is_refused() {
        for l in [
            Layouts::default(),
            Layouts::all(Layout::Warp),
            Layouts { warp_dense: vec![GgmlType::Q6_K, GgmlType::Q4_K], warp_gather: vec![GgmlType::Q2_0] },
        ] {
            assert_eq!(Layouts::parse(&l.name()), Some(l.clone()), "{}", l.name());
        }
        let l = Layouts { warp_dense: vec![GgmlType::Q6_K], warp_gather: vec![] };
        assert_eq!((l.dense(GgmlType::Q6_K), l.dense(GgmlType::Q8_0)), (Layout::Warp, Layout::Block));
        assert_eq!(l.gather(GgmlType::Q6_K), Layout::Block);
        for bad in ["", "warp-dense=Q6_K", "warp-dense=Q7_K,warp-gather=-", "warp-dense=TQ1_0,warp-gather=-", "x,y"] {
            assert_eq!(Layouts::parse(bad), None, "{bad}");
        }
        assert!(TYPES.iter().all(|&t| supported(t)));
    }
}
