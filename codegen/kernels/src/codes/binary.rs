//! QLinearAdd / QLinearMul on codes, correctly rounded, with numpy broadcasting:
//!
//! - Add: `y = sat(rne((sa·(a − za) + sb·(b − zb)) / sy) + zy)`
//! - Mul: `y = sat(rne(sa·sb·(a − za)·(b − zb) / sy) + zy)`
//!
//! of the exact real values (f32 scales taken as the dyadic rationals they are), ties to even.
//! [`binary_exact`] is the definition. [`Binary`] computes it two ways: an Add tabulates it for
//! all 256×256 code pairs once (one table load per element, the definition by construction); a
//! Mul needs no 64 KiB table: its value is the integer product `A·B` (|A·B| ≤ 65,025) times the
//! one ratio `sa·sb/sy`, which is the requantization of an accumulator, so it runs the certified
//! requantization (`requant::requant_certified`, equal to `requant_exact` by its own proof) per
//! element. Both are `sat(rne(A·B·sa·sb/sy) + zy)` exactly (the clamp to ±2^10 below changes no
//! saturated code); tests/binary.rs checks the Mul form against the definition on every pair.
//!
//! | condition | why |
//! |---|---|
//! | every scale positive finite, zero points codes of their types | refused otherwise ([`CodesError`]) |
//! | Mul without a table: `Ratio::new(sa, sb, sy)` exists (positive finite scales, checked above) | the requantization's exact form is defined for it |
//! | Mul: `sa·sb·A·B/sy = (ma·mb·A·B)·2^(ea+eb−ey)/my`, `\|ma·mb·A·B\| < 2^64` | one exact rounding (`rne_clamped`, private) |
//! | Add, exponent gap `g = p − q ≤ 91` between the terms `n1·2^p`, `n2·2^q` (over `my`) | `N = n1·2^g + n2`, `\|N\| < 2^124`, exact |
//! | Add, `g > 91`, both terms nonzero: `n2` replaced by `sign(n2)` at exponent `p − 91` | below |
//!
//! The gap argument: with `X = x·my = n1·2^p + n2·2^q`, `\|n\| < 2^32`. If `\|n1·2^p/my\| ≥ 2^11`
//! the small term (`< 2^(p−59)` in X) cannot move the sum below 2^10: both saturate alike. Else
//! `p ≤ 34`; the rounding boundaries in X are `h·my` (h a half-integer), multiples of 1/2; the
//! distance from `n1·2^p` to a boundary is 0 or at least `min(1/2, 2^p)`, larger than both the
//! small term and its replacement (each `< 2^(p−59)`, `≤ 2^-25`). So off a boundary the rounding
//! is `n1·2^p`'s, and on one the small term only breaks the tie by its sign: the replacement has
//! the same sign.

use super::rational::{LIMIT, dyadic, rne_clamped};
use super::shape::{broadcast_strides, check_len};
use super::{CodesError, QCode, Quant, broadcast_shape};
use crate::requant::{Certified, Code, Output, Ratio, requant_certified};
use std::marker::PhantomData;

/// The elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// A scale as `m·2^e`.
type Dyadic = (i128, i32);

/// `rne(value/sy)` clamped to ±2^10 for the centred codes `a = a − za`, `b = b − zb`.
fn centred(op: BinaryOp, a: i32, b: i32, (ma, ea): Dyadic, (mb, eb): Dyadic, (my, ey): Dyadic) -> i128 {
    match op {
        BinaryOp::Mul => rne_clamped(ma * mb * i128::from(a) * i128::from(b), ea + eb - ey, my),
        BinaryOp::Add => {
            let (t1, t2) = ((ma * i128::from(a), ea - ey), (mb * i128::from(b), eb - ey));
            // t1 the term with the larger exponent.
            let ((n1, p), (n2, q)) = if t1.1 >= t2.1 { (t1, t2) } else { (t2, t1) };
            if n1 == 0 {
                return rne_clamped(n2, q, my);
            }
            if n2 == 0 {
                return rne_clamped(n1, p, my);
            }
            let (n2, gap) = if p - q > 91 { (n2.signum(), 91) } else { (n2, p - q) };
            rne_clamped((n1 << gap) + n2, p - gap, my)
        }
    }
}

/// The definition: `y` for one pair of codes (see the module header). The codes are typed, so
/// `|a − za|, |b − zb| ≤ 255` and the header's bounds hold.
pub fn binary_exact<A: QCode, B: QCode, Y: QCode>(op: BinaryOp, a: A, qa: Quant, b: B, qb: Quant, qy: Quant) -> Result<Y, CodesError> {
    let (qa, qb, qy) = (qa.check::<A>("input A")?, qb.check::<B>("input B")?, qy.check::<Y>("output")?);
    let r = centred(op, a.value() - qa.zero_point, b.value() - qb.zero_point, dyadic(qa.scale)?, dyadic(qb.scale)?, dyadic(qy.scale)?);
    Ok(Y::saturate((r + i128::from(qy.zero_point)) as i64))
}

/// [`binary_exact`] for one node: `A` and `B` input codes, `Y` output codes.
#[derive(Clone, Debug)]
pub struct Binary<A: QCode, B: QCode, Y: QCode> {
    repr: Repr<Y>,
    _inputs: PhantomData<(A, B)>,
}

/// How the codes are computed (module header).
#[derive(Clone, Debug)]
enum Repr<Y> {
    /// `table[a.index()·256 + b.index()]` (a fixed-size array: the index of two codes is in
    /// bounds by its type, no check per element).
    Table(Box<[Y; 1 << 16]>),
    /// A Mul: `(a − za)·(b − zb)` requantized by `sa·sb/sy` to the output's zero point and type.
    Product { za: i32, zb: i32, plan: Certified, out: Output },
}

impl<A: QCode, B: QCode, Y: QCode> Binary<A, B, Y> {
    /// An Add's table (65,536 exact evaluations), or a Mul's requantization plan.
    pub fn new(op: BinaryOp, qa: Quant, qb: Quant, qy: Quant) -> Result<Self, CodesError> {
        let (qa, qb, qy) = (qa.check::<A>("input A")?, qb.check::<B>("input B")?, qy.check::<Y>("output")?);
        if op == BinaryOp::Mul {
            let code = if Y::MIN < 0 { Code::I8 } else { Code::U8 };
            // Both exist for checked parameters; a refusal would only mean "tabulate instead".
            if let (Ok(ratio), Ok(out)) = (Ratio::new(qa.scale, qb.scale, qy.scale), Output::new(qy.zero_point, code)) {
                let repr = Repr::Product { za: qa.zero_point, zb: qb.zero_point, plan: Certified::new(ratio), out };
                return Ok(Binary { repr, _inputs: PhantomData });
            }
        }
        let (da, db, dy) = (dyadic(qa.scale)?, dyadic(qb.scale)?, dyadic(qy.scale)?);
        let mut table = Vec::with_capacity(1 << 16);
        for i in 0..256 {
            let a = A::from_index(i).value() - qa.zero_point;
            for j in 0..256 {
                let b = B::from_index(j).value() - qb.zero_point;
                let r = centred(op, a, b, da, db, dy);
                debug_assert!(r.abs() <= LIMIT);
                table.push(Y::saturate((r + i128::from(qy.zero_point)) as i64));
            }
        }
        let table = table.into_boxed_slice().try_into().expect("256 × 256 entries");
        Ok(Binary { repr: Repr::Table(table), _inputs: PhantomData })
    }

    /// Bytes the node holds (the table, when it has one).
    pub fn bytes(&self) -> usize {
        match &self.repr {
            Repr::Table(t) => std::mem::size_of_val(&**t),
            Repr::Product { .. } => 0,
        }
    }

    /// The code for one pair.
    #[inline]
    pub fn code(&self, a: A, b: B) -> Y {
        match &self.repr {
            Repr::Table(t) => t[(a.index() << 8) | b.index()],
            Repr::Product { za, zb, plan, out } => product(a, b, *za, *zb, plan, *out),
        }
    }

    /// `out = op(a, b)` with numpy broadcasting; `out` holds `broadcast_shape(a_shape, b_shape)`.
    pub fn apply(&self, a: &[A], a_shape: &[usize], b: &[B], b_shape: &[usize], out: &mut [Y]) -> Result<(), CodesError> {
        // One dispatch per call, not per element.
        match &self.repr {
            Repr::Table(t) => each(a, a_shape, b, b_shape, out, |a, b| t[(a.index() << 8) | b.index()]),
            Repr::Product { za, zb, plan, out: o } => each(a, a_shape, b, b_shape, out, |a, b| product(a, b, *za, *zb, plan, *o)),
        }
    }
}

/// A Mul's code: the centred product (|A·B| ≤ 65,025, an i32) requantized.
#[inline(always)]
fn product<A: QCode, B: QCode, Y: QCode>(a: A, b: B, za: i32, zb: i32, plan: &Certified, out: Output) -> Y {
    Y::saturate(i64::from(requant_certified((a.value() - za) * (b.value() - zb), 0, plan, out)))
}

/// `out[i] = f(a[·], b[·])` over the broadcast shape.
#[inline(always)]
fn each<A: QCode, B: QCode, Y: QCode>(a: &[A], a_shape: &[usize], b: &[B], b_shape: &[usize], out: &mut [Y], f: impl Fn(A, B) -> Y) -> Result<(), CodesError> {
    let shape = broadcast_shape(a_shape, b_shape)?;
    check_len("binary input A", a.len(), a_shape)?;
    check_len("binary input B", b.len(), b_shape)?;
    check_len("binary output", out.len(), &shape)?;
    if out.is_empty() {
        return Ok(());
    }
    if a_shape == b_shape {
        for ((y, &a), &b) in out.iter_mut().zip(a).zip(b) {
            *y = f(a, b);
        }
        return Ok(());
    }
    if shape.is_empty() {
        out[0] = f(a[0], b[0]);
        return Ok(());
    }
    let (sa, sb) = (broadcast_strides(a_shape, &shape), broadcast_strides(b_shape, &shape));
    let rank = shape.len();
    let (inner, la, lb) = (shape[rank - 1], sa[rank - 1], sb[rank - 1]);
    // An odometer over every axis but the last; the last runs in the inner loop.
    let mut idx = vec![0usize; rank - 1];
    for row in out.chunks_exact_mut(inner) {
        let oa: usize = idx.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let ob: usize = idx.iter().zip(&sb).map(|(i, s)| i * s).sum();
        for (k, y) in row.iter_mut().enumerate() {
            *y = f(a[oa + k * la], b[ob + k * lb]);
        }
        for ax in (0..rank - 1).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Ok(())
}
