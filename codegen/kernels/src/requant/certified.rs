//! Certified wider evaluation: `v = fl64(t·r)` with `r = fl64(fl64(sx·sw)/sy)`, rounded to the
//! nearest integer unless v lies within its error bound of a rounding boundary (a half-integer),
//! in which case [`super::requant_exact`] decides. Always equal to the exact form.
//!
//! Error: `fl64(sx·sw)` is exact (two 24-bit mantissas, no underflow: |exponent| stays far inside
//! f64's), the division and the product each round once, so `|v − x| ≤ |x|·(2^-52 + 2^-106)`.
//! The check uses `|v|·2^-49`, which covers that with room to spare. Between two consecutive
//! half-integers rne is constant, so a v farther than the bound from every half-integer rounds
//! as x does. `t = acc + bias` has |t| < 2^33 and converts to f64 exactly; |v| ≥ 2^40 saturates (the
//! exact value has the same sign and |x| > 2^39), and the check passes there (d = 0, bound 2^-9).

use super::{Output, Ratio, requant_exact};
use std::sync::atomic::{AtomicU64, Ordering};

/// The relative error bound the boundary check uses, 2^-49.
const BOUND: f64 = 1.0 / (1u64 << 49) as f64;

static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Elements settled by the exact fallback since the process started (all threads).
pub fn fallback_hits() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

pub(crate) fn count(n: u64) {
    if n > 0 {
        FALLBACKS.fetch_add(n, Ordering::Relaxed);
    }
}

/// The certified form of one ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Certified {
    ratio: Ratio,
    r: f64,
}

impl Certified {
    pub fn new(ratio: Ratio) -> Certified {
        let (sx, sw, sy) = ratio.scales;
        Certified { ratio, r: f64::from(sx) * f64::from(sw) / f64::from(sy) }
    }

    pub fn ratio(&self) -> &Ratio {
        &self.ratio
    }
}

/// The code, and whether the exact fallback decided it.
#[inline]
pub(crate) fn evaluate(acc: i32, bias: i32, plan: &Certified, out: Output) -> (i32, bool) {
    let t = i64::from(acc) + i64::from(bias);
    // Beyond ±2^40 the code saturates either way; clamping keeps the rounding trick below valid.
    let v = (t as f64 * plan.r).clamp(-LIMIT, LIMIT);
    // rne(v) for |v| < 2^51 under the default rounding mode, without a libm call.
    let rounded = (v + MAGIC) - MAGIC;
    // Exact (v and rounded share v's ulp grid, |v − rounded| ≤ 1/2); 1/2 means v is a half-integer.
    let d = (v - rounded).abs();
    if 0.5 - d <= v.abs() * BOUND {
        return (requant_exact(acc, bias, &plan.ratio, out), true);
    }
    let y = (rounded + f64::from(out.zero_point())).clamp(f64::from(out.code().min()), f64::from(out.code().max()));
    (y as i32, false)
}

/// 2^40: saturation threshold of the f64 value.
const LIMIT: f64 = (1u64 << 40) as f64;
/// 1.5·2^52: adding and subtracting it rounds to an integer, ties to even.
const MAGIC: f64 = (3u64 << 51) as f64;

/// `sat(rne((acc + bias)·sx·sw/sy) + zy)`, correctly rounded; fallbacks are counted in [`fallback_hits`].
pub fn requant_certified(acc: i32, bias: i32, plan: &Certified, out: Output) -> i32 {
    let (v, fell_back) = evaluate(acc, bias, plan, out);
    count(u64::from(fell_back));
    v
}
