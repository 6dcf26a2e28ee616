//! Parsing a GGUF header (metadata and tensor infos) from bytes, trusting nothing in them.
//!
//! Every length and count is checked against the bytes that remain before anything is allocated for
//! it, every offset and size is computed with checked arithmetic, and every tensor's data range is
//! checked against the file, the alignment and the other tensors.

use crate::error::ErrorKind;
use crate::types::GgmlType;
use crate::value::{Array, Value, ValueType};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most 4 dimensions.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays deeper than this are refused (they would only serve to exhaust the stack).
pub const MAX_NESTING: usize = 8;

/// One tensor as the header describes it, already checked.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `[ne0, ne1, ...]`, ne0 fastest.
    pub shape: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
}

/// The parsed header of one GGUF file.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

/// Parses and checks the header of a GGUF file whose whole contents are `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Header, ErrorKind> {
    parse_head(bytes, bytes.len() as u64)
}

/// Parses the header from the first bytes of a file of `file_len` bytes (`head` must hold at least the
/// whole header); tensor data ranges are checked against `file_len`.
pub fn parse_head(bytes: &[u8], file_len: u64) -> Result<Header, ErrorKind> {
    let mut c = Cursor { bytes, pos: 0 };
    let magic = c.take(4, "magic")?;
    if magic != MAGIC {
        return Err(ErrorKind::BadMagic(magic.try_into().unwrap_or_default()));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => return Err(ErrorKind::BigEndian),
        v => return Err(ErrorKind::UnsupportedVersion(v)),
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    // The smallest tensor info is an empty name, 0 dims, a type and an offset; the smallest key-value pair
    // an empty key, a type and one byte.
    c.check_count(n_tensors, 8 + 4 + 4 + 8, "tensor")?;
    c.check_count(n_kv, 8 + 4 + 1, "metadata")?;

    let metadata = read_metadata(&mut c, n_kv)?;
    let alignment = alignment_of(&metadata)?;
    let tensors = collect_n(n_tensors, || read_tensor_info(&mut c))?;
    let data_offset = align_up(c.pos, alignment).ok_or_else(|| ErrorKind::BadMetadata {
        key: "general.alignment".into(),
        what: "data section offset overflows".into(),
    })?;
    check_tensor_data(&tensors, alignment, data_offset, file_len)?;
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

fn read_metadata(c: &mut Cursor, n_kv: u64) -> Result<Vec<(String, Value)>, ErrorKind> {
    let mut metadata: Vec<(String, Value)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let ty = c.value_type(&key)?;
        let value = c.value(ty, &key, 0)?;
        if !seen.insert(key.clone()) {
            return Err(ErrorKind::DuplicateKey(key));
        }
        metadata.push((key, value));
    }
    Ok(metadata)
}

fn alignment_of(metadata: &[(String, Value)]) -> Result<u64, ErrorKind> {
    let Some((key, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v {
        Value::U32(a) if a.is_power_of_two() => Ok(*a as u64),
        _ => Err(ErrorKind::BadMetadata { key: key.clone(), what: format!("must be a u32 power of two, found {v}") }),
    }
}

fn read_tensor_info(c: &mut Cursor) -> Result<TensorInfo, ErrorKind> {
    let name = c.string("tensor name")?;
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(ErrorKind::TooManyDims { tensor: name, n_dims });
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        shape.push(c.u64("tensor dimension")?);
    }
    let id = c.u32("tensor type")?;
    let ty = GgmlType::from_id(id).ok_or_else(|| ErrorKind::UnknownTensorType { tensor: name.clone(), id })?;
    let offset = c.u64("tensor offset")?;
    let (n_elements, n_bytes) = tensor_size(&name, &shape, ty)?;
    Ok(TensorInfo { name, shape, ty, offset, n_elements, n_bytes })
}

/// Element count and byte size of a tensor, refusing shapes that overflow (ggml keeps counts in i64) or
/// are not a whole number of blocks along ne0.
pub fn tensor_size(name: &str, shape: &[u64], ty: GgmlType) -> Result<(u64, u64), ErrorKind> {
    let overflow = || ErrorKind::ShapeOverflow { tensor: name.to_string(), shape: shape.to_vec() };
    let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(overflow)?;
    if n > i64::MAX as u64 || shape.iter().any(|&d| d > i64::MAX as u64) {
        return Err(overflow());
    }
    let ne0 = shape.first().copied().unwrap_or(1);
    if ne0 % ty.block_size() as u64 != 0 {
        return Err(ErrorKind::NotWholeBlocks {
            tensor: name.to_string(),
            ty: ty.name().to_string(),
            ne0,
            block: ty.block_size(),
        });
    }
    let bytes = ty.bytes_for(n).ok_or_else(overflow)?;
    Ok((n, bytes))
}

fn check_tensor_data(tensors: &[TensorInfo], alignment: u64, data_offset: u64, file_len: u64) -> Result<(), ErrorKind> {
    let mut names = std::collections::HashSet::new();
    for t in tensors {
        if !names.insert(t.name.as_str()) {
            return Err(ErrorKind::DuplicateTensor(t.name.clone()));
        }
        if t.offset % alignment != 0 {
            return Err(ErrorKind::Misaligned { tensor: t.name.clone(), offset: t.offset, alignment });
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(_), Some(end)) if end <= file_len => {}
            _ => {
                return Err(ErrorKind::DataPastEnd {
                    tensor: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                })
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for w in order.windows(2) {
        if w[0].offset + w[0].n_bytes > w[1].offset {
            return Err(ErrorKind::Overlap { a: w[0].name.clone(), b: w[1].name.clone() });
        }
    }
    Ok(())
}

/// Calls `f` `n` times, collecting the results. The vector grows as items actually parse, so a count
/// that passed the bytes-left check still cannot reserve more memory than the items it finds.
fn collect_n<T>(n: u64, mut f: impl FnMut() -> Result<T, ErrorKind>) -> Result<Vec<T>, ErrorKind> {
    let mut v = Vec::with_capacity(n.min(1024) as usize);
    for _ in 0..n {
        v.push(f()?);
    }
    Ok(v)
}

/// A read position over the file's bytes; every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: u64,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        self.bytes.len() as u64 - self.pos
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], ErrorKind> {
        if n > self.left() {
            return Err(ErrorKind::Truncated { offset: self.pos, what: what.to_string(), need: n, left: self.left() });
        }
        let s = &self.bytes[self.pos as usize..(self.pos + n) as usize];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ErrorKind> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ErrorKind> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ErrorKind> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Refuses a count of items of at least `min_size` bytes each that the rest of the file cannot hold.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), ErrorKind> {
        match count.checked_mul(min_size) {
            Some(need) if need <= self.left() => Ok(()),
            _ => Err(ErrorKind::CountTooLarge { offset: self.pos, what: what.to_string(), count }),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, ErrorKind> {
        let at = self.pos;
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| ErrorKind::InvalidUtf8 { offset: at, what: what.to_string() })
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType, ErrorKind> {
        let at = self.pos;
        let id = self.u32("value type")?;
        ValueType::from_id(id).ok_or_else(|| ErrorKind::UnknownValueType { offset: at, id, what: key.to_string() })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, ErrorKind> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(key)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::Bool => Value::Bool(self.bool(key)?),
            ValueType::String => Value::String(self.string(key)?),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
        })
    }

    fn bool(&mut self, what: &str) -> Result<bool, ErrorKind> {
        let at = self.pos;
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(ErrorKind::BadMetadata { key: what.to_string(), what: format!("offset {at}: bool byte {b}") }),
        }
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array, ErrorKind> {
        if depth >= MAX_NESTING {
            return Err(ErrorKind::NestingTooDeep { offset: self.pos, max: MAX_NESTING, what: key.to_string() });
        }
        let ty = self.value_type(key)?;
        let n = self.u64(key)?;
        self.check_count(n, ty.min_encoded_size(), key)?;
        let n = n as usize;
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n as u64, key)?.to_vec()),
            ValueType::I8 => Array::I8(self.take(n as u64, key)?.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => Array::U16(self.fixed(n, key, u16::from_le_bytes)?),
            ValueType::I16 => Array::I16(self.fixed(n, key, i16::from_le_bytes)?),
            ValueType::U32 => Array::U32(self.fixed(n, key, u32::from_le_bytes)?),
            ValueType::I32 => Array::I32(self.fixed(n, key, i32::from_le_bytes)?),
            ValueType::F32 => Array::F32(self.fixed(n, key, f32::from_le_bytes)?),
            ValueType::U64 => Array::U64(self.fixed(n, key, u64::from_le_bytes)?),
            ValueType::I64 => Array::I64(self.fixed(n, key, i64::from_le_bytes)?),
            ValueType::F64 => Array::F64(self.fixed(n, key, f64::from_le_bytes)?),
            ValueType::Bool => Array::Bool(collect_n(n as u64, || self.bool(key))?),
            ValueType::String => Array::String(collect_n(n as u64, || self.string(key))?),
            ValueType::Array => Array::Array(collect_n(n as u64, || self.array_value(key, depth + 1))?),
        })
    }

    /// `n` fixed-size little-endian numbers (the count was checked against the bytes left).
    fn fixed<T, const N: usize>(&mut self, n: usize, what: &str, f: fn([u8; N]) -> T) -> Result<Vec<T>, ErrorKind> {
        let raw = self.take((n * N) as u64, what)?;
        Ok(raw.chunks_exact(N).map(|c| f(c.try_into().expect("chunk of N"))).collect())
    }
}
