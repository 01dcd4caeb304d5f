//! A chain of elementwise IEEE ops between a DequantizeLinear and a QuantizeLinear over 8-bit
//! codes, evaluated as a lookup table (contract §5.5): the reference evaluation of every code
//! (under `exact` the same correctly rounded f32 operations every conforming runtime performs;
//! under `real` exact rational arithmetic, which Div and Sqrt do not have), and the P1 check of
//! the table against the chain. A chain that produces NaN or ±Inf for some code is refused:
//! runtimes quantize those differently.

use crate::num::Dyadic;
use crate::p1::exhaustive;
use crate::reference::{CodeType, dequantize, dequantize_real, quantize, quantize_real};
use crate::{Contract, QParam, Verdict};
use qdqc_lang::term::FloatOp;

/// One step of the chain, applied to an f32.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A unary op: Relu, Neg, Abs or Sqrt.
    Unary(FloatOp),
    /// The op with a scalar constant; `left` when the constant is the first operand.
    Scalar {
        /// The binary op.
        op: FloatOp,
        /// The constant.
        c: f32,
        /// Whether the constant is the first operand.
        left: bool,
    },
    /// Clip to constant bounds.
    Clip {
        /// The lower bound.
        lo: f32,
        /// The upper bound.
        hi: f32,
    },
}

impl Step {
    /// The step in f32, as every conforming runtime computes it (one correct rounding).
    pub fn apply(self, x: f32) -> f32 {
        use FloatOp::*;
        match self {
            Step::Unary(Relu) => x.max(0.0),
            Step::Unary(Neg) => -x,
            Step::Unary(Abs) => x.abs(),
            Step::Unary(Sqrt) => x.sqrt(),
            Step::Unary(op) => unreachable!("{op:?} is not a chain step"),
            Step::Scalar { op, c, left } => {
                let (a, b) = if left { (c, x) } else { (x, c) };
                match op {
                    Add => a + b,
                    Sub => a - b,
                    Mul => a * b,
                    Div => a / b,
                    Max => a.max(b),
                    Min => a.min(b),
                    _ => unreachable!("{op:?} is not a chain step"),
                }
            }
            Step::Clip { lo, hi } => x.max(lo).min(hi),
        }
    }
}

impl Step {
    /// The step in exact arithmetic (the `real` contract); `None` where the result is not a
    /// dyadic rational (Div, Sqrt) or leaves i128.
    pub fn apply_exact(self, x: Dyadic) -> Option<Dyadic> {
        use FloatOp::*;
        let max = |a: Dyadic, b: Dyadic| Some(if a.checked_add(-b)?.mant >= 0 { a } else { b });
        let min = |a: Dyadic, b: Dyadic| Some(if a.checked_add(-b)?.mant <= 0 { a } else { b });
        match self {
            Step::Unary(Relu) => max(x, Dyadic::ZERO),
            Step::Unary(Neg) => Some(-x),
            Step::Unary(Abs) => Some(if x.mant < 0 { -x } else { x }),
            Step::Unary(_) => None,
            Step::Scalar { op, c, left } => {
                let c = Dyadic::from_f32(c)?;
                let (a, b) = if left { (c, x) } else { (x, c) };
                match op {
                    Add => a.checked_add(b),
                    Sub => a.checked_add(-b),
                    Mul => a.checked_mul(b),
                    Max => max(a, b),
                    Min => min(a, b),
                    _ => None,
                }
            }
            Step::Clip { lo, hi } => min(max(x, Dyadic::from_f32(lo)?)?, Dyadic::from_f32(hi)?),
        }
    }
}

/// The table indexed as ONNX Gather indexes it with the codes cast to int32: codes 0..=255 for
/// uint8; for int8, non-negative codes first, negative ones from the end (Gather's negative
/// indices count from the end).
pub fn table(x: QParam, y: QParam, steps: &[Step], contract: Contract) -> Result<Vec<i64>, String> {
    let eval = |c: i64| reference(x, y, steps, contract, c);
    (0..256).map(|i| eval(if x.code == CodeType::I8 && i >= 128 { i - 256 } else { i })).collect()
}

/// `Q(chain(DQ(c)))` under the contract: f32 operations for `exact`, exact rationals for `real`.
fn reference(x: QParam, y: QParam, steps: &[Step], contract: Contract, c: i64) -> Result<i64, String> {
    match contract {
        Contract::Exact => {
            let v = steps.iter().fold(dequantize(c, x.scale, x.zero_point), |v, s| s.apply(v));
            if !v.is_finite() {
                return Err(format!("code {c} gives {v} (runtimes quantize it differently)"));
            }
            Ok(quantize(v, y.scale, y.zero_point, y.code))
        }
        Contract::Real => {
            let v = steps
                .iter()
                .try_fold(dequantize_real(c, x.scale, x.zero_point).ok_or("scale is not finite")?, |v, s| s.apply_exact(v))
                .ok_or("a step (Div, Sqrt) has no exact rational value")?;
            quantize_real(v, y.scale, y.zero_point, y.code).ok_or_else(|| "the output scale is not finite and non-zero".to_string())
        }
    }
}

/// The obligation of a lookup table for the chain `steps` between a DQ with parameters `x` and a Q
/// with `y`: the table (by construction the reference of every code) checked by P1 against the
/// chain, refused where a code's value is not finite or (under `real`) has no exact value.
pub fn prove(x: QParam, y: QParam, steps: &[Step], contract: Contract) -> Verdict {
    let t = match table(x, y, steps, contract) {
        Ok(t) => t,
        Err(reason) => return Verdict::Unknown { reason },
    };
    // `rem_euclid(256)` lies in 0..256: the cast is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let index = |c: i64| c.rem_euclid(256) as usize;
    exhaustive(
        &[x.domain("q")],
        "Gather(table, q) against Q(chain(DQ(q))) for every code",
        |c| reference(x, y, steps, contract, c[0]).unwrap_or(i64::MIN),
        |c| t[index(c[0])],
        |_| None,
    )
}
