//! `gemm_u8_requant` (the requantization fused per finished block on the VNNI path and on the
//! AVX2 one from 32 rows) against its definition on every path: `gemm_u8`, then `requant_exact`
//! element by element; per-tensor and per-column scales, with and without bias, scales that put
//! values on ties (exact fallbacks), shapes around the 6 × 64 and 6 × 16 tiles (partial rows and
//! panels), the K blocks (K = 9000: three on AVX2, the corrections after the last) and the
//! one-row (GEMV) tiles, the AMX tiles' 32 × 128 blocks (their own buffer; with symmetric
//! weights the pairs of whole panels start from the column corrections, the others are finished
//! in place: (70, 600, 300) has 3 blocks of rows and of columns, the last of 3 panels, 12 columns
//! in the last); ratios in the f32
//! form's range and below it (the f64 form); the requantization made per call and made once
//! (`gemm_u8_requant_prepared`, what generated code calls).

mod common;

use common::{Rng, kernels};
use qdqc_kernels::requant::{Certified, CodeOut, Form, Output, Plan, Prepared, Ratio, requant_exact};
use qdqc_kernels::{Isa, Layout, PackedB, gemm_u8, gemm_u8_requant, gemm_u8_requant_prepared};

#[allow(clippy::too_many_arguments)] // the case's operands, spelled out
fn case<C: CodeOut + PartialEq + std::fmt::Debug>(
    isa: Isa,
    rng: &mut Rng,
    m: usize,
    k: usize,
    n: usize,
    per_column: bool,
    with_bias: bool,
    scales: (f32, f32, f32),
    zy: i32,
    symmetric: bool,
) {
    let Some(kern) = kernels(isa) else { return };
    let a = rng.u8s(m * k);
    let b = rng.i8s(k * n);
    let zb = match (symmetric, per_column) {
        (true, _) => vec![0],
        (false, true) => rng.i8s(n),
        (false, false) => vec![rng.next() as i8],
    };
    let za = rng.next() as u8;
    let packed = PackedB::from_i8(&b, k, n, Layout::KN, &zb).unwrap();
    let mut acc = vec![0i32; m * n];
    gemm_u8(kern, &a, m, za, &packed, &mut acc).unwrap();
    let (sx, sw, sy) = scales;
    let ratios: Vec<Ratio> = (0..if per_column { n } else { 1 }).map(|c| Ratio::new(sx, sw * (1.0 + (c % 5) as f32 / 4.0), sy).unwrap()).collect();
    let bias: Vec<i32> = (0..n).map(|_| (rng.next() % 20001) as i32 - 10000).collect();
    let output = Output::new(zy, C::CODE).unwrap();
    let plan = Plan { output, form: Form::Certified(ratios.iter().map(|&r| Certified::new(r)).collect()) };
    let mut c = vec![0i32; m * n];
    let mut got = vec![C::from_code(0); m * n];
    gemm_u8_requant(kern, &a, m, za, &packed, &plan, with_bias.then_some(&bias[..]), &mut c, &mut got).unwrap();
    let want: Vec<C> = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let col = i % n;
            let b = if with_bias { bias[col] } else { 0 };
            C::from_code(requant_exact(v, b, &ratios[if per_column { col } else { 0 }], output))
        })
        .collect();
    assert_eq!(got, want, "{isa}: m={m} k={k} n={n}");
    let prepared = Prepared::new(plan, if with_bias { bias } else { vec![0; n] }).unwrap();
    let mut once = vec![C::from_code(0); m * n];
    gemm_u8_requant_prepared(kern, &a, m, za, &packed, &prepared, &mut c, &mut once).unwrap();
    assert_eq!(once, want, "{isa}, prepared: m={m} k={k} n={n}");
}

fn suite(isa: Isa) {
    let mut rng = Rng::new(21);
    let ties = (0.5, 0.0625, 0.5);
    let plain = (0.0213, 0.00391, 0.0517);
    // sx·sw/sy below 2^-100: the f64 form (the product of a bias of 2^13 and 2^30 accumulators is
    // still below a code, so zy comes out: the form taken, not its numbers, is what this covers).
    let tiny = (1e-20, 1e-20, 1.0);
    for &(m, k, n) in &[
        (1, 1, 1),
        (1, 40, 100),
        (1, 700, 130),
        (5, 33, 63),
        (6, 4, 64),
        (7, 129, 65),
        (13, 500, 130),
        (64, 96, 48),
        (20, 1000, 200),
        (37, 300, 70),
        (40, 9000, 20),
        (70, 600, 300),
    ] {
        case::<u8>(isa, &mut rng, m, k, n, true, true, plain, 128, false);
        case::<i8>(isa, &mut rng, m, k, n, false, true, ties, -2, false);
        case::<u8>(isa, &mut rng, m, k, n, true, false, ties, 0, false);
        case::<i8>(isa, &mut rng, m, k, n, true, true, tiny, 5, false);
        case::<u8>(isa, &mut rng, m, k, n, true, true, plain, 128, true);
    }
}

#[test]
fn portable() {
    suite(Isa::Portable)
}

#[test]
fn avx2() {
    suite(Isa::Avx2)
}

#[test]
fn avx512vnni() {
    suite(Isa::Avx512Vnni)
}

#[test]
fn avx512amx() {
    suite(Isa::Avx512Amx)
}

/// Biases at the ends of i32, where `acc + bias` overflows i32 for some accumulators (the
/// vector blocks must flag the sum and let the exact form decide), and small ones, on every
/// path, fused (from 32 rows on AVX2) and not: every code equals the exact form of the true sum.
#[test]
fn biases_at_the_i32_ends() {
    let mut rng = Rng::new(29);
    for isa in Isa::ALL {
        let Some(kern) = kernels(isa) else { continue };
        for (m, k, n) in [(40, 300, 48), (7, 33, 20)] {
            let a = rng.u8s(m * k);
            let b = rng.i8s(k * n);
            let packed = PackedB::from_i8(&b, k, n, Layout::KN, &[3]).unwrap();
            let za = 117;
            let mut acc = vec![0i32; m * n];
            gemm_u8(kern, &a, m, za, &packed, &mut acc).unwrap();
            assert!(acc.iter().any(|&v| v > 600) && acc.iter().any(|&v| v < -600), "sums on both sides of ±600");
            for big in [true, false] {
                let bias: Vec<i32> = (0..n as i32)
                    .map(|c| {
                        if !big {
                            c - 20
                        } else if c % 2 == 0 {
                            i32::MAX - 500
                        } else {
                            i32::MIN + 500
                        }
                    })
                    .collect();
                let ratio = Ratio::new(0.0213, 0.00391, 0.0517).unwrap();
                let output = Output::new(128, qdqc_kernels::requant::Code::U8).unwrap();
                let plan = Plan { output, form: Form::Certified(vec![Certified::new(ratio)]) };
                let want: Vec<u8> = acc.iter().enumerate().map(|(i, &v)| requant_exact(v, bias[i % n], &ratio, output) as u8).collect();
                let (mut c, mut got) = (vec![0i32; m * n], vec![0u8; m * n]);
                gemm_u8_requant(kern, &a, m, za, &packed, &plan, Some(&bias), &mut c, &mut got).unwrap();
                assert_eq!(got, want, "{isa}: m={m} k={k} n={n}, biases at the ends {big}");
            }
        }
    }
}
