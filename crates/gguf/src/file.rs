//! A GGUF file over a memory map, and a model split into `-0000N-of-0000M.gguf` shards opened as one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::quant;
use crate::read::{self, Header, TensorInfo};
use crate::value::Value;

enum Storage {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Map(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// One GGUF file: its checked header and zero-copy access to its tensors' bytes.
pub struct GgufFile {
    path: PathBuf,
    storage: Arc<Storage>,
    header: Header,
    keys: HashMap<String, usize>,
    by_name: HashMap<String, usize>,
}

/// A tensor's description and its bytes, borrowed from the file.
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
    pub file: &'a Path,
    storage: &'a Arc<Storage>,
    start: usize,
}

/// Reads one byte a page of `bytes`, so that a mapped file's pages are faulted in (from the disk or the
/// page cache) before a hot loop meets them; the bytes' XOR keeps the reads from being optimised away.
pub fn read_pages(bytes: &[u8]) {
    let sum = bytes.iter().step_by(4096).fold(0u8, |s, &b| s ^ b);
    std::hint::black_box(sum);
}

/// A tensor's bytes that keep the file's memory map alive: weights can outlive the `GgufFile`.
#[derive(Clone)]
pub struct TensorBytes {
    storage: Arc<Storage>,
    start: usize,
    len: usize,
}

impl TensorBytes {
    /// Bytes held in memory (weights made by a program rather than read from a file).
    pub fn from_vec(bytes: Vec<u8>) -> TensorBytes {
        let len = bytes.len();
        TensorBytes { storage: Arc::new(Storage::Owned(bytes)), start: 0, len }
    }

    /// Bytes `start .. start + len` of these bytes (sharing the storage); None past the end.
    pub fn slice(&self, start: usize, len: usize) -> Option<TensorBytes> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| TensorBytes { storage: self.storage.clone(), start: self.start + start, len })
    }
}

impl std::ops::Deref for TensorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage.bytes()[self.start..self.start + self.len]
    }
}

impl GgufFile {
    /// Opens and checks a GGUF file. The file is memory-mapped; tensor data is read only when used.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let err = |kind| Error::new(path, kind);
        let file = std::fs::File::open(path).map_err(|e| err(e.into()))?;
        let len = file.metadata().map_err(|e| err(e.into()))?.len();
        let storage = if len == 0 {
            Storage::Owned(Vec::new()) // an empty file cannot be mapped; the parser reports it as truncated
        } else {
            // SAFETY: the map is read-only. Another process truncating the file while it is open is not
            // something this reader can defend against (no mmap reader can); it is documented.
            Storage::Map(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| err(e.into()))?)
        };
        Self::from_storage(path.to_path_buf(), storage)
    }

    /// Parses a GGUF file held in memory; `name` stands for the file in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile> {
        Self::from_storage(name.into(), Storage::Owned(bytes))
    }

    fn from_storage(path: PathBuf, storage: Storage) -> Result<GgufFile> {
        let header = read::parse(storage.bytes()).map_err(|k| Error::new(&path, k))?;
        let keys = header.metadata.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
        let by_name = header.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile { path, storage: Arc::new(storage), header, keys, by_name })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).map(|&i| &self.header.metadata[i].1)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let info = &self.header.tensors[*self.by_name.get(name)?];
        // The parser checked the range against the file length.
        let start = (self.header.data_offset + info.offset) as usize;
        let data = &self.storage.bytes()[start..start + info.n_bytes as usize];
        Some(TensorView { info, data, file: &self.path, storage: &self.storage, start })
    }

    /// The tensor, or an error naming the file and the tensor.
    pub fn require(&self, name: &str) -> Result<TensorView<'_>> {
        self.tensor(name).ok_or_else(|| Error::new(&self.path, ErrorKind::TensorNotFound(name.to_string())))
    }

    pub fn file_len(&self) -> u64 {
        self.storage.bytes().len() as u64
    }
}

impl TensorView<'_> {
    /// The bytes, shared with the file's map (no copy).
    pub fn bytes(&self) -> TensorBytes {
        TensorBytes { storage: self.storage.clone(), start: self.start, len: self.data.len() }
    }

    /// The tensor as f32, ne0 fastest.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.info.n_elements as usize];
        quant::dequantize(self.info.ty, self.data, &mut out)
            .map_err(|what| Error::new(self.file, ErrorKind::Codec { tensor: self.info.name.clone(), what }))?;
        Ok(out)
    }
}

/// A model stored as one file or as shards `PREFIX-0000N-of-0000M.gguf`, opened as one set: tensors are
/// looked up across every shard, metadata in shard order.
pub struct GgufSet {
    files: Vec<GgufFile>,
    by_name: HashMap<String, usize>,
}

impl GgufSet {
    /// Opens `path`. If its name is a shard's name (`...-00002-of-00003.gguf`), all shards of the set are
    /// opened, whichever was named.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufSet> {
        let path = path.as_ref();
        let paths = match shard_paths(path) {
            Some(paths) => paths,
            None => vec![path.to_path_buf()],
        };
        let files = paths.iter().map(GgufFile::open).collect::<Result<Vec<_>>>()?;
        Self::from_files(files)
    }

    /// A set of already opened files, in shard order.
    pub fn from_files(files: Vec<GgufFile>) -> Result<GgufSet> {
        let count = files.len();
        let mut by_name = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            check_split_keys(f, i, count)?;
            for t in f.tensors() {
                if by_name.insert(t.name.clone(), i).is_some() {
                    return Err(Error::new(f.path(), ErrorKind::DuplicateTensor(t.name.clone())));
                }
            }
        }
        Ok(GgufSet { files, by_name })
    }

    pub fn files(&self) -> &[GgufFile] {
        &self.files
    }

    /// The first shard, which holds the model's metadata.
    pub fn first(&self) -> &GgufFile {
        &self.files[0]
    }

    /// A metadata value from the first shard that has the key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.files.iter().find_map(|f| f.get(key))
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.files[*self.by_name.get(name)?].tensor(name)
    }

    pub fn require(&self, name: &str) -> Result<TensorView<'_>> {
        self.tensor(name).ok_or_else(|| Error::new(self.first().path(), ErrorKind::TensorNotFound(name.to_string())))
    }

    /// Every tensor of every shard, shard by shard in file order.
    pub fn tensors(&self) -> impl Iterator<Item = (&GgufFile, &TensorInfo)> {
        self.files.iter().flat_map(|f| f.tensors().iter().map(move |t| (f, t)))
    }
}

/// The paths of every shard of the set `path` belongs to, if its name follows `PREFIX-NNNNN-of-MMMMM.gguf`.
pub fn shard_paths(path: &Path) -> Option<Vec<PathBuf>> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    let is_num = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !is_num(count) || !is_num(index) {
        return None;
    }
    let count: usize = count.parse().ok()?;
    if count == 0 {
        return None;
    }
    Some((1..=count).map(|i| path.with_file_name(shard_name(prefix, i, count))).collect())
}

/// The file name of shard `index` (1-based) of `count`.
pub fn shard_name(prefix: &str, index: usize, count: usize) -> String {
    format!("{prefix}-{index:05}-of-{count:05}.gguf")
}

/// If a shard carries the usual `split.no` (0-based) and `split.count` keys, they must agree with its name.
fn check_split_keys(f: &GgufFile, index: usize, count: usize) -> Result<()> {
    let bad = |what: String| Err(Error::new(f.path(), ErrorKind::Shards(what)));
    if let Some(n) = f.get("split.count").and_then(Value::as_u64) {
        if n != count as u64 {
            return bad(format!("split.count is {n} but the set has {count} files"));
        }
    }
    if let Some(n) = f.get("split.no").and_then(Value::as_u64) {
        if n != index as u64 {
            return bad(format!("split.no is {n} but the file is shard {index} (0-based)"));
        }
    }
    Ok(())
}
