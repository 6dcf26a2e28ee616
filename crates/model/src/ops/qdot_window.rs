//! Rows of a § qdot type times a window of quantized inputs on the host, by the chosen vector level
//! (`ops/vector.rs`): the scalar contract of `ops/qdot.rs`, or x86's kernels (`ops/qdot_x86.rs`), which
//! unpack each block once for the whole window. Every level gives the scalar bits.

use strata_gguf::GgmlType;

use super::qdot::{qdot_row, QInput, QBLOCK};
use super::vector::Vector;

/// `out[r·T + t]` = row r of `bytes` (rows of `row_bytes`) times `xs[t]`, for each row and each of the
/// window's T inputs, by the vector level `v`: every level gives [`qdot_row`]'s bits; the vector ones
/// unpack each block once for the whole window.
pub fn qdot_rows_window(ty: GgmlType, bytes: &[u8], row_bytes: usize, xs: &[&QInput], out: &mut [f32], v: Vector) {
    debug_assert_eq!(bytes.len() / row_bytes * xs.len(), out.len());
    if xs.is_empty() || bytes.is_empty() {
        return;
    }
    match v {
        #[cfg(target_arch = "x86_64")]
        Vector::Avx2 | Vector::Avx512 => {
            // The kernels read the inputs' codes by pointer: a short input would be read past its end.
            let cols = row_bytes / ty.type_size() * ty.block_size();
            assert!(xs.iter().all(|x| x.q.len() >= cols && x.d.len() * QBLOCK >= cols && x.sum.len() * QBLOCK >= cols));
            assert!(bytes.len().is_multiple_of(row_bytes) && row_bytes.is_multiple_of(ty.type_size()));
            // SAFETY: the level is only ever chosen where the CPU has it (vector::set, Vector::parse).
            unsafe {
                if v == Vector::Avx512 && ty == GgmlType::Q2_0 && super::vector::q2_0_wide() {
                    super::qdot_avx512::rows_q2_0(bytes, row_bytes, xs, out)
                } else {
                    super::qdot_x86::rows_window(ty, bytes, row_bytes, xs, out, v == Vector::Avx512)
                }
            }
        }
        _ => {
            for (row, out) in bytes.chunks_exact(row_bytes).zip(out.chunks_exact_mut(xs.len())) {
                for (o, x) in out.iter_mut().zip(xs) {
                    *o = qdot_row(ty, row, x);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::qdot::{quantize_input, uses_qdot};
    use strata_gguf::{quant, SplitMix64};

    fn normal(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).map(|_| (0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0).collect()
    }

    #[test]
    fn every_vector_level_gives_the_scalar_bits_for_every_window() {
        // Random bit patterns (every weight code, Q8_0's −128, Q6_K's negative scales), rows with a
        // partial last group of pieces, windows longer than a kernel's stack, inputs at ±127 and NaN.
        let mut rng = SplitMix64::new(17);
        let levels: Vec<Vector> = Vector::ALL.into_iter().filter(|v| v.available()).collect();
        for ty in GgmlType::ALL.into_iter().filter(|&t| uses_qdot(t)) {
            let bs = ty.block_size();
            for blocks in [1, 3, 5, 8, 13] {
                let cols = blocks * bs;
                let bytes = quant::random_blocks(ty, blocks, &mut rng);
                let inputs: Vec<QInput> = (0..19)
                    .map(|t| {
                        let mut x = normal(&mut rng, cols);
                        if t % 4 == 1 {
                            x[rng.next_u64() as usize % cols] = f32::NAN;
                        }
                        if t % 4 == 2 {
                            x.iter_mut().step_by(3).for_each(|v| *v = v.signum() * 1e3);
                        }
                        quantize_input(&x)
                    })
                    .collect();
                let xs: Vec<&QInput> = inputs.iter().collect();
                let want: Vec<u32> = xs.iter().map(|x| qdot_row(ty, &bytes, x).to_bits()).collect();
                for &v in &levels {
                    for t in [1, 2, 8, 19] {
                        // The row three times over: each copy gives the same bits.
                        let rows = bytes.repeat(3);
                        let mut out = vec![0f32; 3 * t];
                        qdot_rows_window(ty, &rows, bytes.len(), &xs[..t], &mut out, v);
                        for r in 0..3 {
                            let got: Vec<u32> = out[r * t..(r + 1) * t].iter().map(|o| o.to_bits()).collect();
                            assert_eq!(got, want[..t], "{ty} × {cols}, {} with a window of {t}, row {r}", v.name());
                        }
                    }
                }
            }
        }
        // Where this CPU has no vector level the test has checked the scalar path only; say so.
        if levels.len() == 1 {
            eprintln!("note: no vector level on this CPU; only the scalar path was checked");
        }
    }
}
