//! `Q(Softmax(DQ(x)))` on codes (`codes::softmax`) against the three kernels the unfused program
//! calls, byte for byte, on every kernel path the host has: random slices, every code as the
//! maximum, ties for the maximum, slices of one code, slice counts around the four-slice groups,
//! scales that make zeros of both signs, infinities and NaN, and both code types on each side.

mod common;

use common::Rng;
use qdqc_kernels::codes::QCode;
use qdqc_kernels::codes::qdq::{dequantize_linear, quantize_linear};
use qdqc_kernels::codes::softmax::SoftmaxCodes;
use qdqc_kernels::float::softmax::softmax;
use qdqc_kernels::{Isa, Kernels};

/// The paths this host has (a missing one fails unless `QDQC_KERNELS_SKIP_ISA` acknowledges it).
fn paths() -> Vec<Kernels> {
    Isa::ALL.into_iter().filter_map(common::kernels).collect()
}

/// The unfused program: DequantizeLinear, Softmax along the last axis, QuantizeLinear.
fn unfused<X: QCode, Y: QCode>(k: Kernels, x: &[X], shape: &[usize], q: (f32, i32), out: (f32, i32)) -> Vec<Y> {
    let mut v = vec![0f32; x.len()];
    dequantize_linear(x, shape, 0, &[q.0], &[q.1], &mut v).unwrap();
    let mut s = vec![0f32; x.len()];
    softmax(k, &v, shape, -1, &mut s).unwrap();
    let mut y = vec![Y::default(); x.len()];
    quantize_linear(&s, shape, 0, &[out.0], &[out.1], &mut y).unwrap();
    y
}

fn check<X: QCode, Y: QCode>(k: Kernels, x: &[X], shape: &[usize], q: (f32, i32), out: (f32, i32), what: &str) {
    let t = SoftmaxCodes::<X>::new(q.0, q.1, out.0, out.1).unwrap();
    let mut y = vec![Y::default(); x.len()];
    t.run(k, x, shape, &mut y).unwrap();
    let want = unfused::<X, Y>(k, x, shape, q, out);
    if let Some(i) = (0..y.len()).find(|&i| y[i] != want[i]) {
        panic!("{what} on {:?}: element {i} of {shape:?}: fused {:?}, unfused {:?}", k.path(), y[i], want[i]);
    }
}

#[test]
fn fused_softmax_on_codes_equals_the_three_kernels() {
    let mut rng = Rng::new(7);
    // MiniLM's attention softmax (u8 in, u8 out, scale 1/255), other scales and zero points.
    let params = [
        ((0.122_419_4, 132), (1.0 / 255.0, 0)),
        ((0.076_327_6, 150), (0.003_921_57, 0)),
        ((0.5, 0), (0.002, 17)),
        ((1e-3, 255), (1.0 / 256.0, 3)),
        ((3.0, 40), (0.01, 0)),
    ];
    for k in paths() {
        for &(q, out) in &params {
            for shape in [vec![1, 12, 64, 64], vec![3, 7], vec![5, 1], vec![2, 3, 130], vec![9, 64], vec![15, 3], vec![17, 64], vec![64]] {
                let len = shape.iter().product();
                check::<u8, u8>(k, &rng.u8s(len), &shape, q, out, "random u8");
                // A narrow band of codes: many ties for the maximum and near-equal exponentials.
                let band: Vec<u8> = rng.u8s(len).iter().map(|&c| 120 + c % 4).collect();
                check::<u8, u8>(k, &band, &shape, q, out, "band");
                check::<u8, u8>(k, &vec![q.1 as u8; len], &shape, q, out, "one code");
            }
            // Every code as the maximum of a slice holding every smaller code.
            let mut x = Vec::new();
            for top in 0..256usize {
                x.extend((0..64).map(|i| (top * i / 63) as u8));
            }
            check::<u8, u8>(k, &x, &[256, 64], q, out, "every maximum");
            let s: Vec<i8> = rng.i8s(4 * 96);
            let zi = q.1 - 128;
            check::<i8, u8>(k, &s, &[4, 96], (q.0, zi), out, "i8 in");
            check::<i8, i8>(k, &s, &[4, 96], (q.0, zi), (out.0, out.1 - 128), "i8 in and out");
            check::<u8, i8>(k, &rng.u8s(4 * 96), &[4, 96], q, (out.0, out.1 - 128), "i8 out");
        }
        // Scales the values cannot stay finite under: zeros of both signs (scale 0), ±∞ (a huge
        // scale), NaN (∞·0 at the zero point), a negative scale (the maximum at the lowest code).
        for scale in [0.0, -0.0, 3.0e38, f32::INFINITY, f32::NAN, -0.25] {
            let x = rng.u8s(6 * 33);
            check::<u8, u8>(k, &x, &[6, 33], (scale, 100), (1.0 / 255.0, 0), &format!("scale {scale}"));
            check::<u8, u8>(k, &[100u8; 6 * 33], &[6, 33], (scale, 100), (1.0 / 255.0, 0), &format!("zero point only, scale {scale}"));
        }
    }
}

#[test]
fn mismatched_lengths_and_zero_points_are_refused() {
    let k = Kernels::new(Isa::Portable).unwrap();
    let t = SoftmaxCodes::<u8>::new(0.1, 0, 1.0 / 255.0, 0).unwrap();
    let mut y = [0u8; 8];
    assert!(t.run(k, &[0u8; 9], &[3, 3], &mut y).is_err(), "output length refused");
    assert!(SoftmaxCodes::<i8>::new(0.1, 200, 1.0 / 255.0, 0).is_err(), "input zero point refused");
    let t = SoftmaxCodes::<u8>::new(0.1, 0, 1.0 / 255.0, 200).unwrap();
    let mut y = [0i8; 9];
    assert!(t.run(k, &[0u8; 9], &[3, 3], &mut y).is_err(), "output zero point outside i8 refused");
}
