//! Operators on quantized codes (u8 and i8, per-tensor parameters): what the Rust target runs for
//! the integer groups that are not GEMMs (contract §3.12).
//!
//! | module | ops | arithmetic |
//! |---|---|---|
//! | [`compare`] | Equal then Cast to f32 (one-hot encodings of integer inputs), Where(Equal(p, q), a, b); broadcasting, any element type | an exact comparison |
//! | [`binary`] | QLinearAdd / QLinearMul with numpy broadcasting | a 256×256 table of codes filled by the exact definition ([`binary::binary_exact`]) |
//! | [`pool`] | MaxPool, AveragePool, GlobalAveragePool (1–3-D) | max on codes; exact i64 window sums, correctly rounded mean |
//! | [`lut`] | a 256-entry table applied to codes | the generator's table, indexed by the code's bits |
//! | [`movement`] | Concat, Transpose, Pad, Resize (nearest), Slice, Gather | copies of codes, `T: Copy` |
//! | [`qdq`] | QuantizeLinear, DequantizeLinear (per tensor, per axis) | ONNX Runtime's f32 arithmetic, bit for bit |
//! | [`softmax`] | DequantizeLinear → Softmax (last axis) → QuantizeLinear | the three kernels' bits, the exponentials from a 256 × 256 table |
//!
//! A scale is a positive finite f32 taken as the exact dyadic rational it is; a zero point is an
//! i32 that must be a code of its tensor's type. Requantized results are `sat(rne(v/sy) + zy)` of
//! the exact real value v, ties to even (QuantizeLinear's rounding), computed in integers.

pub mod binary;
pub mod compare;
mod lookup;
pub mod lut;
pub mod movement;
pub mod pool;
pub mod qdq;
mod rational;
mod shape;
pub mod softmax;

pub use shape::{broadcast_shape, numel};

use crate::requant::CodeOut;
use std::fmt;

/// A code type: u8 or i8. Tables are indexed by the code's bit pattern ([`QCode::index`]).
pub trait QCode: CodeOut + Default + PartialOrd + fmt::Debug + 'static {
    const MIN: i32;
    const MAX: i32;
    /// The bit pattern as a table index, 0..=255 (`-1i8` is 255).
    fn index(self) -> usize;
    /// The code's integer value.
    fn value(self) -> i32;
    /// The code with bit pattern `i` (0..=255).
    fn from_index(i: usize) -> Self;
    /// `v` clamped to the type's range.
    fn saturate(v: i64) -> Self;
}

impl QCode for u8 {
    const MIN: i32 = 0;
    const MAX: i32 = 255;
    #[inline]
    fn index(self) -> usize {
        usize::from(self)
    }
    #[inline]
    fn value(self) -> i32 {
        i32::from(self)
    }
    #[inline]
    fn from_index(i: usize) -> u8 {
        i as u8
    }
    #[inline]
    fn saturate(v: i64) -> u8 {
        v.clamp(0, 255) as u8
    }
}

impl QCode for i8 {
    const MIN: i32 = -128;
    const MAX: i32 = 127;
    #[inline]
    fn index(self) -> usize {
        usize::from(self as u8)
    }
    #[inline]
    fn value(self) -> i32 {
        i32::from(self)
    }
    #[inline]
    fn from_index(i: usize) -> i8 {
        i as u8 as i8
    }
    #[inline]
    fn saturate(v: i64) -> i8 {
        v.clamp(-128, 127) as i8
    }
}

/// Per-tensor quantization parameters: `real = scale·(code − zero_point)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quant {
    pub scale: f32,
    pub zero_point: i32,
}

impl Quant {
    pub fn new(scale: f32, zero_point: i32) -> Quant {
        Quant { scale, zero_point }
    }

    /// Refused unless the scale is a positive finite f32 and the zero point a code of `T`.
    pub(crate) fn check<T: QCode>(self, what: &str) -> Result<Quant, CodesError> {
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(CodesError::Scale(format!("{what}: scale {:e} is not a positive finite f32", self.scale)));
        }
        if !(T::MIN..=T::MAX).contains(&self.zero_point) {
            return Err(CodesError::ZeroPoint(format!("{what}: zero point {} outside {}..={}", self.zero_point, T::MIN, T::MAX)));
        }
        Ok(self)
    }
}

/// Arguments an op cannot run with (the generator checks shapes first; this is the backstop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodesError {
    Scale(String),
    ZeroPoint(String),
    /// Shapes, buffer lengths or attributes that do not fit together.
    Shape(String),
    /// A value the graph leaves undefined (a Cast of NaN or of a value out of range).
    Undefined(String),
}

impl fmt::Display for CodesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodesError::Scale(s) | CodesError::ZeroPoint(s) | CodesError::Shape(s) | CodesError::Undefined(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for CodesError {}

/// A shape error with a formatted message.
pub(crate) fn shape_err<T>(msg: String) -> Result<T, CodesError> {
    Err(CodesError::Shape(msg))
}
