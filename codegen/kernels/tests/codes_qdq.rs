//! QuantizeLinear / DequantizeLinear against ONNX Runtime's own outputs (`data/qdq_ort.bin`,
//! written by `qdq_ort.py` with the pinned onnxruntime, ORT_DISABLE_ALL): exact ties of `x/s`,
//! their f32 neighbours, NaN, infinities, signed zeros, subnormals, quotients that overflow,
//! random values; per tensor and per axis; u8 and i8. Compared bit for bit.

use qdqc_kernels::codes::QCode;
use qdqc_kernels::codes::qdq::{dequantize, dequantize_linear, quantize, quantize_linear};

const DATA: &[u8] = include_bytes!("data/qdq_ort.bin");

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        h
    }
    fn u32(&mut self) -> usize {
        u32::from_le_bytes(self.take(4).try_into().unwrap()) as usize
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    }
    fn i32s(&mut self, n: usize) -> Vec<i32> {
        self.take(4 * n).chunks_exact(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect()
    }
}

fn check<T: QCode>(kind: u8, scales: &[f32], zps: &[i32], n: usize, r: &mut Reader) {
    let c = scales.len();
    let shape = if c > 1 { vec![2, c, n / (2 * c)] } else { vec![n] };
    let axis = if c > 1 { 1 } else { 0 };
    if kind < 2 {
        let x = r.f32s(n);
        let want: Vec<T> = r.take(n).iter().map(|&b| T::from_index(usize::from(b))).collect();
        let mut got = vec![T::default(); n];
        quantize_linear(&x, &shape, axis, scales, zps, &mut got).unwrap();
        for i in 0..n {
            assert_eq!(got[i], want[i], "QuantizeLinear x={:e} ({:#x}) scales {scales:?} zps {zps:?} at {i}", x[i], x[i].to_bits());
        }
    } else {
        let q: Vec<T> = r.take(n).iter().map(|&b| T::from_index(usize::from(b))).collect();
        let want = r.f32s(n);
        let mut got = vec![0f32; n];
        dequantize_linear(&q, &shape, axis, scales, zps, &mut got).unwrap();
        for i in 0..n {
            assert_eq!(got[i].to_bits(), want[i].to_bits(), "DequantizeLinear q={:?} scales {scales:?} zps {zps:?} at {i}", q[i]);
        }
    }
}

#[test]
fn matches_onnx_runtime_bit_for_bit() {
    let mut r = Reader(DATA);
    let mut cases = 0;
    while !r.0.is_empty() {
        let kind = r.take(1)[0];
        let (c, n) = (r.u32(), r.u32());
        let (scales, zps) = (r.f32s(c), r.i32s(c));
        match kind {
            0 | 2 => check::<u8>(kind, &scales, &zps, n, &mut r),
            1 | 3 => check::<i8>(kind, &scales, &zps, n, &mut r),
            k => panic!("bad record kind {k}"),
        }
        cases += 1;
    }
    assert_eq!(cases, 24, "the data file holds every case");
}

/// ORT rounds the f32 quotient, not the exact `x/s`: a quotient just below a half-integer can
/// round up to it in f32 and then to even. The kernel follows ORT.
#[test]
fn rounds_the_f32_quotient() {
    let s = 0.1f32;
    let mut found = 0;
    for k in 0..2000 {
        // Exact value of x/s, from the f32 values as f64 (exact) divided in f64 (close enough to
        // see which side of the half-integer the exact quotient falls on).
        let x = f32::from_bits((0.05f32 + k as f32 * 0.1).to_bits());
        for x in [f32::from_bits(x.to_bits() - 1), x, f32::from_bits(x.to_bits() + 1)] {
            let exact = f64::from(x) / f64::from(s);
            let f = x / s;
            if f.fract().abs() == 0.5 && exact != f64::from(f) {
                found += 1;
                let q: u8 = quantize(x, s, 0);
                assert_eq!(f32::from(q), f.round_ties_even().clamp(0.0, 255.0));
            }
        }
    }
    assert!(found > 0, "no f32 quotient rounded onto a tie in the sample");
}

#[test]
fn refuses_bad_parameters() {
    let mut out = [0u8; 6];
    assert!(quantize_linear(&[0.0; 6], &[2, 3], 1, &[0.1, 0.2], &[0, 0], &mut out).is_err(), "2 scales on an axis of 3");
    assert!(quantize_linear(&[0.0; 6], &[2, 3], 0, &[0.1], &[256], &mut out).is_err(), "zero point outside u8");
    assert!(quantize_linear(&[0.0; 6], &[2, 3], 0, &[0.1, 0.2], &[1], &mut out).is_err(), "1 zero point for 2 scales");
    assert!(quantize_linear(&[0.0; 5], &[2, 3], 0, &[0.1], &[], &mut out).is_err(), "short input");
}

/// The rounding without libm (1.5·2^23 added, its bits subtracted) and the cast without a clamp
/// against the definition `sat(rne(clamp(x/s)) + zp)`, on every half-integer and its neighbours
/// across both code ranges, the extremes, infinities and NaN, for u8 and i8 and several zero points.
#[test]
fn rounding_and_cast_match_the_definition() {
    fn reference(f: f32, lo: i32, hi: i32, zp: i32) -> i32 {
        let f = if f > (lo - zp) as f32 { f } else { (lo - zp) as f32 };
        let f = if f < (hi - zp) as f32 { f } else { (hi - zp) as f32 };
        f.round_ties_even() as i32 + zp
    }
    let mut xs = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, 0.0, -0.0, 1e-30, 4.5e6, -4.5e6];
    for h in -800..=800 {
        let v = h as f32 * 0.5;
        xs.extend([f32::from_bits(v.to_bits().wrapping_sub(1)), v, f32::from_bits(v.to_bits() + 1)]);
    }
    for &x in &xs {
        for zp in [0, 1, 127, 255] {
            let q: u8 = quantize(x, 1.0, zp);
            assert_eq!(i32::from(q), reference(x, 0, 255, zp), "u8 x {x:e} zp {zp}");
        }
        for zp in [-128, -3, 0, 127] {
            let q: i8 = quantize(x, 1.0, zp);
            assert_eq!(i32::from(q), reference(x, -128, 127, zp), "i8 x {x:e} zp {zp}");
        }
    }
}

/// QuantizeLinear and DequantizeLinear over tensors (the host's widest instance, 8 lanes on AVX2,
/// with tails) equal the one-value functions element by element: ties of x/s and their f32
/// neighbours, NaN, ±∞, ±0, subnormals, saturating values; per tensor and per axis.
#[test]
fn tensors_equal_the_one_value_functions() {
    let s = 0.37f32;
    let mut x = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, f32::from_bits(1), -f32::from_bits(1), 1e30, -1e30];
    for k in -300..300 {
        let tie = (k as f32 + 0.5) * s;
        x.extend([tie, f32::from_bits(tie.to_bits() + 1), f32::from_bits(tie.to_bits().wrapping_sub(1))]);
    }
    for n in [x.len(), x.len() - 3, 7] {
        let x = &x[..n];
        for (scales, zps) in [(vec![s], vec![3]), (vec![s, 0.011, 2.5], vec![-128, 0, 127])] {
            let (shape, axis) = if scales.len() == 1 { (vec![n], 0) } else { (vec![n / 3, 3], 1) };
            let x = &x[..shape.iter().product::<usize>()];
            let mut q = vec![0i8; x.len()];
            quantize_linear(x, &shape, axis, &scales, &zps, &mut q).unwrap();
            let mut d = vec![0f32; x.len()];
            dequantize_linear(&q, &shape, axis, &scales, &zps, &mut d).unwrap();
            for (i, (&v, (&q, &d))) in x.iter().zip(q.iter().zip(&d)).enumerate() {
                let c = if scales.len() == 1 { 0 } else { i % 3 };
                assert_eq!(q, quantize::<i8>(v, scales[c], zps[c]), "x = {v:e} at {i}");
                assert_eq!(d.to_bits(), dequantize(q, scales[c], zps[c]).to_bits(), "q = {q} at {i}");
            }
        }
    }
}
