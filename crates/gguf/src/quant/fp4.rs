//! NVFP4: 64 values as four groups of 16 E2M1 codes, each group with an unsigned E4M3 scale.

/// E2M1 values doubled (the scale carries the ½).
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// An unsigned E4M3 scale (bias 7) times ½: exponent bits 3..7, mantissa bits 0..3; 0 and 0x7F are 0.
fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let (exp, man) = (((x >> 3) & 0xf) as i32, (x & 7) as f32);
    let v = if exp == 0 { man * (2f32).powi(-9) } else { (1.0 + man / 8.0) * (2f32).powi(exp - 7) };
    v * 0.5
}

/// NVFP4: scales[4] (UE4M3), then per group of 16 eight bytes: element k (< 8) is the low nibble of
/// byte k, element 8 + k its high nibble; value = scale·kvalue.
pub fn dequant_nvfp4(b: &[u8], y: &mut [f32]) {
    for g in 0..4 {
        let d = ue4m3_half(b[g]);
        for k in 0..8 {
            let q = b[4 + 8 * g + k];
            y[16 * g + k] = d * KVALUES[(q & 0xf) as usize] as f32;
            y[16 * g + 8 + k] = d * KVALUES[(q >> 4) as usize] as f32;
        }
    }
}
