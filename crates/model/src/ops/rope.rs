//! Rotary position embedding (spec §5.1, §8; docs/ARITHMETIC.md § rope). The cos/sin of every angle is
//! computed once in f64 and rounded to f32; both back-ends and the indexer use these values.

/// How positions map to angles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by the factor.
    Linear(f64),
    /// YaRN (spec §8) with the trained context `orig_ctx`.
    Yarn {
        factor: f64,
        orig_ctx: u64,
    },
}

/// The rope of one geometry: `rot` rotated dims, `base`, and a scaling rule.
#[derive(Clone, Debug)]
pub struct Rope {
    pub rot: usize,
    pub base: f64,
    pub scaling: RopeScaling,
}

impl Rope {
    pub fn new(rot: usize, base: f64, scaling: RopeScaling) -> Rope {
        Rope { rot, base, scaling }
    }

    /// The (cos, sin) pairs of position `pos`, one per rotated pair i in 0..rot/2.
    pub fn row(&self, pos: u64) -> Vec<(f32, f32)> {
        let half = self.rot / 2;
        (0..half)
            .map(|i| {
                let theta = self.base.powf(-2.0 * i as f64 / self.rot as f64);
                let (angle, mscale) = match self.scaling {
                    RopeScaling::None => (pos as f64 * theta, 1.0),
                    RopeScaling::Linear(f) => (pos as f64 * theta / f, 1.0),
                    RopeScaling::Yarn { factor, orig_ctx } => {
                        let t = yarn_theta(theta, i, self.rot, self.base, factor, orig_ctx);
                        (pos as f64 * t, 1.0 + 0.1 * factor.ln())
                    }
                };
                ((angle.cos() * mscale) as f32, (angle.sin() * mscale) as f32)
            })
            .collect()
    }

    /// Rotates the first `rot` dims of `x` in NEOX pairs (i, i + rot/2):
    /// `x₀' = x₀·c − x₁·s`, `x₁' = x₀·s + x₁·c`, each product rounded, then the sum.
    pub fn apply(&self, row: &[(f32, f32)], x: &mut [f32]) {
        let half = self.rot / 2;
        for (i, &(c, s)) in row.iter().enumerate() {
            let (x0, x1) = (x[i], x[i + half]);
            x[i] = x0 * c - x1 * s;
            x[i + half] = x0 * s + x1 * c;
        }
    }
}

/// YaRN's per-dimension frequency: interpolate (θ/F) for dimensions whose wavelength exceeds the trained
/// context, keep θ for those well inside it, and ramp linearly between (beta_fast 32, beta_slow 1).
fn yarn_theta(theta: f64, i: usize, rot: usize, base: f64, factor: f64, orig_ctx: u64) -> f64 {
    let dim_for = |rotations: f64| {
        rot as f64 * (orig_ctx as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    let low = dim_for(32.0).floor().max(0.0);
    let high = dim_for(1.0).ceil().min(rot as f64 - 1.0);
    let ramp = ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
    let extrapolate = 1.0 - ramp; // 1: keep θ; 0: interpolate
    (theta / factor) * (1.0 - extrapolate) + theta * extrapolate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_norm_and_position_zero_is_identity() {
        let rope = Rope::new(16, 1e7, RopeScaling::None);
        let mut x: Vec<f32> = (0..64).map(|i| i as f32 * 0.1 - 3.0).collect();
        let orig = x.clone();
        rope.apply(&rope.row(0), &mut x);
        assert_eq!(x, orig);
        rope.apply(&rope.row(12345), &mut x);
        let n = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((n(&x[..16]) - n(&orig[..16])).abs() < 1e-3);
        assert_eq!(x[16..], orig[16..], "dims past rot are untouched");
    }

    #[test]
    fn yarn_keeps_high_frequencies_and_scales_low_ones() {
        let rope = Rope::new(64, 1e7, RopeScaling::Yarn { factor: 2.0, orig_ctx: 262_144 });
        let plain = Rope::new(64, 1e7, RopeScaling::None);
        let (y, p) = (rope.row(1000), plain.row(1000));
        let m = (1.0 + 0.1 * 2f64.ln()) as f32;
        assert!((y[0].0 - p[0].0 * m).abs() < 1e-6, "dimension 0 is extrapolated");
        let last = rope.row(1);
        let theta_last = 1e7f64.powf(-2.0 * 31.0 / 64.0);
        assert!((last[31].1 as f64 - (theta_last / 2.0).sin() * m as f64).abs() < 1e-6, "the slowest is interpolated");
    }
}
