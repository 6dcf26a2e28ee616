//! The expert cache's routing counts kept between runs (docs/PLACEMENT.md, "The cache"): a run that places
//! experts saves its counts, and the next run of the same model starts its cache from them, ranked, instead
//! of from each layer's first experts. Only which experts the card holds at the start follows from them;
//! where an expert is computed changes no bit, so a stale, foreign or missing file changes only speed.
//!
//! The file: 16 bytes of magic, the layers (trunk and MTP) and experts a layer as u32, then every count as
//! u64, little-endian, by layer · experts + expert.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 16] = b"strata-routing-1";

/// Where the counts of the model whose first file is `model` are kept under the cache directory `cache`:
/// one file a model, named by the file's path, length and modification time (a file rewritten in place
/// starts afresh).
pub fn path_for(cache: &Path, model: &Path) -> PathBuf {
    let canon = model.canonicalize().unwrap_or_else(|_| model.to_path_buf());
    let meta = std::fs::metadata(&canon).ok();
    let len = meta.as_ref().map_or(0, |m| m.len());
    let mtime = meta.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let key = format!("{}\n{len}\n{}", canon.display(), mtime.map_or(0, |d| d.as_nanos()));
    let h = strata_gguf::fnv1a(key.bytes());
    cache.join("routing").join(format!("{h:016x}.bin"))
}

/// Counts of `layers` layers (the trunk's and the MTP layer's) of `experts` experts, written whole or not
/// at all (a temporary file renamed).
pub fn save(path: &Path, (layers, experts): (usize, usize), counts: &[u64]) -> std::io::Result<()> {
    if counts.len() != layers * experts {
        return Err(std::io::Error::other(format!("{} counts for {layers} × {experts}", counts.len())));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut bytes = Vec::with_capacity(24 + 8 * counts.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(layers as u32).to_le_bytes());
    bytes.extend_from_slice(&(experts as u32).to_le_bytes());
    counts.iter().for_each(|c| bytes.extend_from_slice(&c.to_le_bytes()));
    let tmp = path.with_extension("partial");
    std::fs::File::create(&tmp)?.write_all(&bytes)?;
    std::fs::rename(&tmp, path)
}

/// The counts saved at `path` for `layers` × `experts`; None where there is no file, and an error naming
/// what differs where it is not one of that shape.
pub fn load(path: &Path, (layers, experts): (usize, usize)) -> std::io::Result<Option<Vec<u64>>> {
    let mut bytes = Vec::new();
    match std::fs::File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |what: String| Err(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
    if bytes.len() < 24 || &bytes[..16] != MAGIC {
        return bad("not a routing counts file".into());
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
    let (l, e) = (word(16), word(20));
    if (l, e) != (layers, experts) {
        return bad(format!("counts of {l} layers × {e} experts, not {layers} × {experts}"));
    }
    if bytes.len() != 24 + 8 * layers * experts {
        return bad(format!("{} bytes, not {}", bytes.len(), 24 + 8 * layers * experts));
    }
    Ok(Some(bytes[24..].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_back_as_saved_and_a_foreign_shape_is_refused() {
        let dir = std::env::temp_dir().join(format!("strata-routing-{}", std::process::id()));
        let p = dir.join("r.bin");
        assert_eq!(load(&p, (3, 4)).unwrap(), None, "no file yet");
        let counts: Vec<u64> = (0..12).map(|i| i * 1_000_000_007).collect();
        save(&p, (3, 4), &counts).unwrap();
        assert_eq!(load(&p, (3, 4)).unwrap(), Some(counts.clone()));
        let e = load(&p, (4, 3)).unwrap_err();
        assert!(e.to_string().contains("3 layers × 4 experts, not 4 × 3"), "{e}");
        assert!(save(&p, (2, 4), &counts).is_err(), "12 counts are not 2 × 4");
        std::fs::write(&p, &b"strata-routing-1\x03\0\0\0\x04\0\0\0"[..]).unwrap();
        assert!(load(&p, (3, 4)).unwrap_err().to_string().contains("bytes"), "a cut file is refused");
        std::fs::write(&p, b"something else entirely, long enough").unwrap();
        assert!(load(&p, (3, 4)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_model_file_rewritten_gets_a_new_name() {
        let dir = std::env::temp_dir().join(format!("strata-routing-name-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join("m.gguf");
        std::fs::write(&m, b"one").unwrap();
        let a = path_for(&dir, &m);
        assert_eq!(a, path_for(&dir, &m), "the same file, the same name");
        std::fs::write(&m, b"longer").unwrap();
        assert_ne!(a, path_for(&dir, &m), "another length, another name");
        assert!(a.starts_with(dir.join("routing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
