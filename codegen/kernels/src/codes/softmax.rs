//! `Q(Softmax(DQ(x)))` along the last axis in one pass over codes: the bits of the three kernels
//! the unfused program calls ([`qdq::dequantize_linear`], [`crate::float::softmax::softmax`],
//! [`qdq::quantize_linear`]), without their f32 tensors and with the exponentials read from a
//! table.
//!
//! Obligation: every output code equals the unfused one. The softmax of a slice is (its module
//! header) `m` = the first largest `v_i` by `>`, `e_i = exp64(f64(v_i) − f64(m))`, `s = Σ e_i` in
//! index order from +0, `y_i = f32(e_i / s)`, then QuantizeLinear. Here `v_i = dq[x_i]`, the
//! table of [`qdq::dequantize`] over the 256 codes (the function `dequantize_linear` applies
//! element by element), and `m` is found by the same comparisons, recording the code `a` it was
//! read from, so `m` has the bits of `dq[a]`. Then `e_i = exp64(f64(dq[x_i]) − f64(dq[a]))` is
//! entry `x_i` of row `a` of [`SoftmaxCodes`]' table, built by that very expression for every
//! code; the sum, the division and [`qdq::quantize`] are the unfused steps, in the same order.
//! Nothing needs the values to be finite: a slice with no `v_i > −∞` (all −∞ or NaN) keeps
//! `m = −∞`, which no code's entry holds, and evaluates `exp64(f64(v_i) − f64(m))` directly.
//!
//! Every path gives the same bits: the table lookups and the sums are scalar and sequential per
//! slice; four slices are summed side by side, each in its own lane (so the adds of one slice stay
//! in index order); the divisions and QuantizeLinear are per element with no contraction.
//! Memory: a row of 256 f64 (2 KiB) per code that is some slice's maximum, filled the first time
//! it is (at most 512 KiB per node; the rows of the maxima that never occur are never made).
//!
//! | condition | why |
//! |---|---|
//! | the softmax axis is the last one | each slice is contiguous, as the table path reads it |
//! | one scale and zero point for the input and for the output | one `dq` table, one QuantizeLinear |
//! | the scan reads only a slice's largest code where `dq` strictly increases along the codes' order (checked once, in `new`) | the first largest `v_i` by `>` is then that code's value, or none is recorded (`SoftmaxCodes::exponentials`) |

use super::qdq;
use super::shape::check_len;
use super::{CodesError, QCode};
use crate::float::math::exp64;
use crate::isa::{Isa, Kernels};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// Slices summed side by side, one per lane of an f64 vector (eight, in two vectors, measured no
/// faster on a Zen 3 host: the entries' loads and inserts bound the loop, not the adds).
const LANES: usize = 4;

/// The tables of one `Q(Softmax(DQ(x)))` on codes `X`.
pub struct SoftmaxCodes<X> {
    /// `dq[i]`: DequantizeLinear of the code with bit pattern `i`.
    dq: [f32; 256],
    /// Row `a`: `exp64(f64(dq[b]) − f64(dq[a]))` for every b, filled when a slice's maximum is
    /// first read from code a (only the rows of the maxima that occur take memory).
    exp: Box<[OnceLock<Box<[f64; 256]>>]>,
    /// `dq` strictly increasing (by `>`) along the codes' numeric order: a slice's maximum is
    /// its largest code's value (see [`SoftmaxCodes::exponentials`]).
    increasing: bool,
    out_scale: f32,
    out_zero_point: i32,
    codes: PhantomData<X>,
}

impl<X: QCode> SoftmaxCodes<X> {
    /// The input's scale and zero point (codes `X`), the output's.
    pub fn new(scale: f32, zero_point: i32, out_scale: f32, out_zero_point: i32) -> Result<SoftmaxCodes<X>, CodesError> {
        if !(X::MIN..=X::MAX).contains(&zero_point) {
            return Err(CodesError::ZeroPoint(format!("Softmax input zero point {zero_point} outside {}..={}", X::MIN, X::MAX)));
        }
        let mut dq = [0f32; 256];
        for (i, v) in dq.iter_mut().enumerate() {
            *v = qdq::dequantize(X::from_index(i), scale, zero_point);
        }
        let exp = (0..256).map(|_| OnceLock::new()).collect();
        let increasing = (X::MIN..X::MAX).all(|v| dq[X::saturate(i64::from(v + 1)).index()] > dq[X::saturate(i64::from(v)).index()]);
        Ok(SoftmaxCodes { dq, exp, increasing, out_scale, out_zero_point, codes: PhantomData })
    }

    /// `y = Q(Softmax(DQ(x)))` along the last axis of `shape`, on the kernel path `kernels`; the
    /// output codes `Y` must be those of the zero point given to [`SoftmaxCodes::new`].
    pub fn run<Y: QCode>(&self, kernels: Kernels, x: &[X], shape: &[usize], y: &mut [Y]) -> Result<(), CodesError> {
        check_len("Softmax input", x.len(), shape)?;
        check_len("Softmax output", y.len(), shape)?;
        if !(Y::MIN..=Y::MAX).contains(&self.out_zero_point) {
            return Err(CodesError::ZeroPoint(format!("Softmax output zero point {} outside {}..={}", self.out_zero_point, Y::MIN, Y::MAX)));
        }
        let n = shape.last().copied().unwrap_or(1);
        if n == 0 || x.is_empty() {
            return Ok(());
        }
        match kernels.isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
            // the function only lets the compiler use AVX-512F instructions for safe code.
            Isa::Avx512Vnni => unsafe { self.slices_avx512(x, n, y) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, AVX2 was checked.
            Isa::Avx2 => unsafe { self.slices_avx2(x, n, y) },
            _ => self.slices(x, n, y),
        }
        Ok(())
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn slices_avx512<Y: QCode>(&self, x: &[X], n: usize, y: &mut [Y]) {
        self.slices(x, n, y)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn slices_avx2<Y: QCode>(&self, x: &[X], n: usize, y: &mut [Y]) {
        self.slices(x, n, y)
    }

    /// Every slice of `n` codes, [`LANES`] at a time, in the order of the module header. The
    /// exponentials are read from the slices' table rows twice, for the sums and for the
    /// divisions, rather than stored between the two (the stores and the sums' strided reloads
    /// were a third of the kernel's time); a group with a slice that has no row (no value above
    /// −∞) goes slice by slice.
    #[inline(always)]
    fn slices<Y: QCode>(&self, x: &[X], n: usize, y: &mut [Y]) {
        for (xg, yg) in x.chunks(LANES * n).zip(y.chunks_mut(LANES * n)) {
            let slices = xg.len() / n;
            let xs: [&[X]; LANES] = std::array::from_fn(|j| if j < slices { &xg[j * n..][..n] } else { &[] });
            let rows: [Option<&[f64; 256]>; LANES] = std::array::from_fn(|j| if j < slices { self.row(xs[j]) } else { None });
            if rows.iter().all(Option::is_some) {
                let rows = rows.map(|r| r.expect("checked"));
                // Lane j sums slice j in index order.
                let mut s = [0f64; LANES];
                for i in 0..n {
                    for ((s, row), xs) in s.iter_mut().zip(&rows).zip(&xs) {
                        // SAFETY: every slice of the group holds n codes (`chunks_exact(n)`, and
                        // the group is whole here). Unchecked: with a bounds check per slice and
                        // element the loop spilled the slices' lengths.
                        *s += row[unsafe { xs.get_unchecked(i) }.index()];
                    }
                }
                for (((ys, xs), row), &s) in yg.chunks_exact_mut(n).zip(&xs).zip(&rows).zip(&s) {
                    // `for` loops, not `for_each` (an out-of-line `fold` would lose the caller's
                    // target features: float/unary.rs).
                    for (y, &c) in ys.iter_mut().zip(xs.iter()) {
                        *y = qdq::quantize((row[c.index()] / s) as f32, self.out_scale, self.out_zero_point);
                    }
                }
            } else {
                for ((ys, xs), row) in yg.chunks_exact_mut(n).zip(&xs).zip(&rows).take(slices) {
                    let mut s = 0f64;
                    for &c in xs.iter() {
                        s += self.exponential(*row, c);
                    }
                    for (y, &c) in ys.iter_mut().zip(xs.iter()) {
                        *y = qdq::quantize((self.exponential(*row, c) / s) as f32, self.out_scale, self.out_zero_point);
                    }
                }
            }
        }
    }

    /// The table row of one slice: that of the code the maximum was read from, or none when no
    /// value is above −∞. Where `dq` is strictly increasing along the codes' order, the scan of
    /// the module header (`m` from −∞, replaced by each `v > m`) ends at the slice's largest
    /// code `c` when `dq[c] > −∞` (the values are distinct and none is NaN: a NaN compares
    /// false), and with nothing recorded otherwise: so the largest code (a vectorized max)
    /// stands for the scan.
    #[inline(always)]
    fn row(&self, xs: &[X]) -> Option<&[f64; 256]> {
        let (mut m, mut at) = (f32::NEG_INFINITY, None);
        if self.increasing {
            let top = xs.iter().fold(X::saturate(i64::from(X::MIN)), |t, &c| if c > t { c } else { t });
            if self.dq[top.index()] > m {
                at = Some(top.index());
            }
        } else {
            for &c in xs {
                let v = self.dq[c.index()];
                if v > m {
                    (m, at) = (v, Some(c.index()));
                }
            }
        }
        at.map(|a| {
            &**self.exp[a].get_or_init(|| {
                let m = f64::from(self.dq[a]);
                Box::new(std::array::from_fn(|b| exp64(f64::from(self.dq[b]) - m)))
            })
        })
    }

    /// `e_i` of code `c` in a slice whose row is `row`: the entry, or with no row (`m = −∞`)
    /// the expression itself.
    #[inline(always)]
    fn exponential(&self, row: Option<&[f64; 256]>, c: X) -> f64 {
        match row {
            Some(row) => row[c.index()],
            None => exp64(f64::from(self.dq[c.index()]) - f64::NEG_INFINITY),
        }
    }
}
