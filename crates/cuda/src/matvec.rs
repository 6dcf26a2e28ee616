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

/// A block per row: as many warps (up to ROW_WARPS) as the row has rounds of 32 chunks.
fn row_block(cols: usize, grid: (u32, u32)) -> LaunchConfig {
    let warps = cols.div_ceil(8 * 32).clamp(1, ROW_WARPS) as u32;
    LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (32 * warps, 1, 1), shared_mem_bytes: 0 }
}

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

/// `y[t·rows + r] = W[r]·x[t·cols ..]` for t < T.
pub fn matvec(gpu: &Gpu, w: &MatrixGpu, x: &Buf<f32>, y: &Buf<f32>, t: usize) -> Result<(), CudaError> {
    if !(1..=MAX_T).contains(&t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens (1..=8)")));
    }
    let name = kernel(w.ty).expect("checked at upload");
    let f = gpu.function("matvec.cu", SRC, name)?;
    let cfg = row_block(w.cols, (w.rows as u32, 1));
    let args = [
        Arg::Ptr(w.bytes.ptr(gpu)),
        Arg::Ptr(x.ptr(gpu)),
        Arg::Ptr(y.ptr(gpu)),
        Arg::I32(w.rows as i32),
        Arg::I32(w.cols as i32),
        Arg::I32(t as i32),
    ];
    launch(gpu, &f, name, cfg, &args)
}

/// Where the experts' rows start in a stacked matrix: expert e's first row is `e·stride + offset`.
#[derive(Clone, Copy)]
pub struct Gather {
    pub stride: usize,
    pub offset: usize,
    /// Rows of one expert's projection.
    pub rows: usize,
}

/// For each token t < T and slot s < k: `y[(t·k + s)·rows ..] = W[expert ids[t·k + s]]·x[t·x_tok + s·x_slot ..]`.
#[allow(clippy::too_many_arguments)]
pub fn matvec_gather(
    gpu: &Gpu,
    w: &MatrixGpu,
    g: Gather,
    x: &Buf<f32>,
    (x_tok, x_slot): (usize, usize),
    y: &Buf<f32>,
    ids: &Buf<i32>,
    (t, k): (usize, usize),
) -> Result<(), CudaError> {
    let name = format!("{}_gather", kernel(w.ty).expect("checked at upload"));
    let f = gpu.function("matvec.cu", SRC, &name)?;
    let cfg = row_block(w.cols, (g.rows as u32, (t * k) as u32));
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
    launch(gpu, &f, &name, cfg, &args)
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
