//! Certified wider evaluation: `v = fl64(fl64(t·r) + ρ)` with `r = fl64(fl64(sx·sw)/sy)` and,
//! for a bias off the accumulator's scale ([`Ratio::with_bias`]), `ρ = fl64(fl64(b·sb)/sy)`
//! (`+0` otherwise), rounded to the nearest integer unless v lies within its error bound of a
//! rounding boundary (a half-integer), in which case [`super::requant_exact`] decides. Always
//! equal to the exact form.
//!
//! Error: `fl64(sx·sw)` is exact (two 24-bit mantissas, no underflow: |exponent| stays far inside
//! f64's), so r and `p = fl64(t·r)` carry relative errors ≤ 2u and ρ (b·sb has up to 55 bits)
//! ≤ 2u (u = 2^-53); the sum rounds once more: `|v − x| ≤ (|p| + |ρ|)·(5u + O(u²))`. The check
//! uses `(|p| + |ρ|)·2^-49`, which covers that with room to spare (without an offset, ρ = +0 and
//! `|p| = |v|`). Between two consecutive half-integers rne is constant, so a v farther than the
//! bound from every half-integer rounds as x does. `t = acc + bias` has |t| < 2^33 and converts
//! to f64 exactly; |v| ≥ 2^40 saturates (the exact value has the same sign and |x| > 2^39), and
//! the check passes there (d = 0, bound ≥ 2^-9). Every intermediate is a normal f64 or zero (|r|
//! lies in [2^-426, 2^405], |ρ| in [2^-277, 2^190]), so flush-to-zero modes do not matter; the
//! default round-to-nearest mode is assumed (as by every float kernel).
//!
//! Where the ratio is exactly `2^−k` (`1 ≤ k ≤ 31`, no bias offset: power-of-two scales), a run
//! of one plan ([`row_uniform`]: a convolution channel, a QLinearMul) shifts `acc + bias` right
//! by k with ties to even in i64 instead: the exact value by construction, no f64 step, no tie
//! sent to the exact fallback (ties are common there: with power-of-two scales every value lies
//! on a grid of halves).
//!
//! On AVX-512 (the VNNI path) a row runs 16 lanes at a time by hand (`row_avx512`: the same IEEE
//! steps lane by lane, steps that are identities for the block's columns left out), on AVX2 8
//! (`certified/avx2.rs`), the lanes near a boundary then settled one by one by the exact form.

/// `f::<C, A, B>(args…)` with the const flags `A`, `B` that the two booleans hold: the vector
/// blocks and rows have an instance per combination of their two flags (the steps a flag turns
/// off leave that instance's loop), chosen here once per call.
macro_rules! with_flags {
    ($($f:ident)::+, $c:ty, ($a:expr, $b:expr), $($arg:expr),* $(,)?) => {
        match ($a, $b) {
            (false, false) => $($f)::+::<$c, false, false>($($arg),*),
            (false, true) => $($f)::+::<$c, false, true>($($arg),*),
            (true, false) => $($f)::+::<$c, true, false>($($arg),*),
            (true, true) => $($f)::+::<$c, true, true>($($arg),*),
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2;
mod single;

use super::{CodeOut, Output, Ratio, requant_exact};
use crate::isa::{Isa, Kernels};
use crate::micro::Finished;
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
    rho: f64,
    /// `Some(k)` where the ratio is exactly `2^−k`, `1 ≤ k ≤ 31`, with no bias offset (power-of-two
    /// scales): the code is `t = acc + bias` shifted right by k with ties to even, in integers
    /// ([`shifted`]), never an f64 step or a fallback.
    shift: Option<u32>,
    /// `(fl32(r), fl32(ρ))` where the f32 form holds ([`single::eligible`]).
    single: Option<(f32, f32)>,
}

impl Certified {
    pub fn new(ratio: Ratio) -> Certified {
        let (sx, sw, sy) = ratio.scales;
        let rho = ratio.offset.map_or(0.0, |o| f64::from(o.code) * f64::from(o.scale) / f64::from(sy));
        let r = f64::from(sx) * f64::from(sw) / f64::from(sy);
        Certified { ratio, r, rho, shift: power_of_two_shift(&ratio, r), single: single::eligible(r, rho) }
    }

    pub fn ratio(&self) -> &Ratio {
        &self.ratio
    }
}

/// The f64 step for `t = acc + bias` (exact in f64: |t| < 2^33): the code, and whether v lies
/// within the error bound of a half-integer (then the exact form must decide).
#[inline(always)]
#[allow(clippy::manual_clamp)] // max/min, not clamp: no panic path, and they vectorize to vmaxpd/vminpd
fn approximate(t: f64, r: f64, rho: f64, out: Output) -> (i32, bool) {
    let p = t * r;
    // Beyond ±2^40 the code saturates either way; clamping keeps the rounding trick below valid.
    let v = (p + rho).max(-LIMIT).min(LIMIT);
    // rne(v) for |v| < 2^51 under the default rounding mode, without a libm call.
    let rounded = (v + MAGIC) - MAGIC;
    // Exact (v and rounded share v's ulp grid, |v − rounded| ≤ 1/2); 1/2 means v is a half-integer.
    let d = (v - rounded).abs();
    let near = 0.5 - d <= (p.abs() + rho.abs()) * BOUND;
    let y = (rounded + f64::from(out.zero_point())).max(f64::from(out.code().min())).min(f64::from(out.code().max()));
    // y is a small integer: y + 1.5·2^52 is exact and its low 32 bits are y in two's complement
    // (a bit read the compiler vectorizes, unlike `as i32`, which must handle NaN and overflow).
    ((y + MAGIC).to_bits() as u32 as i32, near)
}

/// The code, and whether the exact fallback decided it.
fn evaluate(acc: i32, bias: i32, plan: &Certified, out: Output) -> (i32, bool) {
    match approximate(f64::from(acc) + f64::from(bias), plan.r, plan.rho, out) {
        (_, true) => (requant_exact(acc, bias, &plan.ratio, out), true),
        (y, false) => (y, false),
    }
}

/// A row-major block with one bias per column and one plan per tensor or per column (`plans`
/// of length 1 or `bias.len()`); returns the fallback count. The same
/// IEEE operations as [`evaluate`], element by element (Rust never contracts them into FMAs), so
/// the vectorized instances below give the same bits as the scalar one.
pub(crate) fn rows<C: CodeOut>(kernels: Kernels, acc: &[i32], bias: &[i32], plans: &[Certified], out: Output, codes: &mut [C]) -> u64 {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI,
        // the instructions `row_avx512` uses.
        Isa::Avx512Vnni => unsafe { rows_avx512(acc, bias, plans, out, codes) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { rows_avx2(acc, bias, plans, out, codes) },
        _ => rows_generic(acc, bias, plans, out, codes),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn rows_avx512<C: CodeOut>(acc: &[i32], bias: &[i32], plans: &[Certified], out: Output, codes: &mut [C]) -> u64 {
    let n = bias.len();
    let ops = operands(bias, plans);
    let cs = Columns::new(&ops, bias, plans, out);
    if cs.single && n > 0 {
        // SAFETY: the caller guarantees AVX-512 F/BW; the block is the whole matrix (`requantize` checked its length).
        return unsafe {
            with_flags!(
                single::block_avx512,
                C,
                (cs.offset, !cs.unbiased),
                &Finished::of(acc, n, 0, acc.len() / n, 0, n),
                n,
                cs.slice(0, n),
                bias,
                plans,
                out,
                codes
            )
        };
    }
    each_row(&cs, acc, codes, |cs, acc_row, code_row| {
        // SAFETY: the caller guarantees AVX-512 F/BW; the row and its columns have n elements.
        unsafe { with_flags!(row_avx512, C, (!cs.narrow, !cs.unbiased), acc_row, cs.slice(0, acc_row.len()), bias, plans, 0, out, code_row) }
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2<C: CodeOut>(acc: &[i32], bias: &[i32], plans: &[Certified], out: Output, codes: &mut [C]) -> u64 {
    let n = bias.len();
    if n == 0 {
        return 0;
    }
    let ops = operands(bias, plans);
    // SAFETY: the caller guarantees AVX2; the block is the whole matrix (`requantize` checked its length).
    unsafe { block_avx2(&Finished::of(acc, n, 0, acc.len() / n, 0, n), n, &Columns::new(&ops, bias, plans, out), codes) }
}

#[inline(always)]
fn rows_generic<C: CodeOut>(acc: &[i32], bias: &[i32], plans: &[Certified], out: Output, codes: &mut [C]) -> u64 {
    each_row(&Columns::new(&operands(bias, plans), bias, plans, out), acc, codes, |cs, acc_row, code_row| cs.row(acc_row, 0, code_row))
}

/// `row(columns, acc_row, code_row)` on every row of `n = bias.len()` columns, the fallbacks
/// summed: what every path's [`rows`] instance shares (inlined into its target features).
#[inline(always)]
fn each_row<C: CodeOut>(cs: &Columns<'_>, acc: &[i32], codes: &mut [C], mut row: impl FnMut(&Columns<'_>, &[i32], &mut [C]) -> u64) -> u64 {
    let n = cs.bias.len();
    acc.chunks_exact(n).zip(codes.chunks_exact_mut(n)).map(|(acc_row, code_row)| row(cs, acc_row, code_row)).sum()
}

/// [`Operands`] with the bias codes, plans and output the exact fallback reads
/// (what every block of one product shares).
pub(crate) struct Columns<'a> {
    ops: &'a Operands,
    bias: &'a [i32],
    plans: &'a [Certified],
    out: Output,
}

impl<'a> Columns<'a> {
    /// `ops` must be [`operands`] of `bias` and `plans`.
    pub(crate) fn new(ops: &'a Operands, bias: &'a [i32], plans: &'a [Certified], out: Output) -> Columns<'a> {
        debug_assert!(ops.b.len().max(ops.r32.len()) == bias.len() || bias.is_empty());
        Columns { ops, bias, plans, out }
    }
}

impl std::ops::Deref for Columns<'_> {
    type Target = Operands;
    fn deref(&self) -> &Operands {
        self.ops
    }
}

/// Per column: the bias as f64, the ratio `r` and the offset `ρ` of its plan, or their f32 forms
/// where every plan has one ([`operands`]): computed once per product, or once per model
/// ([`super::Prepared`]), since reading the plans (104 bytes per column) costs more than a block.
#[derive(Clone, Debug)]
pub(crate) struct Operands {
    b: Vec<f64>,
    r: Vec<f64>,
    rho: Vec<f64>,
    r32: Vec<f32>,
    rho32: Vec<f32>,
    /// Every column has `2^33·|r| ≤ 2^40` and ρ = +0 (no bias offset): |p| stays within 2^40
    /// (|t| ≤ 2^32), so the clamp to ±2^40 is the identity, and `p + ρ` differs from p only by
    /// the sign of a zero, which no later step sees (`v + 1.5·2^52`, `|v − rounded|` and
    /// `|p| + |ρ|` are the same); the vectorized form leaves both steps out.
    narrow: bool,
    /// Every bias is 0: `f64(acc) + 0` is `f64(acc)` (never −0), so the addition is left out.
    unbiased: bool,
    /// Every plan has the f32 form ([`single`]): the rows take it (and `b`, `r`, `rho` are empty;
    /// `r32`, `rho32` are empty otherwise).
    single: bool,
    /// Some plan has ρ ≠ 0 (the f32 form adds it only then).
    offset: bool,
}

/// One range of columns of [`Columns`] (the f64 operands, or the f32 ones where the plans take
/// that form; the other set empty).
#[derive(Clone, Copy)]
pub(crate) struct ColumnSlice<'a> {
    b: &'a [f64],
    r: &'a [f64],
    rho: &'a [f64],
    r32: &'a [f32],
    rho32: &'a [f32],
}

impl<'a> ColumnSlice<'a> {
    /// Columns `from..` of the slice (the f32 forms stay empty where the plans have none).
    fn tail(&self, from: usize) -> ColumnSlice<'a> {
        fn from_on<T>(v: &[T], from: usize) -> &[T] {
            v.get(from..).unwrap_or(&[])
        }
        ColumnSlice {
            b: from_on(self.b, from),
            r: from_on(self.r, from),
            rho: from_on(self.rho, from),
            r32: from_on(self.r32, from),
            rho32: from_on(self.rho32, from),
        }
    }
}

impl Operands {
    fn slice(&self, c0: usize, cols: usize) -> ColumnSlice<'_> {
        fn part<T>(v: &[T], c0: usize, cols: usize) -> &[T] {
            if v.is_empty() { v } else { &v[c0..][..cols] }
        }
        ColumnSlice {
            b: part(&self.b, c0, cols),
            r: part(&self.r, c0, cols),
            rho: part(&self.rho, c0, cols),
            r32: part(&self.r32, c0, cols),
            rho32: part(&self.rho32, c0, cols),
        }
    }
}

impl Columns<'_> {
    /// Columns `c0..c0 + acc.len()` of one row in the form the plans take, on the generic instance.
    #[inline(always)]
    fn row<C: CodeOut>(&self, acc: &[i32], c0: usize, codes: &mut [C]) -> u64 {
        let slice = self.slice(c0, acc.len());
        if self.single {
            single::row(acc, slice, self.bias, self.plans, c0, self.out, codes)
        } else {
            row_columns(acc, slice, self.bias, self.plans, c0, self.out, codes)
        }
    }
}

/// The per-column operands of `plans` (length 1 or `bias.len()`) writing `out`.
pub(crate) fn operands(bias: &[i32], plans: &[Certified]) -> Operands {
    let plan = |col: usize| &plans[if plans.len() == 1 { 0 } else { col }];
    // One pass over the plans (per column, 104 bytes each: reading them is this function's
    // cost), the f32 operands taken on the way; the f64 ones only where some plan has no f32 form.
    let (mut single, mut offset, mut narrow) = (true, false, true);
    let (mut r32, mut rho32) = (Vec::with_capacity(bias.len()), Vec::with_capacity(bias.len()));
    for p in plans {
        (offset, narrow) = (offset || p.rho != 0.0, narrow && p.r.abs() * (1u64 << 33) as f64 <= LIMIT && p.rho == 0.0);
        match p.single {
            Some((r, rho)) if single => {
                r32.push(r);
                rho32.push(rho);
            }
            _ => single = false,
        }
    }
    if single && plans.len() == 1 {
        (r32, rho32) = (vec![r32[0]; bias.len()], vec![rho32[0]; bias.len()]);
    }
    let per_column = |part: fn(&Certified) -> f64| if single { Vec::new() } else { (0..bias.len()).map(|col| part(plan(col))).collect() };
    Operands {
        b: if single { Vec::new() } else { bias.iter().map(|&b| f64::from(b)).collect() },
        r: per_column(|p| p.r),
        rho: per_column(|p| p.rho),
        r32: if single { r32 } else { Vec::new() },
        rho32: if single { rho32 } else { Vec::new() },
        single,
        offset,
        narrow,
        unbiased: bias.iter().all(|&b| b == 0),
    }
}

/// Columns `c0..c0 + acc.len()` of one row: `cs` and `codes` those columns' operands (from
/// [`columns`]), `bias` and `plans` the whole row's (for the exact fallback). Returns the
/// fallback count, not yet added to [`fallback_hits`].
#[inline(always)]
#[allow(clippy::too_many_arguments)] // one row's operands, spelled out
pub(crate) fn row_columns<C: CodeOut>(acc: &[i32], cs: ColumnSlice<'_>, bias: &[i32], plans: &[Certified], c0: usize, out: Output, codes: &mut [C]) -> u64 {
    const CH: usize = 64;
    let plan = |col: usize| &plans[if plans.len() == 1 { 0 } else { col }];
    let mut fallbacks = 0;
    let chunks = acc.chunks(CH).zip(codes.chunks_mut(CH)).zip(cs.b.chunks(CH).zip(cs.r.chunks(CH)).zip(cs.rho.chunks(CH)));
    for (i0, ((acc, codes), ((b, r), rho))) in chunks.enumerate() {
        let mut near = [false; CH];
        // One OR per element (a vector OR), so the scan below runs only for a chunk with a hit.
        let mut any = false;
        for (((((&a, y), &b), &r), &rho), near) in acc.iter().zip(codes.iter_mut()).zip(b).zip(r).zip(rho).zip(&mut near) {
            let (v, n) = approximate(f64::from(a) + b, r, rho, out);
            *y = C::from_code(v);
            *near = n;
            any |= n;
        }
        if any {
            for (i, _) in near.iter().enumerate().filter(|(_, n)| **n) {
                let col = c0 + i0 * CH + i;
                codes[i] = C::from_code(requant_exact(acc[i], bias[col], &plan(col).ratio, out));
                fallbacks += 1;
            }
        }
    }
    fallbacks
}

/// A finished block of the product's accumulators ([`Finished`]: rows `r0..r0 + mr`, columns
/// `c0..c0 + cols`, in C or in a kernel's own buffer) into the same places of the row-major
/// `· × n` `codes`, per-column operands `cs` as in [`row_columns`]; on the kernel path's instance
/// (vectorized). Returns the fallback count, not yet added to [`fallback_hits`].
pub(crate) fn block<C: CodeOut>(kernels: Kernels, f: Finished<'_>, n: usize, cs: &Columns<'_>, codes: &mut [C]) -> u64 {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI,
        // the instructions `row_avx512` uses.
        Isa::Avx512Vnni => unsafe { block_avx512(&f, n, cs, codes) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { block_avx2(&f, n, cs, codes) },
        _ => each_block_row(&f, n, codes, |acc, code_row| cs.row(acc, f.c0, code_row)),
    }
}

/// `row(accumulators, codes)` on each row of the block `f`, the codes those of its columns in
/// the row-major `· × n` `codes`; the sum of what it returns (fallbacks).
#[inline(always)]
fn each_block_row<C: CodeOut>(f: &Finished<'_>, n: usize, codes: &mut [C], mut row: impl FnMut(&[i32], &mut [C]) -> u64) -> u64 {
    f.rows().map(|r| row(f.row(r), &mut codes[r * n + f.c0..][..f.cols])).sum()
}

/// [`block`] on AVX2: the f32 form's block ([`single::block_avx2`]), or the f64 form row by row.
///
/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // [`block`]'s operands
unsafe fn block_avx2<C: CodeOut>(f: &Finished<'_>, n: usize, cs: &Columns<'_>, codes: &mut [C]) -> u64 {
    let slice = cs.slice(f.c0, f.cols);
    if cs.single {
        // SAFETY: the caller guarantees AVX2; rows and columns lie inside the n-column matrices.
        return unsafe { with_flags!(single::block_avx2, C, (cs.offset, !cs.unbiased), f, n, slice, cs.bias, cs.plans, cs.out, codes) };
    }
    each_block_row(f, n, codes, |acc, code_row| {
        // SAFETY: the caller guarantees AVX2; both rows have the block's columns.
        unsafe { with_flags!(avx2::row, C, (!cs.narrow, !cs.unbiased), acc, slice, cs.bias, cs.plans, f.c0, cs.out, code_row) }
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn block_avx512<C: CodeOut>(f: &Finished<'_>, n: usize, cs: &Columns<'_>, codes: &mut [C]) -> u64 {
    let slice = cs.slice(f.c0, f.cols);
    if cs.single {
        // SAFETY: the caller guarantees AVX-512 F/BW; rows and columns lie inside the n-column matrices.
        return unsafe { with_flags!(single::block_avx512, C, (cs.offset, !cs.unbiased), f, n, slice, cs.bias, cs.plans, cs.out, codes) };
    }
    each_block_row(f, n, codes, |acc, code_row| {
        // SAFETY: the caller guarantees AVX-512 F/BW; both rows have the block's columns.
        unsafe { with_flags!(row_avx512, C, (!cs.narrow, !cs.unbiased), acc, slice, cs.bias, cs.plans, f.c0, cs.out, code_row) }
    })
}

/// [`row_columns`] on AVX-512, 16 columns at a time (two halves of 8 f64 lanes): the same IEEE
/// operations as [`approximate`] in the same order, lane by lane (`vmaxpd`/`vminpd` equal
/// `f64::max`/`min` here: no operand is NaN, and where both are zeros the result is a zero
/// either way), so the same lanes are sent to the exact fallback; the code is taken in the
/// integer domain: `v + 1.5·2^52` has ulp 1 for |v| ≤ 2^40, so its bits minus those of
/// `1.5·2^52` are rne(v) exactly, and `rne(v) + zy` narrowed with saturation (`vpmovusqb` after a
/// max with 0 for u8, `vpmovsqb` for i8) is the clamped integer the scalar form computes in f64.
/// `WIDE` (the clamp and ρ) false only where [`Columns::narrow`] holds, `BIAS` false only where
/// [`Columns::unbiased`] does.
///
/// # Safety
/// AVX-512 F and BW present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments)] // [`row_columns`]' operands
unsafe fn row_avx512<C: CodeOut, const WIDE: bool, const BIAS: bool>(
    acc: &[i32],
    cs: ColumnSlice<'_>,
    bias: &[i32],
    plans: &[Certified],
    c0: usize,
    out: Output,
    codes: &mut [C],
) -> u64 {
    use std::arch::x86_64::*;
    let n = acc.len();
    assert!(cs.b.len() == n && cs.r.len() == n && cs.rho.len() == n && codes.len() == n);
    let bytes = C::bytes_mut(codes);
    // `rne(v) + zy` from the bits of `v + 1.5·2^52`.
    let zy = _mm512_set1_epi64(i64::from(out.zero_point()) - MAGIC.to_bits() as i64);
    let unsigned = out.code() == super::Code::U8;
    let (limit, magic, half, bound) = (_mm512_set1_pd(LIMIT), _mm512_set1_pd(MAGIC), _mm512_set1_pd(0.5), _mm512_set1_pd(BOUND));
    let neg_limit = _mm512_set1_pd(-LIMIT);
    let mut fallbacks = 0;
    let mut j = 0;
    while j < n {
        let lanes = (n - j).min(16);
        let mask: __mmask16 = if lanes == 16 { 0xffff } else { (1 << lanes) - 1 };
        // SAFETY: masked loads read only lanes j..j + lanes of slices of n ≥ j + lanes elements
        // (masked-off lanes are not accessed; `wrapping_add` keeps the address arithmetic defined).
        let (y, near) = unsafe {
            let a = _mm512_maskz_loadu_epi32(mask, acc.as_ptr().wrapping_add(j));
            let mut near: u16 = 0;
            let mut y = [_mm_setzero_si128(); 2];
            for (h, y) in y.iter_mut().enumerate() {
                let m8 = (mask >> (8 * h)) as __mmask8;
                let ah = if h == 0 { _mm512_castsi512_si256(a) } else { _mm512_extracti64x4_epi64::<1>(a) };
                let at = |v: &[f64]| _mm512_maskz_loadu_pd(m8, v.as_ptr().wrapping_add(j + 8 * h));
                let mut t = _mm512_cvtepi32_pd(ah);
                if BIAS {
                    t = _mm512_add_pd(t, at(cs.b));
                }
                let p = _mm512_mul_pd(t, at(cs.r));
                let (v, tol) = if WIDE {
                    let rho = at(cs.rho);
                    let v = _mm512_min_pd(_mm512_max_pd(_mm512_add_pd(p, rho), neg_limit), limit);
                    (v, _mm512_mul_pd(_mm512_add_pd(_mm512_abs_pd(p), _mm512_abs_pd(rho)), bound))
                } else {
                    (p, _mm512_mul_pd(_mm512_abs_pd(p), bound))
                };
                let shifted = _mm512_add_pd(v, magic);
                let rounded = _mm512_sub_pd(shifted, magic);
                let d = _mm512_abs_pd(_mm512_sub_pd(v, rounded));
                near |= u16::from(_mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(m8, _mm512_sub_pd(half, d), tol)) << (8 * h);
                // Saturating narrowing to the code type's range, which is the clamp's.
                let code = _mm512_add_epi64(_mm512_castpd_si512(shifted), zy);
                *y = if unsigned { _mm512_cvtusepi64_epi8(_mm512_max_epi64(code, _mm512_setzero_si512())) } else { _mm512_cvtsepi64_epi8(code) };
            }
            (_mm_unpacklo_epi64(y[0], y[1]), near)
        };
        // SAFETY: bytes j..j + lanes are inside `bytes` (n of them); masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_epi8(bytes.as_mut_ptr().wrapping_add(j).cast(), u64::from(mask), _mm512_castsi128_si512(y)) };
        if near != 0 {
            fallbacks += settle_flags(acc, bias, plans, c0, out, j, u64::from(near), bytes);
        }
        j += lanes;
    }
    fallbacks
}

/// The exact form on columns `j0 + i` of a row for each bit i of `flags` (`bias` and `plans` the
/// whole row's, from column `c0`), where every vectorized row and block settles its flagged
/// lanes; out of line, so that a vector loop that settles a group after it holds no call.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)] // a row's operands and the flags
fn settle_flags(acc: &[i32], bias: &[i32], plans: &[Certified], c0: usize, out: Output, j0: usize, mut flags: u64, bytes: &mut [u8]) -> u64 {
    let plan = |col: usize| &plans[if plans.len() == 1 { 0 } else { col }];
    let mut fallbacks = 0;
    while flags != 0 {
        let i = j0 + flags.trailing_zeros() as usize;
        flags &= flags - 1;
        bytes[i] = requant_exact(acc[i], bias[c0 + i], &plan(c0 + i).ratio, out) as u8;
        fallbacks += 1;
    }
    fallbacks
}

/// `k` where `ratio` is exactly `2^−k` (`r` its f64 quotient), `1 ≤ k ≤ 31`, and carries no bias
/// offset. `sx·sw` is exact in f64 (two 24-bit mantissas), so when r is a power of two and
/// `r·sy` (a product by a power of two: exact) equals it, `sx·sw/sy` is r exactly.
fn power_of_two_shift(ratio: &Ratio, r: f64) -> Option<u32> {
    let (sx, sw, sy) = ratio.scales;
    let power = r > 0.0 && r.is_finite() && r.to_bits() & ((1u64 << 52) - 1) == 0 && r.to_bits() >> 52 != 0;
    let exact = power && r * f64::from(sy) == f64::from(sx) * f64::from(sw);
    let k = 1023 - (r.to_bits() >> 52) as i64;
    (ratio.offset.is_none() && exact && (1..=31).contains(&k)).then_some(k as u32)
}

/// `sat(rne((acc + bias)·2^−k) + zy)` in integers: `t = acc + bias` in i64 (exact), then
/// `⌊(t + 2^(k−1) − 1 + ⌊t/2^k⌋ mod 2) / 2^k⌋`, which is t/2^k rounded to the nearest integer,
/// ties to the even one (a tie `m + ½` adds the parity of m to reach `m + 1` only when m is
/// odd). Element by element with no branch, so it vectorizes on the caller's path.
#[inline(always)]
fn shifted<C: CodeOut>(acc: &[i32], bias: i32, k: u32, out: Output, codes: &mut [C]) {
    let (zy, lo, hi) = (i64::from(out.zero_point()), i64::from(out.code().min()), i64::from(out.code().max()));
    let half = (1i64 << (k - 1)) - 1;
    for (y, &a) in codes.iter_mut().zip(acc) {
        let t = i64::from(a) + i64::from(bias);
        let q = (t + half + ((t >> k) & 1)) >> k;
        *y = C::from_code((q + zy).clamp(lo, hi) as i32);
    }
}

/// One run of accumulators sharing one bias and one plan (a convolution channel's positions):
/// the integer shift for a power-of-two ratio, the f32 form where the plan allows it
/// ([`single::row_uniform`]: twice the lanes), else the same IEEE operations as [`evaluate`]
/// element by element, like [`rows`] (vectorized where the caller's instance allows); returns
/// the fallback count, not yet added to [`fallback_hits`]. `bound`: every `|acc| ≤ bound` (a
/// convolution's K·255², a product's 255²), which spares the AVX2 form the overflow test of
/// `acc + bias` where it cannot overflow.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(crate) fn row_uniform<C: CodeOut>(kernels: Kernels, acc: &[i32], bound: u64, bias: i32, plan: &Certified, out: Output, codes: &mut [C]) -> u64 {
    const CH: usize = 64;
    if let Some(k) = plan.shift {
        shifted(acc, bias, k, out, codes);
        return 0;
    }
    if let Some(single) = plan.single {
        #[cfg(target_arch = "x86_64")]
        if kernels.isa() == Isa::Avx2 {
            // SAFETY: a `Kernels` of the AVX2 path was made by `Kernels::new`/`detect`, which checked AVX2.
            return unsafe { single::row_uniform_avx2(acc, bound, bias, single, plan, out, codes) };
        }
        return single::row_uniform(acc, bias, single, plan, out, codes);
    }
    let (b, r, rho) = (f64::from(bias), plan.r, plan.rho);
    let mut fallbacks = 0;
    for (acc, codes) in acc.chunks(CH).zip(codes.chunks_mut(CH)) {
        let mut near = [false; CH];
        let mut any = false;
        for ((&a, y), near) in acc.iter().zip(codes.iter_mut()).zip(&mut near) {
            let (v, n) = approximate(f64::from(a) + b, r, rho, out);
            *y = C::from_code(v);
            *near = n;
            any |= n;
        }
        if any {
            fallbacks += settle_run(acc, bias, plan, out, &near, codes);
        }
    }
    fallbacks
}

/// The exact form on the flagged elements of a chunk of a run of one plan (the f64 and f32
/// forms of [`row_uniform`]); returns how many it settled.
pub(super) fn settle_run<C: CodeOut>(acc: &[i32], bias: i32, plan: &Certified, out: Output, near: &[bool], codes: &mut [C]) -> u64 {
    let mut fallbacks = 0;
    for (i, _) in near.iter().enumerate().take(acc.len()).filter(|(_, n)| **n) {
        codes[i] = C::from_code(requant_exact(acc[i], bias, &plan.ratio, out));
        fallbacks += 1;
    }
    fallbacks
}

/// 2^40: saturation threshold of the f64 value.
const LIMIT: f64 = (1u64 << 40) as f64;
/// 1.5·2^52: adding and subtracting it rounds to an integer, ties to even.
const MAGIC: f64 = (3u64 << 51) as f64;

/// The f64 step alone for scales known only at run time (`crate::dynamic`: no [`Ratio`] is made
/// unless the exact form must decide): `Some(code)` where `v = fl64(acc·fl64(fl64(sx·sw)/sy))`, the
/// value [`Certified::new`]'s `r` gives, is farther than the bound from a rounding boundary;
/// `None` where [`super::requant_exact`] must decide. `sx`, `sw`, `sy` must be positive finite
/// f32 (the caller checks; the error argument above assumes them); no bias.
#[inline(always)]
pub fn certified_step(acc: i32, sx: f32, sw: f32, sy: f32, out: Output) -> Option<i32> {
    match approximate(f64::from(acc), f64::from(sx) * f64::from(sw) / f64::from(sy), 0.0, out) {
        (y, false) => Some(y),
        (_, true) => None,
    }
}

/// `sat(rne((acc + bias)·sx·sw/sy) + zy)`, correctly rounded; fallbacks are counted in [`fallback_hits`].
pub fn requant_certified(acc: i32, bias: i32, plan: &Certified, out: Output) -> i32 {
    let (v, fell_back) = evaluate(acc, bias, plan, out);
    count(u64::from(fell_back));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requant::Code;

    /// Every power-of-two ratio `2^−k` takes the integer form, and it equals the exact form on
    /// every accumulator of a window around each rounding boundary and at the i32 extremes, for
    /// biases of both signs and both code types; ratios that are not exact powers of two keep
    /// the f64 form.
    #[test]
    fn power_of_two_ratios_shift_exactly() {
        for k in 1..=31u32 {
            // sx·sw/sy = 2^−k from scales that are powers of two themselves and from ones that are not.
            for (sx, sw, sy) in [(0.5f32.powi(k as i32), 1.0, 1.0), (0.75, 2f32.powi(1 - k as i32), 1.5), (3.0 * 2f32.powi(-20), 2f32.powi(20 - k as i32), 3.0)]
            {
                let ratio = Ratio::new(sx, sw, sy).unwrap();
                let plan = Certified::new(ratio);
                assert_eq!(plan.shift, Some(k), "{sx} · {sw} / {sy}");
                for (code, zy) in [(Code::U8, 0), (Code::U8, 131), (Code::I8, -5), (Code::I8, 127)] {
                    let out = Output::new(zy, code).unwrap();
                    for bias in [0, 37, -1 << 20, i32::MAX / 2] {
                        let step = 1i64 << k;
                        let mut acc: Vec<i32> = (-3 * step..=3 * step).step_by(usize::try_from(step / 64).unwrap_or(1).max(1)).map(|t| t as i32).collect();
                        acc.extend(
                            (-70..70).flat_map(|m: i64| [-1, 0, 1].map(move |d| (m * step / 2 + d).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)),
                        );
                        acc.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, -1, 0, 1]);
                        let mut got = vec![0u8; acc.len()];
                        assert_eq!(row_uniform(Kernels::detect(), &acc, u64::MAX, bias, &plan, out, &mut got), 0, "no fallback");
                        for (&a, &g) in acc.iter().zip(&got) {
                            let want = requant_exact(a, bias, &plan.ratio, out);
                            assert_eq!(g, want as u8, "k {k} acc {a} bias {bias} zy {zy} {code:?}");
                        }
                    }
                }
            }
        }
        for (sx, sw, sy) in [(0.1f32, 0.5, 1.0), (1.0, 1.0, 1.0), (2.0, 1.0, 1.0), (0.5, 0.5, 3.0), (2f32.powi(-40), 1.0, 1.0)] {
            assert_eq!(Certified::new(Ratio::new(sx, sw, sy).unwrap()).shift, None, "{sx} · {sw} / {sy}");
        }
        let (_, with_offset) = Ratio::new(0.5, 0.5, 1.0).unwrap().with_bias(3, 0.3).unwrap();
        assert_eq!(Certified::new(with_offset).shift, None, "a bias off the accumulator's scale");
    }

    /// A run of one plan in the f32 form equals the exact form on accumulators around every
    /// rounding boundary of a tie-rich ratio (3·2^−4: a half-integer every 16 accumulators), of
    /// a plain one, of a tiny one (3·2^−23: accumulators beyond 2^24, which f32 rounds, so that
    /// values near a boundary misround unless the exact form settles them), at the i32 extremes
    /// with biases whose sum overflows i32, and with a bias off the accumulator's scale (ρ ≠ 0);
    /// both code types, on every kernel path the host has (the AVX2 path's own vector form),
    /// runs of every length mod 8 (the vector form's scalar tail).
    #[test]
    fn uniform_runs_in_f32_equal_the_exact_form() {
        let plain = Ratio::new(0.0213, 0.0039, 0.517).unwrap();
        let tiny = Ratio::new(3.0 / 4096.0, 1.0 / 2048.0, 1.0).unwrap();
        let (_, offset) = Ratio::new(0.02, 0.004, 0.05).unwrap().with_bias(3, 0.3).unwrap();
        for ratio in [Ratio::new(0.375, 0.5, 1.0).unwrap(), plain, tiny, offset] {
            let plan = Certified::new(ratio);
            assert!(plan.single.is_some() && plan.shift.is_none(), "{ratio:?}: the f32 form");
            let r = plan.r;
            for (code, zy) in [(Code::U8, 0), (Code::U8, 131), (Code::I8, -5)] {
                let out = Output::new(zy, code).unwrap();
                for bias in [0, 1000, -77, i32::MAX, i32::MIN + 5] {
                    // Every accumulator within 3 of each half-integer value from −130.5 to 130.5.
                    let acc: Vec<i32> = (-131..=130)
                        .flat_map(|k: i64| {
                            let centre = ((k as f64 + 0.5) / r).round() as i64 - i64::from(bias);
                            (-3..=3).map(move |d| (centre + d).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
                        })
                        .collect();
                    // The accumulators as they are, with their true bound (the AVX2 form's
                    // overflow test is then skipped where the bias cannot overflow them), then
                    // with the i32 extremes and no bound.
                    let inner = acc.iter().map(|a| u64::from(a.unsigned_abs())).max().unwrap();
                    let mut extremes = acc.clone();
                    extremes.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, -1, 0, 1]);
                    for ((acc, bound), kernels) in
                        [(acc, inner), (extremes, u64::MAX)].iter().flat_map(|c| Isa::available().into_iter().map(move |isa| (c, Kernels::new(isa).unwrap())))
                    {
                        for skip in 0..8 {
                            let (acc, bound) = (&acc[skip..], *bound);
                            let mut got = vec![0u8; acc.len()];
                            row_uniform(kernels, acc, bound, bias, &plan, out, &mut got);
                            for (&a, &g) in acc.iter().zip(&got) {
                                let want = requant_exact(a, bias, &plan.ratio, out);
                                assert_eq!(g, want as u8, "{ratio:?} on {kernels:?}: acc {a} bias {bias} zy {zy} {code:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
