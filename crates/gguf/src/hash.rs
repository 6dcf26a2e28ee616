//! The one hash the project uses for names and fingerprints: 64-bit FNV-1a, stable across runs, builds
//! and machines (std's hasher is not), so what it names on disk (a kernel cache, a saved state's
//! geometry, a model's routing counts) is found again.

/// FNV-1a over `bytes`.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_published_vectors() {
        assert_eq!(super::fnv1a(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(super::fnv1a("foobar".bytes()), 0x85944171f73967e8);
    }
}
