//! Requantization: i32 accumulators (plus i32 bias codes at scale `sx·sw`) to u8/i8 codes,
//! correctly rounded: `sat(rne((acc + bias)·sx·sw/sy) + zy)` with the f32 scales taken as the
//! exact dyadic rationals they are, ties to even (ONNX QuantizeLinear).
//!
//! | form | function | exact when |
//! |---|---|---|
//! | exact rational, i128 | [`requant_exact`] | always: it is the definition the others are checked against |
//! | fixed point `(multiplier, shift, rounding)` | [`requant_fixed`] | where the compiler proved it over the reachable accumulators (P3, by calling both functions) |
//! | certified f64 with exact fallback | [`requant_certified`] | always: f64 where the value is farther than its error bound from a rounding boundary, [`requant_exact`] otherwise |
//! | certified f32 with exact fallback | the rows of [`requantize`] and of `gemm_u8_requant` | always, where the ratio and offset sit well inside f32's range (`certified/single.rs`); f64 otherwise |
//!
//! [`requantize`] applies a per-tensor or per-column [`Plan`] to a row-major `m × n` block;
//! [`Prepared`] holds a GEMM's plan with the per-column operands its rows read, made once.

mod certified;
mod exact;
pub(crate) use exact::{div_rem_euclid, rne_div};
mod fixed;

pub use certified::{Certified, certified_step, fallback_hits, requant_certified};
pub(crate) use certified::{Columns, Operands, block as requant_block, count as count_fallbacks, operands, row_uniform};
pub use exact::{Ratio, requant_exact};
pub use fixed::{Fixed, Rounding, first_disagreement, requant_fixed};

use crate::isa::Kernels;
use std::fmt;

/// The output code type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    U8,
    I8,
}

impl Code {
    pub fn min(self) -> i32 {
        match self {
            Code::U8 => 0,
            Code::I8 => -128,
        }
    }

    pub fn max(self) -> i32 {
        match self {
            Code::U8 => 255,
            Code::I8 => 127,
        }
    }
}

/// The output's zero point and code type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    zero_point: i32,
    code: Code,
}

impl Output {
    /// Refused when the zero point is not a code of the type.
    pub fn new(zero_point: i32, code: Code) -> Result<Output, RequantError> {
        if (code.min()..=code.max()).contains(&zero_point) { Ok(Output { zero_point, code }) } else { Err(RequantError::ZeroPoint(zero_point)) }
    }

    pub fn zero_point(self) -> i32 {
        self.zero_point
    }

    pub fn code(self) -> Code {
        self.code
    }

    /// `sat(q + zy)` for any integer q.
    pub(crate) fn saturate(self, q: i128) -> i32 {
        (q + i128::from(self.zero_point)).clamp(i128::from(self.code.min()), i128::from(self.code.max())) as i32
    }
}

/// A plan that cannot be made or applied.
#[derive(Clone, Debug, PartialEq)]
pub enum RequantError {
    /// A scale that is not a positive finite f32.
    Scale(f32),
    /// A zero point outside the output code range.
    ZeroPoint(i32),
    /// Columns of the plan, the bias or the block disagree.
    Shape(String),
}

impl fmt::Display for RequantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequantError::Scale(s) => write!(f, "scale {s:e} is not a positive finite f32"),
            RequantError::ZeroPoint(z) => write!(f, "output zero point {z} outside the code range"),
            RequantError::Shape(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for RequantError {}

/// The form applied to every column (one entry per tensor, or one per column).
#[derive(Clone, Debug)]
pub enum Form {
    Fixed(Vec<Fixed>),
    Certified(Vec<Certified>),
    Exact(Vec<Ratio>),
}

impl Form {
    fn columns(&self) -> usize {
        match self {
            Form::Fixed(v) => v.len(),
            Form::Certified(v) => v.len(),
            Form::Exact(v) => v.len(),
        }
    }
}

/// A requantization plan: an output and a form per tensor or per column.
#[derive(Clone, Debug)]
pub struct Plan {
    pub output: Output,
    pub form: Form,
}

/// A GEMM's requantization made once (a generated model's `new()`): the plan, one bias code per
/// column, and for the certified form the per-column operands its vectorized rows read (made
/// per call otherwise, which reads every column's plan: 104 bytes each).
#[derive(Clone, Debug)]
pub struct Prepared {
    plan: Plan,
    bias: Vec<i32>,
    ops: Option<Operands>,
}

impl Prepared {
    /// `bias` has one code per column (zeros for none); the plan one form, or one per column.
    pub fn new(plan: Plan, bias: Vec<i32>) -> Result<Prepared, RequantError> {
        let cols = plan.form.columns();
        if bias.is_empty() || (cols != 1 && cols != bias.len()) {
            return Err(RequantError::Shape(format!("a plan of {cols} forms for {} columns", bias.len())));
        }
        let ops = match &plan.form {
            Form::Certified(p) => Some(operands(&bias, p)),
            _ => None,
        };
        Ok(Prepared { plan, bias, ops })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// One bias code per column.
    pub fn bias(&self) -> &[i32] {
        &self.bias
    }

    pub(crate) fn operands(&self) -> Option<&Operands> {
        self.ops.as_ref()
    }
}

/// Output code types [`requantize`] writes.
pub trait CodeOut: Copy {
    const CODE: Code;
    /// `v` is already inside the type's range.
    fn from_code(v: i32) -> Self;
    /// The codes as their bytes, where the byte of code `v` is `v as u8` (the vectorized
    /// requantization stores the low byte of each lane).
    fn bytes_mut(codes: &mut [Self]) -> &mut [u8];
}

impl CodeOut for u8 {
    const CODE: Code = Code::U8;
    fn from_code(v: i32) -> u8 {
        v as u8
    }
    fn bytes_mut(codes: &mut [u8]) -> &mut [u8] {
        codes
    }
}

impl CodeOut for i8 {
    const CODE: Code = Code::I8;
    fn from_code(v: i32) -> i8 {
        v as i8
    }
    fn bytes_mut(codes: &mut [i8]) -> &mut [u8] {
        // SAFETY: i8 and u8 have the same size and alignment and every bit pattern is valid in
        // both; the slice's lifetime and length carry over.
        unsafe { std::slice::from_raw_parts_mut(codes.as_mut_ptr().cast(), codes.len()) }
    }
}

/// What one [`requantize`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Elements the certified form settled with the exact rational.
    pub fallbacks: u64,
}

/// Requantizes a row-major block `acc` of `n` columns (bias: one i32 per column) into `out`.
/// The kernel path only changes speed: every path gives the same codes.
pub fn requantize<C: CodeOut>(kernels: Kernels, plan: &Plan, acc: &[i32], n: usize, bias: Option<&[i32]>, out: &mut [C]) -> Result<Stats, RequantError> {
    let cols = plan.form.columns();
    if C::CODE != plan.output.code() {
        return Err(RequantError::Shape(format!("plan writes {:?} codes, buffer holds {:?}", plan.output.code(), C::CODE)));
    }
    if n == 0 || !acc.len().is_multiple_of(n) || out.len() != acc.len() || (cols != 1 && cols != n) || bias.is_some_and(|b| b.len() != n) {
        return Err(RequantError::Shape(format!(
            "requantize: {} accumulators, {} outputs, {n} columns, plan of {cols}, bias of {:?}",
            acc.len(),
            out.len(),
            bias.map(|b| b.len())
        )));
    }
    let o = plan.output;
    let mut stats = Stats::default();
    // One column plan per column (a per-tensor plan repeated), so the loop below has no branch on it.
    let pick = |c: usize| if cols == 1 { 0 } else { c };
    let bias: Vec<i32> = (0..n).map(|c| bias.map_or(0, |b| b[c])).collect();
    match &plan.form {
        Form::Fixed(f) => {
            let f: Vec<Fixed> = (0..n).map(|c| f[pick(c)]).collect();
            for (acc_row, out_row) in acc.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                for (((&a, y), f), &b) in acc_row.iter().zip(out_row).zip(&f).zip(&bias) {
                    *y = C::from_code(requant_fixed(a, b, f, o));
                }
            }
        }
        Form::Exact(r) => {
            for (acc_row, out_row) in acc.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                for (c, (&a, y)) in acc_row.iter().zip(out_row).enumerate() {
                    *y = C::from_code(requant_exact(a, bias[c], &r[pick(c)], o));
                }
            }
        }
        Form::Certified(p) => stats.fallbacks = certified::rows(kernels, acc, &bias, p, o, out),
    }
    certified::count(stats.fallbacks);
    Ok(stats)
}
