//! The built-in default model: a small qwen4exp model trained on English text (models/README.md says what
//! it is and how python/train/ rebuilds it), carried inside the binary and written once to the cache
//! directory, which the loader maps like any other file.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The file itself.
static MODEL: &[u8] = include_bytes!("../../../models/fortunes.gguf");

/// The cache directory: `$STRATA_CACHE`, else `$XDG_CACHE_HOME/strata`, else `~/.cache/strata`.
fn cache_dir() -> Result<PathBuf> {
    crate::env::settings().cache.clone().context("no HOME for the model cache: set STRATA_CACHE")
}
/// FNV-1a of the file (build.rs computes it when the binary is built): the cached copy's name, so a binary
/// with another model never takes an old one.
const FINGERPRINT: &str = env!("BUILTIN_MODEL_FNV");

/// The path of the built-in model, written there on first use.
pub fn path() -> Result<PathBuf> {
    let dir = cache_dir()?;
    let path = dir.join(format!("strata-fortunes-{FINGERPRINT}.gguf"));
    if path.metadata().is_ok_and(|m| m.len() == MODEL.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!("writing the built-in model (first use only): {}", path.display());
    // Written under a name of its own and renamed, so concurrent first runs never see each other's half file.
    let tmp = dir.join(format!(".fortunes-{}.gguf", std::process::id()));
    std::fs::write(&tmp, MODEL).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("moving the model into {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    /// The fingerprint build.rs made is that of the bytes the binary carries.
    #[test]
    fn the_fingerprint_is_the_model_bytes() {
        assert_eq!(super::FINGERPRINT, format!("{:016x}", strata_gguf::fnv1a(super::MODEL.iter().copied())));
    }
}
