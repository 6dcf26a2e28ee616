//! Mutation test: at least 100,000 corrupted variants of a valid file, each parsed and (when accepted)
//! fully dequantized. Every one must end in `Ok` or a typed error; a panic fails the test.
//! `STRATA_MUTANTS=N` changes the count.

mod common;

use strata_gguf::{GgufFile, SplitMix64};

/// Values that tend to break length and offset arithmetic.
const NASTY: [u64; 10] = [0, 1, 7, 0xff, 0xffff_ffff, 1 << 32, 1 << 62, i64::MAX as u64, u64::MAX, u64::MAX - 7];

fn mutate(seed_file: &[u8], header_len: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let mut f = seed_file.to_vec();
    // Most mutations land in the header, where the structure is.
    let pos = |rng: &mut SplitMix64, len: usize| {
        let span = if rng.below(4) == 0 { len } else { header_len.min(len) };
        rng.below(span.max(1) as u64) as usize
    };
    for _ in 0..=rng.below(3) {
        if f.is_empty() {
            break;
        }
        match rng.below(7) {
            0 => {
                let p = pos(rng, f.len());
                f[p] ^= 1 << rng.below(8);
            }
            1 => {
                let p = pos(rng, f.len());
                f[p] = rng.next_u64() as u8;
            }
            2 => {
                let p = pos(rng, f.len());
                let v = if rng.below(2) == 0 { NASTY[rng.below(10) as usize] } else { rng.below(f.len() as u64 * 2) };
                let bytes = v.to_le_bytes();
                let n = [1, 2, 4, 8][rng.below(4) as usize].min(f.len() - p);
                f[p..p + n].copy_from_slice(&bytes[..n]);
            }
            3 => {
                let n = pos(rng, f.len());
                f.truncate(n);
            }
            4 => {
                let p = pos(rng, f.len());
                let n = (rng.below(16) as usize + 1).min(f.len() - p);
                f.drain(p..p + n);
            }
            5 => {
                let p = pos(rng, f.len());
                let junk: Vec<u8> = (0..rng.below(16) + 1).map(|_| rng.next_u64() as u8).collect();
                f.splice(p..p, junk);
            }
            _ => {
                // Copy a run of the file over another place in it.
                let (a, b) = (pos(rng, f.len()), pos(rng, f.len()));
                let n = (rng.below(24) as usize).min(f.len() - a.max(b));
                let run = f[a..a + n].to_vec();
                f[b..b + n].copy_from_slice(&run);
            }
        }
    }
    f
}

/// Parses and, if accepted, dequantizes everything. Returns whether the file was accepted.
fn exercise(bytes: Vec<u8>) -> bool {
    match GgufFile::from_bytes("mutant.gguf", bytes) {
        Ok(f) => {
            for t in f.tensors() {
                let view = f.require(&t.name).expect("a listed tensor is found");
                assert_eq!(view.data.len() as u64, t.n_bytes);
                // Keep huge (but valid) shapes from allocating: the data is in the file, so this is
                // bounded by the mutant's size anyway.
                let _ = view.to_f32();
            }
            let _ = f.metadata().iter().map(|(k, v)| format!("{k}={v}")).count();
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

#[test]
fn mutated_files_never_panic() {
    let count: u64 = std::env::var("STRATA_MUTANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let seeds: Vec<(Vec<u8>, usize)> = (0..4)
        .map(|s| {
            let mut file = common::sample_file(s);
            if s == 3 {
                file[4] = 2; // a version-2 seed too
            }
            let header = GgufFile::from_bytes("seed", file.clone()).unwrap().header().data_offset as usize;
            (file, header)
        })
        .collect();
    let mut rng = SplitMix64::new(0x5eed);
    let (mut accepted, mut panics) = (0u64, 0u64);
    for i in 0..count {
        let (file, header) = &seeds[(i % seeds.len() as u64) as usize];
        let m = mutate(file, *header, &mut rng);
        match std::panic::catch_unwind(|| exercise(m)) {
            Ok(true) => accepted += 1,
            Ok(false) => {}
            Err(_) => panics += 1,
        }
    }
    println!(
        "mutation test: {count} mutated files, {accepted} accepted, {} refused with an error, {panics} panics",
        count - accepted - panics
    );
    assert_eq!(panics, 0, "{panics} of {count} mutated files panicked");
    assert!(accepted > 0 && accepted < count, "mutations should produce both valid and invalid files");
}
