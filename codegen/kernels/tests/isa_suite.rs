//! One suite, instantiated for every kernel path (tract-linalg style): each path against an i64
//! reference, on random, adversarial and wrapping inputs; then every path the host has against
//! the others, byte for byte.

mod common;

use common::{Rng, conv_attrs as params, conv_reference, gemm_reference, kernels};
use qdqc_kernels::conv::{ConvParams, PackedConv};
use qdqc_kernels::{Isa, Kernels, Layout, PackedB, accumulator_bound, gemm_u8};

/// i8 weights against the reference; `zb` one value or one per column.
#[allow(clippy::too_many_arguments)] // the GEMM's operands, spelled out
fn check_i8(kern: Kernels, a: &[u8], m: usize, k: usize, za: u8, b: &[i8], n: usize, zb: &[i8]) {
    let packed = PackedB::from_i8(b, k, n, Layout::KN, zb).unwrap();
    let mut c = vec![0i32; m * n];
    gemm_u8(kern, a, m, za, &packed, &mut c).unwrap();
    let bw: Vec<i64> = b.iter().map(|&v| i64::from(v)).collect();
    let zw: Vec<i64> = zb.iter().map(|&v| i64::from(v)).collect();
    let want = gemm_reference(a, m, k, i64::from(za), &bw, n, &zw);
    for (i, (&got, &want)) in c.iter().zip(&want).enumerate() {
        // Exact modulo 2^32 always; exact outright when the reference fits (asserted by the callers' shapes).
        assert_eq!(got, want as i32, "{}: m={m} k={k} n={n} za={za}: C[{}][{}] = {got}, want {want}", kern.path(), i / n, i % n);
    }
}

fn random_shapes(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(1);
    // Tails on every axis: m around the 6-row tiles, k around groups of 4, n around 8/16/64
    // columns; one-row products with 1 to 13 panels (the 8-panel GEMV tiles and their tails).
    let shapes = [(1, 1, 1), (1, 3, 5), (2, 7, 17), (3, 64, 16), (5, 33, 63), (6, 4, 64), (7, 129, 65), (13, 250, 130), (1, 1000, 200), (64, 96, 48)];
    let gemv = [(1, 40, 100), (1, 9, 96), (1, 17, 128), (1, 64, 129), (1, 5, 80)];
    // Row strides that are multiples of 1 KiB (K = 2048 widened to i16 on AVX2 is padded by a
    // line; VNNI reads rows 4 KiB apart in place).
    let strided = [(7, 1024, 40), (3, 2048, 17), (13, 1021, 64), (5, 4096, 20)];
    // K around the K blocks (AVX2: 128 groups below 32 rows, 2048 pairs of k from 32 rows on;
    // VNNI: 1024 groups) with K not a multiple of 4, and panels of exactly 4 KiB (K in 253..=256:
    // packed with a padding row). (40, 2050, 150): 7 row tiles sharing the next block's
    // prefetches, 10 panels; (11, 1100, 45): 3 K blocks on AVX2 (the last of 19 groups) added
    // into a last panel of 13 columns; (35, 4101, 45): AVX2's weights widened per panel, 2 K
    // blocks (the second of 4 pairs) added into a last panel of 13 columns (both halves masked),
    // rows 5 × 6 + 5; (33, 70, 8) and (38, 1021, 100): last panels of 8 and 4 columns, row tails
    // of 3 and 2; (8, 4099, 40): 2 K blocks on VNNI; (131, 4096, 24): 2 blocks of rows on VNNI
    // (128 + 3). AMX (from 8 rows and K = 256; tiles of 16 rows × 64 k, 2 × 2 tiles of 32 ×
    // 32; K in blocks of 8 steps; with every zb zero, pairs of whole panels stored straight
    // into C, the others finished by vector code): (32, 256, 32) four full tile steps; (48,
    // 4096, 40) 64 steps in 8 blocks, rows 32 + 16, a last panel of 8 columns; (16, 300, 48) one tile of rows, a K tail of 44 read against the next
    // panels' groups, the last panel's from its zero-padded copy; (200, 4096, 33) two blocks of
    // rows (128 + 72); (9, 1000, 16) 9 rows, one panel.
    let blocks = [
        (32, 256, 32),
        (48, 4096, 40),
        (16, 300, 48),
        (200, 4096, 33),
        (9, 1000, 16),
        (9, 1025, 70),
        (8, 513, 33),
        (14, 1543, 100),
        (2, 515, 20),
        (6, 256, 80),
        (1, 255, 300),
        (19, 253, 17),
        (40, 2050, 150),
        (11, 1100, 45),
        (35, 4101, 45),
        (33, 70, 8),
        (38, 1021, 100),
        (8, 4099, 40),
        (131, 4096, 24),
    ];
    for &(m, k, n) in shapes.iter().chain(&gemv).chain(&strided).chain(&blocks) {
        for per_column in [false, true] {
            let a = rng.u8s(m * k);
            let b = rng.i8s(k * n);
            let zb = if per_column { rng.i8s(n) } else { vec![rng.next() as i8] };
            check_i8(kern, &a, m, k, rng.next() as u8, &b, n, &zb);
            check_i8(kern, &a, m, k, 0, &b, n, &[0]);
            // Symmetric weights under an activation zero point (real models' usual case): only
            // the column term of the corrections.
            check_i8(kern, &a, m, k, rng.next() as u8, &b, n, &[0]);
        }
    }
}

/// Full-range weights with same-sign adjacent pairs and 255 activations: every int16-pair
/// saturating kernel (`vpmaddubsw`) gets these wrong.
fn adversarial(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let (m, k, n) = (4, 256, 32);
    let a = vec![255u8; m * k];
    for w in [127i8, -128, -127] {
        let b = vec![w; k * n];
        check_i8(kern, &a, m, k, 0, &b, n, &[0]);
        check_i8(kern, &a, m, k, 3, &b, n, &[-128]);
    }
    let alternating: Vec<i8> = (0..k * n).map(|i| if (i / n) % 3 == 0 { -128 } else { 127 }).collect();
    check_i8(kern, &a, m, k, 255, &alternating, n, &[127]);
}

fn u8_weights(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(2);
    for &(m, k, n) in &[(1, 5, 3), (6, 128, 64), (9, 77, 33)] {
        let a = rng.u8s(m * k);
        let b = rng.u8s(k * n);
        let zb = rng.u8s(n);
        for (zb, za) in [(&zb[..], 128u8), (&[128u8][..], 0), (&[0u8][..], 255)] {
            let packed = PackedB::from_u8(&b, k, n, Layout::KN, zb).unwrap();
            let mut c = vec![0i32; m * n];
            gemm_u8(kern, &a, m, za, &packed, &mut c).unwrap();
            let bw: Vec<i64> = b.iter().map(|&v| i64::from(v)).collect();
            let zw: Vec<i64> = zb.iter().map(|&v| i64::from(v)).collect();
            let want: Vec<i32> = gemm_reference(&a, m, k, i64::from(za), &bw, n, &zw).into_iter().map(|v| v as i32).collect();
            assert_eq!(c, want, "{isa}: u8 weights m={m} k={k} n={n}");
        }
    }
}

/// K large enough that the sums leave i32: every path wraps the same way (exact modulo 2^32),
/// and `accumulator_bound` reports the overflow.
fn wrapping(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let (m, k, n) = (2, 70_001, 17);
    let a = vec![255u8; m * k];
    let b = vec![-128i8; k * n];
    let packed = PackedB::from_i8(&b, k, n, Layout::KN, &[0]).unwrap();
    assert!(accumulator_bound(&packed, 0) > i64::from(i32::MAX));
    let mut c = vec![0i32; m * n];
    gemm_u8(kern, &a, m, 0, &packed, &mut c).unwrap();
    let exact = -255i64 * 128 * k as i64;
    assert!(exact < i64::from(i32::MIN));
    assert!(c.iter().all(|&v| v == exact as i32), "{isa}: {} != {}", c[0], exact as i32);
}

fn conv_case(kern: Kernels, rng: &mut Rng, p: ConvParams, batch: usize, input: &[usize], per_channel: bool) {
    let zw = if per_channel { rng.i8s(p.out_channels) } else { vec![rng.next() as i8] };
    conv_case_zw(kern, rng, p, batch, input, zw);
}

/// [`conv_case`] with the weight zero points `zw` (one, or one per output channel).
fn conv_case_zw(kern: Kernels, rng: &mut Rng, p: ConvParams, batch: usize, input: &[usize], zw: Vec<i8>) {
    let ksz: usize = p.kernel.iter().product();
    let x = rng.u8s(batch * p.in_channels * input.iter().product::<usize>());
    let w = rng.i8s(p.out_channels * p.in_channels / p.groups * ksz);
    let zx = rng.next() as u8;
    let conv = PackedConv::from_i8(p.clone(), &w, &zw).unwrap();
    let osz: usize = p.output(input).unwrap().iter().product();
    let mut y = vec![0i32; batch * p.out_channels * osz];
    conv.run(kern, &x, batch, input, zx, &mut y).unwrap();
    let wi: Vec<i64> = w.iter().map(|&v| i64::from(v)).collect();
    let zi: Vec<i64> = zw.iter().map(|&v| i64::from(v)).collect();
    let want: Vec<i32> = conv_reference(&p, &x, batch, input, i64::from(zx), &wi, &zi).into_iter().map(|v| v as i32).collect();
    assert_eq!(y, want, "{}: {p:?} input {input:?}", kern.path());
}

fn convolutions(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(3);
    // 2-D: plain 3x3 pad 1; stride 2 with asymmetric pads; dilation 2; groups 2; depthwise; depthwise ×2 multiplier; 1x1.
    conv_case(kern, &mut rng, params(3, 8, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), 2, &[7, 6], false);
    conv_case(kern, &mut rng, params(4, 5, 1, &[3, 2], &[2, 2], &[1, 1], &[0, 1], &[2, 0]), 1, &[9, 8], true);
    conv_case(kern, &mut rng, params(2, 3, 1, &[3, 3], &[1, 2], &[2, 2], &[2, 1], &[2, 1]), 1, &[8, 9], true);
    conv_case(kern, &mut rng, params(4, 6, 2, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), 2, &[5, 5], true);
    conv_case(kern, &mut rng, params(8, 8, 8, &[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1]), 1, &[10, 11], true);
    conv_case(kern, &mut rng, params(4, 8, 4, &[5, 5], &[1, 1], &[1, 1], &[2, 2], &[2, 2]), 1, &[6, 6], false);
    conv_case(kern, &mut rng, params(32, 40, 1, &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[0, 0]), 1, &[4, 5], true);
    // Column phases of the shifted lowering: stride 3 under a 4-wide kernel with pads that end
    // mid-phase; stride 2 under a 2-wide kernel, rows strided 2 without a tap between them; 1-D
    // stride 2 over 40 columns (several 16-position panels per line, the last one short).
    conv_case(kern, &mut rng, params(7, 13, 1, &[3, 4], &[1, 3], &[1, 1], &[0, 2], &[1, 1]), 1, &[6, 23], true);
    conv_case(kern, &mut rng, params(5, 6, 1, &[1, 2], &[2, 2], &[1, 1], &[0, 0], &[0, 1]), 2, &[9, 40], true);
    conv_case(kern, &mut rng, params(9, 10, 1, &[3], &[2], &[1], &[1], &[2]), 1, &[81], true);
    // Symmetric weights (zero points 0: the paths skip the activations' sums), packed and shifted.
    conv_case_zw(kern, &mut rng, params(5, 9, 1, &[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1]), 2, &[11, 9], vec![0]);
    conv_case_zw(kern, &mut rng, params(6, 7, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), 1, &[8, 10], vec![0; 7]);
    // Depthwise (direct path): dilation 2 with stride 1; stride 3 with a kernel wider than the
    // padded edges; a kernel larger than the input (only padded taps at the borders).
    conv_case(kern, &mut rng, params(5, 5, 5, &[3, 3], &[1, 1], &[2, 2], &[2, 2], &[2, 2]), 2, &[9, 7], true);
    conv_case(kern, &mut rng, params(3, 6, 3, &[4, 5], &[3, 2], &[1, 1], &[0, 3], &[3, 1]), 1, &[11, 10], true);
    conv_case(kern, &mut rng, params(2, 2, 2, &[5, 5], &[1, 1], &[1, 1], &[4, 4], &[4, 4]), 1, &[3, 2], false);
    conv_case(kern, &mut rng, params(4, 4, 4, &[7], &[2], &[3], &[9], &[0]), 3, &[30], true);
    // Depthwise with stride 2 and dilation 2 along the last axis (the phases of a framed line).
    conv_case(kern, &mut rng, params(4, 4, 4, &[3, 3], &[2, 2], &[2, 2], &[2, 1], &[1, 2]), 1, &[9, 13], true);
    // Depthwise over planes of many 64-output runs (full and partial ones, the taps summed in
    // registers): 3×3 and 5×5 stride 1 on 24×48 (OCR's shapes), 5×5 stride 2, and 3-D stride 1
    // (one flat run per depth slice, the last one past the spare line).
    conv_case(kern, &mut rng, params(3, 3, 3, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), 1, &[24, 48], true);
    conv_case(kern, &mut rng, params(2, 4, 2, &[5, 5], &[1, 1], &[1, 1], &[2, 2], &[2, 2]), 1, &[24, 48], false);
    conv_case(kern, &mut rng, params(3, 3, 3, &[5, 5], &[2, 2], &[1, 1], &[2, 2], &[2, 2]), 1, &[24, 47], true);
    conv_case(kern, &mut rng, params(2, 2, 2, &[3, 3, 3], &[1, 1, 1], &[1, 1, 1], &[1, 0, 1], &[1, 2, 0]), 1, &[3, 9, 20], true);
    // 3-D depthwise with strides and a dilation along depth (the per-line offsets of the taps).
    conv_case(kern, &mut rng, params(3, 3, 3, &[2, 3, 3], &[2, 2, 1], &[2, 1, 2], &[1, 1, 0], &[0, 1, 1]), 1, &[6, 7, 9], true);
    // 1-D: audio-style stride and dilation; 3-D: small volume with groups.
    conv_case(kern, &mut rng, params(3, 4, 1, &[5], &[3], &[2], &[4], &[1]), 2, &[40], true);
    conv_case(kern, &mut rng, params(6, 4, 2, &[3], &[1], &[1], &[1], &[1]), 1, &[17], false);
    conv_case(kern, &mut rng, params(2, 4, 2, &[2, 3, 3], &[1, 2, 1], &[1, 1, 2], &[1, 1, 2], &[0, 1, 2]), 1, &[4, 6, 7], true);
    // Stride 1 along the last axis (the shifted layout): lines longer than a panel and not a
    // multiple of 16, channels not a multiple of 4 or of the 8-row tile, stride 2 and dilation 2
    // on other axes, asymmetric pads, a pointwise convolution (one line), groups, a large K (an
    // 11×11 kernel as RivaGAN's, K = 968), per-tensor and per-channel zero points.
    conv_case(kern, &mut rng, params(13, 19, 1, &[5, 5], &[2, 1], &[1, 2], &[2, 3], &[1, 4]), 2, &[11, 37], true);
    conv_case(kern, &mut rng, params(37, 10, 1, &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[0, 0]), 1, &[9, 7], false);
    conv_case(kern, &mut rng, params(6, 9, 3, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), 2, &[8, 17], true);
    conv_case(kern, &mut rng, params(8, 9, 1, &[1, 11, 11], &[1, 1, 1], &[1, 1, 1], &[0, 5, 5], &[0, 5, 5]), 1, &[1, 20, 35], true);
    conv_case(kern, &mut rng, params(5, 3, 1, &[2, 2, 3], &[2, 1, 1], &[1, 1, 1], &[1, 0, 2], &[0, 1, 0]), 1, &[5, 4, 33], false);
}

/// uint8 weights in a convolution: the shift to int8 is exact.
fn convolution_u8_weights(isa: Isa) {
    let Some(kern) = kernels(isa) else { return };
    let mut rng = Rng::new(4);
    let p = params(4, 6, 2, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]);
    let x = rng.u8s(4 * 25);
    let w = rng.u8s(6 * 2 * 9);
    let zw = rng.u8s(6);
    let conv = PackedConv::from_u8(p.clone(), &w, &zw).unwrap();
    let mut y = vec![0i32; 6 * 25];
    conv.run(kern, &x, 1, &[5, 5], 7, &mut y).unwrap();
    let wi: Vec<i64> = w.iter().map(|&v| i64::from(v)).collect();
    let zi: Vec<i64> = zw.iter().map(|&v| i64::from(v)).collect();
    let want: Vec<i32> = conv_reference(&p, &x, 1, &[5, 5], 7, &wi, &zi).into_iter().map(|v| v as i32).collect();
    assert_eq!(y, want, "{isa}");
}

macro_rules! suite {
    ($($module:ident => $isa:expr),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[test] fn gemm_random_shapes() { random_shapes($isa) }
            #[test] fn gemm_adversarial_pairs() { adversarial($isa) }
            #[test] fn gemm_u8_weights() { u8_weights($isa) }
            #[test] fn gemm_wraps_modulo_2_32() { wrapping($isa) }
            #[test] fn conv_against_definition() { convolutions($isa) }
            #[test] fn conv_u8_weights() { convolution_u8_weights($isa) }
        }
    )*};
}

suite! {
    portable => Isa::Portable,
    avx2 => Isa::Avx2,
    avx512vnni => Isa::Avx512Vnni,
    avx512amx => Isa::Avx512Amx,
}

/// Every path the host has gives the same bytes on the same random problems, including shapes
/// no reference above covers.
#[test]
fn paths_agree_byte_for_byte() {
    let paths: Vec<Kernels> = Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()).collect();
    assert!(!paths.is_empty());
    let mut rng = Rng::new(5);
    for _ in 0..40 {
        let (m, k, n) = (1 + rng.below(40) as usize, 1 + rng.below(600) as usize, 1 + rng.below(150) as usize);
        let a = rng.u8s(m * k);
        let b = rng.i8s(k * n);
        let zb = rng.i8s(n);
        let za = rng.next() as u8;
        let packed = PackedB::from_i8(&b, k, n, Layout::KN, &zb).unwrap();
        // A clone (its own 64-byte alignment) computes the same on every path.
        let copy = packed.clone();
        let outs: Vec<Vec<i32>> = paths
            .iter()
            .flat_map(|&kern| [&packed, &copy].map(|p| (kern, p)))
            .map(|(kern, p)| {
                let mut c = vec![0i32; m * n];
                gemm_u8(kern, &a, m, za, p, &mut c).unwrap();
                c
            })
            .collect();
        for (i, out) in outs.iter().enumerate().skip(1) {
            assert!(out == &outs[0], "{} (copy: {}) differs from {} at m={m} k={k} n={n}", paths[i / 2].path(), i % 2 == 1, paths[0].path());
        }
    }
}

/// `QDQC_KERNELS_ISA` values: names parse, an unknown name and a path the host lacks are refused.
#[test]
fn isa_setting() {
    assert_eq!(Kernels::from_setting(Some("portable")).unwrap().isa(), Isa::Portable);
    assert_eq!(Kernels::from_setting(None).unwrap(), Kernels::detect());
    assert_eq!(Kernels::from_setting(Some("")).unwrap(), Kernels::detect());
    assert!(Kernels::from_setting(Some("sse9")).unwrap_err().to_string().contains("expected portable, avx2, avx512vnni or avx512amx"));
    for isa in Isa::ALL {
        assert_eq!(Kernels::from_setting(Some(isa.name())).is_ok(), isa.is_available(), "{isa}");
    }
    assert!(Isa::available().contains(&Kernels::detect().path()));
    // Every kernel but the GEMM's tiles dispatches on `isa()`: the AMX path runs VNNI's.
    for isa in Isa::available() {
        let k = Kernels::new(isa).unwrap();
        assert_eq!((k.path(), k.isa()), (isa, if isa == Isa::Avx512Amx { Isa::Avx512Vnni } else { isa }));
    }
}
