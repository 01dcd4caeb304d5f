//! The certified evaluation in f32, for ratios whose operands sit well inside f32's normal range:
//! `v = fl32(fl32(fl32(t)·R) + P)` with `t = acc + bias` (i32; an overflowing sum goes to the
//! exact form), `R = fl32(r)`, `P = fl32(ρ)`, rounded to the nearest integer unless v lies
//! within its error bound of a half-integer, where [`super::requant_exact`] decides. Always equal
//! to the exact form; twice the lanes of the f64 form per register, with the same boundary test.
//!
//! | condition (per instance, [`eligible`]) | why |
//! |---|---|
//! | `2^-100 ≤ r ≤ 2^60` | R, `fl32(t)·R` (\|t\| < 2^31) and the bound below are normal f32: each rounding is relative, ≤ u = 2^-24 |
//! | `ρ = 0` or `2^-100 ≤ \|ρ\| ≤ 2^8` | P normal; a value beyond ±2^12 saturates even after the error of ρ is counted |
//!
//! Error: r is within 2^-52 (relative) of the exact ratio (the f64 form's argument), so
//! `p = fl32(fl32(t)·R)` is within `3u + 2^-52 + O(u²)` of `t·ratio`, P within `u + 2^-52` of
//! the offset, and the sum rounds once more: `|v − x| ≤ (|p| + |P|)·(5u + O(u²))`. The test uses
//! `fl32(|p| + |P|)·2^-20` (16u; its own rounding costs one u), a bound with room to spare. Where
//! `|v| ≤ 2^12` the steps below are exact: `v + 1.5·2^23` rounds to an integer with ties to even,
//! `v − rne(v)` is exact (both on v's ulp grid), and `1/2 − d` is exact when `d ≥ 1/4` (when
//! d < 1/4 it exceeds the bound, < 2^-7 there, either way). Where `|v| > 2^12` the exact value
//! has v's sign and `|x| ≥ |v|(1 − 5u) − 10u·2^8 > 2^11`: both saturate, so no test is needed;
//! v is clamped to ±2^12 first, which keeps the rounding trick exact and the code saturated.

use super::{Certified, ColumnSlice, requant_exact, settle_flags, settle_run};
use crate::micro::Finished;
use crate::requant::{CodeOut, Output};

/// ±2^12: beyond it the code saturates (every zero point lies in −128..=255).
const LIMIT: f32 = 4096.0;
/// 1.5·2^23: adding and subtracting it rounds an f32 of magnitude ≤ 2^22 to an integer, ties to even.
const MAGIC: f32 = 12_582_912.0;
/// The relative error bound the boundary test uses, 2^-20.
const BOUND: f32 = 1.0 / (1u32 << 20) as f32;

/// `(R, P)` where the f32 form holds for the ratio `r` and offset `ρ` (the header's table).
pub(super) fn eligible(r: f64, rho: f64) -> Option<(f32, f32)> {
    let inside = |x: f64, hi: f64| (2f64.powi(-100)..=hi).contains(&x.abs());
    (inside(r, 2f64.powi(60)) && (rho == 0.0 || inside(rho, 2f64.powi(8)))).then_some((r as f32, rho as f32))
}

/// The code, and whether the exact form must decide (v near a boundary, or `acc + bias`
/// overflows i32). The vectorized rows below are these operations lane by lane.
#[inline(always)]
#[allow(clippy::manual_clamp)] // max/min: no panic path, and they vectorize
fn approximate(acc: i32, bias: i32, r: f32, rho: f32, out: Output) -> (i32, bool) {
    let (t, overflow) = acc.overflowing_add(bias);
    let p = t as f32 * r;
    let v = p + rho;
    let inside = v.abs() <= LIMIT;
    let shifted = v.max(-LIMIT).min(LIMIT) + MAGIC;
    let d = (v.max(-LIMIT).min(LIMIT) - (shifted - MAGIC)).abs();
    let near = overflow || (inside && 0.5 - d <= (p.abs() + rho.abs()) * BOUND);
    let code = (shifted.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) + out.zero_point();
    (code.clamp(out.code().min(), out.code().max()), near)
}

/// One row's columns `c0..c0 + acc.len()` in the f32 form (every plan [`eligible`]): as
/// [`super::row_columns`]. Returns the fallback count.
#[inline(always)]
pub(super) fn row<C: CodeOut>(acc: &[i32], cs: ColumnSlice<'_>, bias: &[i32], plans: &[Certified], c0: usize, out: Output, codes: &mut [C]) -> u64 {
    const CH: usize = 64;
    let mut fallbacks = 0;
    let chunks = acc.chunks(CH).zip(codes.chunks_mut(CH)).zip(bias[c0..][..acc.len()].chunks(CH).zip(cs.r32.chunks(CH)).zip(cs.rho32.chunks(CH)));
    for (i0, ((acc, codes), ((b, r), rho))) in chunks.enumerate() {
        let mut near = [false; CH];
        let mut any = false;
        for (((((&a, y), &b), &r), &rho), near) in acc.iter().zip(codes.iter_mut()).zip(b).zip(r).zip(rho).zip(&mut near) {
            let (v, n) = approximate(a, b, r, rho, out);
            *y = C::from_code(v);
            *near = n;
            any |= n;
        }
        if any {
            fallbacks += settle(acc, b, plans, c0 + i0 * CH, out, &near, codes);
        }
    }
    fallbacks
}

/// A run of accumulators sharing one bias and one plan (`(r, ρ)` its f32 pair: the plan is
/// [`eligible`]) in the f32 form: [`approximate`]'s operations, written without branches (the
/// overflow of `acc + bias` from the signs, the flags combined bitwise) so that they vectorize
/// where the caller's instance allows. Returns the fallback count.
#[inline(always)]
#[allow(clippy::manual_clamp)] // max/min: no panic path, and they vectorize
pub(super) fn row_uniform<C: CodeOut>(acc: &[i32], bias: i32, (r, rho): (f32, f32), plan: &Certified, out: Output, codes: &mut [C]) -> u64 {
    const CH: usize = 64;
    let (zy, lo, hi) = (out.zero_point().wrapping_sub(MAGIC.to_bits() as i32), out.code().min(), out.code().max());
    let tol = rho.abs();
    let mut fallbacks = 0;
    for (acc, codes) in acc.chunks(CH).zip(codes.chunks_mut(CH)) {
        let mut near = [false; CH];
        let mut any = false;
        for ((&a, y), near) in acc.iter().zip(codes.iter_mut()).zip(&mut near) {
            let t = a.wrapping_add(bias);
            let overflow = (a ^ t) & (bias ^ t) < 0;
            let p = t as f32 * r;
            let v = p + rho;
            let clamped = v.max(-LIMIT).min(LIMIT);
            let shifted = clamped + MAGIC;
            let d = (clamped - (shifted - MAGIC)).abs();
            let n = overflow | ((v.abs() <= LIMIT) & (0.5 - d <= (p.abs() + tol) * BOUND));
            *y = C::from_code((shifted.to_bits() as i32).wrapping_add(zy).max(lo).min(hi));
            *near = n;
            any |= n;
        }
        if any {
            fallbacks += settle_run(acc, bias, plan, out, &near, codes);
        }
    }
    fallbacks
}

/// [`row_uniform`] on AVX2, 8 lanes per vector with the constants in registers, for accumulators
/// of magnitude at most `bound`: the same IEEE operations lane by lane (`vmaxps`/`vminps` equal
/// `f32::max`/`min` here: no operand is NaN); the code narrowed with saturation (`vpackssdw`,
/// then `vpackuswb` for u8, `vpacksswb` for i8), which is the clamp to the type's range (every
/// code before it lies within ±2^12 + 255). Without three of the scalar form's tests where
/// they cannot matter: ρ = 0 adds nothing (`OFFSET`); `acc + bias` cannot overflow i32 when
/// `bound + |bias| < 2^31` (`CHECK` false: a convolution's accumulators are at most K·255², a
/// product's 255²); and the boundary test runs on every lane, not only within ±2^12 — a lane
/// beyond it is flagged only when `|p|·2^-20 ≥ 1/2 − d`, which sends it to the exact form (a
/// superset of the scalar form's flags: the same codes). The flagged lanes of a chunk of
/// [`CHUNK`] go to the exact form after the chunk's vector loop, which so has no call that
/// would spill its constants; the last `n mod 8` go through [`row_uniform`]. Where the
/// compiler vectorized [`row_uniform`] inside a convolution it kept the constants and the flags
/// on the stack (the requantization took as long as the tile on a 1×1 64→64 convolution).
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // the run's operands
pub(super) unsafe fn row_uniform_avx2<C: CodeOut>(acc: &[i32], bound: u64, bias: i32, rr: (f32, f32), plan: &Certified, out: Output, codes: &mut [C]) -> u64 {
    let check = bound.saturating_add(u64::from(bias.unsigned_abs())) > i32::MAX as u64;
    let offset = rr.1 != 0.0;
    let u8_out = out.code() == crate::requant::Code::U8;
    // SAFETY: forwarded (AVX2 present).
    unsafe {
        match (u8_out, offset, check) {
            (true, false, false) => uniform_avx2::<C, true, false, false>(acc, bias, rr, plan, out, codes),
            (true, false, true) => uniform_avx2::<C, true, false, true>(acc, bias, rr, plan, out, codes),
            (true, true, false) => uniform_avx2::<C, true, true, false>(acc, bias, rr, plan, out, codes),
            (true, true, true) => uniform_avx2::<C, true, true, true>(acc, bias, rr, plan, out, codes),
            (false, false, false) => uniform_avx2::<C, false, false, false>(acc, bias, rr, plan, out, codes),
            (false, false, true) => uniform_avx2::<C, false, false, true>(acc, bias, rr, plan, out, codes),
            (false, true, false) => uniform_avx2::<C, false, true, false>(acc, bias, rr, plan, out, codes),
            (false, true, true) => uniform_avx2::<C, false, true, true>(acc, bias, rr, plan, out, codes),
        }
    }
}

/// Elements per chunk of [`row_uniform_avx2`]: one flag byte per vector on the stack.
#[cfg(target_arch = "x86_64")]
const CHUNK: usize = 512;

/// [`row_uniform_avx2`] for one code type (`UNSIGNED`: u8), with or without ρ (`OFFSET`) and the
/// overflow test (`CHECK`).
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn uniform_avx2<C: CodeOut, const UNSIGNED: bool, const OFFSET: bool, const CHECK: bool>(
    acc: &[i32],
    bias: i32,
    (r, rho): (f32, f32),
    plan: &Certified,
    out: Output,
    codes: &mut [C],
) -> u64 {
    use std::arch::x86_64::*;
    let n = acc.len();
    assert_eq!(codes.len(), n);
    let full = n / 8 * 8;
    let (b, rv, rhov, tol) = (_mm256_set1_epi32(bias), _mm256_set1_ps(r), _mm256_set1_ps(rho), _mm256_set1_ps(rho.abs()));
    let (limit, neg_limit, magic, half, bound) =
        (_mm256_set1_ps(LIMIT), _mm256_set1_ps(-LIMIT), _mm256_set1_ps(MAGIC), _mm256_set1_ps(0.5), _mm256_set1_ps(BOUND));
    let zy = _mm256_set1_epi32(out.zero_point().wrapping_sub(MAGIC.to_bits() as i32));
    let abs = |x: __m256| _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
    let bytes = C::bytes_mut(codes);
    let mut fallbacks = 0;
    for c0 in (0..full).step_by(CHUNK) {
        let end = (c0 + CHUNK).min(full);
        let mut flags = [0u8; CHUNK / 8];
        let mut any = 0;
        for (j, flag) in (c0..end).step_by(8).zip(&mut flags) {
            // SAFETY: j + 8 ≤ full ≤ n, the length of `acc` and of `bytes`.
            unsafe {
                let a = _mm256_loadu_si256(acc.as_ptr().add(j).cast());
                let t = _mm256_add_epi32(a, b);
                let p = _mm256_mul_ps(_mm256_cvtepi32_ps(t), rv);
                let (v, tolerance) = if OFFSET { (_mm256_add_ps(p, rhov), _mm256_add_ps(abs(p), tol)) } else { (p, abs(p)) };
                let clamped = _mm256_min_ps(_mm256_max_ps(v, neg_limit), limit);
                let shifted = _mm256_add_ps(clamped, magic);
                let d = abs(_mm256_sub_ps(clamped, _mm256_sub_ps(shifted, magic)));
                let close = _mm256_cmp_ps::<_CMP_LE_OQ>(_mm256_sub_ps(half, d), _mm256_mul_ps(tolerance, bound));
                let near = if CHECK {
                    // Signed overflow: the sum's sign differs from both operands' (sign of (a ^ t) & (b ^ t)).
                    let overflow = _mm256_castsi256_ps(_mm256_and_si256(_mm256_xor_si256(a, t), _mm256_xor_si256(b, t)));
                    _mm256_movemask_ps(_mm256_or_ps(overflow, close))
                } else {
                    _mm256_movemask_ps(close)
                };
                let code = _mm256_add_epi32(_mm256_castps_si256(shifted), zy);
                let words = _mm_packs_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256::<1>(code));
                let narrowed = if UNSIGNED { _mm_packus_epi16(words, words) } else { _mm_packs_epi16(words, words) };
                _mm_storel_epi64(bytes.as_mut_ptr().add(j).cast(), narrowed);
                *flag = near as u8;
                any |= near;
            }
        }
        if any != 0 {
            for (v, &flag) in flags.iter().enumerate().filter(|(_, f)| **f != 0) {
                let mut lanes = flag;
                while lanes != 0 {
                    let i = c0 + 8 * v + lanes.trailing_zeros() as usize;
                    lanes &= lanes - 1;
                    bytes[i] = requant_exact(acc[i], bias, &plan.ratio, out) as u8;
                    fallbacks += 1;
                }
            }
        }
    }
    fallbacks + row_uniform(&acc[full..], bias, (r, rho), plan, out, &mut codes[full..])
}

/// The exact form on the flagged columns of a chunk starting at column `c0` (`bias` the chunk's).
fn settle<C: CodeOut>(acc: &[i32], bias: &[i32], plans: &[Certified], c0: usize, out: Output, near: &[bool], codes: &mut [C]) -> u64 {
    let plan = |col: usize| &plans[if plans.len() == 1 { 0 } else { col }];
    let mut fallbacks = 0;
    for (i, _) in near.iter().enumerate().take(acc.len()).filter(|(_, n)| **n) {
        codes[i] = C::from_code(requant_exact(acc[i], bias[i], &plan(c0 + i).ratio, out));
        fallbacks += 1;
    }
    fallbacks
}

/// The bounds [`block_avx512`] and [`block_avx2`] read and write within: the block's columns are
/// the slice's, inside the bias and the `ld` columns of `codes`, whose rows reach the block's last.
fn check(f: &Finished<'_>, cs: &ColumnSlice<'_>, bias: &[i32], ld: usize, codes: usize) {
    let n = cs.r32.len();
    assert!(cs.rho32.len() == n && f.cols == n && bias.len() >= f.c0 + n && f.c0 + n <= ld && codes >= f.rows().end * ld);
}

/// [`row`] on AVX-512 for the finished block `f` (its `cs.len()` columns) into the same places
/// of the row-major `codes` of `ld` columns, 16 per register, the constants set up once per block: the
/// operations of [`approximate`] lane by lane (`vmaxps`/`vminps` equal `f32::max`/`min` here: no
/// NaN, and a zero of either sign is then added to 1.5·2^23, which does not see its sign), the
/// overflow of `acc + bias` from the signs of the operands and the sum; the code narrowed with
/// saturation (`vpmovusdb` after a max with 0 for u8, `vpmovsdb` for i8), which is the clamp.
/// `OFFSET` false only where every ρ is 0 (`p + 0` is p up to the sign of a zero), `BIAS` false
/// only where every bias is 0.
///
/// # Safety
/// AVX-512 F and BW present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments)] // a block's operands
pub(super) unsafe fn block_avx512<C: CodeOut, const OFFSET: bool, const BIAS: bool>(
    f: &Finished<'_>,
    ld: usize,
    cs: ColumnSlice<'_>,
    bias: &[i32],
    plans: &[Certified],
    out: Output,
    codes: &mut [C],
) -> u64 {
    use std::arch::x86_64::*;
    let n = cs.r32.len();
    let c0 = f.c0;
    check(f, &cs, bias, ld, codes.len());
    let bytes = C::bytes_mut(codes);
    let zy = _mm512_set1_epi32(out.zero_point().wrapping_sub(MAGIC.to_bits() as i32));
    // The callers checked that `out` writes C's codes: the type decides the narrowing at compile time.
    debug_assert!(out.code() == C::CODE);
    let unsigned = C::CODE == super::super::Code::U8;
    let (limit, neg_limit, magic, half, bound) =
        (_mm512_set1_ps(LIMIT), _mm512_set1_ps(-LIMIT), _mm512_set1_ps(MAGIC), _mm512_set1_ps(0.5), _mm512_set1_ps(BOUND));
    let mut fallbacks = 0;
    for row in f.rows() {
        let (acc, bytes) = (f.row(row), &mut bytes[row * ld + c0..][..n]);
        // The boundary flags of up to 64 columns (four vectors) gathered before one test, so that
        // the loop does not branch on every vector's last compare.
        let mut flags = 0u64;
        let mut j = 0;
        while j < n {
            let lanes = (n - j).min(16);
            let mask: __mmask16 = if lanes == 16 { 0xffff } else { (1 << lanes) - 1 };
            // SAFETY: masked loads read only lanes j..j + lanes of slices of n ≥ j + lanes elements
            // (`bias` from column c0; masked-off lanes are not accessed, `wrapping_add` keeps the
            // address arithmetic defined).
            let (y, near) = unsafe {
                let a = _mm512_maskz_loadu_epi32(mask, acc.as_ptr().wrapping_add(j));
                let (t, overflow) = if BIAS {
                    let b = _mm512_maskz_loadu_epi32(mask, bias.as_ptr().wrapping_add(c0 + j));
                    let t = _mm512_add_epi32(a, b);
                    // Signed overflow: the sum's sign differs from both operands' (0x42: (a ^ t) & (b ^ t)).
                    (t, _mm512_cmplt_epi32_mask(_mm512_ternarylogic_epi32::<0x42>(a, b, t), _mm512_setzero_si512()))
                } else {
                    (a, 0)
                };
                let p = _mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_maskz_loadu_ps(mask, cs.r32.as_ptr().wrapping_add(j)));
                let (v, sum) = if OFFSET {
                    let rho = _mm512_maskz_loadu_ps(mask, cs.rho32.as_ptr().wrapping_add(j));
                    (_mm512_add_ps(p, rho), _mm512_add_ps(_mm512_abs_ps(p), _mm512_abs_ps(rho)))
                } else {
                    (p, _mm512_abs_ps(p))
                };
                let inside = _mm512_mask_cmp_ps_mask::<_CMP_LE_OQ>(mask, _mm512_abs_ps(v), limit);
                let clamped = _mm512_min_ps(_mm512_max_ps(v, neg_limit), limit);
                let shifted = _mm512_add_ps(clamped, magic);
                let d = _mm512_abs_ps(_mm512_sub_ps(clamped, _mm512_sub_ps(shifted, magic)));
                let near = _mm512_mask_cmp_ps_mask::<_CMP_LE_OQ>(inside, _mm512_sub_ps(half, d), _mm512_mul_ps(sum, bound)) | (overflow & mask);
                let code = _mm512_add_epi32(_mm512_castps_si512(shifted), zy);
                let y = if unsigned { _mm512_cvtusepi32_epi8(_mm512_max_epi32(code, _mm512_setzero_si512())) } else { _mm512_cvtsepi32_epi8(code) };
                (y, near)
            };
            // SAFETY: bytes j..j + lanes are inside `bytes` (n of them); masked-off lanes are not written.
            unsafe { _mm512_mask_storeu_epi8(bytes.as_mut_ptr().wrapping_add(j).cast(), u64::from(mask), _mm512_castsi128_si512(y)) };
            flags |= u64::from(near) << (j % 64);
            j += lanes;
            if (j % 64 == 0 || j == n) && flags != 0 {
                // Columns j0..j0 + 64 (the last group may be shorter).
                fallbacks += settle_flags(acc, bias, plans, c0, out, (j - 1) / 64 * 64, flags, bytes);
                flags = 0;
            }
        }
    }
    fallbacks
}

/// [`row`] on AVX2 for the finished block `f` (`codes` as in [`block_avx512`]), 8 per register, the constants set up once per block, as
/// [`block_avx512`] (the overflow and boundary masks from sign bits, `vmovmskps`; `OFFSET` and
/// `BIAS` as there: without them the loop has 7 of its 25 instructions fewer); the code
/// narrowed by `vpackssdw` then `vpackuswb` (u8) or `vpacksswb` (i8), saturating steps whose
/// composition is the clamp (|code| < 2^15 after the clamp of v). The flags of up to 64 columns
/// are gathered before the exact form settles them, so that the vector loop holds no call: its
/// constants and pointers stay in registers (with the settling inside, the loop spilled them and
/// ran at 2.3 cycles per column, 8 % of the MiniLM encoder's time on a Zen 3 host). The last
/// `n mod 8` columns of each row go through [`row`].
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // a block's operands
pub(super) unsafe fn block_avx2<C: CodeOut, const OFFSET: bool, const BIAS: bool>(
    f: &Finished<'_>,
    ld: usize,
    cs: ColumnSlice<'_>,
    bias: &[i32],
    plans: &[Certified],
    out: Output,
    codes: &mut [C],
) -> u64 {
    use std::arch::x86_64::*;
    let n = cs.r32.len();
    let c0 = f.c0;
    check(f, &cs, bias, ld, codes.len());
    let full = n / 8 * 8;
    let zy = _mm256_set1_epi32(out.zero_point().wrapping_sub(MAGIC.to_bits() as i32));
    // The callers checked that `out` writes C's codes: the type decides the narrowing at compile time.
    debug_assert!(out.code() == C::CODE);
    let unsigned = C::CODE == super::super::Code::U8;
    let (limit, neg_limit, magic, half, bound) =
        (_mm256_set1_ps(LIMIT), _mm256_set1_ps(-LIMIT), _mm256_set1_ps(MAGIC), _mm256_set1_ps(0.5), _mm256_set1_ps(BOUND));
    let sign = _mm256_set1_ps(-0.0);
    let abs = |x: __m256| _mm256_andnot_ps(sign, x);
    let (b_ptr, r_ptr, rho_ptr) = (bias[c0..].as_ptr(), cs.r32.as_ptr(), cs.rho32.as_ptr());
    let mut fallbacks = 0;
    for r in f.rows() {
        let (acc, codes) = (f.row(r), &mut codes[r * ld + c0..][..n]);
        let bytes = C::bytes_mut(codes);
        let (a_ptr, y_ptr) = (acc.as_ptr(), bytes.as_mut_ptr());
        let mut j0 = 0;
        while j0 < full {
            let group = (full - j0).min(64);
            let mut flags = 0u64;
            for j in (j0..j0 + group).step_by(8) {
                // SAFETY: j + 8 ≤ full ≤ n, the length of the row's `acc` and `bytes`, of the
                // column slices and of `bias` from column c0.
                unsafe {
                    let a = _mm256_loadu_si256(a_ptr.add(j).cast());
                    let (t, overflow) = if BIAS {
                        let b = _mm256_loadu_si256(b_ptr.add(j).cast());
                        let t = _mm256_add_epi32(a, b);
                        (t, _mm256_and_si256(_mm256_xor_si256(a, t), _mm256_xor_si256(b, t)))
                    } else {
                        (a, _mm256_setzero_si256())
                    };
                    let p = _mm256_mul_ps(_mm256_cvtepi32_ps(t), _mm256_loadu_ps(r_ptr.add(j)));
                    let (v, sum) = if OFFSET {
                        let rho = _mm256_loadu_ps(rho_ptr.add(j));
                        (_mm256_add_ps(p, rho), _mm256_add_ps(abs(p), abs(rho)))
                    } else {
                        (p, abs(p))
                    };
                    let inside = _mm256_cmp_ps::<_CMP_LE_OQ>(abs(v), limit);
                    let clamped = _mm256_min_ps(_mm256_max_ps(v, neg_limit), limit);
                    let shifted = _mm256_add_ps(clamped, magic);
                    let d = abs(_mm256_sub_ps(clamped, _mm256_sub_ps(shifted, magic)));
                    let tol = _mm256_mul_ps(sum, bound);
                    let near = _mm256_and_ps(inside, _mm256_cmp_ps::<_CMP_LE_OQ>(_mm256_sub_ps(half, d), tol));
                    let near = if BIAS { _mm256_or_ps(near, _mm256_castsi256_ps(overflow)) } else { near };
                    let code = _mm256_add_epi32(_mm256_castps_si256(shifted), zy);
                    // Per 128-bit half: 4 i16 (twice), then 4 bytes (four times); the two halves' first dwords.
                    let words = _mm256_packs_epi32(code, code);
                    let small = if unsigned { _mm256_packus_epi16(words, words) } else { _mm256_packs_epi16(words, words) };
                    let pair = _mm_unpacklo_epi32(_mm256_castsi256_si128(small), _mm256_extracti128_si256::<1>(small));
                    _mm_storel_epi64(y_ptr.add(j).cast(), pair);
                    flags |= u64::from(_mm256_movemask_ps(near) as u8) << (j - j0);
                }
            }
            if flags != 0 {
                fallbacks += settle_flags(acc, bias, plans, c0, out, j0, flags, bytes);
            }
            j0 += group;
        }
        fallbacks += row(&acc[full..], cs.tail(full), bias, plans, c0 + full, out, &mut codes[full..]);
    }
    fallbacks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::{Isa, Kernels};
    use crate::requant::{Code, Ratio};

    /// The gate: ratios and offsets outside the table's ranges keep the f64 form.
    #[test]
    fn eligibility_follows_the_table() {
        assert!(eligible(0.01, 0.0).is_some());
        assert!(eligible(0.01, -3.5).is_some());
        assert!(eligible(2f64.powi(-101), 0.0).is_none(), "r below 2^-100");
        assert!(eligible(2f64.powi(61), 0.0).is_none(), "r above 2^60");
        assert!(eligible(0.01, 300.0).is_none(), "ρ above 2^8");
        assert!(eligible(0.01, 2f64.powi(-120)).is_none(), "ρ below 2^-100");
    }

    /// The scalar step equals the exact form wherever it does not flag the value, on windows
    /// around rounding boundaries (the accumulators nearest to each half-integer), at the i32
    /// extremes and with biases that overflow i32. Ratios near 2^-20 put accumulators of up to
    /// 2^30 on the boundaries, where `fl32(t)` alone moves v by more than the distance to the
    /// boundary: the unchecked f32 rounding is wrong there (counted, so the windows are known to
    /// test the bound; a bound of 2^-26 instead of 2^-20 fails this test).
    #[test]
    fn unflagged_values_are_exact() {
        let (mut flagged, mut naive_wrong) = (0, 0);
        for (sx, sw, sy) in [(0.0213f32, 0.00391, 0.0517), (0.1, 0.3, 0.7), (1.0, 1.0, 3.0), (0.02, 0.5, 1e-3), (1e-3, 1e-3, 0.9), (3e-4, 7e-4, 0.23)] {
            let ratio = Ratio::new(sx, sw, sy).unwrap();
            let plan = Certified::new(ratio);
            let (r, rho) = plan.single.expect("eligible");
            for (code, zy) in [(Code::U8, 0), (Code::U8, 128), (Code::I8, -3)] {
                let out = Output::new(zy, code).unwrap();
                for bias in [0, 1234, -77, i32::MAX - 5, i32::MIN + 5] {
                    let per = 1.0 / plan.r;
                    let mut accs: Vec<i32> = (-600..600)
                        .flat_map(|h: i64| {
                            let c = ((h as f64 + 0.5) * per) as i64 - i64::from(bias);
                            (-2..=2).map(move |d| (c + d).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
                        })
                        .collect();
                    accs.extend([i32::MIN, i32::MAX, -1, 0, 1]);
                    for a in accs {
                        let (y, near) = approximate(a, bias, r, rho, out);
                        let exact = requant_exact(a, bias, &plan.ratio, out);
                        flagged += u64::from(near);
                        naive_wrong += u64::from(y != exact);
                        if !near {
                            assert_eq!(y, exact, "acc {a} bias {bias} {sx}·{sw}/{sy} zy {zy}");
                        }
                    }
                }
            }
        }
        assert!(flagged > 0 && naive_wrong > 0, "the windows must reach the boundary test: {flagged} flagged, {naive_wrong} wrong unchecked");
    }

    /// Rows made only of accumulators whose unchecked f32 rounding is wrong, on every path the
    /// host has: each must be flagged and settled in its own column (a flag set in the wrong
    /// lane or bit of a vector, a group of 64 or the tail leaves a wrong code), so every code
    /// equals the exact form and every element is a fallback. Row lengths cover one vector, a
    /// group of 64 with a tail, and three groups.
    #[test]
    fn misrounded_values_are_settled_in_their_own_columns() {
        let plan = Certified::new(Ratio::new(1e-3, 1e-3, 0.9).unwrap());
        let (r, rho) = plan.single.expect("eligible");
        for (code, zy) in [(Code::U8, 128), (Code::I8, -3)] {
            let out = Output::new(zy, code).unwrap();
            // Accumulators next to the rounding boundaries (|v| < 100, unsaturated) where the
            // unchecked f32 step gives another code than the exact form.
            let per = 1.0 / plan.r;
            let wrong: Vec<i32> = (-100..100)
                .flat_map(|h: i64| {
                    let c = ((h as f64 + 0.5) * per) as i64;
                    (-40..=40).map(move |d| (c + d) as i32)
                })
                .filter(|&a| approximate(a, 0, r, rho, out).0 != requant_exact(a, 0, &plan.ratio, out))
                .collect();
            assert!(wrong.len() >= 200, "only {} misrounded accumulators", wrong.len());
            for n in [8, 71, 192] {
                let acc: Vec<i32> = wrong.iter().cycle().take(3 * n).copied().collect();
                let want: Vec<i32> = acc.iter().map(|&a| requant_exact(a, 0, &plan.ratio, out)).collect();
                for isa in Isa::available() {
                    let kernels = Kernels::new(isa).unwrap();
                    let (plans, bias) = ([plan], vec![0; n]);
                    let (got, fallbacks): (Vec<i32>, u64) = if code == Code::U8 {
                        let mut y = vec![0u8; acc.len()];
                        let f = super::super::rows(kernels, &acc, &bias, &plans, out, &mut y);
                        (y.iter().map(|&v| i32::from(v)).collect(), f)
                    } else {
                        let mut y = vec![0i8; acc.len()];
                        let f = super::super::rows(kernels, &acc, &bias, &plans, out, &mut y);
                        (y.iter().map(|&v| i32::from(v)).collect(), f)
                    };
                    assert_eq!(got, want, "{isa}: rows of {n}, {code:?}");
                    assert_eq!(fallbacks, acc.len() as u64, "{isa}: rows of {n}, {code:?}");
                }
            }
        }
    }
}
