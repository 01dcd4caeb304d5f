//! Pooling on codes against a direct evaluation of the ONNX definition: windows enumerated tap by
//! tap over the kernel, output sizes from the ceil/floor formula, the mean as an exact rational
//! (i128 numerator and denominator, no float arithmetic), on random geometries (1-D to 3-D,
//! strides, dilations, asymmetric pads, ceil_mode, both pad counts) and tie-prone scales; MaxPool
//! also against ONNX Runtime's own outputs (`data/maxpool_ort.bin`, see `movement_ort.py`).

mod common;

use common::{Rng, as_fraction, rne};
use qdqc_kernels::codes::pool::{PoolParams, average_pool, global_average_pool, max_pool, mean_exact, pool_output_shape};
use qdqc_kernels::codes::{QCode, Quant, numel};

/// `sat(rne(sx·sum/(count·sy)) + zy)`, exactly; a zero count is the mean 0.
fn mean_code<Y: QCode>(sum: i128, count: i128, sx: f32, sy: f32, zy: i32) -> i32 {
    let ((nx, px), (ny, py)) = (as_fraction(sx), as_fraction(sy));
    let r = if count == 0 { 0 } else { rne((nx * sum) << py, (ny * count) << px) };
    (r + i128::from(zy)).clamp(i128::from(Y::MIN), i128::from(Y::MAX)) as i32
}

/// Output length of one axis, ONNX Runtime's formula; None when the window does not fit.
fn out_len(inp: i64, k: i64, s: i64, d: i64, pb: i64, pe: i64, ceil: bool) -> Option<i64> {
    let num = inp + pb + pe - d * (k - 1) - 1;
    if num < 0 {
        return None;
    }
    let mut o = if ceil { (num as f64 / s as f64).ceil() as i64 + 1 } else { num / s + 1 };
    if ceil && (o - 1) * s >= inp + pb {
        o -= 1;
    }
    Some(o)
}

struct Case {
    shape: Vec<usize>,
    p: PoolParams,
}

fn random_case(rng: &mut Rng) -> Case {
    let d = 1 + rng.below(3) as usize;
    let mut shape = vec![1 + rng.below(2) as usize, 1 + rng.below(3) as usize];
    let mut p = PoolParams::new(&vec![1; d]);
    for a in 0..d {
        shape.push(1 + rng.below(if d == 3 { 5 } else { 8 }) as usize);
        p.kernel[a] = 1 + rng.below(4) as usize;
        p.strides[a] = 1 + rng.below(3) as usize;
        p.dilations[a] = 1 + rng.below(2) as usize;
        // Pads up to the kernel size: windows entirely in the padding happen.
        p.pads[a] = rng.below(p.kernel[a] as u64 + 1) as usize;
        p.pads[a + d] = rng.below(p.kernel[a] as u64 + 1) as usize;
    }
    p.ceil_mode = rng.below(2) == 1;
    Case { shape, p }
}

/// One output's window: its input taps as flat indices, and its include-pad count.
type Window = (Vec<usize>, i128);

/// The output shape and every output's window, by the definition.
fn reference_windows(c: &Case) -> Option<(Vec<usize>, Vec<Window>)> {
    let d = c.p.kernel.len();
    let mut outs = vec![];
    for a in 0..d {
        let (k, s, dil) = (c.p.kernel[a] as i64, c.p.strides[a] as i64, c.p.dilations[a] as i64);
        outs.push(out_len(c.shape[a + 2] as i64, k, s, dil, c.p.pads[a] as i64, c.p.pads[a + d] as i64, c.p.ceil_mode)? as usize);
    }
    let mut out_shape = c.shape[..2].to_vec();
    out_shape.extend(&outs);
    let spatial = &c.shape[2..];
    let plane: usize = spatial.iter().product();
    let mut res = vec![];
    for nc in 0..c.shape[0] * c.shape[1] {
        for o in 0..numel(&outs) {
            // Output coordinates.
            let mut oc = vec![0i64; d];
            let mut rem = o;
            for a in (0..d).rev() {
                oc[a] = (rem % outs[a]) as i64;
                rem /= outs[a];
            }
            let (mut taps, mut padded) = (vec![], 0i128);
            for j in 0..numel(&c.p.kernel) {
                let mut jr = j;
                let (mut inside, mut in_pad_extent, mut flat) = (true, true, 0usize);
                for a in (0..d).rev() {
                    let ja = (jr % c.p.kernel[a]) as i64;
                    jr /= c.p.kernel[a];
                    let pos = oc[a] * c.p.strides[a] as i64 - c.p.pads[a] as i64 + ja * c.p.dilations[a] as i64;
                    let n = spatial[a] as i64;
                    inside &= (0..n).contains(&pos);
                    in_pad_extent &= pos < n + c.p.pads[a + d] as i64;
                    let stride: usize = spatial[a + 1..].iter().product();
                    flat += if (0..n).contains(&pos) { pos as usize * stride } else { 0 };
                }
                if inside {
                    taps.push(nc * plane + flat);
                }
                padded += i128::from(in_pad_extent);
            }
            res.push((taps, padded));
        }
    }
    Some((out_shape, res))
}

fn check_case<X: QCode, Y: QCode>(rng: &mut Rng, c: &Case, qx: Quant, qy: Quant) -> bool {
    let reference = reference_windows(c);
    let got_shape = pool_output_shape(&c.p, &c.shape);
    let Some((out_shape, wins)) = reference else {
        assert!(got_shape.is_err(), "{:?} on {:?}: the window does not fit, yet a shape", c.p, c.shape);
        return false;
    };
    assert_eq!(got_shape.unwrap(), out_shape, "{:?} on {:?}", c.p, c.shape);
    let x: Vec<X> = (0..numel(&c.shape)).map(|_| X::from_index(rng.below(256) as usize)).collect();
    let n = numel(&out_shape);
    let mut mx = vec![X::default(); n];
    max_pool(&x, &c.shape, &c.p, &mut mx).unwrap();
    for include in [false, true] {
        let mut avg = vec![Y::default(); n];
        average_pool(&x, &c.shape, &c.p, include, qx, qy, &mut avg).unwrap();
        for (o, (taps, padded)) in wins.iter().enumerate() {
            let sum: i128 = taps.iter().map(|&t| i128::from(x[t].value() - qx.zero_point)).sum();
            let count = if taps.is_empty() {
                0
            } else if include {
                *padded
            } else {
                taps.len() as i128
            };
            let want = mean_code::<Y>(sum, count, qx.scale, qy.scale, qy.zero_point);
            assert_eq!(avg[o].value(), want, "avg include_pad={include} {:?} on {:?} at {o}: taps {taps:?}", c.p, c.shape);
        }
    }
    for (o, (taps, _)) in wins.iter().enumerate() {
        let want = taps.iter().map(|&t| x[t].value()).max().unwrap_or(X::MIN);
        assert_eq!(mx[o].value(), want, "max {:?} on {:?} at {o}", c.p, c.shape);
    }
    true
}

const SCALES: [(f32, f32); 5] = [(1.0, 1.0), (0.5, 0.75), (0.02, 0.02), (0.013, 0.0041), (3.0 / 64.0, 1.0 / 16.0)];

#[test]
fn random_geometries() {
    let mut rng = Rng::new(7);
    let mut checked = 0;
    for i in 0..1500 {
        let c = random_case(&mut rng);
        let (sx, sy) = SCALES[i % SCALES.len()];
        let ok = match i % 3 {
            0 => check_case::<u8, u8>(&mut rng, &c, Quant::new(sx, 128), Quant::new(sy, 100)),
            1 => check_case::<i8, i8>(&mut rng, &c, Quant::new(sx, -3), Quant::new(sy, 0)),
            _ => check_case::<u8, i8>(&mut rng, &c, Quant::new(sx, 0), Quant::new(sy, -128)),
        };
        checked += usize::from(ok);
    }
    assert!(checked > 1000, "most random geometries fit ({checked})");
}

/// 2×2 windows at stride 2 on 2-D planes (the pools' in-place path): even and odd line counts
/// and widths (an odd last line or column read by no window), several planes and images, both
/// code types and zero points on both sides; then the same windows with a pad, a dilation or
/// ceil_mode (the general path), each against the definition.
#[test]
fn two_by_two_windows_at_stride_two() {
    let mut rng = Rng::new(11);
    let quads = |p: &PoolParams| p.kernel == [2, 2] && p.strides == [2, 2] && p.pads == [0; 4] && p.dilations == [1, 1] && !p.ceil_mode;
    let mut cases = Vec::new();
    for (n, c, h, w) in [(1, 1, 2, 2), (1, 16, 16, 16), (2, 3, 8, 6), (1, 2, 5, 7), (1, 4, 7, 4), (2, 1, 9, 9), (1, 3, 2, 32)] {
        let p = PoolParams { strides: vec![2, 2], ..PoolParams::new(&[2, 2]) };
        cases.push(Case { shape: vec![n, c, h, w], p: p.clone() });
        cases.push(Case { shape: vec![n, c, h, w], p: PoolParams { pads: vec![0, 0, 0, 1], ..p.clone() } });
        cases.push(Case { shape: vec![n, c, h, w], p: PoolParams { ceil_mode: true, ..p.clone() } });
        cases.push(Case { shape: vec![n, c, h + 2, w + 2], p: PoolParams { dilations: vec![1, 2], ..p } });
    }
    assert!(cases.iter().filter(|c| quads(&c.p)).count() == 7);
    for (i, c) in cases.iter().enumerate() {
        let (sx, sy) = SCALES[i % SCALES.len()];
        assert!(check_case::<u8, u8>(&mut rng, c, Quant::new(sx, 128), Quant::new(sy, 100)), "{:?} on {:?}", c.p, c.shape);
        assert!(check_case::<i8, i8>(&mut rng, c, Quant::new(sx, -3), Quant::new(sy, 0)), "{:?} on {:?}", c.p, c.shape);
        assert!(check_case::<u8, i8>(&mut rng, c, Quant::new(sx, 0), Quant::new(sy, -128)), "{:?} on {:?}", c.p, c.shape);
    }
}

#[test]
fn global_average() {
    let mut rng = Rng::new(8);
    for shape in [vec![1, 3, 7], vec![2, 2, 4, 4], vec![1, 1, 3, 5, 2], vec![1, 4, 224, 3]] {
        for &(sx, sy) in &SCALES {
            let x = rng.u8s(numel(&shape));
            let (qx, qy) = (Quant::new(sx, 37), Quant::new(sy, 250));
            let mut y = vec![0u8; shape[0] * shape[1]];
            global_average_pool(&x, &shape, qx, qy, &mut y).unwrap();
            let plane = numel(&shape[2..]);
            for (c, &v) in y.iter().enumerate() {
                let sum: i128 = x[c * plane..(c + 1) * plane].iter().map(|&v| i128::from(v) - 37).sum();
                assert_eq!(i32::from(v), mean_code::<u8>(sum, plane as i128, sx, sy, 250), "{shape:?} plane {c}");
            }
        }
    }
}

/// Exact ties of the mean (1.5, 2.5, ...) go to even; sx = sy = 1 and windows of 2.
#[test]
fn mean_ties_to_even() {
    let x: Vec<i8> = vec![1, 2, 2, 3, -1, -2, -2, -3];
    let p = PoolParams { strides: vec![2], ..PoolParams::new(&[2]) };
    let mut y = [0i8; 4];
    average_pool(&x, &[1, 1, 8], &p, false, Quant::new(1.0, 0), Quant::new(1.0, 0), &mut y).unwrap();
    assert_eq!(y, [2, 2, -2, -2]);
}

#[test]
fn refuses_bad_geometry() {
    let mut y = [0u8; 4];
    assert!(max_pool(&[0u8; 4], &[1, 1, 4], &PoolParams::new(&[5]), &mut y).is_err(), "kernel wider than the padded input");
    assert!(max_pool(&[0u8; 4], &[1, 4], &PoolParams::new(&[1]), &mut y).is_err(), "no spatial axis");
    assert!(max_pool(&[0u8; 4], &[1, 1, 4], &PoolParams::new(&[1]), &mut y[..3]).is_err(), "short output");
    assert!(average_pool(&[0u8; 4], &[1, 1, 4], &PoolParams::new(&[1]), true, Quant::new(0.0, 0), Quant::new(1.0, 0), &mut y).is_err(), "zero scale");
    let p = PoolParams { strides: vec![0], ..PoolParams::new(&[1]) };
    assert!(max_pool(&[0u8; 4], &[1, 1, 4], &p, &mut y).is_err(), "stride 0");
}

/// MaxPool cases from ONNX Runtime (u8 MaxPool, 1-3-D, strides, dilations, pads, ceil_mode).
#[test]
fn max_pool_matches_onnx_runtime() {
    let mut r: &[u8] = include_bytes!("data/maxpool_ort.bin");
    let mut cases = 0;
    while !r.is_empty() {
        let (d, ceil) = (r[0] as usize, r[1] == 1);
        r = &r[2..];
        let mut words = |n: usize| {
            let v: Vec<usize> = r[..4 * n].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize).collect();
            r = &r[4 * n..];
            v
        };
        let shape = words(d + 2);
        let (kernel, strides, dilations, pads) = (words(d), words(d), words(d), words(2 * d));
        let out_shape = words(d + 2);
        let p = PoolParams { kernel, strides, pads, dilations, ceil_mode: ceil };
        let (x, rest) = r.split_at(numel(&shape));
        let (want, rest) = rest.split_at(numel(&out_shape));
        r = rest;
        assert_eq!(pool_output_shape(&p, &shape).unwrap(), out_shape, "{p:?} on {shape:?}");
        let mut got = vec![0u8; want.len()];
        max_pool(x, &shape, &p, &mut got).unwrap();
        assert_eq!(got, want, "{p:?} on {shape:?}");
        cases += 1;
    }
    assert_eq!(cases, 150);
}

#[test]
fn absurd_attributes_are_refused_not_overflowed() {
    let p = PoolParams { dilations: vec![usize::MAX], ..PoolParams::new(&[3]) };
    assert!(pool_output_shape(&p, &[1, 1, 4]).is_err());
    let p = PoolParams { pads: vec![usize::MAX, usize::MAX], ..PoolParams::new(&[3]) };
    assert!(pool_output_shape(&p, &[1, 1, 4]).is_err(), "2^65 outputs");
    let p = PoolParams { kernel: vec![usize::MAX], ..PoolParams::new(&[3]) };
    assert!(pool_output_shape(&p, &[1, 1, 4]).is_err());
}

/// The per-window definition over sums and counts far beyond any window, ties included.
#[test]
fn mean_definition() {
    let mut rng = Rng::new(9);
    for &(sx, sy) in &SCALES {
        for _ in 0..20_000 {
            let bits = 1 + rng.below(40);
            let count = 1 + rng.below(1 << bits) as usize;
            let sum = (rng.below(511 * count as u64 + 1) as i64) - 255 * count as i64;
            let (qx, qy) = (Quant::new(sx, 0), Quant::new(sy, -5));
            let got: i8 = mean_exact::<u8, i8>(sum, count, qx, qy).unwrap();
            assert_eq!(i32::from(got), mean_code::<i8>(i128::from(sum), count as i128, sx, sy, -5), "sum {sum} count {count}");
        }
    }
    assert_eq!(mean_exact::<u8, u8>(0, 0, Quant::new(1.0, 0), Quant::new(1.0, 77)).unwrap(), 77);
}

/// Every window sum a count can give, for counts 1 to 12 (windows of `c` taps, stride `c`, each
/// window filled to its sum), at scale pairs whose means sit on exact ties: rates exact in f64
/// (powers of two, `3/64 : 1/16` at counts 1, 2, 3, 4, 6, 12), inexact ones with ties (`1/12` at
/// count 9, `2/3 : c` at counts 4 and 8) and none (0.013 : 0.0041); u8 and i8 codes, zero points
/// that put the sums on both signs. Against [`mean_exact`], the definition.
#[test]
fn every_window_sum_per_count() {
    fn check<X: QCode, Y: QCode>(zx: i32, sx: f32, sy: f32, zy: i32) {
        let (qx, qy) = (Quant::new(sx, zx), Quant::new(sy, zy));
        for c in 1..=12usize {
            let (lo, hi) = (X::MIN - zx, X::MAX - zx);
            let sums: Vec<i64> = (lo as i64 * c as i64..=hi as i64 * c as i64).collect();
            // Window w's taps: as much of its sum as each tap holds, the rest on the next.
            let mut x = Vec::with_capacity(sums.len() * c);
            for &s in &sums {
                let mut rest = s;
                for _ in 0..c {
                    let v = rest.clamp(i64::from(lo), i64::from(hi));
                    x.push(X::saturate(v + i64::from(zx)));
                    rest -= v;
                }
                assert_eq!(rest, 0);
            }
            let p = PoolParams { strides: vec![c], ..PoolParams::new(&[c]) };
            let mut y = vec![Y::default(); sums.len()];
            average_pool(&x, &[1, 1, x.len()], &p, false, qx, qy, &mut y).unwrap();
            for (&s, &got) in sums.iter().zip(&y) {
                assert_eq!(got, mean_exact::<X, Y>(s, c, qx, qy).unwrap(), "count {c}, sum {s}, scales {sx:e} / {sy:e}");
            }
        }
    }
    for (sx, sy) in [(1.0, 1.0), (0.25, 2.0), (3.0 / 64.0, 1.0 / 16.0), (0.5, 0.75), (1.0, 1.0 / 1024.0), (0.013, 0.0041)] {
        check::<u8, u8>(0, sx, sy, 3);
        check::<u8, i8>(128, sx, sy, -5);
        check::<i8, i8>(-7, sx, sy, 0);
    }
}

/// Windows wholly in the end padding (no input tap: MaxPool gives the lowest code, AveragePool
/// zy under both counts or, with count_include_pad, the mean of pads), at the borders of 1-D, 2-D
/// and dilated axes, against the tap-by-tap reference.
#[test]
fn windows_in_the_padding() {
    let mut rng = Rng::new(9);
    let cases = [
        Case { shape: vec![1, 2, 3], p: PoolParams { pads: vec![0, 5], strides: vec![2], ..PoolParams::new(&[2]) } },
        Case { shape: vec![1, 1, 4, 2], p: PoolParams { pads: vec![3, 0, 4, 3], strides: vec![3, 2], ..PoolParams::new(&[3, 2]) } },
        Case { shape: vec![2, 1, 5], p: PoolParams { pads: vec![4, 6], strides: vec![3], dilations: vec![2], ..PoolParams::new(&[3]) } },
    ];
    for c in &cases {
        assert!(check_case::<u8, u8>(&mut rng, c, Quant::new(0.5, 128), Quant::new(0.25, 3)));
        assert!(check_case::<i8, i8>(&mut rng, c, Quant::new(1.0, -3), Quant::new(1.0, 0)));
    }
}
