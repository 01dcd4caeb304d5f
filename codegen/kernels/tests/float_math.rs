//! The portable elementary functions (`float::math`, `float::unary`) against independent
//! references: the platform's f64 libm (glibc here, accurate to < 1 ulp) with a tolerance of a
//! few f64 ulps, erf/erfc against values from CPython's `math.erf`/`math.erfc`, and the f32
//! results against the libm value rounded to f32, which must agree except where that value lies
//! within 2^-40 (relative) of an f32 rounding boundary.

mod common;

use common::Rng;
use qdqc_kernels::float::math;
use qdqc_kernels::float::unary::Function;

/// Relative difference, with `|b|` floored at f64's smallest normal.
fn rel(a: f64, b: f64) -> f64 {
    if a == b { 0.0 } else { (a - b).abs() / b.abs().max(f64::MIN_POSITIVE) }
}

/// Whether the f64 value `v` lies within `tol` (relative) of a midpoint between two f32s.
fn near_midpoint(v: f64, tol: f64) -> bool {
    let f = v as f32;
    let up = f64::from(f32::from_bits(f.to_bits() + 1));
    let down = f64::from(f32::from_bits(f.to_bits().wrapping_sub(1)));
    let f = f64::from(f);
    [(f + up) / 2.0, (f + down) / 2.0].iter().any(|m| (v - m).abs() <= v.abs() * tol)
}

/// A function of f64 (ours or the reference).
type F64Fn = fn(f64) -> f64;

fn sweep(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| lo + (hi - lo) * ((rng.next() >> 11) as f64 / (1u64 << 53) as f64)).collect()
}

#[test]
fn exp_ln_tanh_expm1_log1p_within_a_few_ulps_of_libm() {
    let tol = 2f64.powi(-50);
    let cases: [(&str, F64Fn, F64Fn, f64, f64); 8] = [
        ("exp", math::exp64, f64::exp, -745.0, 709.7),
        ("exp small", math::exp64, f64::exp, -1.0, 1.0),
        ("ln", math::ln64, f64::ln, 1e-300, 1e300),
        ("ln near 1", math::ln64, f64::ln, 0.5, 2.0),
        ("tanh", math::tanh64, f64::tanh, -25.0, 25.0),
        ("tanh small", math::tanh64, f64::tanh, -0.01, 0.01),
        ("expm1", math::expm1_64, f64::exp_m1, -3.0, 3.0),
        ("log1p", math::log1p64, f64::ln_1p, -0.9, 3.0),
    ];
    for (i, (name, f, reference, lo, hi)) in cases.into_iter().enumerate() {
        let worst = sweep(i as u64, 200_000, lo, hi).into_iter().map(|x| (rel(f(x), reference(x)), x)).fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
        assert!(worst.0 <= tol, "{name}: relative error {:e} at x = {:e}", worst.0, worst.1);
    }
    // Subnormal arguments and results.
    for x in [5e-324, 1e-310, 2.2e-308] {
        assert!(rel(math::ln64(x), x.ln()) <= tol, "ln({x:e})");
    }
    for x in [-740.0, -720.5, -708.9] {
        assert!((math::exp64(x) - x.exp()).abs() <= 2.0 * 5e-324 + x.exp() * tol, "exp({x})");
    }
}

#[test]
fn special_values() {
    assert_eq!(math::exp64(0.0), 1.0);
    assert_eq!(math::exp64(f64::NEG_INFINITY), 0.0);
    assert_eq!(math::exp64(f64::INFINITY), f64::INFINITY);
    assert_eq!(math::exp64(710.0), f64::INFINITY);
    assert!(math::exp64(f64::NAN).is_nan());
    assert_eq!(math::ln64(1.0), 0.0);
    assert_eq!(math::ln64(0.0), f64::NEG_INFINITY);
    assert!(math::ln64(-1.0).is_nan());
    assert_eq!(math::ln64(f64::INFINITY), f64::INFINITY);
    assert_eq!(math::tanh64(30.0), 1.0);
    assert_eq!(math::tanh64(-30.0), -1.0);
    assert_eq!(math::tanh64(-0.0).to_bits(), (-0.0f64).to_bits());
    assert_eq!(math::erf64(0.0), 0.0);
    assert_eq!(math::erf64(-7.0), -1.0);
    assert_eq!(math::sigmoid64(0.0), 0.5);
    assert_eq!(math::sigmoid64(-800.0), 0.0);
    assert_eq!(math::sigmoid64(800.0), 1.0);
    for f in
        [Function::Sigmoid, Function::Tanh, Function::Exp, Function::Log, Function::Erf, Function::Gelu, Function::GeluTanh, Function::Softplus, Function::Silu]
    {
        assert!(f.apply(f32::NAN).is_nan(), "{f:?}(NaN)");
    }
    assert_eq!((Function::Tanh.apply(f32::INFINITY), Function::Tanh.apply(f32::NEG_INFINITY)), (1.0, -1.0));
    assert_eq!((Function::Sigmoid.apply(f32::INFINITY), Function::Sigmoid.apply(f32::NEG_INFINITY)), (1.0, 0.0));
    assert_eq!((Function::Exp.apply(f32::INFINITY), Function::Exp.apply(f32::NEG_INFINITY)), (f32::INFINITY, 0.0));
}

#[test]
fn erf_erfc_against_cpython() {
    // CPython 3 `math.erf` / `math.erfc` (libm-independent implementations in CPython ≤ 3.11,
    // the platform's since; either is within a few ulps).
    let erf = [
        (0.1, 0.1124629160182849),
        (0.5, 0.5204998778130465),
        (1.0, 0.8427007929497149),
        (1.5, 0.9661051464753108),
        (2.0, 0.9953222650189527),
        (2.5, 0.999593047982555),
        (3.0, 0.9999779095030014),
        (4.0, 0.9999999845827421),
        (5.0, 0.9999999999984626),
    ];
    for (x, want) in erf {
        assert!(rel(math::erf64(x), want) <= 1e-15, "erf({x}) = {:e}, want {want:e}", math::erf64(x));
        assert!(rel(math::erf64(-x), -want) <= 1e-15, "erf(-{x})");
    }
    let erfc = [
        (2.0, 0.004677734981047265),
        (2.5, 0.0004069520174449589),
        (3.0, 2.2090496998585438e-05),
        (4.0, 1.541725790028002e-08),
        (5.0, 1.5374597944280351e-12),
        (7.0, 4.183825607779414e-23),
        (10.0, 2.088487583762545e-45),
        (20.0, 5.3958656116079005e-176),
        (26.0, 5.663192408856143e-296),
    ];
    for (z, want) in erfc {
        assert!(rel(math::erfc64(z), want) <= 1e-14, "erfc({z}) = {:e}, want {want:e}", math::erfc64(z));
    }
    // The table-driven erf against the series it is built from, everywhere on [-7, 7] (near ±1,
    // beyond |x| ≈ 5, both are within a few ulps of 1 only: 2^-47).
    let worst = sweep(9, 200_000, -7.0, 7.0)
        .into_iter()
        .map(|x| (rel(math::erf64(x), math::erf_series64(x)), x))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    assert!(worst.0 <= 2f64.powi(-47), "erf64 vs its series: {:e} at {}", worst.0, worst.1);
    // The two branches of erfc meet at 2 without a jump.
    assert!(rel(math::erfc64(2.0 - 1e-12), math::erfc64(2.0)) < 1e-10);
}

/// Every f32 result equals the libm reference rounded to f32 wherever that reference is not within
/// 2^-40 of a rounding boundary (so the comparison cannot be decided by the reference's own error).
#[test]
fn f32_results_are_the_correctly_rounded_ones() {
    let tol = 2f64.powi(-40);
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let softplus = |x: f64| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    let cases: [(Function, F64Fn, f32, f32); 6] = [
        (Function::Exp, f64::exp, -103.0, 88.7),
        (Function::Log, f64::ln, 0.0, 1e6),
        (Function::Tanh, f64::tanh, -10.0, 10.0),
        (Function::Sigmoid, sigmoid, -30.0, 30.0),
        (Function::Softplus, softplus, -30.0, 30.0),
        (Function::Silu, |x| x * (1.0 / (1.0 + (-x).exp())), -30.0, 30.0),
    ];
    for (seed, (f, reference, lo, hi)) in cases.into_iter().enumerate() {
        let mut rng = Rng::new(100 + seed as u64);
        let (mut checked, mut skipped) = (0, 0);
        for _ in 0..200_000 {
            let x = rng.f32_in(lo, hi);
            let r = reference(f64::from(x));
            if near_midpoint(r, tol) {
                skipped += 1;
                continue;
            }
            checked += 1;
            assert_eq!(f.apply(x).to_bits(), (r as f32).to_bits(), "{f:?}({x:e}): {} vs libm {}", f.apply(x), r as f32);
        }
        assert!(skipped < 10, "{f:?}: {skipped} of {checked} near a midpoint");
    }
}

/// `unary::map` on every kernel path gives `Function::apply`'s bits (special values included).
#[test]
fn every_path_maps_to_the_scalar_bits() {
    use qdqc_kernels::float::unary;
    use qdqc_kernels::{Isa, Kernels};
    let mut rng = Rng::new(200);
    let mut x = rng.f32s(50_000, -100.0, 100.0);
    x.extend(rng.f32s(50_000, -8.0, 8.0));
    x.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, -1e-40, 88.7, 88.8, -103.9, -745.0, 709.0, 3e38, -3e38]);
    let functions = [
        Function::Sigmoid,
        Function::Tanh,
        Function::Exp,
        Function::Log,
        Function::Erf,
        Function::Gelu,
        Function::GeluTanh,
        Function::Softplus,
        Function::Silu,
    ];
    for kernels in Isa::ALL.into_iter().filter_map(common::kernels).collect::<Vec<Kernels>>() {
        for f in functions {
            let mut y = vec![0f32; x.len()];
            unary::map(kernels, f, &x, &mut y).unwrap();
            for (&v, &got) in x.iter().zip(&y) {
                let want = f.apply(v);
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{}: {f:?}({v:e}) = {got:e}, scalar {want:e}", kernels.path());
            }
        }
    }
}

#[test]
fn erf_and_gelu_f32_against_cpython_grid() {
    // erf(x) at a few points of k/8 (CPython's math.erf): within half an f32 ulp.
    for (x, want) in [(0.125f32, 0.1403162048013338f64), (0.375, 0.4041169094348223), (1.25, 0.9229001282564582), (2.75, 0.9998993780778803)] {
        assert!((f64::from(Function::Erf.apply(x)) - want).abs() <= want * 2f64.powi(-24), "erf({x})");
    }
    // Gelu(x) = x/2·(1 + erf(x/√2)); for very negative x it is x/2·erfc(|x|/√2), tiny and still accurate.
    let gelu = |x: f64| 0.5 * x * (1.0 + math::erf64(x * std::f64::consts::FRAC_1_SQRT_2));
    for x in [-3.0f32, -1.0, -0.25, 0.0, 0.5, 2.0, 6.0] {
        let got = f64::from(Function::Gelu.apply(x));
        assert!((got - gelu(f64::from(x))).abs() <= got.abs() * 2f64.powi(-23), "gelu({x})");
    }
    let far = Function::Gelu.apply(-10.0);
    let want = -5.0 * math::erfc64(10.0 / std::f64::consts::SQRT_2);
    assert!(far < 0.0 && rel(f64::from(far), want) < 1e-6, "gelu(-10) = {far:e}, want {want:e}");
    // The tanh form equals its textbook formula in f64.
    for x in [-4.0f32, -0.7, 0.3, 2.5] {
        let x64 = f64::from(x);
        let t = 0.5 * x64 * (1.0 + (0.797_884_560_802_865_4 * (x64 + 0.044715 * x64 * x64 * x64)).tanh());
        assert!((f64::from(Function::GeluTanh.apply(x)) - t).abs() <= t.abs() * 2f64.powi(-23), "gelu_tanh({x})");
    }
}

#[test]
fn pow_special_cases_and_accuracy() {
    use math::pow;
    assert_eq!(pow(2.0, 10.0), 1024.0);
    assert_eq!(pow(-2.0, 3.0), -8.0);
    assert_eq!(pow(-2.0, -2.0), 0.25);
    assert!(pow(-2.0, 0.5).is_nan());
    assert_eq!(pow(f32::NAN, 0.0), 1.0);
    assert_eq!(pow(1.0, f32::NAN), 1.0);
    assert_eq!(pow(0.0, -1.0), f32::INFINITY);
    assert_eq!(pow(-0.0, -1.0), f32::NEG_INFINITY);
    assert_eq!(pow(-0.0, 3.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(pow(0.0, 0.5), 0.0);
    assert_eq!(pow(f32::NEG_INFINITY, 3.0), f32::NEG_INFINITY);
    assert_eq!(pow(f32::NEG_INFINITY, -3.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(pow(-1.0, f32::INFINITY), 1.0);
    assert_eq!(pow(0.5, f32::INFINITY), 0.0);
    assert_eq!(pow(0.5, f32::NEG_INFINITY), f32::INFINITY);
    let mut rng = Rng::new(7);
    for _ in 0..100_000 {
        let (x, y) = (rng.f32_in(0.0, 50.0), rng.f32_in(-20.0, 20.0));
        let r = f64::from(x).powf(f64::from(y));
        if !near_midpoint(r, 2f64.powi(-40)) && r.is_normal() && r < 3e38 {
            assert_eq!(pow(x, y).to_bits(), (r as f32).to_bits(), "pow({x}, {y})");
        }
    }
}
