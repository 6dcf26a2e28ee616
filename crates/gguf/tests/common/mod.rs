//! A sample GGUF with every metadata value type, nested arrays and one tensor of every type, and a raw
//! header builder for hand-made broken files.
#![allow(dead_code)]

use strata_gguf::quant::random_blocks;
use strata_gguf::{Array, GgmlType, GgufBuilder, SplitMix64, Value};

pub fn sample_metadata() -> Vec<(String, Value)> {
    let v = |k: &str, v: Value| (k.to_string(), v);
    vec![
        v("general.architecture", Value::String("qwen4exp".into())),
        v("general.alignment", Value::U32(64)),
        v("t.u8", Value::U8(200)),
        v("t.i8", Value::I8(-100)),
        v("t.u16", Value::U16(65000)),
        v("t.i16", Value::I16(-32000)),
        v("t.u32", Value::U32(4_000_000_000)),
        v("t.i32", Value::I32(-2_000_000_000)),
        v("t.f32", Value::F32(-1.5e-7)),
        v("t.bool", Value::Bool(true)),
        v("t.string", Value::String("héllo <|im_start|> 你好 🙂".into())),
        v("t.u64", Value::U64(u64::MAX - 1)),
        v("t.i64", Value::I64(i64::MIN + 1)),
        v("t.f64", Value::F64(std::f64::consts::PI)),
        v("t.empty", Value::Array(Array::U32(vec![]))),
        v("t.arr_u8", Value::Array(Array::U8(vec![1, 2, 255]))),
        v("t.arr_i16", Value::Array(Array::I16(vec![-1, 7]))),
        v("t.arr_f32", Value::Array(Array::F32(vec![0.5, -0.0, 1e30]))),
        v("t.arr_bool", Value::Array(Array::Bool(vec![true, false]))),
        v("t.arr_str", Value::Array(Array::String(vec!["a".into(), "".into(), "Ġthe".into()]))),
        v("t.arr_u64", Value::Array(Array::U64(vec![0, u64::MAX]))),
        v("t.arr_f64", Value::Array(Array::F64(vec![1e-300]))),
        v(
            "t.arr_arr",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, -2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::U8(vec![9])]),
            ])),
        ),
    ]
}

/// The tensors of the sample: one per type, 2 rows of 2 blocks, with random valid bytes.
pub fn sample_tensors(seed: u64) -> Vec<(String, Vec<u64>, GgmlType, Vec<u8>)> {
    let mut rng = SplitMix64::new(seed);
    GgmlType::ALL
        .iter()
        .map(|&ty| {
            let bs = ty.block_size() as u64;
            let ne0 = if bs == 1 { 48 } else { 2 * bs };
            let data = random_blocks(ty, (ne0 / bs * 2) as usize, &mut rng);
            (format!("t.{}.weight", ty.name().to_lowercase()), vec![ne0, 2], ty, data)
        })
        .collect()
}

/// The sample file's bytes.
pub fn sample_file(seed: u64) -> Vec<u8> {
    let mut b = GgufBuilder::new();
    for (k, v) in sample_metadata() {
        b.add(&k, v);
    }
    let tensors = sample_tensors(seed);
    for (name, shape, ty, _) in &tensors {
        b.add_tensor(name, shape, *ty).unwrap();
    }
    let mut w = b.begin(Vec::new(), "sample.gguf").unwrap();
    for (name, _, _, data) in &tensors {
        w.write_tensor(name, data).unwrap();
    }
    w.finish().unwrap()
}

/// A hand-made header: `kv` is the raw bytes of the key-value pairs (`n_kv` of them), then tensor infos
/// (name, dims, type id, offset), padding to 32 and `data_len` zero bytes.
pub fn raw_file(version: u32, n_kv: u64, kv: &[u8], tensors: &[(&str, &[u64], u32, u64)], data_len: usize) -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&version.to_le_bytes());
    f.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    f.extend_from_slice(&n_kv.to_le_bytes());
    f.extend_from_slice(kv);
    for (name, dims, ty, offset) in tensors {
        put_str(&mut f, name);
        f.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| f.extend_from_slice(&d.to_le_bytes()));
        f.extend_from_slice(&ty.to_le_bytes());
        f.extend_from_slice(&offset.to_le_bytes());
    }
    while !f.len().is_multiple_of(32) {
        f.push(0);
    }
    f.resize(f.len() + data_len, 0);
    f
}

pub fn put_str(f: &mut Vec<u8>, s: &str) {
    f.extend_from_slice(&(s.len() as u64).to_le_bytes());
    f.extend_from_slice(s.as_bytes());
}

/// Raw bytes of one key with a u32 value.
pub fn kv_u32(key: &str, v: u32) -> Vec<u8> {
    let mut f = Vec::new();
    put_str(&mut f, key);
    f.extend_from_slice(&4u32.to_le_bytes());
    f.extend_from_slice(&v.to_le_bytes());
    f
}
