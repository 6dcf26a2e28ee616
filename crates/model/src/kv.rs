//! KV-cache storage modes (spec §5): fp16, or int8 with one fp16 scale per 64 values (symmetric,
//! scale = amax/127 rounded to fp16, codes round-half-even of v/scale). Cells are dequantized when used.

use strata_gguf::quant::{f16_to_f32, f32_to_f16};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvMode {
    F16,
    Int8,
    /// Unrounded f32 (for checks against float references; twice fp16's memory).
    F32,
}

impl KvMode {
    /// Bytes one cell of `dim` values takes in this mode (int8: the codes and an fp16 scale per group).
    pub fn cell_bytes(self, dim: usize) -> usize {
        match self {
            KvMode::F16 => 2 * dim,
            KvMode::Int8 => dim + 2 * dim / INT8_GROUP,
            KvMode::F32 => 4 * dim,
        }
    }
}

impl std::str::FromStr for KvMode {
    type Err = String;
    fn from_str(s: &str) -> Result<KvMode, String> {
        match s {
            "fp16" | "f16" => Ok(KvMode::F16),
            "int8" | "q8" => Ok(KvMode::Int8),
            "f32" | "fp32" => Ok(KvMode::F32),
            _ => Err(format!("unknown KV mode {s:?} (fp16, int8 or f32)")),
        }
    }
}

/// Values per int8 scale.
pub const INT8_GROUP: usize = 64;

/// One vector per cell, `dim` values each, in the chosen mode.
#[derive(Clone, Debug)]
pub struct KvStore {
    mode: KvMode,
    dim: usize,
    halves: Vec<u16>,
    codes: Vec<i8>,
    scales: Vec<u16>,
    floats: Vec<f32>,
}

impl KvStore {
    pub fn new(mode: KvMode, dim: usize) -> KvStore {
        assert!(mode != KvMode::Int8 || dim.is_multiple_of(INT8_GROUP), "int8 KV needs whole groups of 64");
        KvStore { mode, dim, halves: Vec::new(), codes: Vec::new(), scales: Vec::new(), floats: Vec::new() }
    }

    pub fn mode(&self) -> KvMode {
        self.mode
    }

    pub fn len(&self) -> usize {
        match self.mode {
            KvMode::F16 => self.halves.len() / self.dim,
            KvMode::Int8 => self.codes.len() / self.dim,
            KvMode::F32 => self.floats.len() / self.dim,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dim);
        match self.mode {
            KvMode::F16 => self.halves.extend(v.iter().map(|&x| f32_to_f16(x))),
            KvMode::F32 => self.floats.extend_from_slice(v),
            KvMode::Int8 => {
                for g in v.chunks(INT8_GROUP) {
                    let amax = g.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let h = f32_to_f16(amax / 127.0);
                    let s = f16_to_f32(h);
                    self.scales.push(h);
                    self.codes.extend(g.iter().map(|&x| {
                        if s == 0.0 {
                            0
                        } else {
                            (x / s).round_ties_even().clamp(-127.0, 127.0) as i8
                        }
                    }));
                }
            }
        }
    }

    /// Keeps the first `cells` cells (all of them when it holds fewer).
    pub fn truncate(&mut self, cells: usize) {
        let n = cells * self.dim;
        self.halves.truncate(n);
        self.codes.truncate(n);
        self.floats.truncate(n);
        self.scales.truncate(n / INT8_GROUP);
    }

    /// Cell `i` dequantized into `out` (dim values).
    pub fn get(&self, i: usize, out: &mut [f32]) {
        let r = i * self.dim..(i + 1) * self.dim;
        match self.mode {
            KvMode::F16 => {
                for (o, &h) in out.iter_mut().zip(&self.halves[r]) {
                    *o = f16_to_f32(h);
                }
            }
            KvMode::F32 => out.copy_from_slice(&self.floats[r]),
            KvMode::Int8 => {
                for (g, (og, cg)) in out.chunks_mut(INT8_GROUP).zip(self.codes[r].chunks(INT8_GROUP)).enumerate() {
                    let s = f16_to_f32(self.scales[i * self.dim / INT8_GROUP + g]);
                    for (o, &q) in og.iter_mut().zip(cg) {
                        *o = q as f32 * s;
                    }
                }
            }
        }
    }

    /// The stored arrays (fp16 halves; int8 codes and their fp16 scales; f32 values), for checkpoints.
    pub fn parts(&self) -> (&[u16], &[i8], &[u16], &[f32]) {
        (&self.halves, &self.codes, &self.scales, &self.floats)
    }

    /// A store from saved arrays, checked to hold exactly `cells` cells of `dim` values in `mode`.
    pub fn from_parts(
        mode: KvMode,
        dim: usize,
        halves: Vec<u16>,
        codes: Vec<i8>,
        scales: Vec<u16>,
        floats: Vec<f32>,
        cells: usize,
    ) -> Result<KvStore, String> {
        let none = |n: usize| n == 0;
        let ok = match mode {
            KvMode::F16 => halves.len() == cells * dim && none(codes.len() + scales.len() + floats.len()),
            KvMode::Int8 => {
                codes.len() == cells * dim
                    && scales.len() * INT8_GROUP == cells * dim
                    && none(halves.len() + floats.len())
            }
            KvMode::F32 => floats.len() == cells * dim && none(halves.len() + codes.len() + scales.len()),
        };
        if !ok {
            return Err(format!("KV arrays do not hold {cells} cells of {dim} in {mode:?}"));
        }
        Ok(KvStore { mode, dim, halves, codes, scales, floats })
    }

    /// Bytes held per cell (for reports).
    pub fn bytes_per_cell(&self) -> usize {
        self.mode.cell_bytes(self.dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_within_their_precision() {
        let v: Vec<f32> = (0..128).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
        for (mode, tol) in [(KvMode::F16, 1e-3), (KvMode::Int8, 0.66 / 127.0 * 0.65), (KvMode::F32, 0.0)] {
            let mut s = KvStore::new(mode, 128);
            s.push(&v);
            s.push(&vec![0.0; 128]);
            let mut out = vec![0f32; 128];
            s.get(0, &mut out);
            for (a, b) in v.iter().zip(&out) {
                assert!((a - b).abs() <= tol, "{mode:?}: {a} vs {b}");
            }
            s.get(1, &mut out);
            assert!(out.iter().all(|&x| x == 0.0));
            assert_eq!(s.len(), 2);
        }
        assert_eq!(KvStore::new(KvMode::Int8, 256).bytes_per_cell(), 264);
    }
}
