//! [`super::row_columns`] on AVX2, 8 columns at a time (two halves of 4 f64 lanes): the same IEEE
//! operations as [`super::approximate`] in the same order, lane by lane (`vmaxpd`/`vminpd` equal
//! `f64::max`/`min` here: no operand is NaN, and where both are zeros the result is a zero either
//! way, which the next addition of 1.5·2^52 does not see), so the same lanes are sent to the exact
//! fallback and the same codes come out: the code is the low 32 bits of `y + 1.5·2^52` as in the
//! scalar form, narrowed to its low byte (y already lies in the code type's range). The last
//! `n mod 8` columns of a row go through the scalar form. The auto-vectorized scalar form kept
//! 4 lanes with spilled constants and was 8.7 % of the MiniLM encoder's time on a Zen 3 host.

use super::{BOUND, Certified, ColumnSlice, LIMIT, MAGIC, row_columns, settle_flags};
use crate::requant::{CodeOut, Output};
use std::arch::x86_64::*;

/// One row, as [`super::row_columns`]; `WIDE` (the clamp and ρ) false only where
/// [`super::Columns`]' `narrow` holds, `BIAS` false only where its `unbiased` does.
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // [`row_columns`]' operands
pub(super) unsafe fn row<C: CodeOut, const WIDE: bool, const BIAS: bool>(
    acc: &[i32],
    cs: ColumnSlice<'_>,
    bias: &[i32],
    plans: &[Certified],
    c0: usize,
    out: Output,
    codes: &mut [C],
) -> u64 {
    let n = acc.len();
    assert!(cs.b.len() == n && cs.r.len() == n && cs.rho.len() == n && codes.len() == n);
    let full = n / 8 * 8;
    let (limit, neg_limit, magic, half, bound) =
        (_mm256_set1_pd(LIMIT), _mm256_set1_pd(-LIMIT), _mm256_set1_pd(MAGIC), _mm256_set1_pd(0.5), _mm256_set1_pd(BOUND));
    let (zy, lo, hi) = (f64::from(out.zero_point()), f64::from(out.code().min()), f64::from(out.code().max()));
    let (zy, lo, hi) = (_mm256_set1_pd(zy), _mm256_set1_pd(lo), _mm256_set1_pd(hi));
    let abs = |x: __m256d| _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
    // The low dword of each 64-bit lane, then the low byte of each dword.
    let (dwords, low_bytes) = (_mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    let mut fallbacks = 0;
    let bytes = C::bytes_mut(codes);
    for j in (0..full).step_by(8) {
        // SAFETY: j + 8 ≤ n, the length of `acc` and of every column slice.
        let (word, near) = unsafe {
            let a = _mm256_loadu_si256(acc.as_ptr().add(j).cast());
            let mut near = 0u32;
            let mut four = [_mm_setzero_si128(); 2];
            for (h, four) in four.iter_mut().enumerate() {
                let at = |v: &[f64]| _mm256_loadu_pd(v.as_ptr().add(j + 4 * h));
                let mut t = _mm256_cvtepi32_pd(if h == 0 { _mm256_castsi256_si128(a) } else { _mm256_extracti128_si256::<1>(a) });
                if BIAS {
                    t = _mm256_add_pd(t, at(cs.b));
                }
                let p = _mm256_mul_pd(t, at(cs.r));
                let (v, tol) = if WIDE {
                    let rho = at(cs.rho);
                    let v = _mm256_min_pd(_mm256_max_pd(_mm256_add_pd(p, rho), neg_limit), limit);
                    (v, _mm256_mul_pd(_mm256_add_pd(abs(p), abs(rho)), bound))
                } else {
                    (p, _mm256_mul_pd(abs(p), bound))
                };
                let rounded = _mm256_sub_pd(_mm256_add_pd(v, magic), magic);
                let d = abs(_mm256_sub_pd(v, rounded));
                near |= (_mm256_movemask_pd(_mm256_cmp_pd::<_CMP_LE_OQ>(_mm256_sub_pd(half, d), tol)) as u32) << (4 * h);
                let y = _mm256_min_pd(_mm256_max_pd(_mm256_add_pd(rounded, zy), lo), hi);
                let bits = _mm256_permutevar8x32_epi32(_mm256_castpd_si256(_mm256_add_pd(y, magic)), dwords);
                *four = _mm_shuffle_epi8(_mm256_castsi256_si128(bits), low_bytes);
            }
            (_mm_cvtsi128_si64(_mm_unpacklo_epi32(four[0], four[1])) as u64, near)
        };
        bytes[j..j + 8].copy_from_slice(&word.to_le_bytes());
        if near != 0 {
            fallbacks += settle_flags(acc, bias, plans, c0, out, j, u64::from(near), bytes);
        }
    }
    let tail = cs.tail(full);
    fallbacks + row_columns(&acc[full..], tail, bias, plans, c0 + full, out, &mut codes[full..])
}
