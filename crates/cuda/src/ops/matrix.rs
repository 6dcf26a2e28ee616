//! A weight matrix on the device, with the layouts the plan chose for its type, and the experts' view of
//! a stacked one.

use strata_gguf::GgmlType;
use strata_model::ops::matvec::Matrix;

use crate::ops::layout::{supported, Layout, Layouts};
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The most tokens a window takes (T = 1..8).
pub const MAX_T: usize = 8;

/// The layouts a matrix's products run in: the plan's for its type (select/plan.rs), given at upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatLayouts {
    /// A single token's dense products.
    pub one: Layout,
    /// A window's (T > 1) dense products.
    pub window: Layout,
    /// The experts' gathers, where the matrix is a stack of experts.
    pub gather: Layout,
}

impl MatLayouts {
    /// `ty`'s layouts in the plan's `lay`.
    pub fn of(lay: &Layouts, ty: GgmlType) -> MatLayouts {
        MatLayouts { one: lay.dense_for(ty, 1), window: lay.dense_for(ty, 2), gather: lay.gather(ty) }
    }
}

/// A weight matrix on the device.
pub struct MatrixGpu {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    bytes: Buf<u8>,
    pub layouts: MatLayouts,
}

impl MatrixGpu {
    /// The device address of the weights' first byte.
    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        self.bytes.ptr(gpu)
    }

    /// The first `k` rows (1 ..= rows) as a matrix of their own: a view of these bytes, valid while this
    /// matrix is (a draft head over the first rows of the vocabulary).
    pub fn first_rows(&self, gpu: &Gpu, k: usize) -> Result<MatrixGpu, CudaError> {
        if k == 0 || k > self.rows {
            return Err(CudaError::Shape(format!("the first {k} rows of a matrix of {}", self.rows)));
        }
        // The 16 bytes of padding after the last row stay readable (the staged layout reads them).
        let row_bytes = (self.bytes.len() - 16) / self.rows;
        let bytes = self.bytes.view(gpu, 0, k * row_bytes + 16)?;
        Ok(MatrixGpu { ty: self.ty, rows: k, cols: self.cols, bytes, layouts: self.layouts })
    }

    /// `m` on the device, its products to run in `lay`'s layouts for its type.
    pub fn upload(gpu: &Gpu, m: &Matrix, lay: &Layouts) -> Result<MatrixGpu, CudaError> {
        if !supported(m.ty) {
            return Err(CudaError::Shape(format!("no GPU matrix-vector kernel for {} weights yet", m.ty)));
        }
        if !m.cols.is_multiple_of(8) || m.cols > i32::MAX as usize || m.rows > i32::MAX as usize {
            return Err(CudaError::Shape(format!(
                "matrix of {} × {}: columns must be a multiple of 8",
                m.rows, m.cols
            )));
        }
        // 16 bytes of padding: the staged layout's copy rounds the last row's end up to 16 bytes.
        let mut bytes = Buf::zeros(gpu, m.bytes.len() + 16)?;
        bytes.write(gpu, &m.bytes)?;
        Ok(MatrixGpu { ty: m.ty, rows: m.rows, cols: m.cols, bytes, layouts: MatLayouts::of(lay, m.ty) })
    }

    /// A second copy of these weights on the device (benches and checks: sets that overflow the L2).
    pub fn duplicate(&self, gpu: &Gpu) -> Result<MatrixGpu, CudaError> {
        let bytes = Buf::zeros(gpu, self.bytes.len())?;
        bytes.copy_from(gpu, 0, &self.bytes, self.bytes.len())?;
        Ok(MatrixGpu { ty: self.ty, rows: self.rows, cols: self.cols, bytes, layouts: self.layouts })
    }

    /// The same type and shape as `other` (two products in one launch need it).
    pub fn same_shape(&self, other: &MatrixGpu) -> bool {
        (self.ty, self.rows, self.cols) == (other.ty, other.rows, other.cols)
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    /// The layout of this matrix's dense product of `t` tokens.
    pub fn layout(&self, t: usize) -> Layout {
        if t > 1 {
            self.layouts.window
        } else {
            self.layouts.one
        }
    }
}

/// Where the experts' rows start in a stacked matrix: expert e's first row is `e·stride + offset`.
#[derive(Clone, Copy)]
pub struct Gather {
    pub stride: usize,
    pub offset: usize,
    /// Rows of one expert's projection.
    pub rows: usize,
}
