//! `A8W8::run` (per-row activation × per-column weight parameters, zero points on both sides,
//! with and without a bias at its own scale) against an independent evaluation on every path:
//! `C` in i64 from the codes, then `sat(rne((C·sx[m]·sw[n] + b·sb)/sy) + zy)` in exact
//! fractions of the f32 scales.

mod common;

use common::{Rng, as_fraction, kernels, log_uniform, rne};
use qdqc_kernels::a8w8::A8W8;
use qdqc_kernels::requant::{Code, Output};
use qdqc_kernels::{Isa, Layout, PackedB};

/// The exact output code of one element.
fn expected(c: i64, sx: f32, sw: f32, bias: Option<(i32, f32)>, sy: f32, out: (i32, Code)) -> i32 {
    let ((nx, px), (nw, pw), (ny, py)) = (as_fraction(sx), as_fraction(sw), as_fraction(sy));
    let (nb, pb, b) = match bias {
        Some((b, sb)) => {
            let (nb, pb) = as_fraction(sb);
            (nb, pb, i128::from(b))
        }
        None => (0, 0, 0),
    };
    let p = (px + pw).max(pb);
    let num = (i128::from(c) * nx * nw * (1 << (p - px - pw)) + b * nb * (1 << (p - pb))) * (1 << py);
    let den = ny * (1i128 << p);
    let (zy, code) = out;
    (rne(num, den) + i128::from(zy)).clamp(i128::from(code.min()), i128::from(code.max())) as i32
}

#[allow(clippy::too_many_arguments)] // one case's shape and options
fn case(isa: Isa, seed: u64, m: usize, k: usize, n: usize, period: usize, u8_weights: bool, bias: bool, code: Code) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(seed);
    let a = rng.u8s(m * k);
    // Zero points off the middle of the codes (asymmetric), near enough for C to stay unsaturated.
    let zx: Vec<i32> = (0..period).map(|_| 100 + rng.below(56) as i32).collect();
    let sx: Vec<f32> = (0..period).map(|_| log_uniform(&mut rng, 0.01, 0.03)).collect();
    let sw: Vec<f32> = (0..n).map(|_| log_uniform(&mut rng, 0.01, 0.03)).collect();
    let (w, zw): (Vec<i64>, Vec<i64>) = if u8_weights {
        (rng.u8s(k * n).into_iter().map(i64::from).collect(), (0..n).map(|_| 108 + rng.below(40) as i64).collect())
    } else {
        (rng.i8s(k * n).into_iter().map(i64::from).collect(), (0..n).map(|_| rng.below(40) as i64 - 20).collect())
    };
    let packed = if u8_weights {
        let bytes = |v: &[i64]| v.iter().map(|&x| x as u8).collect::<Vec<u8>>();
        PackedB::from_u8(&bytes(&w), k, n, Layout::KN, &bytes(&zw)).unwrap()
    } else {
        let bytes = |v: &[i64]| v.iter().map(|&x| x as i8).collect::<Vec<i8>>();
        PackedB::from_i8(&bytes(&w), k, n, Layout::KN, &bytes(&zw)).unwrap()
    };
    let b: Vec<i32> = if bias { (0..n).map(|_| rng.below(20001) as i32 - 10000).collect() } else { Vec::new() };
    // Half the columns' bias on the accumulator's grid of row 0, the others off it.
    let sb: Vec<f32> = if bias { (0..n).map(|c| if c % 2 == 0 { sx[0] * sw[c] } else { log_uniform(&mut rng, 1e-6, 1e-4) }).collect() } else { Vec::new() };
    // About 40 codes per standard deviation of C·sx·sw (C's is about 5461·√K).
    let sy = log_uniform(&mut rng, 0.8, 1.25) * 5461.0 * 4e-4 * (k as f32).sqrt() / 40.0;
    let zy = match code {
        Code::U8 => rng.below(256) as i32,
        Code::I8 => rng.below(256) as i32 - 128,
    };
    let output = Output::new(zy, code).unwrap();
    let plan = A8W8::new(&packed, &sx, &zx, &sw, &b, &sb, sy, output).unwrap();
    let mut acc = vec![0i32; m * n];
    let got: Vec<i32> = match code {
        Code::U8 => {
            let mut y = vec![0u8; m * n];
            plan.run(kern, &a, m, &packed, &mut acc, &mut y).unwrap();
            y.into_iter().map(i32::from).collect()
        }
        Code::I8 => {
            let mut y = vec![0i8; m * n];
            plan.run(kern, &a, m, &packed, &mut acc, &mut y).unwrap();
            y.into_iter().map(i32::from).collect()
        }
    };
    let mut saturated = 0;
    for row in 0..m {
        let t = row % period;
        for col in 0..n {
            let c: i64 = (0..k).map(|p| (i64::from(a[row * k + p]) - i64::from(zx[t])) * (w[p * n + col] - zw[col])).sum();
            let want = expected(c, sx[t], sw[col], bias.then(|| (b[col], sb[col])), sy, (zy, code));
            saturated += usize::from(want == code.min() || want == code.max());
            assert_eq!(got[row * n + col], want, "{isa}: row {row} column {col}, C = {c}");
        }
    }
    // The case checks the rounding, not only the clamp.
    assert!(saturated < m * n / 2, "{isa}: {saturated} of {} outputs saturated", m * n);
}

#[test]
fn per_row_per_column_with_zero_points_on_both_sides() {
    for isa in Isa::ALL {
        for (i, &(m, k, n, period)) in [(8, 16, 6, 8), (7, 33, 70, 7), (13, 64, 17, 13), (12, 5, 3, 4), (1, 100, 64, 1)].iter().enumerate() {
            for (j, &(u8w, bias, code)) in
                [(false, false, Code::I8), (false, true, Code::U8), (true, true, Code::I8), (true, false, Code::U8)].iter().enumerate()
            {
                case(isa, (i * 10 + j) as u64, m, k, n, period, u8w, bias, code);
            }
        }
    }
}

#[test]
fn refuses_plans_that_do_not_fit() {
    let packed = PackedB::from_i8(&[1, 2, 3, 4, 5, 6], 2, 3, Layout::KN, &[0]).unwrap();
    let out = Output::new(0, Code::U8).unwrap();
    assert!(A8W8::new(&packed, &[0.1, 0.2], &[0], &[0.1], &[], &[], 1.0, out).is_err(), "two scales, one zero point");
    assert!(A8W8::new(&packed, &[0.1], &[300], &[0.1], &[], &[], 1.0, out).is_err(), "zero point outside u8");
    assert!(A8W8::new(&packed, &[0.1], &[0], &[0.1, 0.2], &[], &[], 1.0, out).is_err(), "two column scales for three columns");
    assert!(A8W8::new(&packed, &[-0.1], &[0], &[0.1], &[], &[], 1.0, out).is_err(), "a negative scale");
    assert!(A8W8::new(&packed, &[0.1], &[0], &[0.1], &[1, 2, 3], &[f32::NAN], 1.0, out).is_err(), "a NaN bias scale");
}

/// `rne_f32(v, e)` against f64 arithmetic where that is exact (|v| < 2^53, so `v·2^e` is an f64
/// and one conversion to f32 rounds it correctly), over normal, subnormal, tie and overflowing
/// values; and the float-output group against it.
#[test]
fn float_output_is_the_correctly_rounded_exact_value() {
    use qdqc_kernels::a8w8::rne_f32;
    let reference = |v: i64, e: i32| ((v as f64) * 2f64.powi(e)) as f32;
    let mut rng = Rng::new(7);
    for _ in 0..200_000 {
        let bits = 1 + rng.below(52) as u32;
        let v = (rng.next() >> (64 - bits)) as i64 * if rng.next() & 1 == 0 { 1 } else { -1 };
        let e = rng.below(330) as i32 - 200;
        let (got, want) = (rne_f32(i128::from(v), e), reference(v, e));
        assert_eq!(got.to_bits(), want.to_bits(), "v = {v}, e = {e}: {got:e} vs {want:e}");
    }
    // Ties: 2^24 + 1 and 2^24 + 3 halfway between f32s, to even; a subnormal tie; overflow.
    assert_eq!(rne_f32((1 << 24) + 1, 0), 16_777_216.0);
    assert_eq!(rne_f32((1 << 24) + 3, 0), 16_777_220.0);
    assert_eq!(rne_f32(3, -150).to_bits(), 2);
    assert_eq!(rne_f32(1, 128), f32::INFINITY);
    assert_eq!(rne_f32(-(1i128 << 100), 40), f32::NEG_INFINITY);
    // Beyond 53 bits: 2^70 + 2^46 + 1 is just above the tie between 2^70 and 2^70 + 2^47.
    assert_eq!(rne_f32((1i128 << 70) + (1 << 46) + 1, 0), (1u128 << 70) as f32 + 2f32.powi(47));
    assert_eq!(rne_f32((1i128 << 70) + (1 << 46), 0), (1u128 << 70) as f32);

    let Some(kern) = kernels(Isa::Portable) else { return };
    let (m, k, n) = (5, 40, 7);
    let a = rng.u8s(m * k);
    let w = rng.i8s(k * n);
    let zw: Vec<i8> = (0..n).map(|_| rng.below(21) as i8 - 10).collect();
    let zx: Vec<i32> = (0..m).map(|_| 100 + rng.below(56) as i32).collect();
    let sx: Vec<f32> = (0..m).map(|_| log_uniform(&mut rng, 0.01, 0.03)).collect();
    let sw: Vec<f32> = (0..n).map(|_| log_uniform(&mut rng, 0.002, 0.006)).collect();
    let packed = PackedB::from_i8(&w, k, n, Layout::KN, &zw).unwrap();
    let plan = A8W8::float(&packed, &sx, &zx, &sw).unwrap();
    let (mut acc, mut y) = (vec![0i32; m * n], vec![0f32; m * n]);
    plan.run_f32(kern, &a, m, &packed, &mut acc, &mut y).unwrap();
    for row in 0..m {
        for col in 0..n {
            let c: i64 = (0..k).map(|p| (i64::from(a[row * k + p]) - i64::from(zx[row])) * (i64::from(w[p * n + col]) - i64::from(zw[col]))).sum();
            let ((nx, px), (nw, pw)) = (as_fraction(sx[row]), as_fraction(sw[col]));
            let want = rne_f32(i128::from(c) * nx * nw, -((px + pw) as i32));
            assert_eq!(y[row * n + col].to_bits(), want.to_bits(), "row {row} column {col}");
        }
    }
    let mut codes = vec![0u8; m * n];
    assert!(plan.run(kern, &a, m, &packed, &mut acc, &mut codes).is_err(), "a float plan refuses to write codes");
}
