//! Writing GGUF v3 files as a stream: the header first, then each tensor's bytes as they are produced,
//! so a 40 GB model is written without ever being held in memory.
//!
//! ```no_run
//! # fn main() -> strata_gguf::Result<()> {
//! use strata_gguf::{GgmlType, GgufBuilder, Value};
//! let mut b = GgufBuilder::new();
//! b.add("general.architecture", Value::String("qwen4exp".into()));
//! b.add_tensor("a.weight", &[64, 2], GgmlType::F32)?;
//! let mut w = b.create("model.gguf")?;
//! w.write(&[0u8; 64 * 2 * 4])?; // in as many pieces as convenient
//! w.finish()?;
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::read::{self, TensorInfo, DEFAULT_ALIGNMENT, MAGIC};
use crate::types::GgmlType;
use crate::value::{Array, Value};

/// The metadata and tensor list of a file to be written.
#[derive(Default)]
pub struct GgufBuilder {
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    alignment: Option<u64>,
}

impl GgufBuilder {
    pub fn new() -> GgufBuilder {
        GgufBuilder::default()
    }

    /// Adds (or replaces) a metadata key. `general.alignment` (a u32 power of two) sets the alignment.
    pub fn add(&mut self, key: &str, value: Value) -> &mut Self {
        if key == "general.alignment" {
            if let Value::U32(a) = value {
                self.alignment = Some(a as u64);
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Declares the next tensor; its bytes are written later, in declaration order.
    pub fn add_tensor(&mut self, name: &str, shape: &[u64], ty: GgmlType) -> Result<&mut Self> {
        let err = |kind| Error::new("(gguf being written)", kind);
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(err(ErrorKind::DuplicateTensor(name.to_string())));
        }
        if shape.len() > read::MAX_DIMS as usize {
            return Err(err(ErrorKind::TooManyDims { tensor: name.to_string(), n_dims: shape.len() as u32 }));
        }
        let (n_elements, n_bytes) = read::tensor_size(name, shape, ty).map_err(err)?;
        self.tensors.push(TensorInfo {
            name: name.to_string(),
            shape: shape.to_vec(),
            ty,
            offset: 0,
            n_elements,
            n_bytes,
        });
        Ok(self)
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Creates the file and writes the header; returns the writer for the tensors' bytes.
    pub fn create(self, path: impl AsRef<Path>) -> Result<GgufWriter<BufWriter<File>>> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| Error::new(path, e.into()))?;
        self.begin(BufWriter::with_capacity(1 << 20, file), path)
    }

    /// Writes the header to `out`; `name` stands for the destination in errors.
    pub fn begin<W: Write>(mut self, mut out: W, name: impl Into<PathBuf>) -> Result<GgufWriter<W>> {
        let path = name.into();
        let io = |e: std::io::Error| Error::new(&path, e.into());
        let alignment = self.alignment.unwrap_or(DEFAULT_ALIGNMENT);
        if !alignment.is_power_of_two() {
            return Err(Error::new(&path, ErrorKind::Write(format!("alignment {alignment} is not a power of two"))));
        }
        let mut offset = 0u64;
        for t in &mut self.tensors {
            t.offset = offset;
            offset = read::align_up(offset + t.n_bytes, alignment).expect("tensor sizes were checked");
        }
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut head, k);
            head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut head, v);
        }
        for t in &self.tensors {
            put_string(&mut head, &t.name);
            head.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&t.offset.to_le_bytes());
        }
        let data_offset = read::align_up(head.len() as u64, alignment).expect("header size is small");
        head.resize(data_offset as usize, 0);
        out.write_all(&head).map_err(io)?;
        Ok(GgufWriter { out, path, tensors: self.tensors, alignment, current: 0, done_in_current: 0 })
    }
}

/// Streams the tensors' bytes, in declaration order, padding between them.
pub struct GgufWriter<W: Write> {
    out: W,
    path: PathBuf,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    current: usize,
    done_in_current: u64,
}

impl<W: Write> GgufWriter<W> {
    /// The tensor whose bytes come next, if any.
    pub fn next_tensor(&self) -> Option<&TensorInfo> {
        self.tensors.get(self.current)
    }

    /// Appends bytes to the data section: they fill the current tensor, then the next, and so on.
    pub fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some(t) = self.tensors.get(self.current) else {
                return Err(self.error(format!("{} bytes past the last tensor", bytes.len())));
            };
            let room = t.n_bytes - self.done_in_current;
            let n = room.min(bytes.len() as u64) as usize;
            self.out.write_all(&bytes[..n]).map_err(|e| Error::new(&self.path, e.into()))?;
            self.done_in_current += n as u64;
            bytes = &bytes[n..];
            self.close_full_tensors()?;
        }
        Ok(())
    }

    /// Writes one whole tensor, checking that it is the one expected next and that the size is right.
    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.close_full_tensors()?; // zero-byte tensors before it
        match self.tensors.get(self.current) {
            Some(t) if t.name == name && self.done_in_current == 0 && t.n_bytes == bytes.len() as u64 => {}
            Some(t) => {
                return Err(self.error(format!(
                    "tensor {name:?} given ({} bytes), expected {:?} ({} bytes, {} written)",
                    bytes.len(),
                    t.name,
                    t.n_bytes,
                    self.done_in_current
                )))
            }
            None => return Err(self.error(format!("tensor {name:?} given after the last tensor"))),
        }
        self.write(bytes)
    }

    /// Checks every tensor was written in full and flushes.
    pub fn finish(mut self) -> Result<W> {
        self.close_full_tensors()?;
        if let Some(t) = self.tensors.get(self.current) {
            let msg =
                format!("file closed with tensor {:?} at {} of {} bytes", t.name, self.done_in_current, t.n_bytes);
            return Err(self.error(msg));
        }
        self.out.flush().map_err(|e| Error::new(&self.path, e.into()))?;
        Ok(self.out)
    }

    /// Moves past every complete tensor, writing the padding that aligns the next one.
    fn close_full_tensors(&mut self) -> Result<()> {
        while let Some(t) = self.tensors.get(self.current) {
            if self.done_in_current < t.n_bytes {
                break;
            }
            if self.current + 1 < self.tensors.len() {
                let end = t.offset + t.n_bytes;
                let pad = read::align_up(end, self.alignment).expect("checked") - end;
                self.out.write_all(&vec![0u8; pad as usize]).map_err(|e| Error::new(&self.path, e.into()))?;
            }
            self.current += 1;
            self.done_in_current = 0;
        }
        Ok(())
    }

    fn error(&self, msg: String) -> Error {
        Error::new(&self.path, ErrorKind::Write(msg))
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        _ => (0..a.len()).for_each(|i| put_value(out, &a.get(i).expect("index in range"))),
    }
}

/// A copy of the file at `src` with every tensor whose type `which` picks dequantized to F32 (the same
/// values; the rest byte for byte): a model whose products all run in f32, for comparisons with a float
/// reference.
pub fn dequantized_copy(src: &Path, dst: &Path, which: impl Fn(GgmlType) -> bool) -> Result<()> {
    retyped_copy(src, dst, |t| if which(t.ty) { GgmlType::F32 } else { t.ty }, &mut |_, _| {})
}

/// A copy of the file at `src` with each tensor stored as `ty_of` says: a tensor of the same type is copied
/// byte for byte, any other is dequantized to f32 and quantized to its new type (a whole number of blocks
/// per row, or an error naming the tensor). `progress(done, total)` counts tensors.
pub fn retyped_copy(
    src: &Path,
    dst: &Path,
    ty_of: impl Fn(&TensorInfo) -> GgmlType,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<()> {
    let f = crate::file::GgufFile::open(src)?;
    let mut b = GgufBuilder::new();
    for (k, v) in f.metadata() {
        b.add(k, v.clone());
    }
    for t in f.tensors() {
        b.add_tensor(&t.name, &t.shape, ty_of(t))?;
    }
    let mut w = b.create(dst)?;
    let fail = |e: String| Error::new(src, ErrorKind::Write(e));
    for (i, t) in f.tensors().iter().enumerate() {
        let (data, ty) = (f.require(&t.name)?.data, ty_of(t));
        if ty == t.ty {
            w.write_tensor(&t.name, data)?;
        } else {
            let mut v = vec![0f32; data.len() / t.ty.type_size() * t.ty.block_size()];
            crate::quant::dequantize(t.ty, data, &mut v).map_err(|e| fail(format!("{}: {e}", t.name)))?;
            let mut out = Vec::new();
            crate::quant::quantize(ty, &v, &mut out).map_err(|e| fail(format!("{}: {e}", t.name)))?;
            w.write_tensor(&t.name, &out)?;
        }
        progress(i + 1, f.tensors().len());
    }
    w.finish().map(|_| ())
}

/// The bytes of a copy of `src` with metadata `key` set to `value` (added when absent), or dropped when
/// `value` is `None`; the tensors byte for byte. For tests and tools that vary one key of a real file.
pub fn with_metadata(src: &crate::file::GgufFile, key: &str, value: Option<&Value>) -> Result<Vec<u8>> {
    let mut b = GgufBuilder::new();
    let mut seen = false;
    for (k, v) in src.metadata() {
        if k == key {
            seen = true;
            if let Some(new) = value {
                b.add(k, new.clone());
            }
        } else {
            b.add(k, v.clone());
        }
    }
    if let (false, Some(new)) = (seen, value) {
        b.add(key, new.clone());
    }
    for t in src.tensors() {
        b.add_tensor(&t.name, &t.shape, t.ty)?;
    }
    let mut w = b.begin(Vec::new(), src.path())?;
    for t in src.tensors() {
        w.write_tensor(&t.name, src.require(&t.name)?.data)?;
    }
    w.finish()
}
