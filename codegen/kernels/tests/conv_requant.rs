//! The fused convolution epilogue (`PackedConv::run_requant`) against its definition on every
//! path: the accumulators of `run`, then `requant_exact` element by element (the rational
//! definition), per output channel; u8 and i8 outputs, per-tensor and per-channel scales, scales
//! that put many values on rounding ties (exact fallbacks), shapes around the 8-channel ×
//! 48-position tiles, depthwise and grouped convolutions.

mod common;

use common::{Rng, conv_params as params, kernels};
use qdqc_kernels::Isa;
use qdqc_kernels::conv::{ConvParams, ConvRequant, PackedConv, Scratch};
use qdqc_kernels::requant::{Certified, Code, CodeOut, Output, Ratio, requant_exact};

#[allow(clippy::too_many_arguments)] // the case's operands, spelled out
fn case<C: CodeOut + PartialEq + std::fmt::Debug>(
    isa: Isa,
    rng: &mut Rng,
    p: ConvParams,
    batch: usize,
    input: &[usize],
    per_channel: bool,
    scales: (f32, f32, f32),
    zy: i32,
) {
    let Some(kern) = kernels(isa) else { return };
    let ksz: usize = p.kernel.iter().product();
    let x = rng.u8s(batch * p.in_channels * input.iter().product::<usize>());
    let w = rng.i8s(p.out_channels * p.in_channels / p.groups * ksz);
    let zw = if per_channel { rng.i8s(p.out_channels) } else { vec![rng.next() as i8] };
    let zx = rng.next() as u8;
    let conv = PackedConv::from_i8(p.clone(), &w, &zw).unwrap();
    let plane: usize = p.output(input).unwrap().iter().product();
    let mut acc = vec![0i32; batch * p.out_channels * plane];
    conv.run(kern, &x, batch, input, zx, &mut acc).unwrap();
    let (sx, sw, sy) = scales;
    let ratios: Vec<Ratio> = (0..if per_channel { p.out_channels } else { 1 }).map(|c| Ratio::new(sx, sw * (1.0 + c as f32 / 8.0), sy).unwrap()).collect();
    let bias: Vec<i32> = (0..p.out_channels).map(|_| (rng.next() % 2001) as i32 - 1000).collect();
    let output = Output::new(zy, C::CODE).unwrap();
    let rq = ConvRequant { forms: ratios.iter().map(|&r| Certified::new(r)).collect(), bias: bias.clone(), output };
    let mut got = vec![C::from_code(0); acc.len()];
    conv.run_requant(kern, &x, batch, input, zx, &rq, &mut got, &mut Scratch::default()).unwrap();
    let want: Vec<C> = acc
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let co = i / plane % p.out_channels;
            C::from_code(requant_exact(a, bias[co], &ratios[if per_channel { co } else { 0 }], output))
        })
        .collect();
    assert_eq!(got, want, "{isa}: {p:?} input {input:?}");
}

fn suite(isa: Isa) {
    let mut rng = Rng::new(12);
    // Ties: sx·sw/sy = 2^-3 puts every eighth accumulator on a half-integer (exact fallbacks).
    let ties = (0.25, 0.125, 0.25);
    let plain = (0.0213, 0.00391, 0.0517);
    // Cout 15 and 7: tiles of 7 rows (the AVX2 register tile's 6 rows and one), packed and shifted.
    for &(cin, cout, k, s, pad, input) in &[
        (3, 8, 3, 1, 1, 16),
        (8, 8, 3, 1, 1, 16),
        (16, 17, 1, 1, 0, 7),
        (5, 9, 3, 2, 1, 13),
        (24, 40, 1, 1, 0, 8),
        (3, 10, 3, 1, 1, 24),
        (64, 9, 3, 1, 1, 30),
        (6, 15, 3, 2, 1, 11),
        (12, 7, 3, 1, 1, 9),
    ] {
        let p = params(cin, cout, 1, &[k, k], &[s, s], &[pad, pad]);
        case::<u8>(isa, &mut rng, p.clone(), 2, &[input, input + 1], true, plain, 120);
        case::<i8>(isa, &mut rng, p.clone(), 1, &[input, input], false, ties, -3);
        case::<u8>(isa, &mut rng, p, 1, &[input, input], true, ties, 0);
    }
    // Grouped, depthwise, 1-D and 3-D.
    case::<u8>(isa, &mut rng, params(4, 6, 2, &[3, 3], &[1, 1], &[1, 1]), 2, &[5, 5], true, plain, 7);
    case::<i8>(isa, &mut rng, params(8, 8, 8, &[3, 3], &[2, 2], &[1, 1]), 1, &[10, 11], true, ties, 0);
    case::<u8>(isa, &mut rng, params(3, 4, 1, &[5], &[3], &[4]), 2, &[40], true, plain, 128);
    case::<i8>(isa, &mut rng, params(2, 4, 2, &[2, 3, 3], &[1, 2, 1], &[1, 1, 2]), 1, &[4, 6, 7], false, plain, 5);
    // "Same" padding with stride 1 (the shifted-plane gather): 3-D slices, 1-D, a 5x5 kernel.
    case::<u8>(isa, &mut rng, params(2, 4, 1, &[3, 3, 3], &[1, 1, 1], &[1, 1, 1]), 1, &[3, 5, 6], true, ties, 9);
    case::<u8>(isa, &mut rng, params(4, 12, 1, &[3], &[1], &[1]), 2, &[50], true, plain, 0);
    case::<i8>(isa, &mut rng, params(3, 5, 1, &[5, 5], &[1, 1], &[2, 2]), 1, &[9, 31], false, plain, 0);
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

/// The code type of the requantization must be the buffer's.
#[test]
fn mismatched_code_type_is_refused() {
    let conv = PackedConv::from_i8(params(1, 1, 1, &[1], &[1], &[0]), &[1], &[0]).unwrap();
    let output = Output::new(0, Code::I8).unwrap();
    let rq = ConvRequant { forms: vec![Certified::new(Ratio::new(1.0, 1.0, 1.0).unwrap())], bias: vec![0], output };
    let mut y = [0u8; 3];
    let k = qdqc_kernels::Kernels::new(Isa::Portable).unwrap();
    assert!(conv.run_requant(k, &[1, 2, 3], 1, &[3], 0, &rq, &mut y, &mut Scratch::default()).is_err());
}
