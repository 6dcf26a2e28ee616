//! The project's own transcendental functions, built only from correctly rounded IEEE operations
//! (+ − × ÷ √, fma, round), so the GPU computes the same bits (docs/ARITHMETIC.md § act).

/// ln 2 split so that `k·LN2_HI` is exact for |k| < 2¹⁶.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 1.4286068e-6
const LOG2E: f32 = std::f32::consts::LOG2_E;

/// eˣ within 2 ulp over the whole f32 range. Reduction x = k·ln2 + r with k = round-half-even(x·log₂e)
/// and r by two fmas; eʳ by a degree-7 Taylor polynomial in Horner form (fma); then 2ᵏ applied as one or
/// two exact power-of-two multiplications.
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > 88.8 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    let k = (x * LOG2E).round_ties_even();
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    const C: [f32; 8] = [1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];
    let mut p = C[7];
    for &c in C[..7].iter().rev() {
        p = p.mul_add(r, c);
    }
    scale_pow2(p, k as i32)
}

/// p·2ᵏ for p in [0.7, 1.5) and k in [−151, 129], by exact power-of-two factors (the last one may round
/// into the subnormals).
fn scale_pow2(p: f32, k: i32) -> f32 {
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    if k > 127 {
        p * pow2(127) * pow2(k - 127)
    } else if k < -126 {
        p * pow2(-126) * pow2(k + 126)
    } else {
        p * pow2(k)
    }
}

/// ln x within 2 ulp for finite x > 0; NaN for x < 0, −∞ at 0, +∞ at +∞. With x = (1 + f)·2ᵏ, f in
/// [√½ − 1, √2 − 1) exact, s = f/(2 + f) and hfsq = f²/2: ln(1 + f) = f − (hfsq − s·(hfsq + R)) where
/// R = Σ 2s^{2i}/(2i + 1) (i = 1..6, Horner by fma); the small corrections carry the rounding errors, so
/// the result is close to correctly rounded even near x = 1.
pub fn ln(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return x;
    }
    let (mut m, mut k) = frexp(x);
    if m < std::f32::consts::FRAC_1_SQRT_2 {
        m *= 2.0;
        k -= 1;
    }
    let f = m - 1.0; // exact (Sterbenz)
    let s = f / (2.0 + f);
    let z = s * s;
    const C: [f32; 6] = [2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0, 2.0 / 9.0, 2.0 / 11.0, 2.0 / 13.0];
    let mut p = C[5];
    for &c in C[..5].iter().rev() {
        p = p.mul_add(z, c);
    }
    let r = z * p;
    let hfsq = 0.5 * f * f;
    let k = k as f32;
    k * LN2_HI - ((hfsq - s.mul_add(hfsq + r, k * LN2_LO)) - f)
}

/// x = m·2ᵉ with m in [0.5, 1), for finite x > 0 (subnormals included).
fn frexp(x: f32) -> (f32, i32) {
    let (x, bias) = if x < f32::MIN_POSITIVE { (x * 16_777_216.0, -24) } else { (x, 0) }; // ×2²⁴, exact
    let bits = x.to_bits();
    let e = ((bits >> 23) & 0xff) as i32 - 126;
    (f32::from_bits((bits & 0x807f_ffff) | (126 << 23)), e + bias)
}

/// ln(1 + t) for t ≥ 0, accurate for small t: with u = 1 + t rounded, ln(u)·t/(u − 1) corrects the
/// rounding of u (and is t itself when u rounds to 1).
pub fn ln1p(t: f32) -> f32 {
    let u = 1.0 + t;
    if u == 1.0 {
        t
    } else {
        ln(u) * t / (u - 1.0)
    }
}

/// σ(x) = 1 / (1 + e⁻ˣ).
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// silu(x) = x·σ(x).
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// The experts' gated activation `silu(g) ⊙ u` (the product rounded), row by row.
pub fn glu(g: &[Vec<f32>], u: &[Vec<f32>]) -> Vec<Vec<f32>> {
    g.iter().zip(u).map(|(g, u)| g.iter().zip(u).map(|(&a, &b)| silu(a) * b).collect()).collect()
}

/// softplus(x) = ln(1 + eˣ); x itself above 20, where the correction is below half an ulp.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        ln1p(exp(x))
    }
}

/// 1/√x: IEEE square root, then IEEE division.
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in ulps between an f32 and the exact (f64) value.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got == w {
            return 0.0;
        }
        let ulp =
            if w == 0.0 { f32::from_bits(1) as f64 } else { ((w.abs().next_up() as f64) - (w.abs() as f64)).abs() };
        ((got as f64) - want).abs() / ulp
    }

    /// Every 401st f32 bit pattern in [lo, hi] (both signs are covered by the callers' ranges).
    fn samples(lo: f32, hi: f32) -> impl Iterator<Item = f32> {
        (0..u32::MAX / 401)
            .map(|i| f32::from_bits(i * 401))
            .chain((0..u32::MAX / 97).map(|i| -f32::from_bits(i * 97)))
            .filter(move |x| x.is_finite() && *x >= lo && *x <= hi)
    }

    #[test]
    fn exp_within_2_ulp() {
        let mut worst = 0f64;
        for x in samples(-87.3, 88.7) {
            worst = worst.max(ulps(exp(x), (x as f64).exp()));
        }
        println!("exp: worst {worst:.3} ulp");
        assert!(worst <= 2.0, "exp: {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(-100.0) > 0.0 && exp(-100.0) < 1e-43, "reaches the subnormals");
    }

    #[test]
    fn ln_within_2_ulp() {
        let mut worst = 0f64;
        for x in samples(1e-38, f32::MAX) {
            worst = worst.max(ulps(ln(x), (x as f64).ln()));
        }
        println!("ln: worst {worst:.3} ulp");
        assert!(worst <= 2.0, "ln: {worst} ulp");
        assert_eq!(ln(1.0), 0.0);
        assert!(ln(-1.0).is_nan());
        assert_eq!(ln(0.0), f32::NEG_INFINITY);
        assert!((ln(1e-45) as f64 - (1e-45f32 as f64).ln()).abs() < 1e-4, "subnormal input");
    }

    #[test]
    fn derived_functions_within_4_ulp() {
        let (mut ws, mut wp, mut wl) = (0f64, 0f64, 0f64);
        for x in samples(-80.0, 80.0) {
            let xd = x as f64;
            ws = ws.max(ulps(sigmoid(x), 1.0 / (1.0 + (-xd).exp())));
            wp = wp.max(ulps(softplus(x), (xd.exp()).ln_1p()));
            if x >= 0.0 {
                wl = wl.max(ulps(ln1p(x), xd.ln_1p()));
            }
        }
        println!("sigmoid {ws:.3}, softplus {wp:.3}, ln1p {wl:.3} ulp");
        assert!(ws <= 4.0 && wp <= 4.0 && wl <= 4.0, "sigmoid {ws} softplus {wp} ln1p {wl}");
        assert_eq!(silu(0.0), 0.0);
        assert_eq!(silu(-200.0), 0.0);
        assert_eq!(silu(200.0), 200.0);
        assert_eq!(rsqrt(4.0), 0.5);
    }
}
