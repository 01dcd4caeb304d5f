//! Exact rounding of dyadic rationals `n·2^q / d` in i128, the arithmetic every requantized code
//! op shares.
//!
//! Results are clamped to `±LIMIT` (2^10): every code op adds a zero point in -128..=255 and
//! saturates to u8/i8, and any value of magnitude ≥ 511 saturates to the same code as its clamp,
//! so `sat(clamp(r) + zy) = sat(r + zy)`.

use super::CodesError;
use crate::requant::{div_rem_euclid, rne_div};

pub(crate) const LIMIT: i128 = 1 << 10;

/// `s = m·2^e` with integer `m < 2^24`, for a positive finite f32.
pub(crate) fn dyadic(s: f32) -> Result<(i128, i32), CodesError> {
    if !(s.is_finite() && s > 0.0) {
        return Err(CodesError::Scale(format!("scale {s:e} is not a positive finite f32")));
    }
    let bits = s.to_bits();
    let (frac, biased) = (i128::from(bits & 0x7f_ffff), ((bits >> 23) & 0xff) as i32);
    Ok(if biased == 0 { (frac, -149) } else { (frac | 1 << 23, biased - 150) })
}

/// `rne(n·2^q / d)` clamped to `±LIMIT`, ties to even. Needs `|n| < 2^125` and `0 < d < 2^100`.
///
/// | step | why it cannot overflow or misround |
/// |---|---|
/// | `\|x\| ≥ 2^(L−1+q−db)` with `2^(L−1) ≤ \|n\| < 2^L`, `d < 2^db` | when that is ≥ 2^10 the clamp is `±LIMIT` whatever the exact value |
/// | otherwise `L + q ≤ db + 10`, so for `q ≥ 0` the shifted `n·2^q < 2^111` | one i128 division with remainder |
/// | for `q < 0`, `rne(n / (d·2^k))` with `k = −q` from `⌊n / 2^(k−1)⌋` and a sticky bit | [`rne_shift_div`] |
pub(crate) fn rne_clamped(n: i128, q: i32, d: i128) -> i128 {
    debug_assert!(d > 0 && n.unsigned_abs() < 1 << 125);
    if n == 0 {
        return 0;
    }
    let l = 128 - n.unsigned_abs().leading_zeros() as i32;
    let db = 128 - d.leading_zeros() as i32;
    if l - 1 + q - db >= 10 {
        return if n < 0 { -LIMIT } else { LIMIT };
    }
    let r = if q >= 0 { rne_div(n << q, d) } else { rne_shift_div(n, d, q.unsigned_abs()) };
    r.clamp(-LIMIT, LIMIT)
}

/// `rne(n / (d·2^k))` for `k ≥ 1`: with `2n/2^k = M + g` (`M` an integer, `0 ≤ g < 1`, `g > 0`
/// exactly when bits below 2^(k−1) are set) and `M = Q·2d + R`, the value is `Q + (R + g)/2d`,
/// so it rounds up when `R > d`, or `R = d` and `g > 0`; `R = d, g = 0` is the tie.
fn rne_shift_div(n: i128, d: i128, k: u32) -> i128 {
    let (m, sticky) = if k > 127 {
        // |n| < 2^125: ⌊n / 2^(k−1)⌋ is 0 or −1 and every bit of n is below the cut.
        (if n < 0 { -1 } else { 0 }, n != 0)
    } else {
        (n >> (k - 1), n & ((1i128 << (k - 1)) - 1) != 0)
    };
    let (q, r) = div_rem_euclid(m, 2 * d);
    match r.cmp(&d) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal if sticky => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the plain division wherever the value is small and the shift fits.
    #[test]
    fn shift_div_matches_division() {
        for n in -300i128..300 {
            for d in 1i128..12 {
                for k in 0u32..6 {
                    let want = rne_div(n, d << k).clamp(-LIMIT, LIMIT);
                    assert_eq!(rne_clamped(n, -(k as i32), d), want, "n={n} d={d} k={k}");
                    let up = rne_div(n << k, d).clamp(-LIMIT, LIMIT);
                    assert_eq!(rne_clamped(n, k as i32, d), up, "n={n} d={d} k={k}");
                }
            }
        }
    }

    #[test]
    fn extreme_shifts() {
        assert_eq!(rne_clamped(1 << 120, -121, 1), 0); // exactly 1/2: tie to even 0
        assert_eq!(rne_clamped((1 << 120) + 1, -121, 1), 1);
        assert_eq!(rne_clamped(3 << 119, -120, 1), 2); // 1.5 → 2
        assert_eq!(rne_clamped(-(3 << 119), -120, 1), -2);
        assert_eq!(rne_clamped(5, -300, 7), 0);
        assert_eq!(rne_clamped(-5, 300, 7), -LIMIT);
    }
}
