//! f32 GEMM, MatMul, Gemm and Conv against naive loops written in the documented order (s = +0,
//! s += product over K in order, then the epilogue): bit for bit, for random (non-exact) data, so
//! the tiling, tails, transposes, broadcasting and im2col cannot change a single rounding — on
//! every kernel path (each has its own tile shape and instruction set).

/// The paths this host has (a missing one fails unless `QDQC_KERNELS_SKIP_ISA` acknowledges it).
fn paths() -> Vec<Kernels> {
    Isa::ALL.into_iter().filter_map(common::kernels).collect()
}

mod common;

use common::{Rng, conv_attrs as params};
use qdqc_kernels::conv::ConvParams;
use qdqc_kernels::float::conv::conv;
use qdqc_kernels::float::gemm::{GemmParams, gemm, matmul, matmul_shape, sgemm};
use qdqc_kernels::{Isa, Kernels};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `Σ_k a[i][k]·b[k][j]` from +0 in order, a `m × k`, b `k × n` row-major.
fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            c[i * n + j] = s;
        }
    }
    c
}

#[test]
fn sgemm_is_the_sequential_sum_on_every_tile_and_tail() {
    let mut rng = Rng::new(1);
    for (m, n, k) in [
        (1, 1, 1),
        (1, 200, 37),
        (4, 64, 9),
        (5, 65, 300),
        (7, 130, 1),
        (13, 3, 64),
        (3, 0, 5),
        (2, 5, 0),
        (33, 129, 17),
        (9, 200, 40),
        (8, 48, 3),
        (6, 1100, 600),
    ] {
        let (a, b) = (rng.f32s(m * k, -1.0, 1.0), rng.f32s(k * n, -1.0, 1.0));
        for kernels in paths() {
            let mut c = vec![f32::NAN; m * n];
            sgemm(kernels, m, n, k, &a, &b, &mut c).unwrap();
            assert_eq!(bits(&c), bits(&naive(m, n, k, &a, &b)), "{}: m={m} n={n} k={k}", kernels.path());
        }
    }
    let mut c = vec![0f32; 6];
    assert!(sgemm(Kernels::detect(), 2, 3, 4, &[0.0; 7], &[0.0; 12], &mut c).is_err());
}

#[test]
fn sgemm_order_is_not_a_reassociation() {
    // 1 + 2^-24 + 2^-24 is 1 summed left to right, 1 + 2^-23 with the small terms first.
    let e = 2f32.powi(-24);
    let (a, b) = ([1.0, e, e], [1.0, 1.0, 1.0]);
    for kernels in paths() {
        let mut c = [0f32];
        sgemm(kernels, 1, 1, 3, &a, &b, &mut c).unwrap();
        assert_eq!(c[0], 1.0);
        sgemm(kernels, 1, 1, 3, &[e, e, 1.0], &b, &mut c).unwrap();
        assert_eq!(c[0], 1.0 + 2.0 * e);
    }
}

#[test]
fn matmul_broadcasts_batches_and_promotes_vectors() {
    let mut rng = Rng::new(2);
    let cases: [(&[usize], &[usize], &[usize]); 6] = [
        (&[3, 4], &[4, 5], &[3, 5]),
        (&[2, 1, 3, 4], &[5, 4, 6], &[2, 5, 3, 6]),
        (&[4], &[2, 4, 3], &[2, 3]),
        (&[2, 3, 4], &[4], &[2, 3]),
        (&[4], &[4], &[]),
        (&[1, 2, 70], &[3, 70, 66], &[3, 2, 66]),
    ];
    for (sa, sb, want) in cases {
        assert_eq!(matmul_shape(sa, sb).unwrap(), want, "{sa:?} x {sb:?}");
        let (na, nb): (usize, usize) = (sa.iter().product(), sb.iter().product());
        let (a, b) = (rng.f32s(na, -2.0, 2.0), rng.f32s(nb, -2.0, 2.0));
        let mut out = vec![0f32; want.iter().product()];
        matmul(Kernels::detect(), &a, sa, &b, sb, &mut out).unwrap();
        // Reference: numpy semantics spelled out, 2-D slices multiplied by `naive`.
        let pa = if sa.len() == 1 { vec![1, sa[0]] } else { sa.to_vec() };
        let pb = if sb.len() == 1 { vec![sb[0], 1] } else { sb.to_vec() };
        let (m, k, n) = (pa[pa.len() - 2], pa[pa.len() - 1], pb[pb.len() - 1]);
        let (ba, bb) = (&pa[..pa.len() - 2], &pb[..pb.len() - 2]);
        let rank = ba.len().max(bb.len());
        let ext = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
        let batch: Vec<usize> = (0..rank).map(|i| ext(ba, i).max(ext(bb, i))).collect();
        let mut expect = Vec::new();
        for flat in 0..batch.iter().product::<usize>() {
            let mut idx = vec![0; rank];
            let mut r = flat;
            for i in (0..rank).rev() {
                idx[i] = r % batch[i];
                r /= batch[i];
            }
            let offset = |s: &[usize]| {
                (0..rank).fold(0, |o, i| {
                    let e = ext(s, i);
                    o * e + if e == 1 { 0 } else { idx[i] }
                })
            };
            expect.extend(naive(m, n, k, &a[offset(ba) * m * k..][..m * k], &b[offset(bb) * k * n..][..k * n]));
        }
        assert_eq!(bits(&out), bits(&expect), "{sa:?} x {sb:?}");
    }
    assert!(matmul_shape(&[2, 3], &[4, 5]).is_err());
    assert!(matmul_shape(&[2, 2, 3], &[3, 3, 5]).is_err());
}

#[test]
fn gemm_transposes_alpha_beta_and_c_broadcast() {
    let mut rng = Rng::new(3);
    let (m, k, n) = (5, 7, 66);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for c_shape in [vec![], vec![n], vec![m, 1], vec![m, n], vec![1, n]] {
            let p = GemmParams { alpha: 0.7, beta: -1.3, trans_a: ta, trans_b: tb };
            let a = rng.f32s(m * k, -1.0, 1.0);
            let b = rng.f32s(k * n, -1.0, 1.0);
            let c = rng.f32s(c_shape.iter().product(), -1.0, 1.0);
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let mut out = vec![0f32; m * n];
            gemm(Kernels::detect(), &p, &a, a_shape, &b, b_shape, Some((&c, &c_shape)), &mut out).unwrap();
            let at = |i: usize, q: usize| if ta { a[q * m + i] } else { a[i * k + q] };
            let bt = |q: usize, j: usize| if tb { b[j * k + q] } else { b[q * n + j] };
            let ct = |i: usize, j: usize| match c_shape.as_slice() {
                [] => c[0],
                [_] => c[j],
                [_, 1] => c[i],
                [1, _] => c[j],
                _ => c[i * n + j],
            };
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f32;
                    for q in 0..k {
                        s += at(i, q) * bt(q, j);
                    }
                    let want = s * p.alpha + p.beta * ct(i, j);
                    assert_eq!(out[i * n + j].to_bits(), want.to_bits(), "ta={ta} tb={tb} C {c_shape:?} at ({i},{j})");
                }
            }
        }
    }
    // Without C (or β = 0, which ignores C even when it holds NaN): α·s.
    let (a, b) = (rng.f32s(6, -1.0, 1.0), rng.f32s(6, -1.0, 1.0));
    let mut out = vec![0f32; 4];
    let p = GemmParams { alpha: 0.5, beta: 0.0, ..GemmParams::default() };
    gemm(Kernels::detect(), &p, &a, [2, 3], &b, [3, 2], Some((&[f32::NAN], &[1])), &mut out).unwrap();
    let want: Vec<f32> = naive(2, 2, 3, &a, &b).iter().map(|s| s * 0.5).collect();
    assert_eq!(bits(&out), bits(&want));
    assert!(gemm(Kernels::detect(), &GemmParams::default(), &a, [2, 3], &b, [2, 3], None, &mut out).is_err());
    assert!(gemm(Kernels::detect(), &GemmParams::default(), &a, [2, 3], &b, [3, 2], Some((&[0.0; 3], &[3])), &mut out).is_err());
}

/// Direct definition of Conv in the documented order: for each output, s = +0, then over
/// (ci, kd, kh, kw) in order s += w·x (x = +0 in the pads), then s + bias.
fn conv_reference(p: &ConvParams, x: &[f32], batch: usize, input: &[usize], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let output = p.output(input).unwrap();
    let lift = |v: &[usize], fill: usize| {
        let mut r = vec![fill; 3 - v.len()];
        r.extend_from_slice(v);
        r
    };
    let (inp, outp, ker) = (lift(input, 1), lift(&output, 1), lift(&p.kernel, 1));
    let (st, di, pb) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    let (cig, cog) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let mut y = Vec::new();
    for n in 0..batch {
        for co in 0..p.out_channels {
            let g = co / cog;
            for od in 0..outp[0] {
                for oh in 0..outp[1] {
                    for ow in 0..outp[2] {
                        let mut s = 0f32;
                        for ci in 0..cig {
                            for kd in 0..ker[0] {
                                for kh in 0..ker[1] {
                                    for kw in 0..ker[2] {
                                        let pos = [od * st[0] + kd * di[0], oh * st[1] + kh * di[1], ow * st[2] + kw * di[2]];
                                        let inside = (0..3).all(|a| pos[a] >= pb[a] && pos[a] - pb[a] < inp[a]);
                                        let xv = if inside {
                                            let c = g * cig + ci;
                                            x[(((n * p.in_channels + c) * inp[0] + pos[0] - pb[0]) * inp[1] + pos[1] - pb[1]) * inp[2] + pos[2] - pb[2]]
                                        } else {
                                            0.0
                                        };
                                        let wv = w[(((co * cig + ci) * ker[0] + kd) * ker[1] + kh) * ker[2] + kw];
                                        s += wv * xv;
                                    }
                                }
                            }
                        }
                        y.push(match bias {
                            Some(b) => s + b[co],
                            None => s,
                        });
                    }
                }
            }
        }
    }
    y
}

#[test]
fn conv_is_the_direct_definition_in_order() {
    let mut rng = Rng::new(4);
    let cases: Vec<(ConvParams, Vec<usize>, usize)> = vec![
        (params(3, 4, 1, &[3], &[1], &[1], &[1], &[1]), vec![10], 2),
        (params(4, 6, 2, &[3], &[2], &[2], &[0], &[3]), vec![11], 1),
        (params(3, 8, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), vec![9, 7], 2),
        (params(8, 8, 8, &[3, 3], &[2, 2], &[1, 1], &[1, 0], &[1, 2]), vec![10, 9], 1),
        (params(4, 12, 4, &[3, 3], &[1, 1], &[2, 2], &[2, 2], &[2, 2]), vec![8, 8], 1),
        (params(6, 5, 1, &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[0, 0]), vec![7, 9], 2),
        (params(6, 4, 2, &[1, 1], &[2, 2], &[1, 1], &[0, 0], &[0, 0]), vec![7, 9], 1),
        (params(2, 3, 1, &[5, 5], &[1, 1], &[1, 1], &[2, 2], &[2, 2]), vec![3, 4], 1),
        (params(2, 4, 2, &[2, 3, 2], &[1, 2, 1], &[1, 1, 2], &[1, 0, 1], &[0, 1, 1]), vec![4, 5, 6], 2),
        (params(16, 32, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), vec![14, 14], 1),
        (params(3, 6, 3, &[3], &[2], &[1], &[2], &[0]), vec![9], 2),
        (params(2, 2, 2, &[5, 5], &[1, 1], &[1, 1], &[2, 2], &[2, 2]), vec![3, 4], 1),
        (params(2, 4, 2, &[3, 3, 3], &[2, 1, 2], &[1, 2, 1], &[1, 2, 0], &[1, 0, 2]), vec![5, 6, 7], 1),
        (params(5, 5, 5, &[1, 7], &[1, 3], &[1, 1], &[0, 3], &[0, 3]), vec![2, 20], 1),
    ];
    for (i, (p, input, batch)) in cases.into_iter().enumerate() {
        let output = p.output(&input).unwrap();
        let x = rng.f32s(batch * p.in_channels * input.iter().product::<usize>(), -1.0, 1.0);
        let w = rng.f32s(p.out_channels * p.in_channels / p.groups * p.kernel.iter().product::<usize>(), -1.0, 1.0);
        let b = rng.f32s(p.out_channels, -1.0, 1.0);
        for (bias, kernels) in [None, Some(b.as_slice())].into_iter().flat_map(|bias| paths().into_iter().map(move |k| (bias, k))) {
            let mut y = vec![f32::NAN; batch * p.out_channels * output.iter().product::<usize>()];
            conv(kernels, &p, &x, batch, &input, &w, bias, &mut y).unwrap();
            assert_eq!(bits(&y), bits(&conv_reference(&p, &x, batch, &input, &w, bias)), "{}: case {i}: {p:?} bias {}", kernels.path(), bias.is_some());
        }
    }
    let p = params(3, 4, 2, &[3], &[1], &[1], &[0], &[0]);
    assert!(conv(Kernels::detect(), &p, &[0.0; 30], 1, &[10], &[0.0; 36], None, &mut [0.0; 32]).is_err(), "3 channels in 2 groups");
}
