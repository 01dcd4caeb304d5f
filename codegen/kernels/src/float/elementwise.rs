//! Elementwise f32 ops that are IEEE-754 basic operations per element, with numpy broadcasting.
//!
//! Evaluation order: each output element is computed on its own, by the formula in its variant's
//! doc, left to right, every operation rounded on its own (no FMA). The broadcast fast paths
//! (same shape, one scalar operand) compute the same formula, so the bits never depend on the
//! path. Where ONNX Runtime (1.31.1, CPU provider) computes the same formula, the bits are its bits:
//!
//! | op | formula here | ONNX Runtime |
//! |---|---|---|
//! | Add/Sub/Mul/Div | `a ∘ b` | the same (Eigen/MLAS, one IEEE op) |
//! | Max/Min | NaN if either is NaN, else the larger/smaller; a ±0 tie gives `b` | Eigen `max<PropagateNaN>`: the same bits (checked on ±0 pairs) |
//! | Relu | `x < 0 ? 0 : x` (NaN stays NaN, −0 stays −0) | Eigen `cwiseMax(0)` = `std::max(x, 0)` |
//! | Clip | `min(max(x, lo), hi)` as `std::max`, `std::min` (NaN stays NaN) | the same order (`clip.cc`) |
//! | LeakyRelu | `x >= 0 ? x : α·x` | the same (`activations.h`) |
//! | HardSigmoid | `t = α·x + β` (two roundings); `t = 1 < t ? 1 : t`; `t < 0 ? 0 : t` | the same (`activations.h`, min then max) |
//! | HardSwish | `x · HardSigmoid(x; α = f32(1/6), β = 0.5)` | ONNX function body (no CPU kernel) |
//! | PRelu | `x >= 0 ? x : x·slope` (+0 and −0 pass unchanged, NaN stays NaN) | 1.31.1's bits on ±0, ±∞, NaN and random values (`tests/float_ort.rs`; the 1.25 sources computed `[x>0]·x + (1−[x>0])·x·slope`, which differs at +0 and +∞) |
//! | Pow | exponent 2: `x·x`; 3: `(x·x)·x`; else [`math::pow`] | ORT's fast paths only for a scalar exponent, else `std::pow` |
//! | Neg/Abs | sign bit | the same |
//! | Sqrt, Reciprocal | `√x`, `1/x` (correctly rounded) | the same |
//! | Floor/Ceil/Round | exact; Round ties to even | `std::floor/ceil/nearbyint` |

use super::dq::{Dequantized, Operand};
use super::{ShapeError, bail, broadcast_shape, broadcast_strides, check_len, math, numel};

/// A two-operand op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    /// `b` is the slope.
    PRelu,
}

impl Binary {
    /// The op on one pair of elements.
    #[inline]
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div => a / b,
            Binary::Max => max_nan(a, b),
            Binary::Min => min_nan(a, b),
            Binary::Pow => pow(a, b),
            Binary::PRelu => {
                if a >= 0.0 {
                    a
                } else {
                    a * b
                }
            }
        }
    }
}

/// NaN-propagating maximum; a tie of ±0 gives `b` (as ONNX Runtime).
#[inline]
fn max_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a > b {
        a
    } else {
        b
    }
}

/// NaN-propagating minimum; a tie of ±0 gives `b` (as ONNX Runtime).
#[inline]
fn min_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a < b {
        a
    } else {
        b
    }
}

/// Pow with the integer fast paths (exact products) ahead of the general [`math::pow`].
#[inline]
fn pow(x: f32, y: f32) -> f32 {
    if y == 2.0 {
        x * x
    } else if y == 3.0 {
        x * x * x
    } else {
        math::pow(x, y)
    }
}

/// A one-operand op that is a basic operation (or a short fixed sequence of them) per element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Map {
    Relu,
    LeakyRelu {
        alpha: f32,
    },
    Clip {
        min: f32,
        max: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Neg,
    Abs,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
    /// Half to even.
    Round,
}

/// HardSwish's α as ONNX's function body writes it (a float attribute `1/6`).
const SIXTH: f32 = 1.0 / 6.0;

#[inline]
fn hard_sigmoid(x: f32, alpha: f32, beta: f32) -> f32 {
    let t = alpha * x + beta;
    let t = if 1.0 < t { 1.0 } else { t };
    if t < 0.0 { 0.0 } else { t }
}

impl Map {
    /// The op on one element.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Map::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Map::LeakyRelu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha * x
                }
            }
            Map::Clip { min, max } => {
                let t = if x < min { min } else { x };
                if max < t { max } else { t }
            }
            Map::HardSigmoid { alpha, beta } => hard_sigmoid(x, alpha, beta),
            Map::HardSwish => x * hard_sigmoid(x, SIXTH, 0.5),
            Map::Neg => -x,
            Map::Abs => x.abs(),
            Map::Sqrt => x.sqrt(),
            Map::Reciprocal => 1.0 / x,
            Map::Floor => x.floor(),
            Map::Ceil => x.ceil(),
            Map::Round => x.round_ties_even(),
        }
    }
}

/// `out[i] = op(x[i])`.
pub fn map(op: Map, x: &[f32], out: &mut [f32]) -> Result<(), ShapeError> {
    if x.len() != out.len() {
        bail!("{op:?}: input has {} elements, output {}", x.len(), out.len());
    }
    // One monomorphic loop per op, so the compiler can vectorize it (across elements only).
    macro_rules! run {
        ($f:expr) => {
            out.iter_mut().zip(x).for_each(|(o, &v)| *o = $f(v))
        };
    }
    match op {
        Map::Relu => run!(|v| Map::Relu.apply(v)),
        Map::Neg => run!(|v: f32| -v),
        Map::Abs => run!(|v: f32| v.abs()),
        Map::Sqrt => run!(|v: f32| v.sqrt()),
        _ => run!(|v| op.apply(v)),
    }
    Ok(())
}

/// `x[i] = op(x[i])` in place.
pub fn map_in_place(op: Map, x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = op.apply(*v));
}

/// `out = op(a, b)` with numpy broadcasting; `out` has [`broadcast_shape`]`(a_shape, b_shape)`.
pub fn binary(op: Binary, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
    let shape = binary_shape(op, a.len(), a_shape, b.len(), b_shape, out.len())?;
    binary_generic(op, Operand::F32(a), a_shape, Operand::F32(b), b_shape, &shape, out);
    Ok(())
}

/// [`binary`] with operands that may be codes decoded where they are read ([`Operand::Codes`]: a
/// dequantized constant, a scalar or a per-channel vector in the models): a broadcast element
/// once per output row, a run of elements [`RUN`] at a time into a stack buffer. Each output is
/// the same `op(a, b)` of the same decoded values (DequantizeLinear's `fl32(fl32(q − zp)·s)`), so
/// the bits are those of [`binary`] on the float copy. One instance for every kernel path (no
/// AVX2/AVX-512 copies: each would add ~70 KiB of code, eight ops times the operand forms, to
/// ops that are bound by memory; the baseline instance is vectorized with SSE2).
pub fn binary_operands(op: Binary, a: Operand<'_>, a_shape: &[usize], b: Operand<'_>, b_shape: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
    let shape = binary_shape(op, a.len(), a_shape, b.len(), b_shape, out.len())?;
    binary_generic(op, a, a_shape, b, b_shape, &shape, out);
    Ok(())
}

/// The output shape, after checking the operands' and the output's lengths.
fn binary_shape(op: Binary, a: usize, a_shape: &[usize], b: usize, b_shape: &[usize], out: usize) -> Result<Vec<usize>, ShapeError> {
    let named = |e: ShapeError| ShapeError(format!("{op:?} {}", e.0));
    check_len("input A", a, a_shape).map_err(named)?;
    check_len("input B", b, b_shape).map_err(named)?;
    let shape = broadcast_shape(a_shape, b_shape).map_err(named)?;
    check_len("output", out, &shape).map_err(named)?;
    Ok(shape)
}

/// One monomorphic broadcast per op, so the compiler can vectorize each (across outputs only).
fn binary_generic(op: Binary, a: Operand<'_>, a_shape: &[usize], b: Operand<'_>, b_shape: &[usize], shape: &[usize], out: &mut [f32]) {
    macro_rules! run {
        ($f:expr) => {
            broadcast2(a, a_shape, b, b_shape, shape, out, $f)
        };
    }
    match op {
        Binary::Add => run!(|x, y| x + y),
        Binary::Sub => run!(|x, y| x - y),
        Binary::Mul => run!(|x, y| x * y),
        Binary::Div => run!(|x, y| x / y),
        Binary::Max => run!(max_nan),
        Binary::Min => run!(min_nan),
        Binary::Pow => run!(pow),
        Binary::PRelu => run!(|x, y| Binary::PRelu.apply(x, y)),
    }
}

/// Elements decoded at a time from an operand's codes (a stack buffer: no allocation).
pub const RUN: usize = 64;

/// An operand's elements along one output row.
#[derive(Clone, Copy)]
enum Row<'a> {
    /// Broadcast along the row: one element, decoded once.
    Scalar(f32),
    F32(&'a [f32]),
    /// Codes from this element on.
    Codes(&'a Dequantized, usize),
}

impl<'a> Row<'a> {
    /// `x`'s row from element `offset`, `len` long, at stride `stride` (0: broadcast, 1: along).
    #[inline(always)]
    fn of(x: Operand<'a>, offset: usize, stride: usize, len: usize) -> Row<'a> {
        match (x, stride) {
            (x, 0) => Row::Scalar(x.get(offset)),
            (Operand::F32(v), _) => Row::F32(&v[offset..][..len]),
            (Operand::Codes(d), _) => Row::Codes(d, offset),
        }
    }
}

/// The broadcast loop: the whole tensor as one row when each operand is whole or one element,
/// else rows of the last output axis (along which a stride is 0 or 1).
#[inline(always)]
fn broadcast2(a: Operand<'_>, a_shape: &[usize], b: Operand<'_>, b_shape: &[usize], shape: &[usize], out: &mut [f32], f: impl Fn(f32, f32) -> f32 + Copy) {
    let n = numel(shape);
    if n == 0 {
        return;
    }
    let flat = |len: usize| (len == n || len == 1).then_some(usize::from(len == n));
    if let (Some(ta), Some(tb)) = (flat(a.len()), flat(b.len())) {
        return row(out, Row::of(a, 0, ta, n), Row::of(b, 0, tb, n), f);
    }
    let (sa, sb) = (broadcast_strides(a_shape, shape), broadcast_strides(b_shape, shape));
    let rank = shape.len();
    let last = shape[rank - 1];
    let (ta, tb) = (sa[rank - 1], sb[rank - 1]);
    let mut index = vec![0usize; rank];
    for out in out.chunks_mut(last) {
        let oa: usize = index.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let ob: usize = index.iter().zip(&sb).map(|(i, s)| i * s).sum();
        row(out, Row::of(a, oa, ta, last), Row::of(b, ob, tb, last), f);
        // Next row: increment the index over all axes but the last.
        for axis in (0..rank - 1).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// An operand's elements along a run of outputs, as [`row_f32`] reads them.
#[derive(Clone, Copy)]
enum Run<'a> {
    Scalar(f32),
    F32(&'a [f32]),
}

/// Elements `at .. at + buf.len()` of `x`'s row: codes decoded into `buf`.
#[inline(always)]
fn decoded<'b>(x: Row<'b>, at: usize, buf: &'b mut [f32]) -> Run<'b> {
    match x {
        Row::Scalar(v) => Run::Scalar(v),
        Row::F32(v) => Run::F32(&v[at..][..buf.len()]),
        Row::Codes(d, o) => {
            d.decode(o + at, buf);
            Run::F32(buf)
        }
    }
}

/// `out[j] = f(a[j], b[j])` along one row, [`RUN`] outputs at a time (one loop per pair of
/// operand forms, whether codes were decoded into the stack buffers or not: the code stays small).
#[inline(always)]
fn row(out: &mut [f32], a: Row<'_>, b: Row<'_>, f: impl Fn(f32, f32) -> f32 + Copy) {
    let (mut da, mut db) = ([0f32; RUN], [0f32; RUN]);
    for (c, out) in out.chunks_mut(RUN).enumerate() {
        let n = out.len();
        row_f32(out, decoded(a, c * RUN, &mut da[..n]), decoded(b, c * RUN, &mut db[..n]), f);
    }
}

/// `out[j] = f(a[j], b[j])` for f32 runs or scalars.
#[inline(always)]
fn row_f32(out: &mut [f32], a: Run<'_>, b: Run<'_>, f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (Run::F32(a), Run::F32(b)) => {
            for (o, (&x, &y)) in out.iter_mut().zip(a.iter().zip(b)) {
                *o = f(x, y);
            }
        }
        (Run::F32(a), Run::Scalar(y)) => {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        (Run::Scalar(x), Run::F32(b)) => {
            for (o, &y) in out.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        (Run::Scalar(x), Run::Scalar(y)) => out.fill(f(x, y)),
    }
}
