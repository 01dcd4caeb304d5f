//! f32 kernels for the ops that stay float (contract §3.12: "a float op that stays float runs with a
//! fixed, documented evaluation order, the same on every ISA").
//!
//! Every kernel is a safe function over row-major slices and their shapes, writing a caller-owned
//! output (the generated code plans its buffers statically). Each file states its evaluation order
//! in its header. Three rules hold throughout:
//!
//! - Only IEEE-754 basic operations (`+ − × ÷ √`, comparisons) in a fixed order: Rust never
//!   contracts `a·b + c` into a fused multiply-add, and no kernel calls `f32::mul_add`, so every
//!   product and every sum is rounded on its own. Loops are written so that LLVM may vectorize
//!   across independent outputs only (never reassociating one output's sum): the bits do not depend
//!   on the ISA or on the optimisation level.
//! - Library functions (exp, log, tanh, erf, …) are not std's (libm calls whose results differ
//!   between platforms) but [`math`]'s: f64 evaluations built from basic operations, rounded once
//!   to f32 — nearly always the correctly rounded result, and the same on every machine with IEEE
//!   binary64 arithmetic (any Rust target except x87-only i586).
//! - Where an ONNX op is one IEEE operation per element (Add, Mul, Div, Sqrt, …), the kernel does
//!   exactly that operation, so it gives ONNX Runtime's bits (`tests/float_ort.rs` checks them).

pub mod conv;
pub mod conv_transpose;
pub mod dq;
pub mod elementwise;
pub mod gemm;
pub mod math;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod softmax;
pub mod unary;
pub mod weight_only;

use std::fmt;

/// Operands that do not fit the op (wrong lengths, shapes that do not broadcast, bad attributes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

/// `Err(ShapeError(..))` with a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::float::ShapeError(format!($($arg)*))) };
}
pub(crate) use bail;

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Checks that `data` holds `shape`'s elements.
pub(crate) fn check_len(what: &str, data: usize, shape: &[usize]) -> Result<(), ShapeError> {
    if data != numel(shape) {
        bail!("{what}: {data} elements, shape {shape:?} needs {}", numel(shape));
    }
    Ok(())
}

/// The numpy broadcast of two shapes (aligned on the right; an extent 1 stretches).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(ShapeError(format!("shapes {a:?} and {b:?} do not broadcast (axis {i}: {x} vs {y})"))),
        })
        .collect()
}

/// Strides (in elements) of `shape` read as `out`'s shape under broadcasting: 0 along stretched axes.
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut step = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let o = i + out.len() - shape.len();
        strides[o] = if d == 1 { 0 } else { step };
        step *= d;
    }
    strides
}

/// Normalises an ONNX axis (negative counts from the end) against `rank`.
pub fn axis(axis: i64, rank: usize) -> Result<usize, ShapeError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!("axis {axis} out of range for rank {rank}");
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}
