//! f32 ConvTranspose against a naive gather written in the documented order (per output: s = +0,
//! s += w·x over the group's input channels, then the taps row-major, each tap at the one input
//! position that reaches the output; then + bias): bit for bit on random, non-exact data, so the
//! scatter's loop order cannot change a rounding. Bad operands are errors, not panics.

mod common;

use common::Rng;
use qdqc_kernels::float::conv_transpose::{ConvTransposeParams, conv_transpose};
use qdqc_kernels::float::numel;

#[allow(clippy::too_many_arguments)] // one per ConvTranspose attribute
fn params(
    cin: usize,
    cout: usize,
    groups: usize,
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    output_padding: &[usize],
) -> ConvTransposeParams {
    let r = kernel.len();
    ConvTransposeParams {
        in_channels: cin,
        out_channels: cout,
        groups,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads_begin: pads[..r].to_vec(),
        pads_end: pads[r..].to_vec(),
        output_padding: output_padding.to_vec(),
    }
}

/// Position `v` of a row-major shape `s` as a multi-index (padded to 3 axes with leading zeros).
fn unravel(mut v: usize, s: &[usize]) -> [usize; 3] {
    let mut r = [0; 3];
    for (k, &e) in s.iter().enumerate().rev() {
        r[3 - s.len() + k] = v % e;
        v /= e;
    }
    r
}

fn naive(p: &ConvTransposeParams, x: &[f32], batch: usize, input: &[usize], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let output = p.output(input).unwrap();
    let (cig, cog) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let (taps, in_size, out_size) = (numel(&p.kernel), numel(input), numel(&output));
    let lift = |v: &[usize], f: usize| {
        let mut r = [f; 3];
        r[3 - v.len()..].copy_from_slice(v);
        r
    };
    let (inp, st, di, pb) = (lift(input, 1), lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    let mut y = vec![0f32; batch * p.out_channels * out_size];
    for n in 0..batch {
        for co in 0..p.out_channels {
            let g = co / cog;
            for o in 0..out_size {
                let oi = unravel(o, &output);
                let mut s = 0f32;
                for ci in g * cig..(g + 1) * cig {
                    for t in 0..taps {
                        let ti = unravel(t, &p.kernel);
                        // i·stride = o + pad − t·dilation on every axis, i inside the input.
                        let mut at = [0usize; 3];
                        let hit = (0..3).all(|a| {
                            let num = (oi[a] + pb[a]) as isize - (ti[a] * di[a]) as isize;
                            at[a] = (num / st[a] as isize).max(0) as usize;
                            num >= 0 && num % st[a] as isize == 0 && at[a] < inp[a]
                        });
                        if hit {
                            let xi = (at[0] * inp[1] + at[1]) * inp[2] + at[2];
                            s += w[(ci * cog + co % cog) * taps + t] * x[(n * p.in_channels + ci) * in_size + xi];
                        }
                    }
                }
                y[(n * p.out_channels + co) * out_size + o] = match bias {
                    Some(b) => s + b[co],
                    None => s,
                };
            }
        }
    }
    y
}

#[test]
fn conv_transpose_is_the_documented_sum_bit_for_bit() {
    let mut rng = Rng::new(3);
    let cases = [
        (params(8, 4, 1, &[2, 2], &[2, 2], &[1, 1], &[0; 4], &[0, 0]), vec![5, 7], 2),
        (params(3, 6, 3, &[3, 3], &[2, 2], &[1, 1], &[1, 1, 1, 1], &[1, 1]), vec![4, 5], 1),
        (params(4, 6, 2, &[3, 2], &[1, 2], &[2, 1], &[1, 0, 2, 1], &[0, 1]), vec![5, 4], 2),
        (params(5, 2, 1, &[4], &[3], &[2], &[2, 1], &[2]), vec![9], 1),
        (params(2, 4, 2, &[2, 3, 2], &[2, 1, 2], &[1, 2, 1], &[0, 1, 1, 1, 0, 0], &[1, 0, 1]), vec![3, 4, 3], 1),
        (params(2, 2, 1, &[3, 3], &[3, 3], &[1, 1], &[3, 2, 2, 3], &[2, 0]), vec![3, 3], 1),
        (params(16, 8, 1, &[1, 1], &[1, 1], &[1, 1], &[0; 4], &[0, 0]), vec![6, 6], 1),
    ];
    for (i, (p, input, batch)) in cases.iter().enumerate() {
        let x = rng.f32s(batch * p.in_channels * numel(input), -1.0, 1.0);
        let w = rng.f32s(p.in_channels * p.out_channels / p.groups * numel(&p.kernel), -1.0, 1.0);
        let b = rng.f32s(p.out_channels, -1.0, 1.0);
        let size = batch * p.out_channels * numel(&p.output(input).unwrap());
        for bias in [Some(&b[..]), None] {
            let mut y = vec![f32::NAN; size];
            conv_transpose(p, &x, *batch, input, &w, bias, &mut y).unwrap();
            let want = naive(p, &x, *batch, input, &w, bias);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y), bits(&want), "case {i}, bias {}", bias.is_some());
        }
    }
}

#[test]
fn bad_operands_are_errors() {
    let p = params(4, 4, 2, &[2, 2], &[2, 2], &[1, 1], &[0; 4], &[0, 0]);
    let mut y = vec![0f32; 4 * 16];
    assert!(conv_transpose(&p, &[0.0; 4 * 4], 1, &[2, 2], &[0.0; 4 * 2 * 4], None, &mut y).is_ok());
    assert!(conv_transpose(&p, &[0.0; 4 * 4], 1, &[2, 2], &[0.0; 4 * 4 * 4], None, &mut y).is_err(), "weights of another size");
    assert!(conv_transpose(&p, &[0.0; 4 * 4], 1, &[2, 2], &[0.0; 4 * 2 * 4], Some(&[0.0; 3]), &mut y).is_err(), "bias of another size");
    assert!(conv_transpose(&params(4, 4, 3, &[2, 2], &[2, 2], &[1, 1], &[0; 4], &[0, 0]), &[0.0; 16], 1, &[2, 2], &[0.0; 32], None, &mut y).is_err(), "groups");
    // Pads eating the whole output.
    assert!(params(1, 1, 1, &[1], &[1], &[1], &[1, 1], &[0]).output(&[2]).is_err());
    assert!(params(1, 1, 1, &[0], &[1], &[1], &[0, 0], &[0]).output(&[2]).is_err());
}
