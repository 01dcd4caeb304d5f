//! QLinearSoftmax (contract §3.8): modelled so that a proof can refute the fusion with a
//! concrete row. Never exact: the fused kernel is unrelated to the float Softmax (an opaque
//! library function, contract §2.1).
//!
//! Source (ORT `contrib_ops/cpu/quantization/qlinear_softmax.cc`):
//! * table: `bit_shift = max(0, log(f32(FLT_MAX / D)) − 5) / sX` and, for `i` in 0..256,
//!   `table[u8(signed ? i − 128 : i)] = (float)exp((i − 255 + bit_shift)·sX)` in double;
//! * per row: the table shifted so the row's maximum reads entry 255 (uint8: `table + 255 −
//!   xmax`; int8: index `u8(127 − xmax + x)`), `vsum` a sequential float sum from 0 (a row
//!   with `vsum == 0` returns early, leaving the rest of its chunk unwritten);
//! * `Y_scale` replaced by `floor(1/sY)`, `vq = nearbyintf(fl(fl(vt·floor(1/sY))/vsum)) + zY`;
//! * uint8: `vq` is a `uint32` (wrapping), `vq > 255 → 255`; int8: `vq` an `int32`, clamped to
//!   [−128, 127]. (Before ORT PR #29728, merged July 2026, int8 clamped at 255 like uint8 and
//!   128..255 wrapped to negative codes; 1.31.1 clamps, as the differential tests confirm.)
//! * the table's top entry is `FLT_MAX·e^-5 / D`; times `floor(1/sY)` it overflows to +inf when
//!   `floor(1/sY) > 148·D` (e.g. D = 1, sY = 1/256), and x86 casts inf to its "integer
//!   indefinite" value: uint8 outputs zY (the uint32 cast keeps the low bits of
//!   0x8000000000000000), int8 outputs −128 (127 when zY < 0: INT_MIN + zY wraps).

use crate::Isa;
use crate::profile::Convert;
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Certificate, Counterexample, Method, QParam, Verdict};
use std::time::Instant;

/// QLinearSoftmax for one reduction length.
#[derive(Clone, Debug)]
pub struct SoftmaxKernel {
    /// Indexed by byte as ORT stores it.
    table: [f32; 256],
    /// `floor(1/sY)`.
    y_scale: f32,
    y: QParam,
    /// Float→integer casts: ARM saturates, x86 gives the "integer indefinite" value.
    arm: bool,
}

/// One output: the value `nearbyintf` rounds, the exact product `vt·floor(1/sY)` before it
/// (which may overflow f32), and the code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxOutput {
    pub pre_round: f32,
    pub product: f64,
    pub code: i64,
}

impl SoftmaxOutput {
    /// Whether last-place differences in the table's `exp` cannot change the code: the value is
    /// far from a rounding boundary, or the product far from f32 overflow on either side.
    pub fn is_robust(&self) -> bool {
        let max = f32::MAX as f64;
        if self.product > max * 1.001 {
            return true;
        }
        self.product < max * 0.999 && robust(self.pre_round as f64)
    }
}

impl SoftmaxKernel {
    // `i` runs over 0..256: `as u8` is the code's byte (int8 codes two's complement, as ORT
    // indexes its table); the f64 `exp` is stored in ORT's float table, rounded as C does.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn new(x: QParam, y: QParam, reduce_len: usize, isa: Isa) -> Result<SoftmaxKernel, String> {
        if !matches!(y.code, CodeType::U8 | CodeType::I8) || x.code != y.code {
            return Err("QLinearSoftmax takes one 8-bit type for input and output".to_string());
        }
        if reduce_len == 0 {
            return Err("empty softmax axis".to_string());
        }
        let signed = x.code == CodeType::I8;
        let sx = x.scale as f64;
        // `log` of the float quotient FLT_MAX / D; the C double `log` (glibc, as Rust's `ln`).
        let bit_shift = ((f32::MAX / reduce_len as f32) as f64).ln();
        let bit_shift = (bit_shift - 5.0).max(0.0) / sx;
        let mut table = [0f32; 256];
        for i in 0..256i32 {
            let index = if signed { (i - 128) as u8 } else { i as u8 };
            table[index as usize] = ((i as f64 - 255.0 + bit_shift) * sx).exp() as f32;
        }
        Ok(SoftmaxKernel { table, y_scale: (1.0f32 / y.scale).floor(), y, arm: isa.arith().convert == Convert::Arm })
    }

    /// The table entry of code `x` in a row whose maximum is `xmax`.
    // `x <= xmax` are codes of the 8-bit type: the index is 0..=255 (int8 through ORT's uint8 wrap).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn entry(&self, x: i64, xmax: i64) -> f32 {
        let index = match self.y.code {
            CodeType::I8 => (127 - xmax + x) as u8 as usize,
            _ => (255 - xmax + x) as usize,
        };
        self.table[index]
    }

    /// One row as `QlinearSoftmaxCPU` computes it; `None` when ORT leaves it unwritten.
    pub fn row(&self, codes: &[i64]) -> Option<Vec<SoftmaxOutput>> {
        let xmax = *codes.iter().max()?;
        let vsum = codes.iter().fold(0f32, |s, &x| s + self.entry(x, xmax));
        if vsum == 0.0 {
            return None;
        }
        Some(codes.iter().map(|&x| self.output(self.entry(x, xmax), vsum)).collect())
    }

    // `zy` is an 8-bit zero point (ORT reads it as one byte): the int32/uint32 casts keep it whole.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]
    fn output(&self, vt: f32, vsum: f32) -> SoftmaxOutput {
        let pre_round = vt * self.y_scale / vsum;
        let r = pre_round.round_ties_even();
        let zy = self.y.zero_point;
        let code = match self.y.code {
            // The int32 sum wraps (x86's out-of-range cast gives INT_MIN, so INT_MIN + a
            // negative zero point wraps to a large positive value), then clamps to int8.
            CodeType::I8 => (self.cast_i32(r).wrapping_add(zy as i32) as i64).clamp(-128, 127),
            _ => {
                let vq = self.cast_u32(r).wrapping_add(zy as u32) as i64;
                vq.min(255)
            }
        };
        SoftmaxOutput { pre_round, product: vt as f64 * self.y_scale as f64, code }
    }

    /// `static_cast<int32_t>(float)`: x86 `cvttss2si` gives `i32::MIN` out of range.
    fn cast_i32(&self, v: f32) -> i32 {
        if self.arm { super::binary::truncate_arm(v) } else { super::binary::truncate_x86(v) }
    }

    /// `static_cast<uint32_t>(float)`: x86 converts through int64 and keeps the low 32 bits;
    /// ARM's `fcvtzu` saturates.
    // These casts are the model: Rust's saturating `as` is `fcvtzu`; in range, x86's via int64 low bits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn cast_u32(&self, v: f32) -> u32 {
        if self.arm {
            v as u32
        } else if (-9.223372e18..9.223372e18).contains(&v) {
            v as i64 as u32
        } else {
            0
        }
    }
}

/// The real softmax of a row `[first, rest × (d − 1)]` at its two positions, quantized:
/// `(p/sY, code)`, from exact DQ differences and `exp` in f64.
// The rounded quotient saturates into i64 and is then clamped to the code range: the cast loses
// nothing the clamp keeps.
#[allow(clippy::cast_possible_truncation)]
fn real_pattern(x: QParam, y: QParam, first: i64, rest: i64, d: usize) -> [(f64, i64); 2] {
    let xmax = first.max(rest);
    let e = |c: i64| ((c - xmax) as f64 * x.scale as f64).exp();
    let sum = e(first) + (d - 1) as f64 * e(rest);
    let (lo, hi) = y.code.range();
    [first, rest].map(|c| {
        let v = e(c) / sum / y.scale as f64;
        (v, (v.round_ties_even() as i64).saturating_add(y.zero_point).clamp(lo, hi))
    })
}

/// Whether a value about to be rounded to an integer is far enough from a half-integer that
/// last-place differences (in a library's `exp`, in the fused table) cannot move it across:
/// more than 10^-3 plus a relative 10^-4.
fn robust(v: f64) -> bool {
    robust_within(v, 1e-4)
}

/// [`robust`] with a relative tolerance of `rel`.
fn robust_within(v: f64, rel: f64) -> bool {
    let margin = 1e-3 + rel * v.abs();
    ((v - v.floor()) - 0.5).abs() > margin
}

/// Whether the real result `v = p/sY` stays on its side of the rounding boundary for any float
/// Softmax of the f32 DQ values: their rounding (2^-24 relative, on exponents up to 255·sX) and
/// the float `exp` and sums (a few ulps) move `p` by less than a relative 10^-4 + 255·sX·2^-22.
fn robust_real(v: f64, sx: f32) -> bool {
    robust_within(v, 1e-4 + 255.0 * sx as f64 / (1u64 << 22) as f64)
}

/// Parameters the kernel model covers: finite positive scales, one 8-bit type.
fn modelled(x: QParam, y: QParam) -> Result<(), String> {
    if !x.scale.is_finite() || x.scale <= 0.0 || !y.scale.is_finite() || y.scale <= 0.0 {
        return Err("QLinearSoftmax is modelled for finite positive scales".to_string());
    }
    // The table's checks do not depend on the profile.
    SoftmaxKernel::new(x, y, 1, Isa::X86Avx2).map(|_| ())
}

/// Never exact. Refuted with a row where the fused kernel's result and the real softmax's are
/// both unambiguous (far from a rounding boundary) and differ; otherwise unknown. Rows searched:
/// for a reduction length `d`, one element at any code and the other `d − 1` at the lowest code,
/// the zero point or the highest code (all pairs when `d = 2`).
pub fn prove(x: QParam, y: QParam, reduce_len: usize, isa: Isa) -> Verdict {
    let start = Instant::now();
    if let Err(reason) = modelled(x, y) {
        return Verdict::Unknown { reason };
    }
    let kernel = match SoftmaxKernel::new(x, y, reduce_len, isa) {
        Ok(k) => k,
        Err(reason) => return Verdict::Unknown { reason },
    };
    let (lo, hi) = x.code.range();
    let mut firsts: Vec<i64> = (lo..=hi).collect();
    firsts.sort_by_key(|&c| ((c - x.zero_point).abs(), c));
    let rests: Vec<i64> = match reduce_len {
        1 => vec![x.zero_point],
        2 => (lo..=hi).collect(),
        _ => vec![x.zero_point, lo, hi],
    };
    let (mut tried, mut differing, mut found) = (0u64, 0u64, None);
    for &rest in &rests {
        for &first in &firsts {
            tried += 1;
            if let Some(diff) = robust_difference(&kernel, x, y, first, rest, reduce_len) {
                differing += 1;
                found.get_or_insert((first, rest, diff));
            }
        }
    }
    let detail =
        format!("QLinearSoftmax {} {isa}, axis length {reduce_len}: rows of one code and {} more at the zero point or an end", x.code.name(), reduce_len - 1);
    match found {
        None => Verdict::Unknown { reason: format!("{detail}: never exact, and none of {tried} rows differs robustly") },
        Some((first, rest, (i, real, unfused, fused))) => {
            let mut inputs = vec![("x[0]".to_string(), first)];
            if reduce_len > 1 {
                inputs.push((if reduce_len == 2 { "x[1]".to_string() } else { format!("x[1..{reduce_len}]") }, rest));
            }
            let exact = format!("y[{i}]: p/sY ≈ {real:.6} (real softmax; fused {:.6} before rounding)", fused.pre_round);
            Verdict::Refuted {
                counterexample: Counterexample { inputs, unfused, fused: fused.code, exact: Some(exact), differing },
                proof: Certificate { method: Method::P1Exhaustive, domain: tried, micros: crate::elapsed_micros(start), detail },
            }
        }
    }
}

/// The longest axis [`prove_every_length`] tries. QLinearSoftmax's float sum cannot overflow at
/// any length (its table's top entry is `FLT_MAX·e^-5/D`), so the bound is a documented cap.
pub const LENGTH_CAP: usize = 4096;

/// [`prove`] for a symbolic axis length: lengths 1 to 64, then powers of two up to
/// [`LENGTH_CAP`], in that order; the first length with a robust difference refutes the group
/// (its detail names the length). Never exact, so otherwise unknown.
pub fn prove_every_length(x: QParam, y: QParam, isa: Isa) -> Verdict {
    if let Err(reason) = modelled(x, y) {
        return Verdict::Unknown { reason };
    }
    let lengths = (1..=64).chain(std::iter::successors(Some(128usize), |&d| Some(2 * d)).take_while(|&d| d <= LENGTH_CAP));
    for d in lengths {
        if let Verdict::Refuted { counterexample, mut proof } = prove(x, y, d, isa) {
            proof.detail = format!("the axis length is symbolic; refuted at length {d}: {}", proof.detail);
            return Verdict::Refuted { counterexample, proof };
        }
    }
    Verdict::Unknown {
        reason: format!("never exact; the axis length is symbolic and no row of any length 1..=64 or power of two up to {LENGTH_CAP} differs robustly"),
    }
}

/// The first position of the row `[first, rest × (d − 1)]` where the fused and real results
/// differ, both robustly: `(index, p/sY, unfused code, fused output)`.
fn robust_difference(kernel: &SoftmaxKernel, x: QParam, y: QParam, first: i64, rest: i64, d: usize) -> Option<(usize, f64, i64, SoftmaxOutput)> {
    let xmax = first.max(rest);
    let (tf, tr) = (kernel.entry(first, xmax), kernel.entry(rest, xmax));
    // ORT's sequential sum: `0 + tf` is exact, then `d − 1` additions of `tr`.
    let vsum = (1..d).fold(tf, |s, _| s + tr);
    if vsum == 0.0 {
        return None;
    }
    let fused = [kernel.output(tf, vsum), kernel.output(tr, vsum)];
    let real = real_pattern(x, y, first, rest, d);
    let positions: &[usize] = if d == 1 { &[0] } else { &[0, 1] };
    positions.iter().find_map(|&i| {
        let ((v, unfused), f) = (real[i], fused[i]);
        (unfused != f.code && robust_real(v, x.scale) && f.is_robust()).then_some((i.min(d - 1), v, unfused, f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_params::{i8p, u8p};

    #[test]
    fn table_peaks_at_the_row_maximum() {
        let k = SoftmaxKernel::new(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 10, Isa::X86Avx2).unwrap();
        let top = k.entry(7, 7);
        // exp(ln(FLT_MAX/10) − 5) ≈ FLT_MAX/10·e^-5.
        assert!((top as f64 / (f32::MAX as f64 / 10.0 * (-5f64).exp()) - 1.0).abs() < 1e-5, "{top}");
        assert!((k.entry(6, 7) / top - (-0.1f32).exp()).abs() < 1e-6);
        let s = SoftmaxKernel::new(i8p(0.1, 0), i8p(1.0 / 256.0, -128), 10, Isa::X86Avx2).unwrap();
        assert_eq!(s.entry(-5, -5), top);
        assert_eq!(s.entry(-128, 127), k.entry(0, 255));
    }

    #[test]
    fn y_scale_is_floored_reciprocal() {
        // sY = 0.006: 1/sY = 166.67, ORT multiplies by 166. A row whose first element holds
        // all the probability: fused 166, real rne(166.67) = 167.
        let (x, y) = (u8p(0.5, 0), u8p(0.006, 0));
        let k = SoftmaxKernel::new(x, y, 2, Isa::X86Avx2).unwrap();
        assert_eq!(k.row(&[255, 0]).unwrap()[0].code, 166);
        assert_eq!(real_pattern(x, y, 255, 0, 2)[0].1, 167);
        let v = prove(x, y, 2, Isa::X86Avx2);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        println!("{c}");
        assert_ne!(c.unfused, c.fused);
    }

    #[test]
    fn int8_outputs_saturate_in_ort_1_31() {
        // zY = −128, sY = 1/256: p = 1 gives 256 − 128 = 128, clamped to 127 (ORT before PR
        // #29728 stored (int8)128 = −128).
        let (x, y) = (i8p(0.5, 0), i8p(1.0 / 256.0, -128));
        let k = SoftmaxKernel::new(x, y, 2, Isa::X86Avx2).unwrap();
        assert_eq!(k.row(&[127, -128]).unwrap()[0].code, 127);
        assert_eq!(real_pattern(x, y, 127, -128, 2)[0].1, 127);
    }

    #[test]
    fn a_one_element_axis_overflows_the_table() {
        // D = 1: the table's top entry is FLT_MAX·e^-5 ≈ FLT_MAX/148; times floor(1/sY) = 256 it
        // overflows to inf. x86 casts inf to uint32 through int64 (0x8000000000000000, low 32
        // bits 0), so the output is zY = 0 where the real result saturates at 255; ARM saturates.
        let k = SoftmaxKernel::new(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 1, Isa::X86Avx2).unwrap();
        let out = k.row(&[42]).unwrap()[0];
        assert!(out.pre_round.is_infinite());
        assert_eq!(out.code, 0);
        let arm = SoftmaxKernel::new(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 1, Isa::Arm64Neon).unwrap();
        assert_eq!(arm.row(&[42]).unwrap()[0].code, 255);
        let v = prove(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 1, Isa::X86Avx2);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        assert_eq!((c.unfused, c.fused), (255, 0));
    }

    #[test]
    fn uint8_saturates_and_the_usual_scale_agrees_often() {
        // sY = 1/256: floor(1/sY) = 1/sY, so the two paths differ only by rounding details.
        let k = SoftmaxKernel::new(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 2, Isa::X86Avx2).unwrap();
        let out = k.row(&[10, 10]).unwrap();
        assert_eq!((out[0].code, out[1].code), (128, 128));
        assert_eq!(k.row(&[255, 0]).unwrap()[0].code, 255);
        let v = prove(u8p(0.1, 0), u8p(1.0 / 256.0, 0), 2, Isa::X86Avx2);
        assert_ne!(v.word(), "exact");
    }

    #[test]
    fn never_exact() {
        for d in [1, 2, 3, 10] {
            for (x, y) in [(u8p(0.1, 128), u8p(1.0 / 256.0, 0)), (i8p(0.05, 0), i8p(1.0 / 256.0, -128)), (u8p(0.0123, 7), u8p(0.0039, 3))] {
                assert!(!prove(x, y, d, Isa::X86Avx2).is_exact());
            }
        }
    }

    #[test]
    fn robustness_margin() {
        assert!(robust(3.2));
        assert!(!robust(3.5004));
        assert!(!robust(2.4999));
        assert!(robust(1000.3));
        assert!(!robust(1000.45));
    }

    #[test]
    fn a_symbolic_axis_is_refuted_at_a_concrete_length() {
        let (x, y) = (u8p(0.5, 0), u8p(0.006, 0));
        let v = prove_every_length(x, y, Isa::X86Avx512Vnni);
        let Verdict::Refuted { counterexample: c, proof } = &v else { panic!("{v:?}") };
        assert!(proof.detail.starts_with("the axis length is symbolic; refuted at length 1:"), "{}", proof.detail);
        assert_eq!(Some(c), prove(x, y, 1, Isa::X86Avx512Vnni).counterexample());
        let v = prove_every_length(u8p(0.0, 0), y, Isa::X86Avx512Vnni);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("finite positive")), "{v:?}");
    }
}
