//! Scratch folders for the tests. Every test that writes files writes them here, so a run leaves nothing
//! behind in the temporary folder: a test's own folder goes when its `Scratch` is dropped, a folder shared
//! by the tests of one process (a model written once, say) goes when the process exits. A run's files
//! would otherwise pile up on a machine that runs the suite many times, until its disk is full.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A folder of one test, removed (with everything in it) when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new, empty folder `strata-<tag>-<process>-<n>` in the temporary folder.
    pub fn new(tag: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("strata-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// A scratch folder is used as its path (`dir.join(..)`, `&dir` for a `&Path`).
impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new folder that lives until the process exits (for what a `static` holds: statics are never
/// dropped). Removed at exit, whether the tests passed or failed: libtest ends through `exit`.
pub fn for_process(tag: &str) -> PathBuf {
    let s = Scratch::new(tag);
    let dir = s.0.clone();
    std::mem::forget(s);
    at_exit().lock().unwrap_or_else(|e| e.into_inner()).push(dir.clone());
    dir
}

fn at_exit() -> &'static Mutex<Vec<PathBuf>> {
    static DIRS: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    DIRS.get_or_init(|| {
        extern "C" {
            fn atexit(f: extern "C" fn()) -> i32;
        }
        extern "C" fn remove_all() {
            if let Some(dirs) = DIRS.get() {
                for d in dirs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
        // SAFETY: `remove_all` is a plain function that touches only this static; registering it once
        // is all `atexit` asks.
        unsafe { atexit(remove_all) };
        Mutex::new(Vec::new())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_folder_is_gone_once_dropped() {
        let s = Scratch::new("scratch-self-test");
        std::fs::write(s.join("f"), b"x").unwrap();
        let dir = s.path().to_path_buf();
        assert!(dir.join("f").exists());
        drop(s);
        assert!(!dir.exists());
    }

    #[test]
    fn two_folders_of_one_tag_differ() {
        let (a, b) = (Scratch::new("scratch-self-test"), Scratch::new("scratch-self-test"));
        assert_ne!(a.path(), b.path());
    }

    #[test]
    fn a_process_folder_is_gone_after_the_process_exits() {
        // A child process (this test binary, filtered to the helper below) makes one and exits.
        if std::env::var("STRATA_SCRATCH_CHILD").is_ok() {
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::child_makes_a_process_folder", "--nocapture"])
            .env("STRATA_SCRATCH_CHILD", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("process folder: ")).expect("the child printed its folder");
        let dir = PathBuf::from(line);
        assert!(dir.starts_with(std::env::temp_dir()));
        assert!(!dir.exists(), "{} outlived its process", dir.display());
    }

    #[test]
    fn child_makes_a_process_folder() {
        let dir = for_process("scratch-self-test");
        std::fs::write(dir.join("f"), b"x").unwrap();
        assert!(dir.join("f").exists());
        println!("process folder: {}", dir.display());
    }
}
