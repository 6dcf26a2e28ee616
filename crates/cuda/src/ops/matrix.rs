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
    /// Q2_0 in the pair layout ([`pair_q2_0_blocks`]; the `qdot_q2_0p` kernels read it).
    pub pairs: bool,
}

impl MatrixGpu {
    /// The device address of the weights' first byte.
    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        self.bytes.ptr(gpu)
    }

    /// `m` on the device, its products to run in `lay`'s layouts for its type.
    pub fn upload(gpu: &Gpu, m: &Matrix, lay: &Layouts) -> Result<MatrixGpu, CudaError> {
        MatrixGpu::upload_laid(gpu, m, lay, false)
    }

    /// A stack of experts on the device: as [`upload`](MatrixGpu::upload), but Q2_0 rows of whole pairs of
    /// blocks go in the pair layout unless `STRATA_Q2_0_PAIRS=0`.
    pub fn upload_experts(gpu: &Gpu, m: &Matrix, lay: &Layouts) -> Result<MatrixGpu, CudaError> {
        let pairs = gpu.settings.q2_0_pairs && m.ty == GgmlType::Q2_0 && m.cols.is_multiple_of(PAIR_VALUES);
        MatrixGpu::upload_laid(gpu, m, lay, pairs)
    }

    fn upload_laid(gpu: &Gpu, m: &Matrix, lay: &Layouts, pairs: bool) -> Result<MatrixGpu, CudaError> {
        if !supported(m.ty) {
            return Err(CudaError::Shape(format!("no GPU matrix-vector kernel for {} weights yet", m.ty)));
        }
        if !m.cols.is_multiple_of(8) || m.cols > i32::MAX as usize || m.rows > i32::MAX as usize {
            return Err(CudaError::Shape(format!(
                "matrix of {} × {}: columns must be a multiple of 8",
                m.rows, m.cols
            )));
        }
        let want = m.rows * (m.cols / m.ty.block_size()) * m.ty.type_size();
        if pairs && m.bytes.len() != want {
            return Err(CudaError::Shape(format!(
                "{} matrix of {} × {}: {} bytes, not {want}",
                m.ty,
                m.rows,
                m.cols,
                m.bytes.len()
            )));
        }
        let paired;
        let data = match pairs {
            true => {
                paired = pair_q2_0_blocks(&m.bytes);
                &paired[..]
            }
            false => &m.bytes[..],
        };
        // 16 bytes of padding: the staged layout's copy rounds the last row's end up to 16 bytes.
        let mut bytes = Buf::zeros(gpu, data.len() + 16)?;
        bytes.write(gpu, data)?;
        Ok(MatrixGpu { ty: m.ty, rows: m.rows, cols: m.cols, bytes, layouts: MatLayouts::of(lay, m.ty), pairs })
    }

    /// A matrix of `rows` rows of this one's type, columns and layouts, its bytes zeroed (a draft head's
    /// rows gathered into it, ops/draft.rs).
    pub fn shaped_like(&self, gpu: &Gpu, rows: usize) -> Result<MatrixGpu, CudaError> {
        // The 16 bytes of padding after the last row, as an upload leaves them.
        let bytes = Buf::zeros(gpu, rows * self.row_bytes() + 16)?;
        Ok(MatrixGpu { ty: self.ty, rows, cols: self.cols, bytes, layouts: self.layouts, pairs: self.pairs })
    }

    /// A second copy of these weights on the device (benches and checks: sets that overflow the L2).
    pub fn duplicate(&self, gpu: &Gpu) -> Result<MatrixGpu, CudaError> {
        let bytes = Buf::zeros(gpu, self.bytes.len())?;
        bytes.copy_from(gpu, 0, &self.bytes, self.bytes.len())?;
        Ok(MatrixGpu { ty: self.ty, rows: self.rows, cols: self.cols, bytes, layouts: self.layouts, pairs: self.pairs })
    }

    /// The same type and shape as `other` (two products in one launch need it).
    pub fn same_shape(&self, other: &MatrixGpu) -> bool {
        (self.ty, self.rows, self.cols, self.pairs) == (other.ty, other.rows, other.cols, other.pairs)
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

/// Values in a pair of Q2_0 blocks.
const PAIR_VALUES: usize = 128;

/// Q2_0 rows (blocks of 18 bytes: a 2-byte scale, then 16 bytes of codes) in the device's pair layout:
/// each two blocks as their two scales, then their two code runs (36 bytes, the same bytes moved), so
/// that every 8-byte piece of codes lies 4 bytes past a multiple of 8 from the pair's start: 4-byte
/// aligned (qdot.cuh's `Q2_0PQ`). Rows of a multiple of 128 values, so that no pair spans two rows.
/// A whole tensor's spans of pairs are moved on every thread: a full model's experts are 32 GB of them,
/// about 2 GB/s on one thread (some 16 s of every start), and pairs are independent. An expert's rows (a cache's
/// swap, 1.4 MB) stay on the calling thread: waking the pool's threads mid-decode would take cores from
/// the host's expert kernels.
pub fn pair_q2_0_blocks(bytes: &[u8]) -> Vec<u8> {
    use rayon::prelude::*;
    const SPAN: usize = 36 * 8192;
    let mut out = vec![0u8; bytes.len()];
    if bytes.len() <= 8 * SPAN {
        pair_span(bytes, &mut out);
    } else {
        out.par_chunks_mut(SPAN).zip(bytes.par_chunks(SPAN)).for_each(|(out, bytes)| pair_span(bytes, out));
    }
    out
}

fn pair_span(bytes: &[u8], out: &mut [u8]) {
    for (src, dst) in bytes.chunks_exact(36).zip(out.chunks_exact_mut(36)) {
        dst[0..2].copy_from_slice(&src[0..2]);
        dst[2..4].copy_from_slice(&src[18..20]);
        dst[4..20].copy_from_slice(&src[2..18]);
        dst[20..36].copy_from_slice(&src[20..36]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans moved on several threads give the bytes of one pass over the whole (nine spans and a
    /// part of one: every seam between them).
    #[test]
    fn pairs_moved_in_spans_are_the_pairs_moved_in_order() {
        let len = 36 * (9 * 8192 + 5);
        let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 253) as u8).collect();
        let mut want = vec![0u8; len];
        for (src, dst) in bytes.chunks_exact(36).zip(want.chunks_exact_mut(36)) {
            let moved = [&src[0..2], &src[18..20], &src[2..18], &src[20..36]].concat();
            dst.copy_from_slice(&moved);
        }
        assert!(pair_q2_0_blocks(&bytes) == want);
    }

    /// Every piece of every row keeps its scale and its 8 bytes of codes, found where qdot.cuh's `Q2_0PQ`
    /// looks (pair j / 4: the scale at 2·(p / 2), the codes at 4 + 8p, p = j % 4), 4-byte aligned.
    #[test]
    fn the_pair_layout_moves_each_pieces_bytes_where_the_kernels_read_them() {
        let (rows, cols) = (3, 640);
        let row_bytes = cols / 64 * 18;
        let bytes: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 37 % 251) as u8).collect();
        let paired = pair_q2_0_blocks(&bytes);
        assert_eq!(paired.len(), bytes.len());
        for r in 0..rows {
            for j in 0..cols / 32 {
                let block = r * row_bytes + 18 * (j / 2);
                let (pair, p) = (r * row_bytes + 36 * (j / 4), j % 4);
                let codes = pair + 4 + 8 * p;
                assert_eq!(paired[pair + 2 * (p / 2)..][..2], bytes[block..][..2], "row {r} piece {j}: scale");
                assert_eq!(paired[codes..][..8], bytes[block + 2 + 8 * (j % 2)..][..8], "row {r} piece {j}: codes");
                assert_eq!(codes % 4, 0, "row {r} piece {j}: codes at {codes}");
            }
        }
    }

    /// A prompt window's default is the kernels' widest (settings.rs cannot import this floor's constant).
    #[test]
    fn the_default_prompt_window_is_the_kernels_widest() {
        assert_eq!(crate::runtime::settings::DEFAULT_PROMPT_WINDOW, MAX_T);
    }
}
