//! Matrix-vector products over quantized weights (docs/ARITHMETIC.md § matvec): each weight row is
//! dequantized exactly (the codec's bits) and dotted with the f32 input by the reduction contract, or, for
//! the types of § qdot, dotted in integers with the input quantized to int8. Rows are independent, so
//! splitting them over threads changes nothing in the result.

use rayon::prelude::*;
use strata_gguf::{quant, GgmlType, TensorBytes};

use super::dot::dot;
use super::qdot::{qdot_row, quantize_input, uses_qdot};

/// A weight matrix `[cols, rows]` in GGUF terms: `rows` rows of `cols` inputs, any ggml type.
#[derive(Clone)]
pub struct Matrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: TensorBytes,
}

/// Rows per parallel task: enough work to outweigh the hand-off.
const ROWS_PER_TASK: usize = 16;
/// Products of fewer weights than this run on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

impl Matrix {
    fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    /// Rows `first .. first + count` as a matrix of their own (a part of a fused tensor); rows are whole
    /// blocks, so a row range is a byte range.
    pub fn row_range(&self, first: usize, count: usize) -> Option<Matrix> {
        let rb = self.row_bytes();
        let bytes = self.bytes.slice(first.checked_mul(rb)?, count.checked_mul(rb)?)?;
        Some(Matrix { ty: self.ty, rows: count, cols: self.cols, bytes })
    }

    /// Row r dequantized into `out` (cols values).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        quant::dequantize(self.ty, self.row_slice(r), out).expect("shape checked at load");
    }

    /// Row r's bytes as stored.
    pub fn row_slice(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }

    /// `out = W·x` for rows `first..first + out.len()`.
    pub fn matvec_rows(&self, x: &[f32], first: usize, out: &mut [f32]) {
        self.rows_into(x, first, out, uses_qdot(self.ty));
    }

    /// `W·x` by § matvec's dequantize-then-dot whatever the type, § qdot's included: the HC read's
    /// products keep it (a file's HC weights are BF16; any other type is dequantized to f32 on a GPU).
    pub fn matvec_dequantized(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows];
        self.rows_into(x, 0, &mut out, false);
        out
    }

    fn rows_into(&self, x: &[f32], first: usize, out: &mut [f32], qdot: bool) {
        debug_assert_eq!(x.len(), self.cols);
        let qx = qdot.then(|| quantize_input(x));
        let rows = |t: usize, o: &mut [f32]| {
            let mut w = vec![0f32; if qx.is_some() { 0 } else { self.cols }];
            for (i, v) in o.iter_mut().enumerate() {
                let r = first + t * ROWS_PER_TASK + i;
                *v = match &qx {
                    Some(qx) => qdot_row(self.ty, self.row_slice(r), qx),
                    None => {
                        self.row(r, &mut w);
                        dot(&w, x)
                    }
                };
            }
        };
        // Handing a small product to the pool costs more than computing it here.
        if rayon::current_num_threads() == 1 || out.len() * self.cols < PARALLEL_MIN {
            out.chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(t, o)| rows(t, o));
        } else {
            out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(t, o)| rows(t, o));
        }
    }

    /// `W·x`.
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows];
        self.matvec_rows(x, 0, &mut out);
        out
    }
}
