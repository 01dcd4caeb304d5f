//! Library functions per element (Sigmoid, Tanh, Exp, Log, Erf, Gelu, Softplus, SiLU): each the f64
//! formula in its variant's doc over [`math`]'s portable functions, rounded once to f32.
//!
//! Evaluation order: `x` widened to f64 (exact), the formula in f64 (each step a rounded basic
//! operation or one of [`math`]'s functions, whose orders `math` documents), one rounding to f32.
//! The result is nearly always the correctly rounded value of the exact function (see [`math`]) and
//! the same bits on every machine. ONNX Runtime computes these with its own approximations (MLAS
//! polynomials for Sigmoid/Tanh/Exp/Erf): the outputs differ from its by 1–4 ulps (Exp, Log, Erf,
//! Tanh, Softplus) up to |Δ| ≈ 6e-7 (Sigmoid and Gelu tails), measured by `tests/float_ort.rs`;
//! the contract asks only for a fixed order here.

use super::{ShapeError, bail, math};
use crate::isa::{Isa, Kernels};

/// A library function of one element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    /// `1/(1 + e^−x)` (`e^x/(1 + e^x)` for x < 0).
    Sigmoid,
    /// `t/(t + 2)` with `t = expm1(2|x|)`, sign of x; ±1 beyond |x| > 20.
    Tanh,
    Exp,
    /// Natural logarithm.
    Log,
    Erf,
    /// ONNX Gelu, `approximate = "none"`: `x/2·(1 + erf(x/√2))`, as `x/2·erfc(−x/√2)` for x < 0.
    Gelu,
    /// ONNX Gelu, `approximate = "tanh"`: `x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
    /// `x·sigmoid(2·√(2/π)·(x + 0.044715·x³))` (the same function, no cancellation for x < 0).
    GeluTanh,
    /// `ln(1 + e^x)`: `x + log1p(e^−x)` for x > 0, else `log1p(e^x)`.
    Softplus,
    /// Swish/SiLU `x·sigmoid(x)`, one rounding (a graph's Sigmoid→Mul runs as two f32 ops instead).
    Silu,
}

impl Function {
    /// The function on one element, in f64.
    pub fn apply64(self, x: f64) -> f64 {
        match self {
            Function::Sigmoid => math::sigmoid64(x),
            Function::Tanh => math::tanh64(x),
            Function::Exp => math::exp64(x),
            Function::Log => math::ln64(x),
            Function::Erf => math::erf64(x),
            Function::Gelu => {
                let z = x * std::f64::consts::FRAC_1_SQRT_2;
                if x >= 0.0 { 0.5 * x * (1.0 + math::erf64(z)) } else { 0.5 * x * math::erfc64(-z) }
            }
            Function::GeluTanh => {
                const K: f64 = 0.797_884_560_802_865_4; // √(2/π)
                x * math::sigmoid64(2.0 * K * (x + 0.044715 * x * x * x))
            }
            Function::Softplus => {
                if x > 0.0 {
                    x + math::log1p64(math::exp64(-x))
                } else {
                    math::log1p64(math::exp64(x))
                }
            }
            Function::Silu => x * math::sigmoid64(x),
        }
    }

    /// The function on one element, rounded once to f32.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        self.apply64(f64::from(x)) as f32
    }
}

/// `out[i] = f(x[i])` on the kernel path `kernels`: the same IEEE operations on every path (the
/// AVX2 and AVX-512 instances only let the compiler use wider registers: 4 or 8 f64 lanes for
/// Exp, Sigmoid, SiLU, Tanh and the tanh Gelu, whose f64 functions are written branch-free), so the same bits.
pub fn map(kernels: Kernels, f: Function, x: &[f32], out: &mut [f32]) -> Result<(), ShapeError> {
    if x.len() != out.len() {
        bail!("{f:?}: input has {} elements, output {}", x.len(), out.len());
    }
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
        // the function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { map_avx512(f, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { map_avx2(f, x, out) },
        _ => map_generic(f, x, out),
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn map_avx512(f: Function, x: &[f32], out: &mut [f32]) {
    map_generic(f, x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2(f: Function, x: &[f32], out: &mut [f32]) {
    map_generic(f, x, out)
}

/// One monomorphic loop per function, so the compiler can inline and vectorize it. A `for` loop,
/// not `for_each`: `for_each` is `Zip::fold`, a function of its own that the compiler may leave
/// out of line, and then it is compiled without the caller's `#[target_feature]` (scalar SSE2
/// code on every path: Tanh's loop was a quarter of an encoder's run).
#[inline(always)]
fn map_generic(f: Function, x: &[f32], out: &mut [f32]) {
    macro_rules! run {
        ($f:expr) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = $f(f64::from(v)) as f32;
            }
        };
    }
    match f {
        Function::Sigmoid => run!(math::sigmoid64),
        Function::Exp => run!(math::exp64),
        Function::Silu => run!(|v: f64| v * math::sigmoid64(v)),
        Function::Tanh => run!(math::tanh64),
        Function::GeluTanh => run!(|v| Function::GeluTanh.apply64(v)),
        _ => run!(|v| f.apply64(v)),
    }
}

/// `x[i] = f(x[i])` in place.
pub fn map_in_place(f: Function, x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = f.apply(*v));
}
