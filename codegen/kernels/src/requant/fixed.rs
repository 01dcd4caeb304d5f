//! Fixed point: `sat(round((acc + bias)·multiplier / 2^shift) + zy)`, i64 arithmetic.
//!
//! Not exact in general (the multiplier approximates the ratio, and an approximate multiplier
//! cannot see an exact tie); the compiler proves each instance over its reachable accumulator
//! window against [`super::requant_exact`] (P3), e.g. with [`first_disagreement`].

use super::{Output, Ratio, requant_exact};

/// How the fixed-point product is rounded to an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Ties to even (QuantizeLinear's rounding).
    HalfEven,
    /// Ties toward +∞ (XNNPACK's `rndnu`).
    HalfUp,
    /// Ties away from zero (gemmlowp).
    HalfAway,
}

/// A fixed-point requantization: `multiplier < 2^31`, `1 ≤ shift ≤ 62`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    multiplier: i64,
    shift: u32,
    rounding: Rounding,
}

impl Fixed {
    /// Refused outside `0 ≤ multiplier < 2^31`, `1 ≤ shift ≤ 62` (where the i64 product cannot overflow).
    pub fn new(multiplier: i64, shift: u32, rounding: Rounding) -> Option<Fixed> {
        ((0..1 << 31).contains(&multiplier) && (1..=62).contains(&shift)).then_some(Fixed { multiplier, shift, rounding })
    }

    /// The multiplier `rne(ratio·2^shift)` from the exact ratio, with the largest shift that keeps it
    /// below 2^31 (most precision); `None` when the ratio needs a shift outside 1..=62 or carries
    /// a bias offset ([`Ratio::with_bias`]), which this form has no term for.
    pub fn from_ratio(ratio: &Ratio, rounding: Rounding) -> Option<Fixed> {
        if ratio.offset.is_some() {
            return None;
        }
        (1..=62u32).rev().find_map(|shift| {
            let m = ratio.scaled_rne(1, shift as i32)?;
            (m < 1 << 31).then_some(Fixed { multiplier: m as i64, shift, rounding })
        })
    }

    pub fn multiplier(&self) -> i64 {
        self.multiplier
    }

    pub fn shift(&self) -> u32 {
        self.shift
    }

    pub fn rounding(&self) -> Rounding {
        self.rounding
    }
}

/// `sat(round((acc + bias)·multiplier / 2^shift) + zy)`.
pub fn requant_fixed(acc: i32, bias: i32, plan: &Fixed, out: Output) -> i32 {
    // |t| < 2^32 and multiplier < 2^31: the product stays below 2^63.
    let p = (i64::from(acc) + i64::from(bias)) * plan.multiplier;
    let q = p >> plan.shift;
    let rem = p - (q << plan.shift);
    let half = 1i64 << (plan.shift - 1);
    let up = match plan.rounding {
        Rounding::HalfEven => rem > half || (rem == half && q & 1 == 1),
        Rounding::HalfUp => rem >= half,
        Rounding::HalfAway => rem > half || (rem == half && p >= 0),
    };
    out.saturate(i128::from(q + i64::from(up)))
}

/// The first `t` in `ts` (accumulator plus bias) where the fixed form differs from the exact one, with both results.
pub fn first_disagreement(plan: &Fixed, ratio: &Ratio, out: Output, ts: impl IntoIterator<Item = i32>) -> Option<(i32, i32, i32)> {
    ts.into_iter().find_map(|t| {
        let (f, e) = (requant_fixed(t, 0, plan, out), requant_exact(t, 0, ratio, out));
        (f != e).then_some((t, f, e))
    })
}
