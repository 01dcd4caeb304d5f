//! Exact arithmetic on f32 values. Every finite f32 is a dyadic rational `m·2^e`; sums, products
//! and quotients of a few of them are exact rationals that fit i128 for the magnitudes quantized
//! models use. Where they would not fit, functions return `None` and callers answer "unknown".

/// A dyadic rational `mant · 2^exp`, normalised so `mant` is odd (or zero with `exp == 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dyadic {
    /// The odd (or zero) mantissa.
    pub mant: i128,
    /// The power of two it is scaled by.
    pub exp: i32,
}

impl Dyadic {
    /// Zero, in its one normal form.
    pub const ZERO: Dyadic = Dyadic { mant: 0, exp: 0 };

    /// `mant · 2^exp`, normalised so equal values compare equal.
    pub fn new(mant: i128, exp: i32) -> Dyadic {
        if mant == 0 {
            return Dyadic::ZERO;
        }
        let tz = bit_count(mant.trailing_zeros());
        Dyadic { mant: mant >> tz, exp: exp + tz }
    }

    /// The integer `k`.
    pub fn int(k: i64) -> Dyadic {
        Dyadic::new(k as i128, 0)
    }

    /// The exact value of a finite f32; `None` for NaN and infinities.
    pub fn from_f32(x: f32) -> Option<Dyadic> {
        if !x.is_finite() {
            return None;
        }
        let bits = x.to_bits();
        let sign = if bits >> 31 == 1 { -1 } else { 1 };
        let exp_bits = i32::try_from((bits >> 23) & 0xff).expect("masked to 8 bits");
        let frac = (bits & 0x7f_ffff) as i128;
        let (mant, exp) = if exp_bits == 0 { (frac, -149) } else { (frac | 0x80_0000, exp_bits - 150) };
        Some(Dyadic::new(sign * mant, exp))
    }

    /// Whether the value is 0.
    pub fn is_zero(self) -> bool {
        self.mant == 0
    }

    /// The exact product; `None` when the mantissa or exponent overflows.
    pub fn checked_mul(self, o: Dyadic) -> Option<Dyadic> {
        Some(Dyadic::new(self.mant.checked_mul(o.mant)?, self.exp.checked_add(o.exp)?))
    }

    /// The exact sum; `None` when aligning the exponents or the sum overflows i128.
    pub fn checked_add(self, o: Dyadic) -> Option<Dyadic> {
        if self.is_zero() {
            return Some(o);
        }
        if o.is_zero() {
            return Some(self);
        }
        let e = self.exp.min(o.exp);
        let a = shl(self.mant, self.exp - e)?;
        let b = shl(o.mant, o.exp - e)?;
        Some(Dyadic::new(a.checked_add(b)?, e))
    }

    /// Significant bits of the odd mantissa: the value is exactly an f32 iff this is ≤ 24 and the
    /// exponent is in range.
    pub fn sig_bits(self) -> u32 {
        128 - self.mant.unsigned_abs().leading_zeros()
    }

    /// Whether the value is exactly representable as a (normal or subnormal) f32.
    pub fn is_f32(self) -> bool {
        if self.is_zero() {
            return true;
        }
        let bits = bit_count(self.sig_bits());
        // Top bit position of the value: exp + bits - 1. Normal range top in [-126, 127].
        let top = self.exp + bits - 1;
        bits <= 24 && top <= 127 && self.exp >= -149
    }

    /// The nearest-ish f64 (rounded when the mantissa exceeds 53 bits): for bounds with their
    /// own error margin and for messages, never where exactness is claimed.
    pub fn to_f64_lossy(self) -> f64 {
        self.mant as f64 * 2f64.powi(self.exp)
    }
}

fn shl(m: i128, by: i32) -> Option<i128> {
    if !(0..127).contains(&by) {
        return if m == 0 { Some(0) } else { None };
    }
    let r = m.checked_mul(1i128 << by)?;
    Some(r)
}

/// `rne(n / d)` for integers, `d > 0`: round to nearest, ties to even.
pub fn rne_div(n: i128, d: i128) -> i128 {
    debug_assert!(d > 0);
    // One division, in 64 bits when both fit: P3 windows evaluate this for every accumulator.
    let (q, r) = match (i64::try_from(n), i64::try_from(d)) {
        (Ok(n), Ok(d)) => ((n / d) as i128, (n % d) as i128),
        _ => (n / d, n % d),
    };
    let (q, r) = if r < 0 { (q - 1, r + d) } else { (q, r) }; // floor: 0 <= r < d
    // Compare 2r with d without overflow: r and d - r.
    let rest = d - r;
    if r > rest || (r == rest && q.rem_euclid(2) == 1) { q + 1 } else { q }
}

/// Result of rounding an exact quotient to an integer, saturating far outside any code range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounded {
    /// The rounded integer.
    Value(i128),
    /// |quotient| beyond 2^100: only the sign matters for saturation.
    Huge {
        /// Whether the quotient is negative (saturates to the low end).
        negative: bool,
    },
}

impl Rounded {
    /// Adds a zero point and clamps to `[lo, hi]`.
    pub fn saturate(self, zp: i64, lo: i64, hi: i64) -> i64 {
        match self {
            Rounded::Value(v) => i64::try_from((v + i128::from(zp)).clamp(i128::from(lo), i128::from(hi))).expect("clamped into [lo, hi], which are i64"),
            Rounded::Huge { negative } => {
                if negative {
                    lo
                } else {
                    hi
                }
            }
        }
    }
}

/// `rne(a / b)` for dyadic rationals, exactly. `None` when `b` is zero.
pub fn rne_quotient(a: Dyadic, b: Dyadic) -> Option<Rounded> {
    if b.is_zero() {
        return None;
    }
    if a.is_zero() {
        return Some(Rounded::Value(0));
    }
    // a/b = (ma/mb) · 2^k
    let (mut n, mut d) = (a.mant, b.mant);
    if d < 0 {
        n = -n;
        d = -d;
    }
    let k = a.exp - b.exp;
    let negative = n < 0;
    let mag = |x: i128| 128 - bit_count(x.unsigned_abs().leading_zeros());
    if k >= 0 {
        // |n·2^k / d| ≥ 2^(mag(n)-1+k-mag(d)); beyond 2^100 it saturates anything.
        if mag(n) - 1 + k - mag(d) > 100 {
            return Some(Rounded::Huge { negative });
        }
        let n = shl(n, k)?;
        Some(Rounded::Value(rne_div(n, d)))
    } else {
        // |n / (d·2^-k)| < 2^(mag(n) - (mag(d)-1) + k); below 2^-2 it rounds to zero.
        if mag(n) - (mag(d) - 1) + k < -1 {
            return Some(Rounded::Value(0));
        }
        let d = shl(d, -k)?;
        Some(Rounded::Value(rne_div(n, d)))
    }
}

impl std::ops::Neg for Dyadic {
    type Output = Dyadic;

    fn neg(self) -> Dyadic {
        Dyadic { mant: -self.mant, exp: self.exp }
    }
}

/// A bit count or bit position of a `u128` or narrower (at most 128) as a signed exponent term.
pub(crate) fn bit_count(n: u32) -> i32 {
    i32::try_from(n).expect("a bit count of a u128 is at most 128")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_values_are_exact_dyadics() {
        for x in [1.0f32, -0.5, 0.1, 3.0e-39, f32::MAX, f32::MIN_POSITIVE, 123_456.79] {
            let d = Dyadic::from_f32(x).unwrap();
            assert_eq!(d.to_f64_lossy(), x as f64, "{x}");
            assert!(d.is_f32());
        }
        assert_eq!(Dyadic::from_f32(0.0), Some(Dyadic::ZERO));
        assert_eq!(Dyadic::from_f32(f32::NAN), None);
        assert!(!Dyadic::new((1 << 24) + 1, 0).is_f32());
        assert!(Dyadic::new(1 << 24, 0).is_f32());
    }

    #[test]
    fn rne_div_ties_to_even() {
        assert_eq!(rne_div(5, 2), 2);
        assert_eq!(rne_div(7, 2), 4);
        assert_eq!(rne_div(-5, 2), -2);
        assert_eq!(rne_div(-7, 2), -4);
        assert_eq!(rne_div(10, 4), 2);
        assert_eq!(rne_div(11, 4), 3);
        assert_eq!(rne_div(-11, 4), -3);
        assert_eq!(rne_div(1, 3), 0);
        assert_eq!(rne_div(2, 3), 1);
    }

    #[test]
    fn rne_div_agrees_with_euclidean_division_in_and_beyond_64_bits() {
        let reference = |n: i128, d: i128| {
            let (q, r) = (n.div_euclid(d), n.rem_euclid(d));
            if 2 * r > d || (2 * r == d && q % 2 != 0) { q + 1 } else { q }
        };
        let big = 1i128 << 90;
        for n in [-7, -6, -5, -1, 0, 1, 5, 6, 7, i64::MIN as i128, i64::MAX as i128, big + 3, -big - 5, -big] {
            for d in [1, 2, 3, 4, 6, 7, i64::MAX as i128, (1i128 << 70) + 1, big] {
                assert_eq!(rne_div(n, d), reference(n, d), "{n} / {d}");
            }
        }
    }

    #[test]
    fn quotients_round_exactly() {
        let q = |a: f32, b: f32| rne_quotient(Dyadic::from_f32(a).unwrap(), Dyadic::from_f32(b).unwrap()).unwrap();
        assert_eq!(q(0.75, 0.5), Rounded::Value(2)); // 1.5 → 2
        assert_eq!(q(1.25, 0.5), Rounded::Value(2)); // 2.5 → 2
        assert_eq!(q(-1.25, 0.5), Rounded::Value(-2));
        assert_eq!(q(1.0, 1e-35), Rounded::Huge { negative: false });
        assert_eq!(q(-1.0, 1e-35), Rounded::Huge { negative: true });
        assert_eq!(q(1e-30, 1.0), Rounded::Value(0));
        // 0.1f32 / 0.1f32 is exactly 1 although neither is 1/10.
        assert_eq!(q(0.1, 0.1), Rounded::Value(1));
    }
}
