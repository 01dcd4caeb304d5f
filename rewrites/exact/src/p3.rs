//! P3: the requantization window (contract §4.4).
//!
//! A requantizing kernel and its reference both map an integer accumulator `n` to an output code
//! through a chain of steps that are each monotone in the same direction: int→f32 conversion,
//! multiplication or division by a scale of fixed sign, IEEE rounding, round-to-integer,
//! adding a zero point, saturation to `[qmin, qmax]`. A composition of monotone steps is monotone,
//! so both functions are non-decreasing in `n` (or both non-increasing when the effective scale is
//! negative; [`Direction::NonIncreasing`] mirrors `n ↦ −n` and reduces to the first case).
//! For non-decreasing `k` and `r` with values in `[qmin, qmax]`:
//!
//! * below `a` = the first `n` where `k(n) > qmin` or `r(n) > qmin`, both are `qmin`;
//! * above `b` = the last `n` where `k(n) < qmax` or `r(n) < qmax`, both are `qmax`.
//!
//! Both predicates are monotone, so `a` and `b` are found by binary search, and only `[a, b]` —
//! about `(qmax − qmin + 1)/S` accumulators for an effective scale `S` — is enumerated, in exact
//! arithmetic supplied by the caller. A NaN scale makes a kernel constant, which is monotone too.
//!
//! Windows wider than [`MAX_ENUMERATION`] are not enumerated. When both functions are affine
//! roundings `sat(rne((A·n + B)/D) + z)`, [`check_affine`] decides them with floor sums instead
//! (`Σ_{i<n} ⌊(a·i + b)/m⌋` in O(log)); otherwise the answer is "unknown".

use super::num::rne_div;
use std::time::Instant;

/// Widest window enumerated point by point.
pub const MAX_ENUMERATION: u64 = 1 << 24;

/// How the kernel and the reference vary with the accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Both rise with the accumulator (a positive scale).
    NonDecreasing,
    /// Both fall with the accumulator (a negative scale).
    NonIncreasing,
}

impl Direction {
    /// The direction of a function that multiplies the accumulator by a scale of this sign.
    pub fn of_sign(negative: bool) -> Direction {
        if negative { Direction::NonIncreasing } else { Direction::NonDecreasing }
    }
}

/// The first point (closest to zero) where the kernel and the reference differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The accumulator value, in the caller's coordinates.
    pub at: i64,
    /// The kernel's output code there.
    pub kernel: i64,
    /// The reference's output code there.
    pub reference: i64,
}

/// What a P3 check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Equal on the whole domain.
    Exact,
    /// `differing` points of the window differ; `first` is the accepted one closest to zero.
    Refuted {
        /// The accepted mismatch closest to zero.
        first: Mismatch,
        /// How many points of the window differ.
        differing: u64,
    },
    /// Points differ but the caller accepted none of them as a counterexample (e.g. no concrete
    /// input reaches them), or the window could not be decided.
    Unknown {
        /// Why, in words.
        reason: String,
    },
}

/// The result of one P3 check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// What was found.
    pub outcome: Outcome,
    /// Points compared one by one (or counted by floor sums).
    pub points: u64,
    /// The unsaturated window, in the caller's coordinates; `None` when empty.
    pub window: Option<(i64, i64)>,
    /// Wall-clock time of the check, microseconds (for `--timings`, never in reports).
    pub micros: u64,
}

/// The saturation bounds and the direction shared by a kernel and its reference.
#[derive(Clone, Copy, Debug)]
pub struct Codes {
    /// Lowest output code.
    pub qmin: i64,
    /// Highest output code.
    pub qmax: i64,
    /// How both functions vary with the accumulator.
    pub direction: Direction,
}

/// Compares `kernel` and `reference` on every integer of `[lo, hi]` by enumerating the window
/// where either is unsaturated. `accept(n)` is asked, in order of increasing `|n|`, whether a
/// differing `n` can be shown concretely; the first accepted one is reported.
pub fn check((lo, hi): (i64, i64), codes: Codes, kernel: impl Fn(i64) -> i64, reference: impl Fn(i64) -> i64, accept: impl FnMut(i64) -> bool) -> Report {
    let start = Instant::now();
    let mirrored = codes.direction == Direction::NonIncreasing;
    let m = |n: i64| if mirrored { -n } else { n };
    let (lo, hi) = if mirrored { (-hi, -lo) } else { (lo, hi) };
    let k = |n: i64| kernel(m(n));
    let r = |n: i64| reference(m(n));
    let (outcome, points, window) = match window((lo, hi), codes, &k, &r) {
        None => (Outcome::Exact, 0, None),
        Some((a, b)) => {
            let points = b.abs_diff(a) + 1;
            let window = Some(if mirrored { (-b, -a) } else { (a, b) });
            if points > MAX_ENUMERATION {
                let reason = format!("requantization window of {points} accumulators is too wide to enumerate");
                (Outcome::Unknown { reason }, 0, window)
            } else {
                (enumerate((a, b), &k, &r, m, accept), points, window)
            }
        }
    };
    let outcome = match outcome {
        Outcome::Refuted { first, differing } => Outcome::Refuted { first: Mismatch { at: m(first.at), ..first }, differing },
        other => other,
    };
    Report { outcome, points, window, micros: super::micros(start) }
}

/// Whether `kernel` and `reference` are equal on every integer of `[lo, hi]`, by the window
/// argument of [`check`] but stopping at the first difference: for searches that try candidates
/// and need no count. `Ok(points compared)`; `Err` names the difference or why the window was not
/// enumerated.
pub fn agree((lo, hi): (i64, i64), codes: Codes, kernel: impl Fn(i64) -> i64, reference: impl Fn(i64) -> i64) -> Result<u64, String> {
    let sign = if codes.direction == Direction::NonIncreasing { -1 } else { 1 };
    let (lo, hi) = if sign < 0 { (-hi, -lo) } else { (lo, hi) };
    let k = |n: i64| kernel(sign * n);
    let r = |n: i64| reference(sign * n);
    let Some((a, b)) = window((lo, hi), codes, &k, &r) else { return Ok(0) };
    let points = b.abs_diff(a) + 1;
    if points > MAX_ENUMERATION {
        return Err(format!("requantization window of {points} accumulators is too wide to enumerate"));
    }
    match (a..=b).find(|&n| k(n) != r(n)) {
        Some(n) => Err(format!("kernel {} ≠ reference {} at {}", k(n), r(n), sign * n)),
        None => Ok(points),
    }
}

/// `[a, b]`: the part of `[lo, hi]` outside which both non-decreasing functions saturate alike.
fn window((lo, hi): (i64, i64), c: Codes, k: &impl Fn(i64) -> i64, r: &impl Fn(i64) -> i64) -> Option<(i64, i64)> {
    if lo > hi {
        return None;
    }
    let above_min = |n: i64| k(n) > c.qmin || r(n) > c.qmin;
    let at_max = |n: i64| k(n) >= c.qmax && r(n) >= c.qmax;
    let a = first_true(lo, hi, above_min)?;
    let b = first_true(lo, hi, at_max).map_or(hi, |n| n - 1);
    (a <= b).then_some((a, b))
}

/// The smallest `n` in `[lo, hi]` where the monotone (false, then true) predicate holds.
pub fn first_true(lo: i64, hi: i64, pred: impl Fn(i64) -> bool) -> Option<i64> {
    if lo > hi || !pred(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + ((hi - lo) >> 1);
        if pred(mid) { hi = mid } else { lo = mid + 1 }
    }
    Some(lo)
}

/// Compares every point of `[a, b]`, visiting them by increasing `|m(n)|` so the first accepted
/// mismatch is the one closest to zero in the caller's coordinates.
fn enumerate((a, b): (i64, i64), k: &impl Fn(i64) -> i64, r: &impl Fn(i64) -> i64, m: impl Fn(i64) -> i64, mut accept: impl FnMut(i64) -> bool) -> Outcome {
    let mut differing = 0u64;
    let mut first = None;
    for n in by_magnitude(a, b) {
        let (kn, rn) = (k(n), r(n));
        if kn != rn {
            differing += 1;
            if first.is_none() && accept(m(n)) {
                first = Some(Mismatch { at: n, kernel: kn, reference: rn });
            }
        }
    }
    match first {
        None if differing == 0 => Outcome::Exact,
        None => Outcome::Unknown { reason: format!("{differing} accumulator(s) differ but no concrete input reaches them") },
        Some(first) => Outcome::Refuted { first, differing },
    }
}

/// The integers of `[a, b]` ordered by `|n|`, non-negative first on ties.
fn by_magnitude(a: i64, b: i64) -> impl Iterator<Item = i64> {
    let mid = 0i64.clamp(a, b);
    let (mut right, mut left) = (Some(mid), mid.checked_sub(1).filter(|&l| l >= a));
    std::iter::from_fn(move || {
        let take_right = match (right, left) {
            (Some(r), Some(l)) => r.unsigned_abs() <= l.unsigned_abs(),
            (r, _) => r.is_some(),
        };
        if take_right {
            let r = right?;
            right = r.checked_add(1).filter(|&n| n <= b);
            Some(r)
        } else {
            let l = left?;
            left = l.checked_sub(1).filter(|&n| n >= a);
            Some(l)
        }
    })
}

/// `sat(rne((a·n + b)/d) + z)` with `d > 0`: a requantization whose every step is exact except the
/// final rounding, as a kernel is when its float product cannot round, and as the `real` reference
/// always is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Affine {
    /// The accumulator's coefficient.
    pub a: i128,
    /// The constant term.
    pub b: i128,
    /// The positive divisor.
    pub d: i128,
}

impl Affine {
    /// `rne((a·n + b)/d)`, unsaturated.
    pub fn round(&self, n: i64) -> Option<i128> {
        let num = self.a.checked_mul(n as i128)?.checked_add(self.b)?;
        Some(rne_div(num, self.d))
    }

    /// `Σ_{n=lo}^{hi} rne((a·n + b)/d)` by floor sums, in `O(log)`.
    ///
    /// `rne(N/D) = ⌊(2N + D)/(2D)⌋`, less one at ties (`2N + D ≡ 0 mod 2D`) whose quotient is odd,
    /// i.e. where `2N + D ≡ 2D (mod 4D)`: a linear congruence in `n`, counted in closed form.
    pub fn sum(&self, lo: i64, hi: i64) -> Option<i128> {
        if lo > hi {
            return Some(0);
        }
        let count = (hi as i128) - (lo as i128) + 1;
        let (a2, d2) = (self.a.checked_mul(2)?, self.d.checked_mul(2)?);
        let b2 = a2.checked_mul(lo as i128)?.checked_add(self.b.checked_mul(2)?)?.checked_add(self.d)?;
        let floors = floor_sum(count, d2, a2, b2)?;
        // Odd ties: 2a·n ≡ d − 2b (mod 4d).
        let ties = count_congruent(a2, self.d.checked_sub(self.b.checked_mul(2)?)?, self.d.checked_mul(4)?, lo, hi)?;
        Some(floors - ties)
    }
}

/// `Σ_{i=0}^{n−1} ⌊(a·i + b)/m⌋` for `m > 0` and any signs of `a`, `b` (atcoder `floor_sum`),
/// with every intermediate checked.
pub fn floor_sum(n: i128, m: i128, a: i128, b: i128) -> Option<i128> {
    debug_assert!(n >= 0 && m > 0);
    let mut ans: i128 = 0;
    let (mut a, mut b) = (a, b);
    if a < 0 {
        let a2 = a.rem_euclid(m);
        ans = ans.checked_sub(tri(n)?.checked_mul((a2 - a) / m)?)?;
        a = a2;
    }
    if b < 0 {
        let b2 = b.rem_euclid(m);
        ans = ans.checked_sub(n.checked_mul((b2 - b) / m)?)?;
        b = b2;
    }
    ans.checked_add(floor_sum_unsigned(n, m, a, b)?)
}

/// `n(n−1)/2`.
fn tri(n: i128) -> Option<i128> {
    Some(n.checked_mul(n - 1)? / 2)
}

/// atcoder `floor_sum_unsigned`: `a, b ≥ 0`.
fn floor_sum_unsigned(mut n: i128, mut m: i128, mut a: i128, mut b: i128) -> Option<i128> {
    let mut ans: i128 = 0;
    loop {
        if a >= m {
            ans = ans.checked_add(tri(n)?.checked_mul(a / m)?)?;
            a %= m;
        }
        if b >= m {
            ans = ans.checked_add(n.checked_mul(b / m)?)?;
            b %= m;
        }
        let y_max = a.checked_mul(n)?.checked_add(b)?;
        if y_max < m {
            return Some(ans);
        }
        n = y_max / m;
        b = y_max % m;
        std::mem::swap(&mut m, &mut a);
    }
}

/// How many `n ∈ [lo, hi]` satisfy `a·n ≡ c (mod m)`, `m > 0`.
fn count_congruent(a: i128, c: i128, m: i128, lo: i64, hi: i64) -> Option<i128> {
    let (a, c) = (a.rem_euclid(m), c.rem_euclid(m));
    let (g, inv, _) = ext_gcd(a, m);
    if c % g != 0 {
        return Some(0);
    }
    // n ≡ (c/g)·inv (mod m/g), where inv inverts a/g modulo m/g.
    let period = m / g;
    let n0 = mul_mod((c / g) % period, inv.rem_euclid(period), period);
    let below = |x: i128| (x - n0).div_euclid(period); // solutions ≤ x, up to a constant
    Some(below(hi as i128) - below(lo as i128 - 1))
}

/// `a·b mod m` for `0 ≤ a, b < m`, without overflow (double and add).
fn mul_mod(a: i128, mut b: i128, m: i128) -> i128 {
    let (mut acc, mut a) = (0i128, a);
    while b > 0 {
        if b & 1 == 1 {
            acc = add_mod(acc, a, m);
        }
        a = add_mod(a, a, m);
        b >>= 1;
    }
    acc
}

fn add_mod(a: i128, b: i128, m: i128) -> i128 {
    // a, b < m ≤ i128::MAX: a − (m − b) never overflows.
    if a >= m - b { a - (m - b) } else { a + b }
}

/// `(g, x, y)` with `a·x + b·y = g = gcd(a, b)`, for `a, b ≥ 0`.
fn ext_gcd(a: i128, b: i128) -> (i128, i128, i128) {
    if b == 0 {
        return (a, 1, 0);
    }
    let (g, x, y) = ext_gcd(b, a % b);
    (g, y, x - (a / b) * y)
}

/// Decides two affine requantizations `sat(rne(k(n)) + z)` and `sat(rne(r(n)) + z)` over
/// `[lo, hi]` without enumerating the window.
///
/// Where both are unsaturated, the pre-rounding difference `k(n) − r(n)` is affine, so it keeps
/// one sign on each side of its root; rounding is monotone, so one side's codes dominate the
/// other's there, and if `|k(n) − r(n)| < 1` the codes differ by at most one. On such a piece the
/// number of differing points is `|Σ rne(k) − Σ rne(r)|`: two floor sums. The strips where only
/// one of them saturates are enumerated (they are short when the two are close); otherwise the
/// answer is "unknown".
pub fn check_affine(domain: (i64, i64), (qmin, qmax, z): (i64, i64, i64), kernel: Affine, reference: Affine, accept: impl FnMut(i64) -> bool) -> Report {
    let start = Instant::now();
    let codes = Codes { qmin, qmax, direction: Direction::NonDecreasing };
    let forms = Forms { k: kernel, r: reference, codes, z };
    let (outcome, window) = if kernel.a < 0 || reference.a < 0 || kernel.d <= 0 || reference.d <= 0 {
        (Outcome::Unknown { reason: "affine forms must be non-decreasing with positive divisors".to_string() }, None)
    } else {
        match window(domain, codes, &|n| forms.ks(n), &|n| forms.rs(n)) {
            None => (Outcome::Exact, None),
            Some(w) => (forms.decide(w, accept), Some(w)),
        }
    };
    let points = match (&outcome, window) {
        (Outcome::Unknown { .. }, _) | (_, None) => 0,
        (_, Some((a, b))) => b.abs_diff(a) + 1,
    };
    Report { outcome, points, window, micros: super::micros(start) }
}

struct Forms {
    k: Affine,
    r: Affine,
    codes: Codes,
    z: i64,
}

impl Forms {
    fn sat(&self, v: Option<i128>) -> i64 {
        // Overflow only happens far outside any window; the sign of the form decides there.
        v.map_or(self.codes.qmin, |v| {
            i64::try_from((v + i128::from(self.z)).clamp(i128::from(self.codes.qmin), i128::from(self.codes.qmax)))
                .expect("clamped into [qmin, qmax], which are i64")
        })
    }

    fn ks(&self, n: i64) -> i64 {
        self.sat(self.k.round(n))
    }

    fn rs(&self, n: i64) -> i64 {
        self.sat(self.r.round(n))
    }

    fn decide(&self, (a, b): (i64, i64), mut accept: impl FnMut(i64) -> bool) -> Outcome {
        let unknown = |reason: &str| Outcome::Unknown { reason: reason.to_string() };
        let (qmin, qmax) = (self.codes.qmin, self.codes.qmax);
        // [ia, ib]: where neither saturates, so both are plain affine roundings.
        let Some(ia) = first_true(a, b, |n| self.ks(n) > qmin && self.rs(n) > qmin) else {
            return unknown("no accumulator leaves both forms unsaturated");
        };
        let ib = first_true(ia, b, |n| self.ks(n) >= qmax || self.rs(n) >= qmax).map_or(b, |n| n - 1);
        if ia.abs_diff(a) + b.abs_diff(ib) > MAX_ENUMERATION {
            return unknown("the strips where only one form saturates are too wide to enumerate");
        }
        let mut differing = 0u64;
        let mut candidates = Vec::new();
        for n in (a..ia).chain(ib.saturating_add(1)..=b) {
            if self.ks(n) != self.rs(n) {
                differing += 1;
                candidates.push(n);
            }
        }
        for (pa, pb) in split_at_root(self.k, self.r, ia, ib) {
            let Some(piece) = Piece::new(self.k, self.r, pa, pb) else {
                return unknown("the forms differ by one or more before rounding (or overflow)");
            };
            let Some(count) = piece.differing(pa, pb) else { return unknown("floor sums overflow") };
            // Non-negative by construction (every term of a piece has its sign); were it not: no answer.
            let Ok(count) = u64::try_from(count) else { return unknown("floor sums gave a count outside [0, 2^64)") };
            differing += count;
            if count > 0 {
                candidates.extend(piece.closest_mismatch(pa, pb));
            }
        }
        candidates.sort_by_key(|&n| key(n));
        match candidates.into_iter().find(|&n| accept(n)) {
            Some(n) => Outcome::Refuted { first: Mismatch { at: n, kernel: self.ks(n), reference: self.rs(n) }, differing },
            None if differing == 0 => Outcome::Exact,
            None => Outcome::Unknown { reason: format!("{differing} accumulator(s) differ but none checked is reachable") },
        }
    }
}

/// Order of preference for counterexamples: smaller `|n|`, then non-negative.
fn key(n: i64) -> (u64, bool) {
    (n.unsigned_abs(), n < 0)
}

/// `(k − r)(n)·dk·dr = c·n + e`.
fn difference(k: Affine, r: Affine, n: i64) -> Option<i128> {
    let c = k.a.checked_mul(r.d)?.checked_sub(r.a.checked_mul(k.d)?)?;
    let e = k.b.checked_mul(r.d)?.checked_sub(r.b.checked_mul(k.d)?)?;
    c.checked_mul(n as i128)?.checked_add(e)
}

/// Splits `[lo, hi]` where the affine `k − r` changes sign.
fn split_at_root(k: Affine, r: Affine, lo: i64, hi: i64) -> Vec<(i64, i64)> {
    if lo > hi {
        return Vec::new();
    }
    let positive = |n: i64| difference(k, r, n).is_some_and(|v| v > 0);
    let starts_positive = positive(lo);
    match first_true(lo, hi, |n| positive(n) != starts_positive) {
        None => vec![(lo, hi)],
        Some(s) => vec![(lo, s - 1), (s, hi)],
    }
}

/// A sub-interval where one form dominates the other by less than one.
struct Piece {
    k: Affine,
    r: Affine,
    /// +1 when `k ≥ r` on the piece, −1 when `k ≤ r`.
    sign: i128,
}

impl Piece {
    fn new(k: Affine, r: Affine, lo: i64, hi: i64) -> Option<Piece> {
        // An affine function is extreme at the ends: |k − r| < 1 there ⇒ on the whole piece.
        let dd = k.d.checked_mul(r.d)?;
        let (x, y) = (difference(k, r, lo)?, difference(k, r, hi)?);
        if x.abs() >= dd || y.abs() >= dd {
            return None;
        }
        let sign = if x > 0 || y > 0 { 1 } else { -1 };
        Some(Piece { k, r, sign })
    }

    /// Σ |rne(k) − rne(r)| over `[lo, hi]`: each term is 0 or 1 with the piece's sign.
    fn differing(&self, lo: i64, hi: i64) -> Option<i128> {
        Some(self.sign * (self.k.sum(lo, hi)? - self.r.sum(lo, hi)?))
    }

    /// The differing points closest to zero on either side of it (binary search on partial sums
    /// grown outwards, which only grow since every term has the same sign).
    fn closest_mismatch(&self, lo: i64, hi: i64) -> Vec<i64> {
        let any = |a: i64, b: i64| self.differing(a, b).is_some_and(|s| s > 0);
        let upward = |a: i64| first_true(a, hi, |m| any(a, m));
        let downward = |b: i64| first_true(lo, b + 1, |m| !any(m, b)).map(|m| m - 1).filter(|&m| m >= lo);
        if lo >= 0 {
            upward(lo).into_iter().collect()
        } else if hi < 0 {
            downward(hi).into_iter().collect()
        } else {
            upward(0).into_iter().chain(downward(-1)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U8: Codes = Codes { qmin: 0, qmax: 255, direction: Direction::NonDecreasing };

    // Test models of a float requantizer: rounded values in i64 range, so the cast keeps every bit.
    #[allow(clippy::cast_possible_truncation)]
    fn requant(n: i64, scale: f64, zp: i64) -> i64 {
        ((n as f64 * scale).round_ties_even() as i64 + zp).clamp(0, 255)
    }

    #[test]
    fn equal_functions_need_only_the_window() {
        let rep = check((-1 << 30, 1 << 30), U8, |n| requant(n, 1.0 / 64.0, 128), |n| requant(n, 1.0 / 64.0, 128), |_| true);
        assert_eq!(rep.outcome, Outcome::Exact);
        // 254 unsaturated codes × 64 accumulators each, plus the half-width end codes.
        assert!((254 * 64..=256 * 64).contains(&rep.points), "{}", rep.points);
    }

    // Test models of a float requantizer: rounded values in i64 range, so the cast keeps every bit.
    #[allow(clippy::cast_possible_truncation)]
    #[test]
    fn mismatches_are_counted_and_the_closest_to_zero_reported() {
        // Ties at n = 32 + 64k: half-up rounding differs from half-even at every other one.
        let half_up = |n: i64| ((n as f64 / 64.0 + 0.5).floor() as i64 + 128).clamp(0, 255);
        let rep = check((-100_000, 100_000), U8, half_up, |n| requant(n, 1.0 / 64.0, 128), |_| true);
        match rep.outcome {
            Outcome::Refuted { first, differing } => {
                assert_eq!(first, Mismatch { at: 32, kernel: 129, reference: 128 });
                assert_eq!(differing, 128);
            }
            other => panic!("{other:?}"),
        }
    }

    // Test models of a float requantizer: rounded values in i64 range, so the cast keeps every bit.
    #[allow(clippy::cast_possible_truncation)]
    #[test]
    fn rejected_mismatches_make_the_answer_unknown_or_move_it_outwards() {
        let half_up = |n: i64| ((n as f64 / 64.0 + 0.5).floor() as i64 + 128).clamp(0, 255);
        let exact = |n: i64| requant(n, 1.0 / 64.0, 128);
        let rep = check((-100_000, 100_000), U8, half_up, exact, |n| n != 32);
        assert!(matches!(rep.outcome, Outcome::Refuted { first: Mismatch { at: -96, .. }, .. }), "{:?}", rep.outcome);
        let rep = check((-100_000, 100_000), U8, half_up, exact, |_| false);
        assert!(matches!(rep.outcome, Outcome::Unknown { .. }));
    }

    #[test]
    fn negative_scales_are_mirrored() {
        let neg = Codes { direction: Direction::NonIncreasing, ..U8 };
        let k = |n: i64| requant(n, -1.0 / 16.0, 100);
        let rep = check((-1 << 20, 1 << 20), neg, k, k, |_| true);
        assert_eq!(rep.outcome, Outcome::Exact);
        assert!(rep.points >= 254 * 16);
        let window = rep.window.unwrap();
        assert!(window.0 < 0 && window.1 > 0, "{window:?}");
        let off = |n: i64| if n == -40 { k(n) + 1 } else { k(n) };
        let rep = check((-1 << 20, 1 << 20), neg, off, k, |_| true);
        assert!(matches!(rep.outcome, Outcome::Refuted { first: Mismatch { at: -40, .. }, differing: 1 }), "{:?}", rep.outcome);
    }

    #[test]
    fn agree_stops_at_the_first_difference() {
        let exact = |n: i64| requant(n, 1.0 / 64.0, 128);
        assert!(matches!(agree((-100_000, 100_000), U8, exact, exact), Ok(p) if p >= 254 * 64));
        let off = |n: i64| if n == 700 { exact(n) + 1 } else { exact(n) };
        assert_eq!(agree((-100_000, 100_000), U8, off, exact), Err("kernel 140 ≠ reference 139 at 700".to_string()));
        let neg = Codes { direction: Direction::NonIncreasing, ..U8 };
        let k = |n: i64| requant(n, -1.0 / 16.0, 100);
        let off = |n: i64| if n == -40 { k(n) + 1 } else { k(n) };
        assert!(agree((-1 << 20, 1 << 20), neg, off, k).unwrap_err().ends_with("at -40"));
        let wide = |n: i64| requant(n, 1.0 / (1 << 20) as f64, 0);
        assert!(agree((i32::MIN as i64, i32::MAX as i64), U8, wide, wide).unwrap_err().contains("too wide"));
    }

    #[test]
    fn wide_windows_are_not_enumerated() {
        let k = |n: i64| requant(n, 1.0 / (1 << 20) as f64, 0);
        let rep = check((i32::MIN as i64, i32::MAX as i64), U8, k, k, |_| true);
        assert!(matches!(rep.outcome, Outcome::Unknown { .. }), "{:?}", rep.outcome);
    }

    #[test]
    fn floor_sums_match_brute_force() {
        for (n, m, a, b) in [(10i128, 3i128, 2i128, 1i128), (7, 5, -3, -11), (100, 7, 13, -50), (1, 1, 0, 0), (0, 4, 3, 3)] {
            let brute: i128 = (0..n).map(|i| (a * i + b).div_euclid(m)).sum();
            assert_eq!(floor_sum(n, m, a, b), Some(brute), "{n} {m} {a} {b}");
        }
        for f in [Affine { a: 3, b: 1, d: 6 }, Affine { a: 1, b: 0, d: 2 }, Affine { a: 5, b: -7, d: 4 }, Affine { a: 0, b: 3, d: 2 }] {
            let brute: i128 = (-50..=70).map(|n| f.round(n).unwrap()).sum();
            assert_eq!(f.sum(-50, 70), Some(brute), "{f:?}");
        }
    }

    #[test]
    fn affine_check_agrees_with_enumeration() {
        // 1/4 against 1/4 + 2^-22 (a slightly larger multiplier: it rounds ties up) and itself.
        let r = Affine { a: 1 << 20, b: 0, d: 4 << 20 };
        let k = Affine { a: (1 << 20) + 1, b: 0, d: 4 << 20 };
        let sat = |f: Affine| move |n: i64| (f.round(n).unwrap() + 10).clamp(0, 255) as i64;
        let brute = check((-2000, 2000), U8, sat(k), sat(r), |_| true);
        let fast = check_affine((-2000, 2000), (0, 255, 10), k, r, |_| true);
        match (&brute.outcome, &fast.outcome) {
            (Outcome::Refuted { first: f1, differing: d1 }, Outcome::Refuted { first: f2, differing: d2 }) => {
                assert_eq!((f1, d1), (f2, d2));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(check_affine((-1 << 40, 1 << 40), (0, 255, 10), r, r, |_| true).outcome, Outcome::Exact);
    }

    #[test]
    fn affine_check_decides_windows_too_wide_to_enumerate() {
        // S = 2^-30 exactly against S = 2^-30 (1 + 2^-40): windows of 2^38 accumulators.
        let r = Affine { a: 1, b: 0, d: 1 << 30 };
        let k = Affine { a: (1 << 40) + 1, b: 0, d: 1 << 70 };
        let rep = check_affine((-(1 << 45), 1 << 45), (-128, 127, 0), k, r, |_| true);
        match rep.outcome {
            // Differ where n/2^30 is within n·2^-70 below a half-integer: n = (j + ½)·2^30 − m.
            Outcome::Refuted { first, differing } => {
                assert_eq!(first.at, 1 << 29, "the first tie, rounded up by the larger multiplier");
                assert!(differing >= 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
