//! The AVX2 path's pair split (`src/split.rs`, `src/micro/avx2_split.rs`): weights as real models
//! have them — most pairs safe for `vpmaddubsw`, a few broken, some at the extremes — are split,
//! and every path gives the i64 reference's integers, with activations that saturate every
//! broken pair (255) and zero points on both sides; requantized (the fused epilogue of the AVX2
//! path, after the excess) as `requant_exact` of the reference.

mod common;

use common::{Rng, gemm_reference, kernels};
use qdqc_kernels::requant::{Certified, Code, Form, Output, Plan, Prepared, Ratio, requant_exact};
use qdqc_kernels::{Isa, Kernels, Layout, PackedB, gemm_u8, gemm_u8_requant, gemm_u8_requant_prepared};

/// `gemm_u8_requant` (per call and prepared) against `requant_exact` of the reference sums, per
/// column scales and a bias.
fn requantized(kern: Kernels, a: &[u8], m: usize, za: u8, packed: &PackedB, want: &[i64]) {
    let n = packed.n();
    let ratios: Vec<Ratio> = (0..n).map(|c| Ratio::new(0.0213, 0.0039 * (1.0 + (c % 7) as f32 / 6.0), 0.517).unwrap()).collect();
    let bias: Vec<i32> = (0..n).map(|c| (c as i32 * 7919) % 4001 - 2000).collect();
    let output = Output::new(128, Code::U8).unwrap();
    let plan = Plan { output, form: Form::Certified(ratios.iter().map(|&r| Certified::new(r)).collect()) };
    let expected: Vec<u8> = want.iter().enumerate().map(|(i, &v)| requant_exact(v as i32, bias[i % n], &ratios[i % n], output) as u8).collect();
    let (mut c, mut got) = (vec![0i32; m * n], vec![0u8; m * n]);
    gemm_u8_requant(kern, a, m, za, packed, &plan, Some(&bias), &mut c, &mut got).unwrap();
    assert!(got == expected, "{}: requantized m={m} n={n}", kern.path());
    let prepared = Prepared::new(plan, bias).unwrap();
    gemm_u8_requant_prepared(kern, a, m, za, packed, &prepared, &mut c, &mut got).unwrap();
    assert!(got == expected, "{}: prepared m={m} n={n}", kern.path());
}

/// Broken pairs (one weight beyond what `vpmaddubsw` sums exactly with its neighbour), each at
/// the edge of a bound or at the extremes.
const BROKEN: [(i8, i8); 6] = [(127, 127), (-128, -128), (127, 2), (-128, -1), (100, 29), (-100, -29)];

/// Mostly |w| ≤ 40, and a broken pair at every `every`-th pair of k.
fn weights(rng: &mut Rng, k: usize, n: usize, every: u64) -> Vec<i8> {
    let mut b: Vec<i8> = (0..k * n).map(|_| (rng.below(81) as i32 - 40) as i8).collect();
    for row in (0..k - 1).step_by(2) {
        for col in 0..n {
            if rng.below(every) == 0 {
                let (w0, w1) = BROKEN[rng.below(BROKEN.len() as u64) as usize];
                b[row * n + col] = w0;
                b[(row + 1) * n + col] = w1;
            }
        }
    }
    b
}

fn suite(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(11);
    // From 32 rows (the AVX2 path's wide products) with row tails of the 4-row tile and of the
    // 8-row excess blocks, K around groups of 4 and 8 (the transposed activations), last panels
    // of 5 and 1 columns, one panel of exactly 16, K = 1029 over 258 groups.
    for (m, k, n) in [(32, 70, 37), (37, 385, 16), (64, 384, 100), (70, 1029, 33), (33, 9, 17), (45, 260, 129)] {
        let a: Vec<u8> = (0..m * k).map(|_| if rng.below(2) == 0 { 255 } else { rng.next() as u8 }).collect();
        let b = weights(&mut rng, k, n, 24);
        let zb: Vec<i8> = (0..n).map(|_| (rng.below(9) as i32 - 4) as i8).collect();
        let za = rng.next() as u8;
        let packed = PackedB::from_i8(&b, k, n, Layout::KN, &zb).unwrap();
        // The split is x86's (the AVX2 path); elsewhere the sums are checked all the same.
        let entries = packed.split_entries(m).unwrap_or(0);
        assert!(!cfg!(target_arch = "x86_64") || entries > 0, "m={m} k={k} n={n}: a few broken pairs, split");
        let mut c = vec![0i32; m * n];
        gemm_u8(kern, &a, m, za, &packed, &mut c).unwrap();
        let bw: Vec<i64> = b.iter().map(|&v| i64::from(v)).collect();
        let zw: Vec<i64> = zb.iter().map(|&v| i64::from(v)).collect();
        let want = gemm_reference(&a, m, k, i64::from(za), &bw, n, &zw);
        for (i, (&got, &want)) in c.iter().zip(&want).enumerate() {
            assert_eq!(i64::from(got), want, "{isa}: m={m} k={k} n={n} ({entries} split entries): C[{}][{}]", i / n, i % n);
        }
        requantized(kern, &a, m, za, &packed, &want);
    }
    // uint8 weights near their zero point 128 (stored as b − 128: the same split).
    let (m, k, n) = (40, 200, 40);
    let a: Vec<u8> = (0..m * k).map(|_| if rng.below(2) == 0 { 255 } else { rng.next() as u8 }).collect();
    let b: Vec<u8> = weights(&mut rng, k, n, 20).iter().map(|&v| (i32::from(v) + 128) as u8).collect();
    let packed = PackedB::from_u8(&b, k, n, Layout::NK, &[128]).unwrap();
    assert!(!cfg!(target_arch = "x86_64") || packed.split_entries(m).is_some_and(|e| e > 0));
    let mut c = vec![0i32; m * n];
    gemm_u8(kern, &a, m, 7, &packed, &mut c).unwrap();
    // NK: b[col][row].
    let bw: Vec<i64> = (0..k * n).map(|i| i64::from(b[(i % n) * k + i / n])).collect();
    let want = gemm_reference(&a, m, k, 7, &bw, n, &[128]);
    assert!(c.iter().zip(&want).all(|(&g, &w)| i64::from(g) == w), "{isa}: u8 weights");
}

#[test]
fn portable() {
    suite(Isa::Portable);
}

#[test]
fn avx2() {
    suite(Isa::Avx2);
}

#[test]
fn avx512vnni() {
    suite(Isa::Avx512Vnni);
}

/// Uniform int8 weights break about a quarter of their pairs: no split (the AVX2 path keeps its
/// i16 kernel, whose sums the other suites check).
#[test]
fn uniform_weights_are_not_split() {
    let mut rng = Rng::new(3);
    let b = rng.i8s(256 * 64);
    assert_eq!(PackedB::from_i8(&b, 256, 64, Layout::KN, &[0]).unwrap().split_entries(64), None);
}
