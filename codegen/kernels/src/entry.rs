//! The generic kernels, instantiated here once for every element type the generated code uses
//! and marked `#[inline(never)]`: the crate boundary of `qdqc compile --target rust`.
//!
//! A generic function of this crate called from a generated crate is monomorphised, and in a
//! release build optimized, inside that crate — the whole conv/GEMM pipeline and its
//! `#[inline(always)]` tiles each time, and inlined into the generated `run_with` once per call
//! site. The generated code calls these concrete instances instead (named `KERNEL_TYPES`, e.g.
//! [`conv_requant_u8`], [`binary_u8_i8_u8`]): compiled once with this crate, a call in the
//! generated one. Each is exactly the generic function it names (same arguments, same result).

use crate::codes::binary::{Binary, BinaryOp};
use crate::codes::movement::{self, CoordinateTransform, NearestMode, PadMode, ResizeTarget};
use crate::codes::pool::{self, PoolParams};
use crate::codes::softmax::SoftmaxCodes;
use crate::codes::{CodesError, QCode, Quant, lut, qdq};
use crate::conv::{ConvError, ConvRequant, PackedConv, Scratch};
use crate::matmul_codes::MatMulCodes;
use crate::requant::{Plan, Prepared, RequantError};
use crate::{GemmError, Kernels, PackedB};

macro_rules! quantize {
    ($($name:ident: $y:ty),*) => {$(
        /// [`qdq::quantize_linear`] to these codes.
        #[inline(never)]
        pub fn $name(x: &[f32], shape: &[usize], axis: usize, scales: &[f32], zero_points: &[i32], out: &mut [$y]) -> Result<(), CodesError> {
            qdq::quantize_linear(x, shape, axis, scales, zero_points, out)
        }
    )*};
}
quantize!(quantize_linear_u8: u8, quantize_linear_i8: i8);

macro_rules! dequantize {
    ($($name:ident: $x:ty),*) => {$(
        /// [`qdq::dequantize_linear`] of these codes.
        #[inline(never)]
        pub fn $name(q: &[$x], shape: &[usize], axis: usize, scales: &[f32], zero_points: &[i32], out: &mut [f32]) -> Result<(), CodesError> {
            qdq::dequantize_linear(q, shape, axis, scales, zero_points, out)
        }
    )*};
}
dequantize!(dequantize_linear_u8: u8, dequantize_linear_i8: i8);

macro_rules! quantize_by {
    ($($name:ident, $cast:ident: $y:ty),*) => {$(
        /// [`qdq::quantize_by`] to these codes.
        #[inline(never)]
        #[allow(clippy::too_many_arguments)] // QuantizeLinear's operands and attributes
        pub fn $name(x: &[f32], shape: &[usize], scale: &[f32], scale_shape: &[usize], zero_point: Option<&[$y]>, axis: usize, block: usize, out: &mut [$y]) -> Result<(), CodesError> {
            qdq::quantize_by(x, shape, scale, scale_shape, zero_point, axis, block, out)
        }

        /// [`qdq::cast_to_codes`] to these codes.
        #[inline(never)]
        pub fn $cast(x: &[f32], out: &mut [$y]) -> Result<(), CodesError> {
            qdq::cast_to_codes(x, out)
        }
    )*};
}
quantize_by!(quantize_by_u8, cast_to_u8: u8, quantize_by_i8, cast_to_i8: i8);

macro_rules! conv_requant {
    ($($name:ident: $c:ty),*) => {$(
        /// [`PackedConv::run_requant`] into these codes.
        #[inline(never)]
        #[allow(clippy::too_many_arguments)] // the convolution's operands, spelled out
        pub fn $name(conv: &PackedConv, kernels: Kernels, x: &[u8], batch: usize, input: &[usize], zx: u8, rq: &ConvRequant, out: &mut [$c], s: &mut Scratch) -> Result<u64, ConvError> {
            conv.run_requant(kernels, x, batch, input, zx, rq, out, s)
        }
    )*};
}
conv_requant!(conv_requant_u8: u8, conv_requant_i8: i8);

macro_rules! gemm_requant {
    ($($name:ident, $prepared:ident: $c:ty),*) => {$(
        /// [`crate::gemm_u8_requant`] into these codes.
        #[inline(never)]
        #[allow(clippy::too_many_arguments)] // the GEMM's operands, spelled out
        pub fn $name(kernels: Kernels, a: &[u8], m: usize, za: u8, b: &PackedB, plan: &Plan, bias: Option<&[i32]>, c: &mut [i32], out: &mut [$c]) -> Result<u64, GemmError> {
            crate::gemm_u8_requant(kernels, a, m, za, b, plan, bias, c, out)
        }

        /// [`crate::gemm_u8_requant_prepared`] into these codes.
        #[inline(never)]
        #[allow(clippy::too_many_arguments)] // the GEMM's operands, spelled out
        pub fn $prepared(kernels: Kernels, a: &[u8], m: usize, za: u8, b: &PackedB, rq: &Prepared, c: &mut [i32], out: &mut [$c]) -> Result<u64, GemmError> {
            crate::gemm_u8_requant_prepared(kernels, a, m, za, b, rq, c, out)
        }
    )*};
}
gemm_requant!(gemm_u8_requant_u8, gemm_u8_requant_prepared_u8: u8, gemm_u8_requant_i8, gemm_u8_requant_prepared_i8: i8);

macro_rules! binary {
    ($($new:ident, $name:ident: $a:ty, $b:ty, $y:ty;)*) => {$(
        /// [`Binary::new`] for these codes (its 256 × 256 table).
        #[inline(never)]
        pub fn $new(op: BinaryOp, qa: Quant, qb: Quant, qy: Quant) -> Result<Binary<$a, $b, $y>, CodesError> {
            Binary::new(op, qa, qb, qy)
        }

        /// [`Binary::apply`] for these codes.
        #[inline(never)]
        pub fn $name(t: &Binary<$a, $b, $y>, kernels: Kernels, a: &[$a], a_shape: &[usize], b: &[$b], b_shape: &[usize], out: &mut [$y]) -> Result<(), CodesError> {
            t.apply(kernels, a, a_shape, b, b_shape, out)
        }
    )*};
}
binary! {
    binary_new_u8_u8_u8, binary_u8_u8_u8: u8, u8, u8;
    binary_new_u8_u8_i8, binary_u8_u8_i8: u8, u8, i8;
    binary_new_u8_i8_u8, binary_u8_i8_u8: u8, i8, u8;
    binary_new_u8_i8_i8, binary_u8_i8_i8: u8, i8, i8;
    binary_new_i8_u8_u8, binary_i8_u8_u8: i8, u8, u8;
    binary_new_i8_u8_i8, binary_i8_u8_i8: i8, u8, i8;
    binary_new_i8_i8_u8, binary_i8_i8_u8: i8, i8, u8;
    binary_new_i8_i8_i8, binary_i8_i8_i8: i8, i8, i8;
}

macro_rules! softmax_codes {
    ($($new:ident: $x:ty; $($name:ident: $y:ty),*;)*) => {$(
        /// [`SoftmaxCodes::new`] for these input codes.
        #[inline(never)]
        pub fn $new(scale: f32, zero_point: i32, out_scale: f32, out_zero_point: i32) -> Result<SoftmaxCodes<$x>, CodesError> {
            SoftmaxCodes::new(scale, zero_point, out_scale, out_zero_point)
        }
        $(
            /// [`SoftmaxCodes::run`] for these codes.
            #[inline(never)]
            pub fn $name(t: &SoftmaxCodes<$x>, kernels: Kernels, x: &[$x], shape: &[usize], out: &mut [$y]) -> Result<(), CodesError> {
                t.run(kernels, x, shape, out)
            }
        )*
    )*};
}
softmax_codes! {
    softmax_codes_new_u8: u8; softmax_codes_u8_u8: u8, softmax_codes_u8_i8: i8;
    softmax_codes_new_i8: i8; softmax_codes_i8_u8: u8, softmax_codes_i8_i8: i8;
}

macro_rules! requantize_codes {
    ($($table:ident, $lut:ident, $avg:ident, $global:ident: $x:ty, $y:ty;)*) => {$(
        /// QLinearConcat's requantization of one input: the 256 codes
        /// `sat(rne(sx·(x − zx)/sy) + zy)`, each [`pool::mean_exact`] over one element.
        #[inline(never)]
        pub fn $table(qx: Quant, qy: Quant) -> Result<[$y; 256], CodesError> {
            let mut t = [<$y>::default(); 256];
            for (i, v) in t.iter_mut().enumerate() {
                *v = pool::mean_exact::<$x, $y>(i64::from(<$x>::from_index(i).value() - qx.zero_point), 1, qx, qy)?;
            }
            Ok(t)
        }

        /// [`lut::apply_lut`] for these codes.
        #[inline(never)]
        pub fn $lut(kernels: Kernels, table: &[$y; 256], x: &[$x], out: &mut [$y]) -> Result<(), CodesError> {
            lut::apply_lut(kernels, table, x, out)
        }

        /// [`pool::average_pool`] for these codes.
        #[inline(never)]
        pub fn $avg(x: &[$x], shape: &[usize], p: &PoolParams, count_include_pad: bool, qx: Quant, qy: Quant, out: &mut [$y]) -> Result<(), CodesError> {
            pool::average_pool(x, shape, p, count_include_pad, qx, qy, out)
        }

        /// [`pool::global_average_pool`] for these codes.
        #[inline(never)]
        pub fn $global(x: &[$x], shape: &[usize], qx: Quant, qy: Quant, out: &mut [$y]) -> Result<(), CodesError> {
            pool::global_average_pool(x, shape, qx, qy, out)
        }
    )*};
}
requantize_codes! {
    requant_table_u8_u8, apply_lut_u8_u8, average_pool_u8_u8, global_average_pool_u8_u8: u8, u8;
    requant_table_u8_i8, apply_lut_u8_i8, average_pool_u8_i8, global_average_pool_u8_i8: u8, i8;
    requant_table_i8_u8, apply_lut_i8_u8, average_pool_i8_u8, global_average_pool_i8_u8: i8, u8;
    requant_table_i8_i8, apply_lut_i8_i8, average_pool_i8_i8, global_average_pool_i8_i8: i8, i8;
}

macro_rules! max_pool {
    ($($name:ident: $t:ty),*) => {$(
        /// [`pool::max_pool`] on these codes.
        #[inline(never)]
        pub fn $name(x: &[$t], shape: &[usize], p: &PoolParams, out: &mut [$t]) -> Result<(), CodesError> {
            pool::max_pool(x, shape, p, out)
        }
    )*};
}
max_pool!(max_pool_u8: u8, max_pool_i8: i8);

macro_rules! movement {
    ($($concat:ident, $transpose:ident, $pad:ident, $resize:ident, $slice:ident, $expand:ident, $gather:ident: $t:ty;)*) => {$(
        /// [`movement::concat`] of these elements.
        #[inline(never)]
        pub fn $concat(inputs: &[(&[$t], &[usize])], axis: usize, out: &mut [$t]) -> Result<Vec<usize>, CodesError> {
            movement::concat(inputs, axis, out)
        }

        /// [`movement::transpose`] of these elements.
        #[inline(never)]
        pub fn $transpose(x: &[$t], shape: &[usize], perm: &[usize], out: &mut [$t]) -> Result<Vec<usize>, CodesError> {
            movement::transpose(x, shape, perm, out)
        }

        /// [`movement::pad`] of these elements.
        #[inline(never)]
        pub fn $pad(x: &[$t], shape: &[usize], pads: &[i64], mode: PadMode<$t>, out: &mut [$t]) -> Result<(), CodesError> {
            movement::pad(x, shape, pads, mode, out)
        }

        /// [`movement::resize_nearest`] of these elements.
        #[inline(never)]
        pub fn $resize(x: &[$t], shape: &[usize], target: ResizeTarget, transform: CoordinateTransform, mode: NearestMode, out: &mut [$t]) -> Result<(), CodesError> {
            movement::resize_nearest(x, shape, target, transform, mode, out)
        }

        /// [`movement::slice`] of these elements.
        #[inline(never)]
        pub fn $slice(x: &[$t], shape: &[usize], starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64], out: &mut [$t]) -> Result<(), CodesError> {
            movement::slice(x, shape, starts, ends, axes, steps, out)
        }

        /// [`movement::expand`] of these elements.
        #[inline(never)]
        pub fn $expand(x: &[$t], shape: &[usize], out_shape: &[usize], out: &mut [$t]) -> Result<(), CodesError> {
            movement::expand(x, shape, out_shape, out)
        }

        /// [`movement::gather`] of these elements.
        #[inline(never)]
        pub fn $gather(x: &[$t], shape: &[usize], axis: usize, indices: &[i64], indices_shape: &[usize], out: &mut [$t]) -> Result<(), CodesError> {
            movement::gather(x, shape, axis, indices, indices_shape, out)
        }
    )*};
}
movement! {
    concat_f32, transpose_f32, pad_f32, resize_nearest_f32, slice_f32, expand_f32, gather_f32: f32;
    concat_u8, transpose_u8, pad_u8, resize_nearest_u8, slice_u8, expand_u8, gather_u8: u8;
    concat_i8, transpose_i8, pad_i8, resize_nearest_i8, slice_i8, expand_i8, gather_i8: i8;
    concat_i32, transpose_i32, pad_i32, resize_nearest_i32, slice_i32, expand_i32, gather_i32: i32;
    concat_i64, transpose_i64, pad_i64, resize_nearest_i64, slice_i64, expand_i64, gather_i64: i64;
}

/// [`MatMulCodes::run`] for each (A, B, output) code type.
macro_rules! matmul_codes {
    ($($name:ident: $a:ty, $b:ty => $c:ty;)*) => {$(
        /// [`MatMulCodes::run`] of these code types.
        #[inline(never)]
        pub fn $name(mm: &MatMulCodes, kernels: Kernels, a: &[$a], a_shape: &[usize], b: &[$b], b_shape: &[usize], out: &mut [$c]) -> Result<(), RequantError> {
            mm.run(kernels, a, a_shape, b, b_shape, out)
        }
    )*};
}
matmul_codes! {
    matmul_codes_u8_u8_u8: u8, u8 => u8;
    matmul_codes_u8_u8_i8: u8, u8 => i8;
    matmul_codes_u8_i8_u8: u8, i8 => u8;
    matmul_codes_u8_i8_i8: u8, i8 => i8;
    matmul_codes_i8_u8_u8: i8, u8 => u8;
    matmul_codes_i8_u8_i8: i8, u8 => i8;
    matmul_codes_i8_i8_u8: i8, i8 => u8;
    matmul_codes_i8_i8_i8: i8, i8 => i8;
}

/// [`crate::dynamic::DynamicMatMul::run_f32`]: the `quantize_dynamic` group on the row-major
/// `m × K` activation `x` (`codes`, `c`: scratch of `m × K` and `m × N`).
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the group's operands and scratch, as run_f32 takes them
pub fn dynamic_matmul_f32(
    plan: &crate::dynamic::DynamicMatMul,
    kernels: Kernels,
    x: &[f32],
    m: usize,
    b: &PackedB,
    codes: &mut [u8],
    c: &mut [i32],
    out: &mut [f32],
) -> Result<crate::dynamic::Stats, crate::dynamic::DynamicError> {
    plan.run_f32(kernels, x, m, b, codes, c, out)
}

/// The weight blob's bytes as int8 codes, borrowed: a generated crate reads its int8 constants
/// in place (its code forbids `unsafe`), so a constant is never copied at load and only the pages
/// a kernel touches become resident.
pub fn i8_view(bytes: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have the same size and alignment and every bit pattern is valid in
    // both; the result borrows `bytes` for its whole lifetime.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<i8>(), bytes.len()) }
}
