//! The definition: `sat(rne((acc + bias)·sx·sw/sy) + zy)` in exact integer arithmetic (i128).
//!
//! Each f32 scale is `m·2^e` with an integer mantissa `m < 2^24`, so `sx·sw/sy = num·2^exp/den`
//! with `num = mx·mw < 2^48` and `den = my < 2^24`; `t = acc + bias` has |t| < 2^33, so
//! `t·num` fits 81 bits and every shift below is bounded to keep i128 from overflowing.

use super::{Output, RequantError};

/// `sx·sw/sy` as `num·2^exp/den`, exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    num: u64,
    den: u32,
    exp: i32,
    /// The scales, kept for the f64 evaluation of the certified form.
    pub(crate) scales: (f32, f32, f32),
}

/// `s = m·2^e` with integer m, for a positive finite f32.
fn dyadic(s: f32) -> Result<(u64, i32), RequantError> {
    if !(s.is_finite() && s > 0.0) {
        return Err(RequantError::Scale(s));
    }
    let bits = s.to_bits();
    let (frac, biased) = (u64::from(bits & 0x7f_ffff), ((bits >> 23) & 0xff) as i32);
    Ok(if biased == 0 { (frac, -149) } else { (frac | 1 << 23, biased - 150) })
}

impl Ratio {
    /// The exact value of `sx·sw/sy`; refused unless every scale is a positive finite f32.
    pub fn new(sx: f32, sw: f32, sy: f32) -> Result<Ratio, RequantError> {
        let ((mx, ex), (mw, ew), (my, ey)) = (dyadic(sx)?, dyadic(sw)?, dyadic(sy)?);
        Ok(Ratio { num: mx * mw, den: my as u32, exp: ex + ew - ey, scales: (sx, sw, sy) })
    }

    /// `(num, exp, den)` with the ratio `num·2^exp/den`.
    pub fn parts(&self) -> (u64, i32, u32) {
        (self.num, self.exp, self.den)
    }

    /// `rne(t·ratio·2^s)`, or `None` when it is not small enough for an i128 (|·| ≥ 2^100).
    pub(crate) fn scaled_rne(&self, t: i64, s: i32) -> Option<i128> {
        let n = i128::from(t) * i128::from(self.num);
        if n == 0 {
            return Some(0);
        }
        let e = self.exp + s;
        if e >= 0 {
            // |n·2^e / den| ≥ 2^(e − 24): beyond 2^100 the caller only needs to know it is huge.
            if e > 44 { None } else { Some(rne_div(n << e, i128::from(self.den))) }
        } else if -e > 100 {
            // |n| < 2^81 and den ≥ 1: the value is below 2^-19 in magnitude, so rne gives 0.
            Some(0)
        } else {
            Some(rne_div(n, i128::from(self.den) << -e))
        }
    }
}

/// `rne(n / d)` for `d > 0`, ties to even (also the ops on codes' exact rounding).
pub(crate) fn rne_div(n: i128, d: i128) -> i128 {
    let (q, r) = (n.div_euclid(d), n.rem_euclid(d));
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

/// `sat(rne((acc + bias)·sx·sw/sy) + zy)`, exactly.
pub fn requant_exact(acc: i32, bias: i32, ratio: &Ratio, out: Output) -> i32 {
    let t = i64::from(acc) + i64::from(bias);
    match ratio.scaled_rne(t, 0) {
        Some(q) => out.saturate(q),
        // Huge magnitude: saturates on the side of its sign.
        None => out.saturate(if t < 0 { i128::MIN / 2 } else { i128::MAX / 2 }),
    }
}
