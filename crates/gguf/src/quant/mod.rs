//! Block codecs of the ggml types: dequantize every type of spec §10, quantize the ones the
//! synthetic-model writer uses. The type dispatch lives here and only here.
//!
//! Dequantization follows ggml's reference order of float operations exactly (no fused multiply-add),
//! so it agrees bit for bit with the reference and with the `gguf` Python package (checked in CI).

mod float;
mod fp4;
mod grids;
mod iq1;
mod iq4;
mod iqgrid;
mod kquants;
mod legacy;
mod random;
mod ternary;

use crate::types::GgmlType;

pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
pub use grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
pub use iq4::IQ4_NL_VALUES;
pub use kquants::{ints_q4_k, ints_q6_k, scale_min_k4, KInts};
pub use random::random_blocks;

/// Dequantizes whole blocks of `ty` from `data` into `out` (one f32 per element).
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), String> {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    if !data.len().is_multiple_of(ts) || data.len() / ts * bs != out.len() {
        return Err(format!(
            "{} bytes of {ty} do not make {} elements (blocks of {bs} elements in {ts} bytes)",
            data.len(),
            out.len()
        ));
    }
    let f: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => float::dequant_f32,
        GgmlType::F16 => float::dequant_f16,
        GgmlType::BF16 => float::dequant_bf16,
        GgmlType::Q8_0 => legacy::dequant_q8_0,
        GgmlType::Q4_0 => legacy::dequant_q4_0,
        GgmlType::Q5_0 => legacy::dequant_q5_0,
        GgmlType::Q2_0 => legacy::dequant_q2_0,
        GgmlType::IQ4_NL => iq4::dequant_iq4_nl,
        GgmlType::IQ4_XS => iq4::dequant_iq4_xs,
        GgmlType::Q3_K => kquants::dequant_q3_k,
        GgmlType::Q4_K => kquants::dequant_q4_k,
        GgmlType::Q5_K => kquants::dequant_q5_k,
        GgmlType::Q6_K => kquants::dequant_q6_k,
        GgmlType::IQ2_XS => iqgrid::dequant_iq2_xs,
        GgmlType::IQ3_XXS => iqgrid::dequant_iq3_xxs,
        GgmlType::IQ3_S => iqgrid::dequant_iq3_s,
        GgmlType::Q4_1 => legacy::dequant_q4_1,
        GgmlType::Q5_1 => legacy::dequant_q5_1,
        GgmlType::Q2_K => kquants::dequant_q2_k,
        GgmlType::IQ2_XXS => iqgrid::dequant_iq2_xxs,
        GgmlType::IQ2_S => iqgrid::dequant_iq2_s,
        GgmlType::IQ1_M => iq1::dequant_iq1_m,
        GgmlType::TQ1_0 => ternary::dequant_tq1_0,
        GgmlType::TQ2_0 => ternary::dequant_tq2_0,
        GgmlType::NVFP4 => fp4::dequant_nvfp4,
    };
    if bs == 1 {
        f(data, out); // the float types convert a whole run at once
    } else {
        for (b, y) in data.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
            f(b, y);
        }
    }
    Ok(())
}

/// Fills a block's integer weights and returns its scale (see [`int_weights`]).
pub type IntWeightsFn = fn(&[u8], &mut [i8]) -> f32;

/// Reads one block of a type whose values are one scale times small integers (Q8_0, Q4_0, Q2_0, IQ4_NL):
/// fills `w` (one per element) and returns d, so that element i is `d·w[i]` with the dequantizer's bits.
/// None for every other type (their blocks carry several scales or no integer codes).
pub fn int_weights(ty: GgmlType) -> Option<IntWeightsFn> {
    Some(match ty {
        GgmlType::Q8_0 => legacy::ints_q8_0,
        GgmlType::Q4_0 => legacy::ints_q4_0,
        GgmlType::Q2_0 => legacy::ints_q2_0,
        GgmlType::IQ4_NL => iq4::ints_iq4_nl,
        _ => return None,
    })
}

/// Whether [`quantize`] can write `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    quantizer(ty).is_some()
}

/// Quantizes one block (or, for the float types, a run of elements).
type QuantFn = fn(&[f32], &mut [u8]);

fn quantizer(ty: GgmlType) -> Option<QuantFn> {
    Some(match ty {
        GgmlType::F32 => float::quant_f32,
        GgmlType::F16 => float::quant_f16,
        GgmlType::BF16 => float::quant_bf16,
        GgmlType::Q8_0 => legacy::quant_q8_0,
        GgmlType::Q4_0 => legacy::quant_q4_0,
        GgmlType::Q2_0 => legacy::quant_q2_0,
        GgmlType::IQ4_NL => iq4::quant_iq4_nl,
        GgmlType::Q4_K => kquants::quant_q4_k,
        GgmlType::Q6_K => kquants::quant_q6_k,
        GgmlType::IQ2_XS => iqgrid::quant_iq2_xs,
        GgmlType::IQ3_XXS => iqgrid::quant_iq3_xxs,
        GgmlType::IQ3_S => iqgrid::quant_iq3_s,
        GgmlType::Q5_0
        | GgmlType::IQ4_XS
        | GgmlType::Q3_K
        | GgmlType::Q5_K
        | GgmlType::Q4_1
        | GgmlType::Q5_1
        | GgmlType::Q2_K
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_S
        | GgmlType::IQ1_M
        | GgmlType::TQ1_0
        | GgmlType::TQ2_0
        | GgmlType::NVFP4 => return None,
    })
}

/// Quantizes `x` (a whole number of blocks) to `ty`, appending the blocks to `out`.
pub fn quantize(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) -> Result<(), String> {
    let q = quantizer(ty).ok_or_else(|| format!("quantizing to {ty} is not supported"))?;
    let (bs, ts) = (ty.block_size(), ty.type_size());
    if !x.len().is_multiple_of(bs) {
        return Err(format!("{} values are not a whole number of {ty} blocks of {bs}", x.len()));
    }
    let start = out.len();
    out.resize(start + x.len() / bs * ts, 0);
    if bs == 1 {
        q(x, &mut out[start..]);
    } else {
        for (xb, b) in x.chunks_exact(bs).zip(out[start..].chunks_exact_mut(ts)) {
            q(xb, b);
        }
    }
    Ok(())
}

/// The fp16 at `b[at..at + 2]` as f32.
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Stores `v` as fp16 at `b[at..at + 2]` and returns the stored value as f32.
fn put_f16(b: &mut [u8], at: usize, v: f32) -> f32 {
    let h = f32_to_f16(v);
    b[at..at + 2].copy_from_slice(&h.to_le_bytes());
    f16_to_f32(h)
}

/// The element of `x` with the largest magnitude, sign kept (the first one among equals).
fn signed_absmax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

#[cfg(test)]
mod tests;
