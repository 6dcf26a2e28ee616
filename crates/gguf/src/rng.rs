//! A small deterministic generator (splitmix64): reproducible test data and synthetic weights without
//! depending on a crate whose stream could change between versions.

#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// The `i`-th number (from 0) of the stream seeded with `seed`, without drawing those before it: the
    /// state only ever adds a constant, so a stream can be read at any index (speculative sampling draws
    /// the numbers of a window's positions out of order).
    pub fn nth(seed: u64, i: u64) -> u64 {
        mix(seed.wrapping_add(GAMMA.wrapping_mul(i.wrapping_add(1))))
    }

    /// Uniform in [0, 1) with 24 random bits.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn the_nth_number_is_the_one_drawn_nth() {
        for seed in [0, 7, u64::MAX] {
            let mut r = SplitMix64::new(seed);
            for i in 0..100 {
                assert_eq!(SplitMix64::nth(seed, i), r.next_u64(), "seed {seed}, index {i}");
            }
        }
    }
}
