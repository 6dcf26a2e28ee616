//! IQ1_M: 256 values in groups of 8 from a grid of −1/0/1 patterns (grids.rs), each group shifted by
//! ±1/8 and scaled by a 3-bit scale per 16 values; the block's fp16 scale is spread over four nibbles.

use super::f16_to_f32;
use super::grids::IQ1S_GRID;

const DELTA: f32 = 0.125;

/// IQ1_M: qs[32] (low 8 bits of 11-bit grid indices), qh[16] (a nibble per group: 3 index bits and
/// the delta's sign), scales[8] (four u16: 3-bit scales at bits 0, 3, 6, 9, the fp16 d in the top
/// nibbles). Value = (d·(2s + 1))·(grid + delta).
pub fn dequant_iq1_m(b: &[u8], y: &mut [f32]) {
    let (qs, qh, sc) = (&b[0..32], &b[32..48], &b[48..56]);
    let word = |i: usize| u16::from_le_bytes([sc[2 * i], sc[2 * i + 1]]);
    let d_bits = (word(0) >> 12) | ((word(1) >> 8) & 0x00f0) | ((word(2) >> 4) & 0x0f00) | (word(3) & 0xf000);
    let d = f16_to_f32(d_bits);
    for group in 0..32 {
        let scale = (word(group / 8) >> (3 * ((group / 2) % 4))) & 7;
        let dl = d * (2 * scale + 1) as f32;
        let nibble = (qh[group / 2] >> (4 * (group % 2))) & 0xf;
        let grid = IQ1S_GRID[qs[group] as usize | ((nibble & 7) as usize) << 8];
        let delta = if nibble & 8 == 0 { DELTA } else { -DELTA };
        for j in 0..8 {
            let g = ((grid >> (2 * j)) & 3) as i32 - 1;
            y[8 * group + j] = dl * (g as f32 + delta);
        }
    }
}
