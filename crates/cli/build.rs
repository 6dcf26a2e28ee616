//! The built-in model's fingerprint (FNV-1a of models/fortunes.gguf, the same function as
//! strata_gguf::fnv1a) computed once here, not at every start: src/default_model.rs names the cached copy
//! by it, and its test checks it against the bytes the binary carries.

fn main() {
    let path = "../../models/fortunes.gguf";
    println!("cargo:rerun-if-changed={path}");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    // Not a `STRATA_` name: cargo gives it to the tests' processes too, where the binary would take it for
    // a misspelt setting.
    println!("cargo:rustc-env=BUILTIN_MODEL_FNV={h:016x}");
}
