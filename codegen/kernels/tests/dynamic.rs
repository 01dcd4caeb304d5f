//! The dynamic group (`qdqc_kernels::dynamic`): ORT's DynamicQuantizeLinear on ONNX's own cases
//! and its edge cases; the two certificates (P4-f: the f32 of `C·sx·sw` by an f64 product with a
//! midpoint test; P4-q: the certified requantization on ratios made at run time) against the
//! exact definitions over a sampled scale space and constructed boundary cases
//! (`common/adversarial.rs`); the whole group on every path against an independent evaluation.

mod common;

use common::adversarial::{codes_row, float_row};
use common::{Rng, as_fraction, gemm_reference, kernels, rne};
use qdqc_kernels::dynamic::{DynamicMatMul, Epilogue, Granularity, Recipe, certified_f32, dynamic_parameters, dynamic_quantize, exact_f32};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_kernels::{Isa, Layout, PackedB};

/// The inputs of ONNX's backend cases `test_dynamicquantizelinear{,_max_adjusted,_min_adjusted}`
/// and edge inputs, with what ONNX Runtime 1.31.1 (CPU, ORT_DISABLE_ALL) returns for them.
#[test]
fn onnx_backend_cases() {
    let cases: [(&[f32], f32, u8, &[u8]); 7] = [
        (&[0.0, 2.0, -3.0, -2.5, 1.34, 0.5], 0.019_607_844, 153, &[153, 255, 0, 26, 221, 179]),
        (&[-1.0, -2.1, -1.3, -2.5, -3.34, -4.0], 0.015_686_275, 255, &[191, 121, 172, 96, 42, 0]),
        (&[1.0, 2.1, 1.3, 2.5, 3.34, 4.0, 1.5, 2.6, 3.9, 4.0, 3.0, 2.345], 0.015_686_275, 0, &[64, 134, 83, 159, 213, 255, 96, 166, 249, 255, 191, 149]),
        (&[1e-45], 0.0, 255, &[255]),
        (&[f32::NEG_INFINITY, 1.0], f32::INFINITY, 255, &[0, 255]),
        (&[f32::INFINITY, -1.0], f32::INFINITY, 0, &[0, 0]),
        (&[0.0, -0.0], 1.0, 0, &[0, 0]),
    ];
    for (x, scale, zp, y) in cases {
        let mut q = vec![0u8; x.len()];
        assert_eq!(dynamic_quantize(x, &mut q), Some((scale, zp)), "{x:?}");
        assert_eq!(q, y, "{x:?}");
    }
}

/// `GetQuantizationParameter`'s arithmetic at its edges, each value worked out by hand from the
/// C++ (`std::min/max` with a NaN quotient, a range that underflows, infinities).
#[test]
fn parameter_edges() {
    assert_eq!(dynamic_parameters(&[0.0, -0.0, 0.0]), Some((1.0, 0)), "max == min: scale 1");
    assert_eq!(dynamic_parameters(&[1e-45]), Some((0.0, 255)), "(max − min)/255 underflows: min/scale = 0/0 = NaN, std::min(255, NaN) = 255");
    assert_eq!(dynamic_parameters(&[f32::NAN, 1.0]), None);
    // −inf: scale (1 + inf)/255 = inf, 0 − (−inf/inf) = NaN, so 255.
    assert_eq!(dynamic_parameters(&[f32::NEG_INFINITY, 1.0]), Some((f32::INFINITY, 255)));
    // +inf: scale inf, 0 − (0/inf) = 0.
    assert_eq!(dynamic_parameters(&[f32::INFINITY, -1.0]), Some((f32::INFINITY, 0)));
}

/// P4-f over a sampled scale space: exponents across the whole f32 range (subnormal scales
/// included) with random significands, accumulators at every magnitude and at the edges
/// (0, ±1, ±2^24 ± 1, ±(2^31 − 1)), then the constructed rows; every value's bits equal the exact
/// definition's, and the constructed double-rounding cases would be wrong without the fallback.
#[test]
fn certificate_float() {
    let mut rng = Rng::new(41);
    let edges = [0, 1, -1, (1 << 24) + 1, -(1 << 24) - 1, (1 << 24) - 1, i32::MAX, -i32::MAX, i32::MIN + 1];
    let mut checked = 0u64;
    for ex in (-149..=127).step_by(7) {
        for ew in (-149..=127).step_by(11) {
            let scale = |rng: &mut Rng, e: i32| ((((1u64 << 23) | rng.below(1 << 23)) as f64) * 2f64.powi(e - 23)) as f32;
            let (sx, sw) = (scale(&mut rng, ex).max(f32::from_bits(1)), scale(&mut rng, ew).max(f32::from_bits(1)));
            let randoms: Vec<i32> = (0..24).map(|_| (rng.next() as i32) >> rng.below(31)).collect();
            for &c in edges.iter().chain(&randoms) {
                let (got, _) = certified_f32(c, f64::from(sx) * f64::from(sw), sx, sw);
                assert_eq!(got.to_bits(), exact_f32(c, sx, sw).to_bits(), "C = {c}, sx = {sx:e}, sw = {sw:e}");
                checked += 1;
            }
        }
    }
    let (mut fallbacks, mut naive_wrong) = (0u64, 0u64);
    for i in 0..40_000 {
        let row = float_row(&mut rng, i, 16);
        for (&c, &sw) in row.acc.iter().zip(&row.sw) {
            let s = f64::from(row.sx) * f64::from(sw);
            let (got, fell) = certified_f32(c, s, row.sx, sw);
            let want = exact_f32(c, row.sx, sw);
            assert_eq!(got.to_bits(), want.to_bits(), "row {i}: C = {c}, sx = {:e}, sw = {sw:e}", row.sx);
            fallbacks += u64::from(fell);
            naive_wrong += u64::from(((f64::from(c) * s) as f32).to_bits() != want.to_bits());
            checked += 1;
        }
    }
    eprintln!("P4-f: {checked} values, {fallbacks} exact fallbacks, {naive_wrong} that the f64 product alone rounds wrong");
    assert!(naive_wrong > 1000, "the constructed double-rounding cases must defeat the plain f64 product ({naive_wrong})");
    assert!(fallbacks >= naive_wrong);
}

/// P4-f exhaustively over windows of accumulators — every `C` in `[−2^16, 2^16]`, around ±2^24
/// (where the Cast of the graph form starts rounding) and at the ends of i32 — for scale pairs
/// sampled at the corners of the f32 space: significands 1, 3, 2^24 − 1 and a random odd one;
/// exponents that put `C·sx·sw` among the subnormals, at the normal/subnormal edge, mid-range and
/// at the overflow boundary.
#[test]
fn certificate_float_windows() {
    let significands = [1u64 << 23, 3 << 22, (1 << 24) - 1, 0xB7_5A_C3];
    // sx·sw = m·2^(e − 46): C·sx·sw lands around 2^(e − 46 + log2 C + 48).
    let exponents = [(-149, -60), (-126, -40), (-60, -60), (-20, 10), (40, 50), (100, -9), (120, -20), (-149, 127)];
    let mut windows: Vec<i32> = (-(1 << 16)..=(1 << 16)).collect();
    for centre in [1i64 << 24, i64::from(i32::MAX) - (1 << 12)] {
        for c in centre - (1 << 12)..=(centre + (1 << 12)).min(i64::from(i32::MAX)) {
            windows.extend([c as i32, -(c as i32)]);
        }
    }
    let (mut checked, mut fallbacks) = (0u64, 0u64);
    for (i, &(ex, ew)) in exponents.iter().enumerate() {
        for j in 0..2 {
            let (mx, mw) = (significands[(i + j) % 4], significands[(i + 2 * j + 1) % 4]);
            let scale = |m: u64, e: i32| (m as f64 * 2f64.powi(e - 23)) as f32;
            let (sx, sw) = (scale(mx, ex), scale(mw, ew));
            assert!(sx > 0.0 && sw > 0.0 && sx.is_finite() && sw.is_finite(), "{sx:e} {sw:e}");
            let s = f64::from(sx) * f64::from(sw);
            for &c in &windows {
                let (got, fell) = certified_f32(c, s, sx, sw);
                assert_eq!(got.to_bits(), exact_f32(c, sx, sw).to_bits(), "C = {c}, sx = {sx:e}, sw = {sw:e}");
                fallbacks += u64::from(fell);
                checked += 1;
            }
        }
    }
    eprintln!("P4-f windows: {checked} values, {fallbacks} exact fallbacks");
    assert!(fallbacks > 0);
}

/// P4-q with ratios made per row at run time, on every path: the codes equal `requant_exact`.
#[test]
fn certificate_codes() {
    for isa in Isa::available() {
        let Some(kern) = kernels(isa) else { continue };
        let mut rng = Rng::new(43);
        let mut fallbacks = 0;
        for i in 0..6_000 {
            let (code, zy) = if i % 2 == 0 { (Code::U8, rng.below(256) as i32) } else { (Code::I8, rng.below(256) as i32 - 128) };
            let output = Output::new(zy, code).unwrap();
            let row = codes_row(&mut rng, i, 24, (zy, code.min(), code.max()));
            let want: Vec<i32> = row
                .acc
                .iter()
                .zip(&row.sw)
                .map(
                    |(&c, &sw)| {
                        if row.sx == 0.0 { zy.clamp(code.min(), code.max()) } else { requant_exact(c, 0, &Ratio::new(row.sx, sw, row.sy).unwrap(), output) }
                    },
                )
                .collect();
            let got: Vec<i32> = if code == Code::U8 {
                let mut out = vec![0u8; 24];
                fallbacks += qdqc_kernels::dynamic::codes_row(kern, row.sx, &row.sw, row.sy, output, &row.acc, &mut out).unwrap();
                out.into_iter().map(i32::from).collect()
            } else {
                let mut out = vec![0i8; 24];
                fallbacks += qdqc_kernels::dynamic::codes_row(kern, row.sx, &row.sw, row.sy, output, &row.acc, &mut out).unwrap();
                out.into_iter().map(i32::from).collect()
            };
            assert_eq!(got, want, "{isa}: row {i}, sx = {:e}, sw = {:?}, sy = {:e}, acc = {:?}", row.sx, row.sw, row.sy, row.acc);
        }
        assert!(fallbacks > 10_000, "{isa}: the constructed ties must reach the exact fallback ({fallbacks})");
    }
}

/// ORT's DynamicQuantizeLinear written out again from `qmath.h` for the reference (per row or
/// per tensor).
fn reference_quantize(x: &[f32]) -> (Vec<u8>, f32, i64) {
    let lo = x.iter().fold(f32::MAX, |a, &b| a.min(b)).min(0.0);
    let hi = x.iter().fold(f32::MIN, |a, &b| a.max(b)).max(0.0);
    let s = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let z = (-(lo / s)).clamp(0.0, 255.0).round_ties_even();
    let q = x.iter().map(|&v| ((v / s).round_ties_even() + z).clamp(0.0, 255.0) as u8).collect();
    (q, s, z as i64)
}

/// ONNX's DynamicQuantizeLinear function body per row with the i8 range (`Recipe::Asymmetric`).
const SIGNED_ROWS: Recipe = Recipe::Asymmetric { signed: true, divisor: 0x437f_0000, offset: 0xc300_0000, lo: -128, hi: 127 };

/// [`SIGNED_ROWS`] written out with plain f32 operations, its i8 codes and zero point shifted by
/// +128 (the kernel's u8 form).
fn reference_signed_rows(x: &[f32]) -> (Vec<u8>, f32, i64) {
    let mn = x.iter().copied().fold(f32::INFINITY, f32::min).min(0.0);
    let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max).max(0.0);
    let s = (mx - mn) / 255.0;
    let z = (-128.0 - mn / s).clamp(-128.0, 127.0).round_ties_even() as i64;
    let q = x.iter().map(|&v| ((v / s).round_ties_even() as i64 + z).clamp(-128, 127) + 128).map(|v| v as u8).collect();
    (q, s, z + 128)
}

/// The group on every path, the three granularities and the three epilogues, against the reference
/// quantization, an i64 GEMM, and per element: the literal f32 steps (`Graph`), `rne_f32` of the
/// exact product (`Real`), `rne` of the exact fraction (`Codes`).
#[test]
fn group_end_to_end() {
    let (m, k, n) = (37, 70, 21);
    for isa in Isa::available() {
        let Some(kern) = kernels(isa) else { continue };
        for (seed, granularity) in [(1, Granularity::Tensor), (2, Granularity::Row), (3, Granularity::RowBy(SIGNED_ROWS))] {
            let mut rng = Rng::new(seed);
            // Rows of different ranges, some all-negative or all-positive (zx at an end).
            let x: Vec<f32> = (0..m).flat_map(|r| rng.f32s(k, -3.0 + (r % 5) as f32, 0.5 + (r % 3) as f32 * 2.0)).collect();
            let w: Vec<i8> = rng.i8s(k * n);
            let zw: Vec<i8> = (0..n).map(|_| rng.below(21) as i8 - 10).collect();
            let sw: Vec<f32> = (0..n).map(|_| rng.f32_in(0.001, 0.02)).collect();
            let packed = PackedB::from_i8(&w, k, n, Layout::KN, &zw).unwrap();
            let rows: Vec<(Vec<u8>, f32, i64)> = match granularity {
                Granularity::Tensor => {
                    let (q, s, z) = reference_quantize(&x);
                    q.chunks(k).map(|r| (r.to_vec(), s, z)).collect()
                }
                Granularity::Row => x.chunks(k).map(reference_quantize).collect(),
                Granularity::RowBy(_) => x.chunks(k).map(reference_signed_rows).collect(),
            };
            let wide: Vec<i64> = w.iter().map(|&v| i64::from(v)).collect();
            let zwide: Vec<i64> = zw.iter().map(|&v| i64::from(v)).collect();
            let cs: Vec<Vec<i64>> = rows.iter().map(|(q, _, z)| gemm_reference(q, 1, k, *z, &wide, n, &zwide)).collect();
            let (sy, zy) = (0.37f32, 3);
            for epilogue in [Epilogue::Graph, Epilogue::Real, Epilogue::Codes { sy, output: Output::new(zy, Code::I8).unwrap() }] {
                let group = DynamicMatMul::new(&packed, &sw, granularity, epilogue).unwrap();
                let (mut codes, mut c) = (vec![0u8; m * k], vec![0i32; m * n]);
                if let Epilogue::Codes { .. } = epilogue {
                    let mut out = vec![0i8; m * n];
                    group.run(kern, &x, m, &packed, &mut codes, &mut c, &mut out).unwrap();
                    for (r, (_, sx, _)) in rows.iter().enumerate() {
                        for col in 0..n {
                            let ((nx, px), (nw, pw), (ny, py)) = (as_fraction(*sx), as_fraction(sw[col]), as_fraction(sy));
                            let v = rne(i128::from(cs[r][col]) * nx * nw * (1 << py), ny * (1i128 << (px + pw)));
                            let want = (v + i128::from(zy)).clamp(-128, 127) as i8;
                            assert_eq!(out[r * n + col], want, "{isa} {granularity:?}: row {r}, column {col}");
                        }
                    }
                } else {
                    let mut out = vec![0f32; m * n];
                    group.run_f32(kern, &x, m, &packed, &mut codes, &mut c, &mut out).unwrap();
                    for (r, (_, sx, _)) in rows.iter().enumerate() {
                        for col in 0..n {
                            let acc = cs[r][col] as i32;
                            let want = match epilogue {
                                Epilogue::Graph => acc as f32 * (sx * sw[col]),
                                _ => {
                                    let ((nx, px), (nw, pw)) = (as_fraction(*sx), as_fraction(sw[col]));
                                    qdqc_kernels::a8w8::rne_f32(i128::from(acc) * nx * nw, -((px + pw) as i32))
                                }
                            };
                            assert_eq!(out[r * n + col].to_bits(), want.to_bits(), "{isa} {granularity:?} {epilogue:?}: row {r}, column {col}");
                        }
                    }
                }
            }
        }
    }
}
