//! Matrix-vector products over quantized weights (docs/ARITHMETIC.md § matvec): each weight row is
//! dequantized exactly (the codec's bits) and dotted with the f32 input by the reduction contract, or, for
//! the types of § qdot, dotted in integers with the input quantized to int8. Rows are independent, so
//! splitting them over threads changes nothing in the result.

use rayon::prelude::*;
use strata_gguf::{GgmlType, TensorBytes};

use super::dequant::dequantize;
use super::dot::{dot_prepared, dot_rows8, interleave_rows8, Prepared, ROWS8};
use super::qdot::{quantize_input, uses_qdot, QInput};
use super::qdot_window::qdot_rows_window;
use super::vector;

/// A weight matrix `[cols, rows]` in GGUF terms: `rows` rows of `cols` inputs, any ggml type.
#[derive(Clone)]
pub struct Matrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: TensorBytes,
}

/// A window's inputs to one or more products: quantized once (§ qdot) for all the products over them
/// that take int8 inputs, however many there are (a layer's q, k and v, its experts' gate and up).
pub struct Inputs<'a> {
    xs: &'a [&'a [f32]],
    // A lock, not a cell: the host's expert kernels share one expert's inputs between threads.
    quantized: std::sync::OnceLock<Vec<QInput>>,
}

impl<'a> Inputs<'a> {
    pub fn new(xs: &'a [&'a [f32]]) -> Inputs<'a> {
        Inputs { xs, quantized: std::sync::OnceLock::new() }
    }

    fn quantized(&self) -> Vec<&QInput> {
        self.quantized.get_or_init(|| self.xs.iter().map(|x| quantize_input(x)).collect()).iter().collect()
    }

    /// Rows `r0..r0 + n` of `w` times each input, row-major, by the contract of `w`'s type (§ qdot's
    /// with the inputs quantized once for all, or § matvec's).
    pub fn block(&self, w: RowBytes, r0: usize, n: usize) -> Vec<f32> {
        if uses_qdot(w.ty) {
            w.qdot_block(&self.quantized(), r0, n)
        } else {
            w.dequantized_block(self.xs, r0, n)
        }
    }
}

/// Rows of one type laid end to end, wherever they are (a mapped file, a copy in memory): what a product
/// reads. [`Matrix`]'s products split its rows over threads and give each task's rows to this; the host's
/// kernels for experts not on a device (`layers/experts.rs`) take one expert's rows whole.
#[derive(Clone, Copy)]
pub struct RowBytes<'a> {
    pub ty: GgmlType,
    pub cols: usize,
    pub bytes: &'a [u8],
}

impl RowBytes<'_> {
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    pub fn rows(&self) -> usize {
        self.bytes.len() / self.row_bytes()
    }

    fn row(&self, r: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        dequantize(self.ty, &self.bytes[r * rb..(r + 1) * rb], out).expect("shape checked at load");
    }

    /// Rows `r0..r0 + n` times each quantized input (§ qdot), row-major: one value an input.
    pub fn qdot_block(&self, xs: &[&QInput], r0: usize, n: usize) -> Vec<f32> {
        let mut o = vec![0f32; n * xs.len()];
        let rb = self.row_bytes();
        qdot_rows_window(self.ty, &self.bytes[r0 * rb..(r0 + n) * rb], rb, xs, &mut o, vector::current());
        o
    }

    /// Rows `r0..r0 + n` times each input by dequantize-then-dot (§ matvec), row-major: each row
    /// dequantized once for the window, and dotted with each input made ready once (`Prepared`). With
    /// vector units, short rows (the HC read's 32 columns) are interleaved eight at a time and dotted side
    /// by side instead (§ dot's bits either way: `dot_rows8`), so a short row does not cost a whole
    /// butterfly. Long rows were interleaved for windows too, until the prepared dots beat it (IQ2_XS, a
    /// window of 4: 6.3 ms against 3.7 on one thread, bench/results/2026-12-06-cpu-host-experts/).
    pub fn dequantized_block(&self, xs: &[&[f32]], r0: usize, n: usize) -> Vec<f32> {
        dequantized_dots(Rows::Bytes(*self), xs, r0, n)
    }
}

/// Where [`dequantized_dots`] takes its rows from: a matrix's bytes (dequantized as they are dotted), or
/// a [`Dequantized`] (kept so).
#[derive(Clone, Copy)]
enum Rows<'a> {
    Bytes(RowBytes<'a>),
    Kept(&'a Dequantized),
}

impl Rows<'_> {
    fn cols(&self) -> usize {
        match self {
            Rows::Bytes(b) => b.cols,
            Rows::Kept(k) => k.cols,
        }
    }

    /// Rows `r..r + 8` (r a multiple of 8) interleaved as `dot_rows8` reads them.
    #[inline]
    fn group<'s>(&'s self, r: usize, w: &'s mut [f32], wi: &'s mut [f32]) -> &'s [f32] {
        match self {
            Rows::Bytes(b) => {
                for (k, wk) in w.chunks_exact_mut(b.cols).enumerate() {
                    b.row(r + k, wk);
                }
                interleave_rows8(w, b.cols, wi);
                wi
            }
            Rows::Kept(k) => &k.values[r * k.cols..(r + ROWS8) * k.cols],
        }
    }

    /// Row r's values (`w`: room for them).
    #[inline]
    fn row<'s>(&'s self, r: usize, w: &'s mut [f32]) -> &'s [f32] {
        match self {
            Rows::Bytes(b) => {
                b.row(r, w);
                w
            }
            Rows::Kept(k) => k.row(r, w),
        }
    }
}

/// Rows `r0..r0 + n` times each input by dequantize-then-dot (§ matvec), row-major: with vector units,
/// short rows (fewer than [`SHORT`] columns) eight at a time side by side (`dot_rows8`), the rest one by
/// one with each input made ready once (`Prepared`); § dot's bits either way. `r0` is a multiple of 8
/// (`par_rows` cuts so), which a [`Dequantized`]'s groups need.
fn dequantized_dots(src: Rows, xs: &[&[f32]], r0: usize, n: usize) -> Vec<f32> {
    let cols = src.cols();
    let grouped = vector::current() != vector::Vector::Scalar && cols < SHORT;
    #[cfg(target_arch = "x86_64")]
    if let Rows::Bytes(b) = src {
        if !grouped && vector::current() != vector::Vector::Scalar && super::dot_iq_x86::fused(b.ty) {
            return fused_dots(b, xs, r0, n);
        }
    }
    let mut o = Vec::with_capacity(n * xs.len());
    // Room for a group of rows dequantized and interleaved, or for one row.
    let room = if grouped && matches!(src, Rows::Bytes(_)) { cols * ROWS8 } else { cols };
    let (mut w, mut wi) = (vec![0f32; room], vec![0f32; if room > cols { room } else { 0 }]);
    let mut done = 0;
    if grouped {
        while done + ROWS8 <= n {
            let group = src.group(r0 + done, &mut w, &mut wi);
            let dots: Vec<[f32; ROWS8]> = xs.iter().map(|x| dot_rows8(group, x)).collect();
            for k in 0..ROWS8 {
                o.extend(dots.iter().map(|d| d[k]));
            }
            done += ROWS8;
        }
    }
    // Each input made ready once for the rows dotted one at a time (all of them, or the last few).
    let prepared: Vec<Prepared> = if done < n { xs.iter().map(|x| Prepared::new(x)).collect() } else { vec![] };
    for r in r0 + done..r0 + n {
        let row = src.row(r, &mut w[..cols]);
        o.extend(prepared.iter().map(|x| dot_prepared(row, x)));
    }
    o
}

/// [`dequantized_dots`] of the lattice types' rows on x86, decoded and dotted in one pass
/// (`ops/dot_iq_x86.rs`): no row of floats written and read back, the same bits.
#[cfg(target_arch = "x86_64")]
fn fused_dots(b: RowBytes, xs: &[&[f32]], r0: usize, n: usize) -> Vec<f32> {
    let prepared: Vec<Prepared> = xs.iter().map(|x| Prepared::new(x)).collect();
    // The kernel reads each input's transposed groups by pointer: none may be short.
    assert!(prepared.iter().all(|p| p.transposed().len() >= b.cols));
    let rb = b.row_bytes();
    let mut o = Vec::with_capacity(n * xs.len());
    // SAFETY: called only at a level above scalar, where the CPU has AVX2, FMA and F16C (ops/vector.rs);
    // every input holds the rows' columns (checked above).
    unsafe { super::dot_iq_x86::rows_dots(b.ty, &b.bytes[r0 * rb..(r0 + n) * rb], rb, &prepared, &mut o) };
    o
}

/// Multiply-adds a parallel task takes at least: enough work to outweigh its hand-off.
const TASK_MIN: usize = 1 << 18;
/// Products of fewer multiply-adds than this run on the calling thread.
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

    /// The rows `ids` (each inside the matrix), in that order, copied into a matrix of their own: row i is
    /// row `ids[i]` byte for byte, so its products are those rows' (a draft head over a draft vocabulary).
    pub fn gather_rows(&self, ids: &[u32]) -> Option<Matrix> {
        let mut bytes = Vec::with_capacity(ids.len() * self.row_bytes());
        for &r in ids {
            if r as usize >= self.rows {
                return None;
            }
            bytes.extend_from_slice(self.row_slice(r as usize));
        }
        Some(Matrix { ty: self.ty, rows: ids.len(), cols: self.cols, bytes: TensorBytes::from_vec(bytes) })
    }

    /// Row r dequantized into `out` (cols values).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        dequantize(self.ty, self.row_slice(r), out).expect("shape checked at load");
    }

    /// Row r's bytes as stored.
    pub fn row_slice(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }

    /// `out = W·x` for rows `first..first + out.len()`.
    pub fn matvec_rows(&self, x: &[f32], first: usize, out: &mut [f32]) {
        self.products(&Inputs::new(&[x]), first, &mut [out], uses_qdot(self.ty));
    }

    /// `W·x` by § matvec's dequantize-then-dot whatever the type, § qdot's included: the HC read's
    /// products keep it (a file's HC weights are BF16; any other type is dequantized to f32 on a GPU).
    pub fn matvec_dequantized(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows];
        self.products(&Inputs::new(&[x]), 0, &mut [&mut out], false);
        out
    }

    /// `outs[t] = W·x[t]` over rows `first..first + outs[t].len()`, by § qdot's contract (`qdot`) or
    /// § matvec's: every product of the engine on the host comes here.
    fn products(&self, inputs: &Inputs, first: usize, outs: &mut [&mut [f32]], qdot: bool) {
        let xs = inputs.xs;
        debug_assert!(xs.iter().all(|x| x.len() == self.cols) && xs.len() == outs.len());
        if xs.is_empty() {
            return;
        }
        if qdot {
            self.qdot_rows(&inputs.quantized(), first, outs);
        } else {
            self.dequantized_rows(xs, first, outs);
        }
    }

    /// The matrix's rows as [`RowBytes`].
    pub fn row_view(&self) -> RowBytes<'_> {
        RowBytes { ty: self.ty, cols: self.cols, bytes: &self.bytes }
    }

    /// `outs[t] = W·x[t]` over rows `first..` by dequantize-then-dot, the rows over threads.
    fn dequantized_rows(&self, xs: &[&[f32]], first: usize, outs: &mut [&mut [f32]]) {
        let view = self.row_view();
        par_rows(outs[0].len(), self.cols, |r0, n| view.dequantized_block(xs, first + r0, n), outs);
    }

    /// `outs[t] = W·x[t]` over rows `first..` for quantized inputs, the rows over threads: each row read
    /// once for the window.
    fn qdot_rows(&self, xs: &[&QInput], first: usize, outs: &mut [&mut [f32]]) {
        let view = self.row_view();
        par_rows(outs[0].len(), self.cols, |r0, n| view.qdot_block(xs, first + r0, n), outs);
    }

    /// `W·x` for each input of a window: the same bits as [`Matrix::matvec`] on each, with the weights
    /// read once for the whole window.
    pub fn matvec_window(&self, xs: &[&[f32]]) -> Vec<Vec<f32>> {
        self.window(&Inputs::new(xs), 0, self.rows, uses_qdot(self.ty))
    }

    /// [`Matrix::matvec_window`] over inputs shared with other products (quantized once for all).
    pub fn matvec_inputs(&self, inputs: &Inputs) -> Vec<Vec<f32>> {
        self.window(inputs, 0, self.rows, uses_qdot(self.ty))
    }

    /// [`Matrix::matvec_rows`] for each of the inputs: rows `first..first + rows`, read once.
    pub fn matvec_rows_inputs(&self, inputs: &Inputs, first: usize, rows: usize) -> Vec<Vec<f32>> {
        self.window(inputs, first, rows, uses_qdot(self.ty))
    }

    /// [`Matrix::matvec_dequantized`] for each input of a window.
    pub fn matvec_dequantized_window(&self, xs: &[&[f32]]) -> Vec<Vec<f32>> {
        self.window(&Inputs::new(xs), 0, self.rows, false)
    }

    fn window(&self, inputs: &Inputs, first: usize, rows: usize, qdot: bool) -> Vec<Vec<f32>> {
        let mut outs = vec![vec![0f32; rows]; inputs.xs.len()];
        self.products(inputs, first, &mut outs.iter_mut().map(|o| o.as_mut_slice()).collect::<Vec<_>>(), qdot);
        outs
    }

    /// `W·x`.
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows];
        self.matvec_rows(x, 0, &mut out);
        out
    }
}

/// Rows split into tasks: `task(r0, n)` gives the values of the n rows from row r0 (row-major, one
/// value an output), written into `outs` (each as long as the rows). A product too small to pay for the
/// pool's hand-off is one task on this thread; a larger one is cut into a few tasks a thread, each of
/// at least TASK_MIN multiply-adds.
fn par_rows<F>(rows: usize, cols: usize, task: F, outs: &mut [&mut [f32]])
where
    F: Fn(usize, usize) -> Vec<f32> + Sync,
{
    let (k, threads) = (outs.len(), rayon::current_num_threads());
    let work = rows * cols * k;
    let tasks = if threads == 1 || work < PARALLEL_MIN { 1 } else { (work / TASK_MIN).clamp(1, 4 * threads) };
    // Whole groups of eight rows a task (the dequantized path's interleaved rows).
    let per_task = rows.div_ceil(tasks).next_multiple_of(8).max(1);
    let starts: Vec<usize> = (0..rows).step_by(per_task).collect();
    let run = |&r0: &usize| task(r0, per_task.min(rows - r0));
    let vals: Vec<Vec<f32>> =
        if starts.len() == 1 { starts.iter().map(run).collect() } else { starts.par_iter().map(run).collect() };
    for (&r0, v) in starts.iter().zip(&vals) {
        for (i, row) in v.chunks_exact(k).enumerate() {
            for (o, &val) in outs.iter_mut().zip(row) {
                o[r0 + i] = val;
            }
        }
    }
}

/// A matrix kept dequantized: its rows turned into f32 once, for the small matrices every token reads
/// whose dequantizing cost more than their dots (the HC read's, on the built-in model: dequantizing and
/// interleaving were about a fifth of a decode step on one thread). The products are
/// [`Matrix::matvec_dequantized_window`]'s on the same values by the same dots (§ matvec), so the same
/// bits.
pub struct Dequantized {
    rows: usize,
    cols: usize,
    /// Row-major, except that short rows (fewer than [`SHORT`] columns) come in whole groups of eight
    /// interleaved as `dot_rows8` reads them; the rows after the last whole group row-major.
    values: Vec<f32>,
}

/// Rows shorter than this are dotted eight at a time where the CPU has vector units
/// ([`dequantized_dots`]), so a [`Dequantized`] keeps them interleaved.
const SHORT: usize = 64;

impl Dequantized {
    pub fn new(m: &Matrix) -> Dequantized {
        let (rows, cols) = (m.rows, m.cols);
        let mut values = vec![0f32; rows * cols];
        for (r, row) in values.chunks_exact_mut(cols).enumerate() {
            m.row(r, row);
        }
        if cols < SHORT {
            let mut wi = vec![0f32; cols * ROWS8];
            for group in values.chunks_exact_mut(cols * ROWS8) {
                interleave_rows8(group, cols, &mut wi);
                group.copy_from_slice(&wi);
            }
        }
        Dequantized { rows, cols, values }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.values.len() * 4
    }

    /// [`Matrix::matvec_dequantized_window`] of the matrix this was made from: the same bits.
    pub fn matvec_window(&self, xs: &[&[f32]]) -> Vec<Vec<f32>> {
        let mut outs = vec![vec![0f32; self.rows]; xs.len()];
        if !xs.is_empty() {
            let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            par_rows(self.rows, self.cols, |r0, n| dequantized_dots(Rows::Kept(self), xs, r0, n), &mut o);
        }
        outs
    }

    /// Row r's values: in place where it is row-major, else gathered out of its group into `w`.
    fn row<'a>(&'a self, r: usize, w: &'a mut [f32]) -> &'a [f32] {
        let cols = self.cols;
        if self.cols >= SHORT || r >= self.rows / ROWS8 * ROWS8 {
            return &self.values[r * cols..(r + 1) * cols];
        }
        let group = &self.values[r / ROWS8 * ROWS8 * cols..][..ROWS8 * cols];
        for (i, v) in w.iter_mut().enumerate() {
            *v = group[i * ROWS8 + r % ROWS8];
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_gguf::quant::random_blocks;
    use strata_gguf::SplitMix64;

    /// A kept matrix gives the bits of the matrix's own dequantize-then-dot products: short rows (grouped
    /// by eight, and the rows after the last group) and long ones, row counts that do or do not fill a
    /// group, one input and windows, on one thread or split into tasks.
    #[test]
    fn a_kept_dequantized_matrix_gives_the_matrix_own_products() {
        let mut rng = SplitMix64::new(3);
        for ty in [GgmlType::Q8_0, GgmlType::BF16, GgmlType::F32, GgmlType::Q4_K] {
            for (rows, cols) in [(1024usize, 32usize), (37, 32), (5, 32), (32, 1024), (300, 256), (2049, 32)] {
                if !cols.is_multiple_of(ty.block_size()) {
                    continue;
                }
                let bytes = random_blocks(ty, rows * cols / ty.block_size(), &mut rng);
                let m = Matrix { ty, rows, cols, bytes: TensorBytes::from_vec(bytes) };
                let kept = Dequantized::new(&m);
                assert_eq!(kept.bytes(), rows * cols * 4);
                // Each row as the matrix dequantizes it (the path without vector units reads them so).
                let (mut want, mut w) = (vec![0f32; cols], vec![0f32; cols]);
                for r in 0..rows {
                    m.row(r, &mut want);
                    assert!(kept.row(r, &mut w) == &want[..], "{ty} {rows}×{cols}: row {r}");
                }
                for t in [1, 3, 8] {
                    let xs: Vec<Vec<f32>> = (0..t).map(|_| (0..cols).map(|_| rng.uniform() - 0.5).collect()).collect();
                    let xr: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
                    let (want, got) = (m.matvec_dequantized_window(&xr), kept.matvec_window(&xr));
                    let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert!(bits(&want) == bits(&got), "{ty} {rows}×{cols}, {t} inputs");
                }
            }
        }
    }
}
