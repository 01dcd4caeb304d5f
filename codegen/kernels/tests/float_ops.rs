//! Elementwise ops (broadcasting, NaN/±0/tie semantics), Softmax, pools, reductions,
//! normalizations and Resize against straightforward references: naive loops in the documented
//! order where bits are the claim, f64 where accuracy is.

mod common;

use common::Rng;
use qdqc_kernels::float::elementwise::{Binary, Map, binary, map};
use qdqc_kernels::float::math::exp64;
use qdqc_kernels::float::norm::{batch_norm, layer_norm};
use qdqc_kernels::float::pool::{PoolKind, PoolParams, global_pool, pool};
use qdqc_kernels::float::reduce::{Reduce, reduce, reduce_shape};
use qdqc_kernels::float::resize::{Coordinates, Nearest, resize_linear, resize_nearest};
use qdqc_kernels::float::softmax::softmax;
use qdqc_kernels::float::{broadcast_shape, numel};
use qdqc_kernels::{Isa, Kernels};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Row-major multi-index of `flat` in `shape`.
fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    idx
}

/// The element of `x` (shape `s`) that output index `idx` (rank ≥ s's) reads under broadcasting.
fn broadcast_at(x: &[f32], s: &[usize], idx: &[usize]) -> f32 {
    let off = idx.len() - s.len();
    let mut o = 0;
    for (i, &d) in s.iter().enumerate() {
        o = o * d + if d == 1 { 0 } else { idx[off + i] };
    }
    x[o]
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    let mut rng = Rng::new(1);
    let shapes: [(&[usize], &[usize]); 8] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[]),
        (&[], &[5]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[1, 3, 1], &[2, 1, 5]),
        (&[4, 1], &[4, 6]),
        (&[2, 3, 1, 5], &[3, 4, 1]),
    ];
    for op in [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Min, Binary::Pow, Binary::PRelu] {
        for (sa, sb) in shapes {
            let (a, b) = (rng.f32s(numel(sa), -3.0, 3.0), rng.f32s(numel(sb), -3.0, 3.0));
            let shape = broadcast_shape(sa, sb).unwrap();
            let mut out = vec![f32::NAN; numel(&shape)];
            binary(op, &a, sa, &b, sb, &mut out).unwrap();
            for (flat, &y) in out.iter().enumerate() {
                let idx = unflatten(flat, &shape);
                let want = op.apply(broadcast_at(&a, sa, &idx), broadcast_at(&b, sb, &idx));
                assert_eq!(y.to_bits(), want.to_bits(), "{op:?} {sa:?} {sb:?} at {idx:?}");
            }
        }
    }
    assert!(broadcast_shape(&[2, 3], &[4]).is_err());
    assert!(binary(Binary::Add, &[0.0; 6], &[2, 3], &[0.0; 2], &[2], &mut [0.0; 6]).is_err());
}

#[test]
fn binary_ops_are_single_ieee_operations() {
    let mut rng = Rng::new(2);
    for _ in 0..10_000 {
        let (a, b) = (rng.f32_in(-1e3, 1e3), rng.f32_in(-1e3, 1e3));
        let exact = |v: f64| v as f32;
        assert_eq!(Binary::Add.apply(a, b), exact(f64::from(a) + f64::from(b)));
        assert_eq!(Binary::Sub.apply(a, b), exact(f64::from(a) - f64::from(b)));
        assert_eq!(Binary::Mul.apply(a, b), exact(f64::from(a) * f64::from(b)));
        assert_eq!(Map::Sqrt.apply(a.abs()), exact(f64::from(a.abs()).sqrt()));
    }
    // Pow's fast paths are exact products.
    assert_eq!(Binary::Pow.apply(1.1, 2.0), 1.1f32 * 1.1f32);
    assert_eq!(Binary::Pow.apply(1.1, 3.0), 1.1f32 * 1.1f32 * 1.1f32);
}

#[test]
fn nan_zero_and_tie_semantics() {
    let nan = f32::NAN;
    assert!(Binary::Max.apply(nan, 1.0).is_nan() && Binary::Max.apply(1.0, nan).is_nan());
    assert!(Binary::Min.apply(nan, 1.0).is_nan() && Binary::Min.apply(1.0, nan).is_nan());
    assert_eq!(Binary::Max.apply(-1.0, 2.0), 2.0);
    assert_eq!(Binary::Min.apply(-1.0, 2.0), -1.0);
    // A tie of signed zeros gives the second operand, as ORT.
    assert_eq!(Binary::Max.apply(0.0, -0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(Binary::Min.apply(-0.0, 0.0).to_bits(), 0);
    assert!(Map::Relu.apply(nan).is_nan());
    assert_eq!(Map::Relu.apply(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(Map::Relu.apply(-3.0).to_bits(), 0);
    let clip = Map::Clip { min: -1.0, max: 2.0 };
    assert!(clip.apply(nan).is_nan());
    assert_eq!((clip.apply(-5.0), clip.apply(5.0), clip.apply(0.5)), (-1.0, 2.0, 0.5));
    assert_eq!(Map::LeakyRelu { alpha: 0.1 }.apply(-2.0), 0.1f32 * -2.0);
    let hs = Map::HardSigmoid { alpha: 0.2, beta: 0.5 };
    assert_eq!(hs.apply(1.0), 0.2f32 * 1.0 + 0.5);
    assert_eq!((hs.apply(10.0), hs.apply(-10.0)), (1.0, 0.0));
    assert_eq!(Map::HardSwish.apply(1.0), 1.0 * ((1.0f32 / 6.0) * 1.0 + 0.5));
    assert_eq!((Map::HardSwish.apply(4.0), Map::HardSwish.apply(-4.0)), (4.0, -0.0));
    assert_eq!(Binary::PRelu.apply(-2.0, 0.25), -0.5);
    assert_eq!(Binary::PRelu.apply(3.0, 0.25), 3.0);
    assert_eq!(Binary::PRelu.apply(0.0, -0.25).to_bits(), 0, "+0, not 0·slope = −0");
    assert_eq!(Binary::PRelu.apply(-0.0, 0.25).to_bits(), (-0.0f32).to_bits());
    assert_eq!(Binary::PRelu.apply(f32::NEG_INFINITY, 0.25), f32::NEG_INFINITY);
    let round: Vec<f32> = [0.5f32, 1.5, 2.5, -0.5, -1.5, 2.4999998].iter().map(|&v| Map::Round.apply(v)).collect();
    assert_eq!(bits(&round), bits(&[0.0, 2.0, 2.0, -0.0, -2.0, 2.0]));
    assert_eq!((Map::Floor.apply(-1.5), Map::Ceil.apply(-1.5), Map::Neg.apply(0.0).to_bits()), (-2.0, -1.0, (-0.0f32).to_bits()));
    assert_eq!(Map::Reciprocal.apply(4.0), 0.25);
    let mut out = [0f32; 3];
    map(Map::Abs, &[-1.0, 2.0, -0.0], &mut out).unwrap();
    assert_eq!(bits(&out), bits(&[1.0, 2.0, 0.0]));
    assert!(map(Map::Abs, &[1.0], &mut out).is_err());
}

#[test]
fn softmax_is_within_one_ulp_of_f64_along_any_axis() {
    let mut rng = Rng::new(3);
    let shape = [3, 5, 7];
    let x = rng.f32s(numel(&shape), -20.0, 20.0);
    for axis in [-3i64, -2, -1, 0, 1, 2] {
        let a = axis.rem_euclid(3) as usize;
        let mut y = vec![0f32; x.len()];
        softmax(Kernels::detect(), &x, &shape, axis, &mut y).unwrap();
        for (flat, &v) in y.iter().enumerate() {
            let idx = unflatten(flat, &shape);
            let at = |i: usize| {
                let mut j = idx.clone();
                j[a] = i;
                f64::from(x[(j[0] * 5 + j[1]) * 7 + j[2]])
            };
            let m = (0..shape[a]).map(at).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..shape[a]).map(|i| (at(i) - m).exp()).sum();
            let want = (at(idx[a]) - m).exp() / s;
            assert!((f64::from(v) - want).abs() <= want * 2f64.powi(-23), "axis {axis} at {idx:?}: {v} vs {want}");
        }
    }
    // Bit for bit the documented order per slice (max, then exp64 and the f64 sum in index order),
    // on every kernel path this host has (they differ in vector width only). The input holds
    // ±0, ±∞, NaN and a slice of −∞ alone among its values.
    let mut x = x;
    x[3] = -0.0;
    x[10] = 0.0;
    x[20] = f32::NEG_INFINITY;
    x[40] = f32::NAN;
    x[77] = f32::INFINITY;
    x[98..105].fill(f32::NEG_INFINITY);
    for kernels in Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()) {
        for axis in 0..3 {
            let mut y = vec![0f32; x.len()];
            softmax(kernels, &x, &shape, axis as i64, &mut y).unwrap();
            for (flat, &v) in y.iter().enumerate() {
                let idx = unflatten(flat, &shape);
                let at = |i: usize| {
                    let mut j = idx.clone();
                    j[axis] = i;
                    x[(j[0] * 5 + j[1]) * 7 + j[2]]
                };
                let m = (0..shape[axis]).fold(f32::NEG_INFINITY, |m, i| if at(i) > m { at(i) } else { m });
                let s = (0..shape[axis]).fold(0f64, |s, i| s + exp64(f64::from(at(i)) - f64::from(m)));
                let want = (exp64(f64::from(at(idx[axis])) - f64::from(m)) / s) as f32;
                assert_eq!(v.to_bits(), want.to_bits(), "{kernels:?} axis {axis} at {idx:?}");
            }
        }
    }
    let mut y = [0f32; 2];
    softmax(Kernels::detect(), &[f32::INFINITY, 0.0], &[2], 0, &mut y).unwrap();
    assert!(y.iter().all(|v| v.is_nan()));
    assert!(softmax(Kernels::detect(), &[0.0; 2], &[2], 1, &mut y).is_err());
}

fn pool_params(kernel: &[usize], strides: &[usize], dilations: &[usize], pb: &[usize], pe: &[usize], ceil: bool, include: bool) -> PoolParams {
    PoolParams {
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads_begin: pb.to_vec(),
        pads_end: pe.to_vec(),
        ceil_mode: ceil,
        count_include_pad: include,
    }
}

/// 2-D pool by the definition: taps visited row-major, count as documented (ORT's functor).
fn pool2d_reference(kind: PoolKind, p: &PoolParams, x: &[f32], h: usize, w: usize) -> Vec<f32> {
    let out = p.output(&[h, w]).unwrap();
    let mut y = Vec::new();
    for oh in 0..out[0] {
        for ow in 0..out[1] {
            let (hs, ws) = ((oh * p.strides[0]) as i64 - p.pads_begin[0] as i64, (ow * p.strides[1]) as i64 - p.pads_begin[1] as i64);
            let (he, we) = (
                (hs + (p.kernel[0] * p.dilations[0]) as i64).min((h + p.pads_end[0]) as i64),
                (ws + (p.kernel[1] * p.dilations[1]) as i64).min((w + p.pads_end[1]) as i64),
            );
            let (mut acc, mut n) = (if kind == PoolKind::Max { f32::NEG_INFINITY } else { 0.0 }, 0);
            for ih in (hs..he).step_by(p.dilations[0]) {
                for iw in (ws..we).step_by(p.dilations[1]) {
                    if ih >= 0 && iw >= 0 && (ih as usize) < h && (iw as usize) < w {
                        let v = x[ih as usize * w + iw as usize];
                        acc = if kind == PoolKind::Max { acc.max(v) } else { acc + v };
                        n += 1;
                    }
                }
            }
            if kind == PoolKind::Average && n > 0 {
                let full = (1 + (he - hs - 1) as usize / p.dilations[0]) * (1 + (we - ws - 1) as usize / p.dilations[1]);
                acc /= if p.count_include_pad { full } else { n } as f32;
            }
            y.push(acc);
        }
    }
    y
}

#[test]
fn pools_follow_the_definition() {
    let mut rng = Rng::new(4);
    let (h, w) = (7, 8);
    let x = rng.f32s(2 * h * w, -4.0, 4.0);
    let cases = [
        pool_params(&[2, 2], &[2, 2], &[1, 1], &[0, 0], &[0, 0], false, false),
        pool_params(&[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1], false, false),
        pool_params(&[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1], false, true),
        pool_params(&[3, 2], &[2, 3], &[1, 1], &[1, 0], &[0, 1], true, true),
        pool_params(&[3, 2], &[2, 3], &[1, 1], &[1, 0], &[0, 1], true, false),
        pool_params(&[2, 3], &[1, 2], &[2, 2], &[1, 2], &[2, 1], true, true),
        pool_params(&[5, 5], &[3, 3], &[1, 1], &[2, 2], &[2, 2], true, true),
    ];
    for (i, p) in cases.iter().enumerate() {
        for kind in [PoolKind::Max, PoolKind::Average] {
            let out = p.output(&[h, w]).unwrap();
            let mut y = vec![f32::NAN; 2 * numel(&out)];
            pool(kind, p, &x, 2, &[h, w], &mut y).unwrap();
            let mut want = pool2d_reference(kind, p, &x[..h * w], h, w);
            want.extend(pool2d_reference(kind, p, &x[h * w..], h, w));
            assert_eq!(bits(&y), bits(&want), "case {i} {kind:?} {p:?}");
        }
    }
    // ceil_mode: 7 with k 2 s 2 gives 4 windows (the last one half outside), floor 3.
    assert_eq!(pool_params(&[2], &[2], &[1], &[0], &[0], true, false).output(&[7]).unwrap(), [4]);
    assert_eq!(pool_params(&[2], &[2], &[1], &[0], &[0], false, false).output(&[7]).unwrap(), [3]);
    // A window that would start in the end padding is dropped (ONNX PR 5741).
    assert_eq!(pool_params(&[3], &[2], &[1], &[0], &[1], true, false).output(&[6]).unwrap(), [3]);
    // 1-D and 3-D reduce to the same loops.
    let p1 = pool_params(&[3], &[1], &[1], &[1], &[1], false, false);
    let mut y = vec![0f32; 4];
    pool(PoolKind::Average, &p1, &[1.0, 2.0, 3.0, 4.0], 1, &[4], &mut y).unwrap();
    assert_eq!(y, [1.5, 2.0, 3.0, 3.5]);
    let p3 = pool_params(&[2, 2, 2], &[2, 2, 2], &[1, 1, 1], &[0, 0, 0], &[0, 0, 0], false, false);
    let x3: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let mut y3 = [0f32];
    pool(PoolKind::Max, &p3, &x3, 1, &[2, 2, 2], &mut y3).unwrap();
    assert_eq!(y3, [7.0]);
    pool(PoolKind::Average, &p3, &x3, 1, &[2, 2, 2], &mut y3).unwrap();
    assert_eq!(y3, [3.5]);
}

#[test]
fn global_pools_sum_in_order_then_divide() {
    let mut rng = Rng::new(5);
    let x = rng.f32s(3 * 49, -1.0, 1.0);
    let mut y = [0f32; 3];
    global_pool(PoolKind::Average, &x, 3, 49, &mut y).unwrap();
    for (c, &v) in y.iter().enumerate() {
        let mut s = 0f32;
        for &t in &x[c * 49..][..49] {
            s += t;
        }
        assert_eq!(v.to_bits(), (s / 49.0).to_bits());
    }
    global_pool(PoolKind::Max, &x, 3, 49, &mut y).unwrap();
    assert_eq!(y[1], x[49..98].iter().copied().fold(f32::NEG_INFINITY, f32::max));
    assert!(global_pool(PoolKind::Max, &x, 3, 48, &mut y).is_err());
}

#[test]
fn reductions_visit_reduced_elements_in_row_major_order() {
    let mut rng = Rng::new(6);
    let shape = [3, 4, 5, 2];
    let x = rng.f32s(numel(&shape), -2.0, 2.0);
    for axes in [vec![0], vec![1], vec![3], vec![1, 2], vec![0, 3], vec![0, 1, 2, 3]] {
        assert_eq!(reduce_shape(&shape, &axes, true).unwrap().len(), 4);
        let kept = reduce_shape(&shape, &axes, false).unwrap();
        for kind in [Reduce::Sum, Reduce::Mean, Reduce::Max, Reduce::Min] {
            let mut y = vec![f32::NAN; numel(&kept)];
            reduce(kind, &x, &shape, &axes, &mut y).unwrap();
            // Reference: bucket every input in row-major order into its output.
            let start = match kind {
                Reduce::Max => f32::NEG_INFINITY,
                Reduce::Min => f32::INFINITY,
                _ => 0.0,
            };
            let mut acc = vec![start; y.len()];
            let mut count = vec![0usize; y.len()];
            for (flat, &v) in x.iter().enumerate() {
                let idx = unflatten(flat, &shape);
                let o = (0..4).filter(|a| !axes.contains(a)).fold(0, |o, a| o * shape[a] + idx[a]);
                acc[o] = match kind {
                    Reduce::Max => acc[o].max(v),
                    Reduce::Min => acc[o].min(v),
                    _ => acc[o] + v,
                };
                count[o] += 1;
            }
            if kind == Reduce::Mean {
                acc.iter_mut().zip(&count).for_each(|(s, &n)| *s /= n as f32);
            }
            assert_eq!(bits(&y), bits(&acc), "{kind:?} over {axes:?}");
        }
    }
    assert!(reduce_shape(&shape, &[4], false).is_err());
}

#[test]
fn normalizations_follow_their_documented_formulas() {
    let mut rng = Rng::new(7);
    let (n, c, s) = (2, 3, 10);
    let x = rng.f32s(n * c * s, -3.0, 3.0);
    let (scale, bias, mean) = (rng.f32s(c, 0.5, 2.0), rng.f32s(c, -1.0, 1.0), rng.f32s(c, -1.0, 1.0));
    let var = rng.f32s(c, 0.1, 2.0);
    let mut y = vec![0f32; x.len()];
    batch_norm(&x, n, c, s, &scale, &bias, &mean, &var, 1e-5, &mut y).unwrap();
    for (i, (&v, &got)) in x.iter().zip(&y).enumerate() {
        let ch = i / s % c;
        let a = 1.0 / (var[ch] + 1e-5).sqrt() * scale[ch];
        let want = v * a + (bias[ch] - mean[ch] * a);
        assert_eq!(got.to_bits(), want.to_bits());
        let exact = (f64::from(v) - f64::from(mean[ch])) / (f64::from(var[ch]) + 1e-5).sqrt() * f64::from(scale[ch]) + f64::from(bias[ch]);
        assert!((f64::from(got) - exact).abs() < 1e-5);
    }
    // Fewer rows than a group of sums side by side, whole groups, and groups with a remainder.
    for (rows, size) in [(4, 16), (8, 64), (19, 70), (17, 384)] {
        let x = rng.f32s(rows * size, -3.0, 3.0);
        let (g, b) = (rng.f32s(size, 0.5, 2.0), rng.f32s(size, -1.0, 1.0));
        let mut y = vec![0f32; x.len()];
        layer_norm(&x, rows, size, &g, Some(&b), 1e-5, &mut y).unwrap();
        for r in 0..rows {
            let row = &x[r * size..][..size];
            let mut sum = 0f32;
            for &v in row {
                sum += v;
            }
            let m = sum / size as f32;
            let mut sq = 0f32;
            for &v in row {
                sq += (v - m) * (v - m);
            }
            let inv = 1.0 / (sq / size as f32 + 1e-5).sqrt();
            for j in 0..size {
                assert_eq!(y[r * size + j].to_bits(), ((row[j] - m) * inv * g[j] + b[j]).to_bits());
            }
            let m64 = row.iter().map(|&v| f64::from(v)).sum::<f64>() / size as f64;
            let v64 = row.iter().map(|&v| (f64::from(v) - m64).powi(2)).sum::<f64>() / size as f64;
            for j in 0..size {
                let exact = (f64::from(row[j]) - m64) / (v64 + 1e-5).sqrt() * f64::from(g[j]) + f64::from(b[j]);
                assert!((f64::from(y[r * size + j]) - exact).abs() < 1e-5, "layer norm row {r} col {j}");
            }
        }
    }
}

#[test]
fn resize_nearest_and_linear() {
    // Nearest 2x upsample, asymmetric + floor: each input repeated.
    let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let mut y = vec![0f32; 24];
    resize_nearest(&x, &[1, 2, 3], &[1, 4, 6], &[1.0, 2.0, 2.0], Coordinates::Asymmetric, Nearest::Floor, &mut y).unwrap();
    let want: Vec<f32> = (0..24).map(|i| x[(i / 6 / 2) * 3 + (i % 6) / 2]).collect();
    assert_eq!(y, want);
    // half_pixel + round_prefer_floor on 3 → 2: coordinates 0.25 → 0 and 1.75 → 2.
    let mut y = [0f32; 2];
    resize_nearest(&[10.0, 20.0, 30.0], &[3], &[2], &[2.0 / 3.0], Coordinates::HalfPixel, Nearest::RoundPreferFloor, &mut y).unwrap();
    assert_eq!(y, [10.0, 30.0]);
    // Scale 1 maps each index to itself; 2 → 4 with half_pixel reads −0.25, 0.25, 0.75, 1.25 (ceil: 0, 1, 1, 2 → clamped 1).
    resize_nearest(&[1.0, 2.0], &[2], &[2], &[1.0], Coordinates::HalfPixel, Nearest::RoundPreferCeil, &mut y).unwrap();
    assert_eq!(y, [1.0, 2.0]);
    let mut y4 = [0f32; 4];
    resize_nearest(&[1.0, 2.0], &[2], &[4], &[2.0], Coordinates::HalfPixel, Nearest::Ceil, &mut y4).unwrap();
    assert_eq!(y4, [1.0, 2.0, 2.0, 2.0]);
    // Bilinear: against the documented formula spelled out, every coordinate mode.
    let mut rng = Rng::new(8);
    let (h, w, oh, ow) = (3, 4, 7, 5);
    let x = rng.f32s(2 * h * w, -1.0, 1.0);
    let (sh, sw) = (oh as f32 / h as f32, ow as f32 / w as f32);
    for mode in [Coordinates::HalfPixel, Coordinates::PytorchHalfPixel, Coordinates::AlignCorners, Coordinates::Asymmetric] {
        let mut y = vec![0f32; 2 * oh * ow];
        resize_linear(&x, &[2, h, w], &[2, oh, ow], &[1.0, sh, sw], mode, &mut y).unwrap();
        let coord = |o: usize, s: f32, i: usize, out: usize| -> f32 {
            let o = o as f32;
            let c = match mode {
                Coordinates::HalfPixel | Coordinates::PytorchHalfPixel => (o + 0.5) / s - 0.5,
                Coordinates::AlignCorners => o * (i as f32 - 1.0) / (out as f32 - 1.0),
                _ => o / s,
            };
            c.clamp(0.0, (i - 1) as f32)
        };
        for p in 0..2 {
            for yo in 0..oh {
                for xo in 0..ow {
                    let (cy, cx) = (coord(yo, sh, h, oh), coord(xo, sw, w, ow));
                    let (y1, x1) = (cy.floor() as usize, cx.floor() as usize);
                    let (y2, x2) = ((y1 + 1).min(h - 1), (x1 + 1).min(w - 1));
                    let (dy1, dy2) = if y1 == y2 { (0.5, 0.5) } else { (cy - y1 as f32, y2 as f32 - cy) };
                    let (dx1, dx2) = if x1 == x2 { (0.5, 0.5) } else { (cx - x1 as f32, x2 as f32 - cx) };
                    let at = |r: usize, c: usize| x[p * h * w + r * w + c];
                    let want = dx2 * dy2 * at(y1, x1) + dx1 * dy2 * at(y1, x2) + dx2 * dy1 * at(y2, x1) + dx1 * dy1 * at(y2, x2);
                    assert_eq!(y[(p * oh + yo) * ow + xo].to_bits(), want.to_bits(), "{mode:?} ({yo},{xo})");
                }
            }
        }
    }
    // An exact 2x bilinear upsample of a ramp (align_corners keeps the end points).
    let mut y = [0f32; 3];
    resize_linear(&[0.0, 2.0], &[1, 2], &[1, 3], &[1.0, 1.5], Coordinates::AlignCorners, &mut y).unwrap();
    assert_eq!(y, [0.0, 1.0, 2.0]);
    assert!(resize_linear(&[0.0; 4], &[2, 2], &[2, 2], &[1.0, 0.0], Coordinates::HalfPixel, &mut [0.0; 4]).is_err());
    assert!(resize_linear(&[0.0; 8], &[2, 2, 2], &[4, 2, 2], &[2.0, 1.0, 1.0], Coordinates::HalfPixel, &mut [0.0; 16]).is_err());
}
