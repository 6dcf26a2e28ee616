//! The ternary formats TQ1_0 and TQ2_0: 256 values in {−1, 0, 1} times one fp16 scale.

use super::f16_at;

/// TQ1_0: qs[48] (five base-3 digits per byte, as a fixed-point fraction), qh[4] (four digits each),
/// d. Byte x holds digits t = ((x·3^k mod 256)·3) >> 8 for k = 0..5; element order: the 32 bytes of
/// qs[0..32] for each k, then the 16 bytes of qs[32..48] for each k, then qh's 4 bytes for k = 0..4;
/// value = d·(t − 1).
pub fn dequant_tq1_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 52);
    let digit = |x: u8, k: u32| ((((x as u32 * 3u32.pow(k)) & 0xff) * 3) >> 8) as i32 - 1;
    let mut i = 0;
    for (bytes, digits) in [(&b[0..32], 5), (&b[32..48], 5), (&b[48..52], 4)] {
        for k in 0..digits {
            for &x in bytes {
                y[i] = d * digit(x, k) as f32;
                i += 1;
            }
        }
    }
}

/// TQ2_0: qs[64] (2 bits each), d. Element 128·j + 32·s + l is bits 2s.. of qs[32·j + l];
/// value = d·(q − 1).
pub fn dequant_tq2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 64);
    for j in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                let q = ((b[32 * j + l] >> (2 * s)) & 3) as i32 - 1;
                y[128 * j + 32 * s + l] = d * q as f32;
            }
        }
    }
}
