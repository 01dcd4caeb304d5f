//! The definition: `sat(rne((acc + bias)·sx·sw/sy + offset) + zy)` in exact integer arithmetic
//! (i128), where `offset` is the value of a bias whose scale is not `sx·sw` ([`Ratio::with_bias`]:
//! `b·sb/sy`; zero otherwise).
//!
//! Each f32 scale is `m·2^e` with an integer mantissa `m < 2^24`, so `sx·sw/sy = num·2^exp/den`
//! with `num = mx·mw < 2^48` and `den = my < 2^24`; `t = acc + bias` has |t| < 2^33, so
//! `t·num` fits 81 bits and every shift below is bounded to keep i128 from overflowing. The
//! offset shares the denominator: `b·sb/sy = off·2^off_exp/den` with `off = b·mb`, |off| < 2^55;
//! `with_bias` refuses exponents whose common grid would not fit (far outside real models').

use super::{Output, RequantError};

/// `sx·sw/sy` as `num·2^exp/den`, exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    num: u64,
    den: u32,
    exp: i32,
    /// The scales, kept for the f64 evaluation of the certified form.
    pub(crate) scales: (f32, f32, f32),
    /// A bias off the accumulator's scale: `(b, sb)` and its value `off·2^off_exp/den`.
    pub(crate) offset: Option<Offset>,
}

/// `b·sb/sy` exactly, as `off·2^exp` over the ratio's `den`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Offset {
    off: i64,
    exp: i32,
    /// The bias code and scale, kept for the f64 evaluation of the certified form.
    pub(crate) code: i32,
    pub(crate) scale: f32,
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

/// `m·2^e` with m odd (m > 0): equal dyadics have equal lowest terms.
fn lowest_terms(m: u64, e: i32) -> (u64, i32) {
    (m >> m.trailing_zeros(), e + m.trailing_zeros() as i32)
}

impl Ratio {
    /// The exact value of `sx·sw/sy`; refused unless every scale is a positive finite f32.
    pub fn new(sx: f32, sw: f32, sy: f32) -> Result<Ratio, RequantError> {
        let ((mx, ex), (mw, ew), (my, ey)) = (dyadic(sx)?, dyadic(sw)?, dyadic(sy)?);
        Ok(Ratio { num: mx * mw, den: my as u32, exp: ex + ew - ey, scales: (sx, sw, sy), offset: None })
    }

    /// The requantization of `acc·sx·sw + b·sb` (a bias code `b` dequantized with its own scale
    /// `sb`): `(b, self)` when `b·sb = b·sx·sw` exactly, the code then adding to the accumulator;
    /// otherwise `(0, self with the offset b·sb/sy)`, the bias's exact value. Refused for a
    /// non-positive or non-finite `sb`, and where the offset's and the accumulator's grids are
    /// too far apart for the i128 evaluation (2^44 between them; never seen in a real model).
    pub fn with_bias(self, code: i32, sb: f32) -> Result<(i32, Ratio), RequantError> {
        let (mb, eb) = dyadic(sb)?;
        let ((mx, ex), (mw, ew)) = (dyadic(self.scales.0)?, dyadic(self.scales.1)?);
        if code == 0 || lowest_terms(mb, eb) == lowest_terms(mx * mw, ex + ew) {
            return Ok((code, self));
        }
        let (_, ey) = dyadic(self.scales.2)?;
        let exp = eb - ey;
        if (exp - self.exp).abs() > 44 || exp.min(self.exp) < -100 {
            return Err(RequantError::Shape(format!("bias {code}·{sb:e} is {} binary orders from the accumulator's grid", (exp - self.exp).abs())));
        }
        Ok((0, Ratio { offset: Some(Offset { off: i64::from(code) * mb as i64, exp, code, scale: sb }), ..self }))
    }

    /// `(num, exp, den)` with the ratio `num·2^exp/den`.
    pub fn parts(&self) -> (u64, i32, u32) {
        (self.num, self.exp, self.den)
    }

    /// `(n, e)` with `t·ratio·2^s + offset·2^s = n·2^e/den` exactly: |n| < 2^81 without an
    /// offset; with one, both terms on the finer grid (shifts ≤ 44 by `with_bias`), |n| < 2^127.
    fn numerator(&self, t: i64, s: i32) -> (i128, i32) {
        let (n, e) = (i128::from(t) * i128::from(self.num), self.exp + s);
        match self.offset {
            None => (n, e),
            Some(o) => {
                let (oe, g) = (o.exp + s, e.min(o.exp + s));
                ((n << (e - g)) + (i128::from(o.off) << (oe - g)), g)
            }
        }
    }

    /// The sign of `t·ratio + offset`.
    pub(crate) fn sign(&self, t: i64) -> i128 {
        self.numerator(t, 0).0.signum()
    }

    /// `rne((t·ratio + offset)·2^s)` for `s ≥ 0`, or `None` when it is not small enough for an
    /// i128 (|·| ≥ 2^100).
    pub(crate) fn scaled_rne(&self, t: i64, s: i32) -> Option<i128> {
        let (n, e) = self.numerator(t, s);
        if n == 0 {
            return Some(0);
        }
        let bits = 128 - n.unsigned_abs().leading_zeros() as i32;
        if e >= 0 {
            // |n·2^e/den| ≥ 2^(bits − 1 + e − 24): beyond 2^100 the caller only needs to know it is huge.
            if bits + e > 125 { None } else { Some(rne_div(n << e, i128::from(self.den))) }
        } else if -e > 100 {
            // Only without an offset (`with_bias` keeps e ≥ −100 with one): |n| < 2^81, so the value
            // is below 2^-19 in magnitude and rne gives 0.
            Some(0)
        } else {
            Some(rne_div(n, i128::from(self.den) << -e))
        }
    }
}

/// Euclidean quotient and remainder of `n / d`, `d > 0`. Where both fit i64 they come from one
/// 64-bit division (an i128 division is a library call, several times slower on the exact
/// fallbacks that reach here); the same values either way.
pub(crate) fn div_rem_euclid(n: i128, d: i128) -> (i128, i128) {
    match (i64::try_from(n), i64::try_from(d)) {
        (Ok(n), Ok(d)) => (i128::from(n.div_euclid(d)), i128::from(n.rem_euclid(d))),
        _ => (n.div_euclid(d), n.rem_euclid(d)),
    }
}

/// `rne(n / d)` for `d > 0`, ties to even (also the ops on codes' exact rounding).
pub(crate) fn rne_div(n: i128, d: i128) -> i128 {
    let (q, r) = div_rem_euclid(n, d);
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

/// `sat(rne((acc + bias)·sx·sw/sy + offset) + zy)`, exactly.
pub fn requant_exact(acc: i32, bias: i32, ratio: &Ratio, out: Output) -> i32 {
    let t = i64::from(acc) + i64::from(bias);
    match ratio.scaled_rne(t, 0) {
        Some(q) => out.saturate(q),
        // Huge magnitude: saturates on the side of its sign.
        None => out.saturate(if ratio.sign(t) < 0 { i128::MIN / 2 } else { i128::MAX / 2 }),
    }
}

#[cfg(test)]
mod tests {
    use super::rne_div;

    /// The i128 definition: what `rne_div` computed before its i64 path.
    fn wide(n: i128, d: i128) -> i128 {
        let (q, r) = (n.div_euclid(d), n.rem_euclid(d));
        match (2 * r).cmp(&d) {
            std::cmp::Ordering::Less => q,
            std::cmp::Ordering::Greater => q + 1,
            std::cmp::Ordering::Equal => q + (q & 1),
        }
    }

    /// Both widths agree at every edge of the i64 path: ties of either parity, negative
    /// numerators, n and d at and beyond ±2^63.
    #[test]
    fn the_i64_path_is_the_i128_division() {
        let edges = [i128::from(i64::MIN), i128::from(i64::MAX), 1 << 63, -(1 << 63) - 1, 1 << 100, -(1 << 100)];
        let mut ns: Vec<i128> = (-40..=40).collect();
        let mut ds: Vec<i128> = (1..=12).collect();
        for e in edges {
            ns.extend([e - 1, e, e + 1, e / 2, e / 3]);
            if e > 0 {
                ds.extend([e - 1, e, e / 2, e / 2 + 1, 1 << 62]);
            }
        }
        for &n in &ns {
            for &d in &ds {
                assert_eq!(rne_div(n, d), wide(n, d), "n={n} d={d}");
            }
        }
    }
}
