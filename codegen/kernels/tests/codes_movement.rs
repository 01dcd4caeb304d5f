//! Data movement on codes against coordinate-by-coordinate evaluations of the ONNX definitions
//! (every output coordinate mapped back to its input coordinate), on random shapes; Resize also
//! against ONNX Runtime's own outputs (`data/resize_ort.bin`, see `movement_ort.py`).

mod common;

use common::Rng;
use qdqc_kernels::codes::movement::{
    CoordinateTransform, NearestMode, PadMode, ResizeTarget, concat, expand, gather, gather_shape, pad, pad_shape, resize_nearest, resize_shape, slice,
    slice_shape, transpose,
};
use qdqc_kernels::codes::numel;

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        c[a] = flat % shape[a];
        flat /= shape[a];
    }
    c
}

fn ravel(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

fn random_shape(rng: &mut Rng, max_rank: u64, max_dim: u64) -> Vec<usize> {
    (0..rng.below(max_rank + 1)).map(|_| rng.below(max_dim + 1) as usize).collect()
}

#[test]
fn concat_random() {
    let mut rng = Rng::new(21);
    for _ in 0..300 {
        let mut base = random_shape(&mut rng, 4, 4);
        if base.is_empty() {
            base.push(2);
        }
        let axis = rng.below(base.len() as u64) as usize;
        let shapes: Vec<Vec<usize>> = (0..1 + rng.below(3))
            .map(|_| {
                let mut s = base.clone();
                s[axis] = rng.below(4) as usize;
                s
            })
            .collect();
        let data: Vec<Vec<i8>> = shapes.iter().map(|s| rng.i8s(numel(s))).collect();
        let inputs: Vec<(&[i8], &[usize])> = data.iter().zip(&shapes).map(|(d, s)| (&d[..], &s[..])).collect();
        let mut out_shape = base.clone();
        out_shape[axis] = shapes.iter().map(|s| s[axis]).sum();
        let mut out = vec![0i8; numel(&out_shape)];
        assert_eq!(concat(&inputs, axis, &mut out).unwrap(), out_shape);
        for (o, &y) in out.iter().enumerate() {
            let mut c = unravel(o, &out_shape);
            let mut k = 0;
            while c[axis] >= shapes[k][axis] {
                c[axis] -= shapes[k][axis];
                k += 1;
            }
            assert_eq!(y, data[k][ravel(&c, &shapes[k])], "{shapes:?} axis {axis} at {o}");
        }
    }
    assert!(concat::<u8>(&[(&[0; 6], &[2, 3]), (&[0; 6], &[3, 2])], 0, &mut [0; 12]).is_err(), "shapes differ off the axis");
}

#[test]
fn transpose_random() {
    let mut rng = Rng::new(22);
    for _ in 0..300 {
        let shape = random_shape(&mut rng, 5, 4);
        let mut perm: Vec<usize> = (0..shape.len()).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        transposes_by_definition(&rng.u8s(numel(&shape)), &shape, &perm);
    }
    assert!(transpose(&[0u8; 6], &[2, 3], &[0, 0], &mut [0; 6]).is_err(), "repeated axis");
}

/// `transpose(x)` has the permuted shape and every output element is the input element at the
/// permuted coordinates.
fn transposes_by_definition(x: &[u8], shape: &[usize], perm: &[usize]) {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut out = vec![0u8; x.len()];
    assert_eq!(transpose(x, shape, perm, &mut out).unwrap(), out_shape);
    for (o, &y) in out.iter().enumerate() {
        let oc = unravel(o, &out_shape);
        let mut ic = vec![0; shape.len()];
        for (i, &p) in perm.iter().enumerate() {
            ic[p] = oc[i];
        }
        assert_eq!(y, x[ravel(&ic, shape)], "{shape:?} perm {perm:?} at {o}");
    }
}

/// Transposes that keep the last axis (one contiguous run per output row), short and long runs
/// (attention's heads: [1, 12, 64, 32] → [1, 64, 12, 32]; `transpose_random`'s axes are ≤ 4).
#[test]
fn transpose_keeping_the_last_axis() {
    let mut rng = Rng::new(23);
    for (shape, perm) in
        [(vec![1, 12, 64, 32], vec![0, 2, 1, 3]), (vec![2, 3, 40], vec![1, 0, 2]), (vec![3, 2, 300], vec![1, 0, 2]), (vec![5, 2, 7], vec![1, 0, 2])]
    {
        transposes_by_definition(&rng.u8s(numel(&shape)), &shape, &perm);
    }
}

#[test]
fn pad_random() {
    let mut rng = Rng::new(23);
    let mut checked = 0;
    for i in 0..600 {
        let shape: Vec<usize> = (0..1 + rng.below(3)).map(|_| 1 + rng.below(5) as usize).collect();
        let r = shape.len();
        let pads: Vec<i64> = (0..2 * r).map(|_| rng.below(7) as i64 - 2).collect();
        let mode = [PadMode::Constant(-7i8), PadMode::Edge, PadMode::Reflect][i % 3];
        let x = rng.i8s(numel(&shape));
        let Ok(out_shape) = pad_shape(&shape, &pads) else {
            assert!((0..r).any(|a| shape[a] as i64 + pads[a] + pads[a + r] < 0));
            continue;
        };
        let mut out = vec![0i8; numel(&out_shape)];
        let reflect_ok = (0..r).all(|a| (0..shape[a] as i64).contains(&pads[a]) && (0..shape[a] as i64).contains(&pads[a + r]));
        let res = pad(&x, &shape, &pads, mode, &mut out);
        if mode == PadMode::Reflect && !reflect_ok {
            assert!(res.is_err(), "reflect pads outside 0..n refused: {shape:?} {pads:?}");
            continue;
        }
        res.unwrap();
        for (o, &y) in out.iter().enumerate() {
            let oc = unravel(o, &out_shape);
            let mut ic = vec![0; r];
            let mut outside = false;
            for a in 0..r {
                let (n, i) = (shape[a] as i64, oc[a] as i64 - pads[a]);
                ic[a] = match mode {
                    _ if (0..n).contains(&i) => i,
                    PadMode::Constant(_) => {
                        outside = true;
                        0
                    }
                    PadMode::Edge => i.clamp(0, n - 1),
                    // numpy "reflect": the border element is not repeated.
                    PadMode::Reflect => {
                        if i < 0 {
                            -i
                        } else {
                            2 * n - 2 - i
                        }
                    }
                } as usize;
            }
            let want = if outside { -7 } else { x[ravel(&ic, &shape)] };
            assert_eq!(y, want, "{mode:?} {shape:?} pads {pads:?} at {oc:?}");
        }
        checked += 1;
    }
    assert!(checked > 300, "{checked}");
}

#[test]
fn slice_random() {
    let mut rng = Rng::new(24);
    for _ in 0..600 {
        let shape: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(7) as usize).collect();
        let r = shape.len() as i64;
        let n = 1 + rng.below(r as u64) as usize;
        // Distinct axes, some negative.
        let mut axes: Vec<i64> = (0..r).collect();
        for i in (1..axes.len()).rev() {
            axes.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let axes: Vec<i64> = axes[..n].iter().map(|&a| if rng.below(2) == 0 { a } else { a - r }).collect();
        let pick = |rng: &mut Rng| [i64::MIN, -9, -3, -1, 0, 1, 2, 5, 9, i64::MAX][rng.below(10) as usize];
        let starts: Vec<i64> = (0..n).map(|_| pick(&mut rng)).collect();
        let ends: Vec<i64> = (0..n).map(|_| pick(&mut rng)).collect();
        let steps: Vec<i64> = (0..n).map(|_| [-3, -2, -1, 1, 2, 3][rng.below(6) as usize]).collect();
        let x = rng.u8s(numel(&shape));
        let out_shape = slice_shape(&shape, &starts, &ends, &axes, &steps).unwrap();
        // The indices each axis selects, by the ONNX definition (a loop, not a formula).
        let mut sel: Vec<Vec<usize>> = shape.iter().map(|&d| (0..d).collect()).collect();
        for i in 0..n {
            let a = (if axes[i] < 0 { axes[i] + r } else { axes[i] }) as usize;
            let d = shape[a] as i128;
            let fix = |v: i64| if v < 0 { i128::from(v) + d } else { i128::from(v) };
            let step = i128::from(steps[i]);
            let (mut k, end) = if step > 0 {
                (fix(starts[i]).clamp(0, d), fix(ends[i]).clamp(0, d))
            } else {
                (fix(starts[i]).clamp(0, (d - 1).max(0)), fix(ends[i]).clamp(-1, d - 1))
            };
            sel[a].clear();
            while d > 0 && ((step > 0 && k < end) || (step < 0 && k > end)) {
                sel[a].push(k as usize);
                k += step;
            }
        }
        assert_eq!(out_shape, sel.iter().map(Vec::len).collect::<Vec<_>>(), "{shape:?} {starts:?} {ends:?} {axes:?} {steps:?}");
        let mut out = vec![0u8; numel(&out_shape)];
        slice(&x, &shape, &starts, &ends, &axes, &steps, &mut out).unwrap();
        for (o, &y) in out.iter().enumerate() {
            let ic: Vec<usize> = unravel(o, &out_shape).iter().enumerate().map(|(a, &i)| sel[a][i]).collect();
            assert_eq!(y, x[ravel(&ic, &shape)], "{shape:?} {starts:?} {ends:?} {axes:?} {steps:?}");
        }
    }
    assert!(slice_shape(&[4], &[0], &[4], &[0], &[0]).is_err(), "step 0");
    assert!(slice_shape(&[4, 4], &[0, 0], &[4, 4], &[1, -1], &[]).is_err(), "repeated axis");
}

#[test]
fn gather_random() {
    let mut rng = Rng::new(25);
    for _ in 0..300 {
        let shape: Vec<usize> = (0..1 + rng.below(3)).map(|_| 1 + rng.below(4) as usize).collect();
        let axis = rng.below(shape.len() as u64) as usize;
        let ishape = random_shape(&mut rng, 2, 3);
        let d = shape[axis] as i64;
        let idx: Vec<i64> = (0..numel(&ishape)).map(|_| rng.below(2 * d as u64) as i64 - d).collect();
        let x = rng.i8s(numel(&shape));
        let out_shape = gather_shape(&shape, axis, &ishape).unwrap();
        let mut out = vec![0i8; numel(&out_shape)];
        gather(&x, &shape, axis, &idx, &ishape, &mut out).unwrap();
        for (o, &y) in out.iter().enumerate() {
            let oc = unravel(o, &out_shape);
            let k = ravel(&oc[axis..axis + ishape.len()], &ishape);
            let mut ic = oc[..axis].to_vec();
            ic.push((if idx[k] < 0 { idx[k] + d } else { idx[k] }) as usize);
            ic.extend(&oc[axis + ishape.len()..]);
            assert_eq!(y, x[ravel(&ic, &shape)], "{shape:?} axis {axis} indices {idx:?}");
        }
    }
    assert!(gather(&[0u8; 4], &[4], 0, &[4], &[1], &mut [0]).is_err(), "index 4 of 4");
    assert!(gather(&[0u8; 4], &[4], 0, &[-5], &[1], &mut [0]).is_err(), "index -5 of 4");
}

#[test]
fn expand_random() {
    let mut rng = Rng::new(26);
    for _ in 0..300 {
        let out_shape: Vec<usize> = (0..1 + rng.below(4)).map(|_| 1 + rng.below(4) as usize).collect();
        // The input: a suffix of the output's axes, each kept or shrunk to 1.
        let skip = rng.below(out_shape.len() as u64 + 1) as usize;
        let shape: Vec<usize> = out_shape[skip..].iter().map(|&d| if rng.below(2) == 0 { 1 } else { d }).collect();
        let x = rng.i8s(numel(&shape));
        let mut out = vec![0i8; numel(&out_shape)];
        expand(&x, &shape, &out_shape, &mut out).unwrap();
        for (o, &y) in out.iter().enumerate() {
            let oc = unravel(o, &out_shape);
            let ic: Vec<usize> = oc[skip..].iter().zip(&shape).map(|(&c, &d)| if d == 1 { 0 } else { c }).collect();
            assert_eq!(y, x[ravel(&ic, &shape)], "{shape:?} to {out_shape:?}");
        }
    }
    assert!(expand(&[0u8; 2], &[2], &[3], &mut [0; 3]).is_err(), "2 does not stretch to 3");
    assert!(expand(&[0u8; 2], &[1, 2], &[2], &mut [0; 2]).is_err(), "more axes than the output");
}

/// Resize cases from ONNX Runtime: u8 input 0, 1, 2, ... and ORT's output codes.
#[test]
fn resize_matches_onnx_runtime() {
    let data: &[u8] = include_bytes!("data/resize_ort.bin");
    let mut r = data;
    let mut take = |n: usize| {
        let (h, t) = r.split_at(n.min(r.len()));
        r = t;
        h.to_vec()
    };
    let transforms =
        [CoordinateTransform::HalfPixel, CoordinateTransform::Asymmetric, CoordinateTransform::AlignCorners, CoordinateTransform::PytorchHalfPixel];
    let modes = [NearestMode::RoundPreferFloor, NearestMode::RoundPreferCeil, NearestMode::Floor, NearestMode::Ceil];
    let mut cases = 0;
    loop {
        let head = take(4);
        if head.is_empty() {
            break;
        }
        let (t, m, by_sizes, rank) = (transforms[head[0] as usize], modes[head[1] as usize], head[2] == 1, head[3] as usize);
        let word = |b: Vec<u8>| u32::from_le_bytes(b.try_into().unwrap());
        let shape: Vec<usize> = (0..rank).map(|_| word(take(4)) as usize).collect();
        let scales: Vec<f32> = (0..rank).map(|_| f32::from_bits(word(take(4)))).collect();
        let sizes: Vec<usize> = (0..rank).map(|_| word(take(4)) as usize).collect();
        let target = if by_sizes { ResizeTarget::Sizes(&sizes) } else { ResizeTarget::Scales(&scales) };
        let (out_shape, _) = resize_shape(&shape, target).unwrap();
        assert_eq!(out_shape, sizes, "{t:?} {m:?} {shape:?} {target:?}: ORT's output shape");
        let want = take(numel(&sizes));
        let x: Vec<u8> = (0..numel(&shape)).map(|i| i as u8).collect();
        let mut got = vec![0u8; numel(&sizes)];
        resize_nearest(&x, &shape, target, t, m, &mut got).unwrap();
        assert_eq!(got, want, "{t:?} {m:?} {shape:?} {target:?}");
        cases += 1;
    }
    assert!(cases >= 100, "{cases} cases");
}

/// Pad cases from ONNX Runtime: constant (7), edge, reflect; negative pads crop.
#[test]
fn pad_matches_onnx_runtime() {
    let mut r: &[u8] = include_bytes!("data/pad_ort.bin");
    let mut cases = 0;
    while !r.is_empty() {
        let (mode, rank) = (r[0], r[1] as usize);
        r = &r[2..];
        let mut words = |n: usize| {
            let v: Vec<u32> = r[..4 * n].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
            r = &r[4 * n..];
            v
        };
        let shape: Vec<usize> = words(rank).iter().map(|&v| v as usize).collect();
        let pads: Vec<i64> = words(2 * rank).iter().map(|&v| i64::from(v as i32)).collect();
        let out_shape: Vec<usize> = words(rank).iter().map(|&v| v as usize).collect();
        let (x, rest) = r.split_at(numel(&shape));
        let (want, rest) = rest.split_at(numel(&out_shape));
        r = rest;
        let mode = [PadMode::Constant(7u8), PadMode::Edge, PadMode::Reflect][mode as usize];
        assert_eq!(pad_shape(&shape, &pads).unwrap(), out_shape);
        let mut got = vec![0u8; want.len()];
        pad(x, &shape, &pads, mode, &mut got).unwrap();
        assert_eq!(got, want, "{mode:?} {shape:?} pads {pads:?}");
        cases += 1;
    }
    assert_eq!(cases, 120);
}

#[test]
fn absurd_sizes_are_refused_not_overflowed() {
    assert_eq!(numel(&[usize::MAX, 2]), usize::MAX);
    let mut out = [0u8; 4];
    assert!(resize_nearest(&[0u8; 4], &[2, 2], ResizeTarget::Scales(&[1e30, 1e30]), CoordinateTransform::Asymmetric, NearestMode::Floor, &mut out).is_err());
    assert!(pad(&[0u8; 4], &[2, 2], &[i64::MAX / 2, 0, i64::MAX / 2, 0], PadMode::Edge, &mut out).is_err());
}
