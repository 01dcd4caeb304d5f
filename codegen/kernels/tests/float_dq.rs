//! The float Conv, ConvTranspose, MatMul, Gemm, element-wise arithmetic, BatchNormalization and
//! LayerNormalization reading a dequantized constant as its codes (`float::dq::Operand::Codes`,
//! decoded a block, a run or an element at a time) give the bits they give on the float copy
//! (`Operand::F32` of the decoded elements) — on every kernel path, for u8/i8 weights per tensor
//! and per channel, int32 biases, transposed operands, K and N beyond one cache block, broadcasts
//! and tails: decoding moves where a value is stored, never a rounding.

mod common;

use common::Rng;
use qdqc_kernels::conv::ConvParams;
use qdqc_kernels::float::conv::{conv, conv_operands};
use qdqc_kernels::float::conv_transpose::{ConvTransposeParams, conv_transpose, conv_transpose_operands};
use qdqc_kernels::float::dq::{Codes, Dequantized, Operand};
use qdqc_kernels::float::elementwise::{Binary, binary, binary_operands};
use qdqc_kernels::float::gemm::{GemmParams, gemm, gemm_operands, matmul, matmul_operands};
use qdqc_kernels::float::norm::{batch_norm, batch_norm_operands, layer_norm, layer_norm_operands};
use qdqc_kernels::{Isa, Kernels};

fn paths() -> Vec<Kernels> {
    Isa::ALL.into_iter().filter_map(common::kernels).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Codes of `len` elements with `channels` scales along a axis of `inner` elements per step
/// (non-power-of-two scales: the products and sums round), and their decoded float copy.
fn weights(rng: &mut Rng, len: usize, channels: usize, inner: usize, signed: bool) -> (Dequantized, Vec<f32>) {
    let scales: Vec<f32> = (0..channels).map(|_| rng.f32_in(1e-3, 3e-2)).collect();
    let zps: Vec<i64> = (0..channels).map(|_| if signed { 0 } else { rng.below(256) as i64 }).collect();
    let codes = if signed { Codes::I8(rng.i8s(len).into()) } else { Codes::U8(rng.u8s(len).into()) };
    let d = Dequantized::new(codes, scales, zps, inner).unwrap();
    let copy = d.to_vec();
    (d, copy)
}

fn bias(rng: &mut Rng, n: usize) -> (Dequantized, Vec<f32>) {
    let codes: Vec<i32> = (0..n).map(|_| (rng.below(200_001) as i32) - 100_000).collect();
    let d = Dequantized::new(Codes::I32(codes), vec![rng.f32_in(1e-6, 1e-4)], vec![], 1).unwrap();
    let copy = d.to_vec();
    (d, copy)
}

#[test]
fn matmul_on_codes_equals_matmul_on_the_float_copy() {
    let mut rng = Rng::new(7);
    for (m, k, n, channels) in [(1, 300, 600, 600), (5, 37, 65, 1), (9, 520, 130, 130), (4, 64, 24, 1)] {
        let a = rng.f32s(m * k, -1.0, 1.0);
        let (w, copy) = weights(&mut rng, k * n, channels, 1, channels > 1);
        for kernels in paths() {
            let (mut want, mut got) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            matmul(kernels, &a, &[m, k], &copy, &[k, n], &mut want).unwrap();
            matmul_operands(kernels, Operand::F32(&a), &[m, k], Operand::Codes(&w), &[k, n], &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: m={m} k={k} n={n}", kernels.path());
        }
    }
}

#[test]
fn gemm_on_codes_equals_gemm_on_the_float_copy_with_transposes_and_bias() {
    let mut rng = Rng::new(8);
    for (m, k, n, trans_a, trans_b) in [(3, 270, 530, false, true), (6, 33, 70, false, false), (2, 9, 5, true, true), (4, 300, 17, true, false)] {
        let a = rng.f32s(m * k, -1.0, 1.0);
        // Gemm's B per output column: along axis 0 of a transposed [n, k] weight, axis 1 of [k, n].
        let (w, copy) = if trans_b { weights(&mut rng, n * k, n, k, false) } else { weights(&mut rng, k * n, n, 1, true) };
        let (c, c_copy) = bias(&mut rng, n);
        let p = GemmParams { alpha: 1.0, beta: 1.0, trans_a, trans_b };
        let (a_shape, b_shape) = (if trans_a { [k, m] } else { [m, k] }, if trans_b { [n, k] } else { [k, n] });
        for kernels in paths() {
            let (mut want, mut got) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            gemm(kernels, &p, &a, a_shape, &copy, b_shape, Some((&c_copy, &[n])), &mut want).unwrap();
            gemm_operands(kernels, &p, Operand::F32(&a), a_shape, Operand::Codes(&w), b_shape, Some((Operand::Codes(&c), &[n])), &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: m={m} k={k} n={n} transA={trans_a} transB={trans_b}", kernels.path());
            // A dequantized A (the weight on the left) too.
            let (wa, wa_copy) = weights(&mut rng, m * k, 1, 1, false);
            let (mut want, mut got) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            gemm(kernels, &p, &wa_copy, a_shape, &copy, b_shape, None, &mut want).unwrap();
            gemm_operands(kernels, &p, Operand::Codes(&wa), a_shape, Operand::F32(&copy), b_shape, None, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: dequantized A, m={m} k={k} n={n}", kernels.path());
        }
    }
}

fn conv_params(cin: usize, cout: usize, groups: usize, kernel: &[usize], stride: usize, pad: usize) -> ConvParams {
    let r = kernel.len();
    ConvParams {
        in_channels: cin,
        out_channels: cout,
        groups,
        kernel: kernel.to_vec(),
        strides: vec![stride; r],
        dilations: vec![1; r],
        pads_begin: vec![pad; r],
        pads_end: vec![pad; r],
    }
}

#[test]
fn conv_on_codes_equals_conv_on_the_float_copy() {
    let mut rng = Rng::new(9);
    // im2col, direct 1×1, depthwise, grouped; depth beyond one K block (32·9 = 288).
    for (cin, cout, groups, kernel, stride, pad, input) in [
        (32, 12, 1, vec![3, 3], 1, 1, vec![9, 11]),
        (16, 20, 1, vec![1, 1], 1, 0, vec![7, 5]),
        (8, 8, 8, vec![3, 3], 2, 1, vec![10, 9]),
        (12, 6, 3, vec![5], 1, 2, vec![31]),
    ] {
        let p = conv_params(cin, cout, groups, &kernel, stride, pad);
        let depth = cin / groups * kernel.iter().product::<usize>();
        let x = rng.f32s(2 * cin * input.iter().product::<usize>(), -1.0, 1.0);
        let (w, copy) = weights(&mut rng, cout * depth, cout, depth, true);
        let (b, b_copy) = bias(&mut rng, cout);
        let out_len = 2 * cout * p.output(&input).unwrap().iter().product::<usize>();
        for kernels in paths() {
            let (mut want, mut got) = (vec![f32::NAN; out_len], vec![f32::NAN; out_len]);
            conv(kernels, &p, &x, 2, &input, &copy, Some(&b_copy), &mut want).unwrap();
            conv_operands(kernels, &p, &x, 2, &input, Operand::Codes(&w), Some(Operand::Codes(&b)), &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: cin={cin} cout={cout} groups={groups} kernel={kernel:?}", kernels.path());
        }
    }
}

#[test]
fn conv_transpose_on_codes_equals_conv_transpose_on_the_float_copy() {
    let mut rng = Rng::new(10);
    let (cin, cout, input) = (6, 4, vec![5, 7]);
    let p = ConvTransposeParams {
        in_channels: cin,
        out_channels: cout,
        groups: 2,
        kernel: vec![3, 2],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pads_begin: vec![1, 0],
        pads_end: vec![0, 1],
        output_padding: vec![1, 0],
    };
    let x = rng.f32s(cin * 35, -1.0, 1.0);
    // Weights [cin][cout/groups][3][2], per output channel of the group: axis 1.
    let (w, copy) = weights(&mut rng, cin * 2 * 6, 2, 6, false);
    let (b, b_copy) = bias(&mut rng, cout);
    let out_len = cout * p.output(&input).unwrap().iter().product::<usize>();
    let (mut want, mut got) = (vec![f32::NAN; out_len], vec![f32::NAN; out_len]);
    conv_transpose(&p, &x, 1, &input, &copy, Some(&b_copy), &mut want).unwrap();
    conv_transpose_operands(&p, &x, 1, &input, Operand::Codes(&w), Some(Operand::Codes(&b)), &mut got).unwrap();
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn a_wrong_decoding_is_seen() {
    // The twin: codes whose zero point is off by one give other bits (the tests above compare
    // something that can differ).
    let mut rng = Rng::new(11);
    let (m, k, n) = (3, 40, 20);
    let a = rng.f32s(m * k, -1.0, 1.0);
    let codes = rng.u8s(k * n);
    let good = Dequantized::new(Codes::U8(codes.clone().into()), vec![0.0123], vec![128], 1).unwrap();
    let off = Dequantized::new(Codes::U8(codes.into()), vec![0.0123], vec![129], 1).unwrap();
    let kernels = paths()[0];
    let (mut want, mut got) = (vec![0f32; m * n], vec![0f32; m * n]);
    matmul(kernels, &a, &[m, k], &good.to_vec(), &[k, n], &mut want).unwrap();
    matmul_operands(kernels, Operand::F32(&a), &[m, k], Operand::Codes(&off), &[k, n], &mut got).unwrap();
    assert_ne!(bits(&got), bits(&want));
}

/// Element-wise ops with a dequantized operand on either side: a scalar, a per-channel vector
/// broadcast over planes, a last-axis vector, a whole tensor (rows longer than one decoded run,
/// with a tail), against the op on the float copy; both f32 operands through the same entry too.
/// (`binary_operands` has one instance for every kernel path.)
#[test]
fn elementwise_on_codes_equals_elementwise_on_the_float_copy() {
    let mut rng = Rng::new(12);
    let ops = [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Min, Binary::Pow, Binary::PRelu];
    // (activation shape, constant shape, channels of the constant, elements per channel step)
    let cases: [(&[usize], &[usize], usize, usize); 6] = [
        (&[2, 6, 4, 5], &[], 1, 1),
        (&[2, 6, 4, 5], &[6, 1, 1], 6, 1),
        (&[1, 6, 4, 5], &[1, 6, 1, 1], 3, 2),
        (&[3, 150], &[150], 150, 1),
        (&[2, 3, 150], &[2, 3, 150], 3, 150),
        (&[4, 1, 70], &[3, 1], 1, 1),
    ];
    for (xs, cs, channels, inner) in cases {
        let x = rng.f32s(xs.iter().product(), -2.0, 2.0);
        let len: usize = cs.iter().product();
        for signed in [false, true] {
            let (c, copy) = weights(&mut rng, len, channels, inner, signed);
            let shape = qdqc_kernels::float::broadcast_shape(xs, cs).unwrap();
            let n: usize = shape.iter().product();
            for op in ops {
                let (mut want, mut got) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                binary(op, &x, xs, &copy, cs, &mut want).unwrap();
                binary_operands(op, Operand::F32(&x), xs, Operand::Codes(&c), cs, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{op:?} {xs:?} by codes {cs:?}");
                binary(op, &copy, cs, &x, xs, &mut want).unwrap();
                binary_operands(op, Operand::Codes(&c), cs, Operand::F32(&x), xs, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{op:?} codes {cs:?} by {xs:?}");
                binary_operands(op, Operand::F32(&copy), cs, Operand::F32(&x), xs, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{op:?} f32 operands");
            }
            // Both operands codes (two constants).
            let (d, d_copy) = weights(&mut rng, len, 1, 1, !signed);
            let (mut want, mut got) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            binary(Binary::Sub, &copy, cs, &d_copy, cs, &mut want).unwrap();
            binary_operands(Binary::Sub, Operand::Codes(&c), cs, Operand::Codes(&d), cs, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "codes − codes {cs:?}");
        }
    }
}

#[test]
fn batch_norm_on_codes_equals_batch_norm_on_the_float_copy() {
    let mut rng = Rng::new(13);
    for (batch, channels, spatial) in [(2, 7, 33), (1, 16, 1), (3, 5, 130)] {
        let x = rng.f32s(batch * channels * spatial, -3.0, 3.0);
        // scale per tensor u8, B per channel i8, mean per channel u8, var per channel with zero point 0 (≥ 0).
        let (scale, scale_copy) = weights(&mut rng, channels, 1, 1, false);
        let (bias, bias_copy) = weights(&mut rng, channels, channels, 1, true);
        let (mean, mean_copy) = weights(&mut rng, channels, channels, 1, false);
        let var = Dequantized::new(Codes::U8(rng.u8s(channels).into()), (0..channels).map(|_| rng.f32_in(1e-3, 3e-2)).collect(), vec![0], 1).unwrap();
        let var_copy = var.to_vec();
        let eps = 1e-5;
        for kernels in paths() {
            let (mut want, mut got) = (vec![f32::NAN; x.len()], vec![f32::NAN; x.len()]);
            batch_norm(&x, batch, channels, spatial, &scale_copy, &bias_copy, &mean_copy, &var_copy, eps, &mut want).unwrap();
            let params = [Operand::Codes(&scale), Operand::Codes(&bias), Operand::Codes(&mean), Operand::Codes(&var)];
            batch_norm_operands(kernels, &x, batch, channels, spatial, params, eps, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: batch {batch} channels {channels} spatial {spatial}", kernels.path());
            // Mixed: f32 scale and mean, codes elsewhere.
            let params = [Operand::F32(&scale_copy), Operand::Codes(&bias), Operand::F32(&mean_copy), Operand::Codes(&var)];
            batch_norm_operands(kernels, &x, batch, channels, spatial, params, eps, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: mixed operands", kernels.path());
        }
    }
}

#[test]
fn layer_norm_on_codes_equals_layer_norm_on_the_float_copy() {
    let mut rng = Rng::new(14);
    for (rows, size) in [(5, 150), (3, 64), (4, 7), (2, 384), (8, 384), (21, 100)] {
        let x = rng.f32s(rows * size, -3.0, 3.0);
        let (scale, scale_copy) = weights(&mut rng, size, size, 1, false);
        let (bias, bias_copy) = weights(&mut rng, size, 1, 1, true);
        for kernels in paths() {
            let (mut want, mut got) = (vec![f32::NAN; x.len()], vec![f32::NAN; x.len()]);
            layer_norm(&x, rows, size, &scale_copy, Some(&bias_copy), 1e-5, &mut want).unwrap();
            layer_norm_operands(kernels, &x, rows, size, Operand::Codes(&scale), Some(Operand::Codes(&bias)), 1e-5, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: rows {rows} size {size}", kernels.path());
            layer_norm(&x, rows, size, &scale_copy, None, 1e-5, &mut want).unwrap();
            layer_norm_operands(kernels, &x, rows, size, Operand::Codes(&scale), None, 1e-5, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{}: rows {rows} size {size}, no bias", kernels.path());
        }
    }
}

#[test]
fn a_wrong_decoding_of_an_elementwise_operand_is_seen() {
    // The twin for the per-row decoding: a per-channel vector decoded with the neighbouring
    // channel's scale gives other bits.
    let mut rng = Rng::new(15);
    let x = rng.f32s(2 * 6 * 20, -2.0, 2.0);
    let codes = rng.u8s(6);
    let scales: Vec<f32> = (0..6).map(|_| rng.f32_in(1e-3, 3e-2)).collect();
    let good = Dequantized::new(Codes::U8(codes.clone().into()), scales.clone(), vec![100], 1).unwrap();
    let shifted = Dequantized::new(Codes::U8(codes.into()), scales[1..].iter().chain(&scales[..1]).copied().collect(), vec![100], 1).unwrap();
    let (mut want, mut got) = (vec![0f32; x.len()], vec![0f32; x.len()]);
    binary(Binary::Mul, &x, &[2, 6, 20], &good.to_vec(), &[6, 1], &mut want).unwrap();
    binary_operands(Binary::Mul, Operand::F32(&x), &[2, 6, 20], Operand::Codes(&shifted), &[6, 1], &mut got).unwrap();
    assert_ne!(bits(&got), bits(&want));
}
