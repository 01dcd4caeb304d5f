//! Portable elementary functions: f64 evaluations from IEEE basic operations only, so their bits
//! are the same on every machine (std's `exp`, `ln`, `tanh` call the platform's libm, whose last
//! bits differ between glibc, musl, macOS and MSVC).
//!
//! The f32 functions ([`exp`], [`ln`], [`pow`], and `unary`'s) evaluate in f64 and round once to
//! f32. The f64 evaluations are accurate to a few f64 ulps (≤ 2^-49 relative; erf ≤ 2^-47 where
//! it is within 10^-13 of ±1), checked in `tests/float_math.rs` against the platform libm and
//! CPython's erf. So the f32 result is the correctly rounded one except when the exact value lies
//! within ~2^-47 relative of an f32 rounding boundary (about one input in 2^23): there it may be
//! the other neighbour, still the same bits everywhere.
//!
//! Evaluation orders (every step a rounded basic operation, Horner left to right as written):
//! - `exp64(x)`: `k = rne(x/ln2)` by the 1.5·2^52 trick, `r = (x − k·LN2_HI) − k·LN2_LO`
//!   (Cody–Waite, `k·LN2_HI` exact), `e^r` by its Taylor polynomial to degree 13 in Horner form
//!   (|r| ≤ 0.35: truncation < 2^-57), times `2^k` as two exact power-of-two factors.
//! - `expm1_64(x)`: Taylor to degree 14 (`x·(1 + x·(1/2! + x·(1/3! + …)))`) for |x| < 0.35, else
//!   `exp64(x) − 1`.
//! - `ln64(x)`: `x = m·2^e`, m ∈ [√½, √2) (subnormals scaled by 2^54 first), `s = (m−1)/(m+1)`,
//!   `ln m = 2s·(1 + s²/3 + … + s^24/25)` (Horner in s²), `e·LN2_HI + (e·LN2_LO + ln m)`.
//! - `log1p64(u)`: `w = 1 + u`; `u` if `w = 1`, else `ln64(w)·(u/(w − 1))` (Goldberg's correction).
//! - `erf64(x)`: |x| ≥ 6: ±1; else a degree-12 Taylor polynomial around the nearest multiple of
//!   1/8, from a table built once by `erf_series64` (`2/√π·e^{−x²}·Σ 2^n x^{2n+1}/(2n+1)!!`,
//!   positive terms, no cancellation) and the Hermite recurrence for the derivatives.
//! - `erfc64(z)`: z < 2: `1 − erf64(z)`; z ≥ 2: `e^{−z²}/√π / (z + ½/(z + 1/(z + 3/2/(z + …))))`,
//!   the continued fraction of 60 levels evaluated from the bottom (relative error < 10^-15).

use std::sync::OnceLock;

/// ln 2 split for Cody–Waite reduction (fdlibm's: the high part has 32 trailing zero bits).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// 1.5·2^52: adding and subtracting it rounds an |x| < 2^51 to the nearest integer, ties to even.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `1/n!` for n = 0..=14, computed at compile time by repeated division.
const INV_FACT: [f64; 15] = {
    let mut t = [1.0f64; 15];
    let mut n = 1;
    while n < 15 {
        t[n] = t[n - 1] / n as f64;
        n += 1;
    }
    t
};

/// `1/(2n + 1)` for n = 0..=400 (erf's series), computed at compile time.
const INV_ODD: [f64; 401] = {
    let mut t = [1.0f64; 401];
    let mut n = 1;
    while n < 401 {
        t[n] = 1.0 / (2 * n + 1) as f64;
        n += 1;
    }
    t
};

/// `2^k` for k in the normal range.
fn pow2(k: i64) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// e^x in f64. Written with selects instead of early returns (the same values), so that a loop
/// over it vectorizes.
// Inlined into the vectorized loops of `unary::map` (an out-of-line call per element stays scalar).
#[inline(always)]
pub fn exp64(x: f64) -> f64 {
    // Clamped to where the result is neither 0 nor ∞ (restored at the end); NaN passes through.
    let xc = x.clamp(-745.2, 709.79);
    let t = xc * INV_LN2 + ROUNDER;
    let k = t - ROUNDER;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let mut p = INV_FACT[13];
    for n in (0..13).rev() {
        p = p * r + INV_FACT[n];
    }
    // 2^k as two exact power-of-two factors, in range at both ends (k from −1075 to 1024).
    let half = (k * 0.5 + ROUNDER) - ROUNDER;
    let y = p * pow2_of(half) * pow2_of(k - half);
    if x > 709.79 {
        f64::INFINITY
    } else if x < -745.2 {
        0.0
    } else {
        y
    }
}

/// `2^j` for an integer-valued j in the normal range, from bits: `j + 1023 + 1.5·2^52` lies in
/// [2^52, 2^53), so its bits minus 1.5·2^52's are the biased exponent (float and 64-bit integer
/// lane operations only, so a loop over it vectorizes). Any other j only where the caller
/// discards the result (NaN).
#[inline(always)]
fn pow2_of(j: f64) -> f64 {
    f64::from_bits(((j + 1023.0) + ROUNDER).to_bits().wrapping_sub(ROUNDER.to_bits()) << 52)
}

/// e^x − 1 in f64, accurate near 0. Both forms are computed and one selected (branch-free, so a
/// loop over it vectorizes).
#[inline(always)]
pub fn expm1_64(x: f64) -> f64 {
    let mut p = INV_FACT[14];
    for n in (1..14).rev() {
        p = p * x + INV_FACT[n];
    }
    let near = p * x;
    let far = exp64(x) - 1.0;
    if x.abs() < 0.35 { near } else { far }
}

/// ln x in f64 (NaN for x < 0, −∞ at 0).
pub fn ln64(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x == f64::INFINITY {
        return x;
    }
    let (x, bias) = if x < f64::MIN_POSITIVE { (x * pow2(54), -54) } else { (x, 0) };
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023 + bias;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0 / 25.0;
    for n in (0..12).rev() {
        p = p * s2 + 1.0 / (2 * n + 1) as f64;
    }
    let lnm = 2.0 * s * p;
    let e = e as f64;
    e * LN2_HI + (e * LN2_LO + lnm)
}

/// ln(1 + u) in f64, accurate near 0.
pub fn log1p64(u: f64) -> f64 {
    let w = 1.0 + u;
    if w == 1.0 { u } else { ln64(w) * (u / (w - 1.0)) }
}

/// tanh x in f64 (branch-free: selects).
#[inline(always)]
pub fn tanh64(x: f64) -> f64 {
    let a = x.abs();
    // Clamped so that e^{2a} stays finite; a NaN stays NaN (`f64::min` would drop it).
    let t = expm1_64(2.0 * if a > 20.0 { 20.0 } else { a });
    let r = t / (t + 2.0);
    let r = if a > 20.0 { 1.0 } else { r };
    if a < 1e-9 {
        x
    } else if x < 0.0 {
        -r
    } else {
        r
    }
}

/// The logistic function 1/(1 + e^−x) in f64: `e = e^−|x|`, then `1/(1 + e)` for x ≥ 0 and
/// `e/(1 + e)` otherwise (no overflow, no cancellation).
#[inline(always)]
pub fn sigmoid64(x: f64) -> f64 {
    let e = exp64(-x.abs());
    let num = if x >= 0.0 { 1.0 } else { e };
    num / (1.0 + e)
}

const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// erf x in f64 by its series: `2/√π·e^{−x²}·Σ 2^n x^{2n+1}/(2n+1)!!` (positive terms), summed
/// in order until a term falls below 2^-60 of the sum; ±1 for |x| ≥ 6. Slow (up to ~85 terms):
/// [`erf64`] evaluates a table built from it.
pub fn erf_series64(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= 6.0 {
        return 1f64.copysign(x);
    }
    let a2 = a * a;
    let (mut term, mut sum) = (a, a);
    let mut n = 0usize;
    let r = 2.0 * a2;
    while term > sum * 8.7e-19 && n < 400 {
        n += 1;
        term = term * r * INV_ODD[n];
        sum += term;
    }
    (FRAC_2_SQRT_PI * exp64(-a2) * sum).copysign(x)
}

/// Grid points of [`erf64`]'s table per unit (x0 = k/8).
const ERF_GRID: f64 = 8.0;
/// Degree of [`erf64`]'s Taylor polynomials.
const ERF_DEGREE: usize = 12;

/// For x0 = k/8, k = 0..=48: `[erf(x0), c_1, …, c_12]`, `c_n = erf⁽ⁿ⁾(x0)/n!` with
/// `erf⁽ⁿ⁾(x) = 2/√π·e^{−x²}·(−1)^{n−1}·H_{n−1}(x)` (Hermite polynomials by their recurrence).
/// Built once, by the same basic operations on every machine.
fn erf_table() -> &'static [[f64; ERF_DEGREE + 1]] {
    static TABLE: OnceLock<Vec<[f64; ERF_DEGREE + 1]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=48)
            .map(|k| {
                let x0 = f64::from(k) / ERF_GRID;
                let g = FRAC_2_SQRT_PI * exp64(-(x0 * x0));
                let mut row = [0f64; ERF_DEGREE + 1];
                row[0] = erf_series64(x0);
                let (mut h_prev, mut h) = (0.0, 1.0); // H_{m−1}, H_m from m = 0
                for n in 1..=ERF_DEGREE {
                    let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
                    row[n] = g * sign * h * INV_FACT[n];
                    let m = (n - 1) as f64;
                    (h_prev, h) = (h, 2.0 * x0 * h - 2.0 * m * h_prev);
                }
                row
            })
            .collect()
    })
}

/// erf x in f64: |x| ≥ 6: ±1; else with x0 the nearest multiple of 1/8 to |x| and `h = |x| − x0`
/// (exact, |h| ≤ 1/16), `erf(x0) + c_1·h + … + c_12·h^12` in Horner form from the table (truncation
/// < 10^-19; within 2^-47 of [`erf_series64`] and of CPython's erf, `tests/float_math.rs`).
pub fn erf64(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= 6.0 {
        return 1f64.copysign(x);
    }
    let k = (a * ERF_GRID + ROUNDER) - ROUNDER;
    let h = a - k / ERF_GRID;
    let row = &erf_table()[k as usize];
    let mut p = row[ERF_DEGREE];
    for n in (0..ERF_DEGREE).rev() {
        p = p * h + row[n];
    }
    p.copysign(x)
}

/// erfc z = 1 − erf z in f64, accurate for large z.
pub fn erfc64(z: f64) -> f64 {
    if z.is_nan() {
        return z;
    }
    if z < 2.0 {
        return 1.0 - erf64(z);
    }
    if z > 27.3 {
        return 0.0;
    }
    let mut t = z;
    for n in (1..=60).rev() {
        t = z + (f64::from(n) * 0.5) / t;
    }
    exp64(-(z * z)) * (FRAC_2_SQRT_PI * 0.5) / t
}

/// e^x rounded to f32.
pub fn exp(x: f32) -> f32 {
    exp64(f64::from(x)) as f32
}

/// ln x rounded to f32.
pub fn ln(x: f32) -> f32 {
    ln64(f64::from(x)) as f32
}

/// x^y rounded to f32, with C's `pow` special cases: `x^0 = 1`, `1^y = 1`, a negative base needs an
/// integer exponent (its parity gives the sign), zeros and infinities as IEEE 754's `pow`.
/// The general case is `exp64(y·ln64|x|)`: |y·ln|x|| < 110 wherever the result is a finite
/// nonzero f32, so the f64 error stays below 2^-45 relative.
pub fn pow(x: f32, y: f32) -> f32 {
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if x.is_nan() || y.is_nan() {
        return f32::NAN;
    }
    let integer = y.is_finite() && y.fract() == 0.0;
    let odd = integer && (y * 0.5).fract() != 0.0;
    if y.is_infinite() {
        let ax = x.abs();
        return if ax == 1.0 {
            1.0
        } else if (ax < 1.0) == (y > 0.0) {
            0.0
        } else {
            f32::INFINITY
        };
    }
    if x == 0.0 || x.is_infinite() {
        // |x|^y is 0 or ∞; a negative x keeps its sign for odd integer y.
        let big = (x == 0.0) == (y < 0.0);
        let r = if big { f32::INFINITY } else { 0.0 };
        return if odd && x.is_sign_negative() { -r } else { r };
    }
    if x < 0.0 && !integer {
        return f32::NAN;
    }
    let r = exp64(f64::from(y) * ln64(f64::from(x.abs()))) as f32;
    if x < 0.0 && odd { -r } else { r }
}
