//! Data movement on codes (any `T: Copy`; quantization parameters pass through unchanged, so
//! inputs and output must share them — Concat's inputs included): Concat, Transpose, Pad, Resize
//! (nearest), Slice, Gather. Row-major tensors; every op takes the input shape and writes a
//! caller-sized output (the `*_shape` functions give its shape).
//!
//! All but Concat and Transpose are one primitive: each output axis reads the input through an
//! index map (`None` = the pad value), and the output is the product of the maps.
//!
//! | op | index map along an axis | source |
//! |---|---|---|
//! | [`pad`] | `i − pad_begin`; outside: constant, `edge` clamps, `reflect` mirrors without repeating the border (`0 ≤ pad ≤ n − 1`); negative pads crop (not with reflect) | ONNX Pad |
//! | [`resize_nearest`] | ONNX Runtime's f32 arithmetic: the coordinate transform, then the nearest mode, clamped to `0..n` | `upsamplebase.h` |
//! | [`slice()`] | `start + k·step`, starts/ends clamped as ONNX Slice | ONNX Slice |
//! | [`gather`] | the indices (negative counts from the end) | ONNX Gather |
//! | [`expand`] | `0` along a stretched axis (extent 1), else the identity; leading axes added | ONNX Expand |

use super::shape::{check_len, strides};
use super::{CodesError, numel, shape_err};

/// `out[o] = x[Σ_a maps[a][o_a]·stride_a]`, or `fill` when some `maps[a][o_a]` is `None`.
///
/// Row by row of the last axis: a row reading the same input row as the previous output row
/// (nearest upsampling repeats rows) is a copy of it, a row whose last-axis map is a run of
/// consecutive offsets (Slice, Pad's interior, Gather of a range) one `copy_from_slice`, one
/// reading each offset of a run twice in turn (nearest upsampling by 2) pairs of copies; the
/// others gather element by element. Every branch writes the same elements as the definition.
fn map_axes<T: Copy>(x: &[T], shape: &[usize], maps: &[Vec<Option<usize>>], fill: Option<T>, out: &mut [T]) {
    let out_shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    if out.is_empty() {
        return;
    }
    if maps.is_empty() {
        out[0] = x[0];
        return;
    }
    // Without a fill value no map holds None, and a non-empty output has a non-empty input.
    let fill = fill.unwrap_or_else(|| x[0]);
    let st = strides(shape);
    let rank = maps.len();
    let width = out_shape[rank - 1];
    let last: Vec<Option<usize>> = maps[rank - 1].iter().map(|m| m.map(|i| i * st[rank - 1])).collect();
    // The last axis' offsets when none is the pad, and whether they are one consecutive run.
    let dense: Option<Vec<usize>> = last.iter().copied().collect();
    let run = dense.as_ref().is_some_and(|d| d.windows(2).all(|w| w[1] == w[0] + 1));
    // Each offset twice in turn (nearest upsampling by 2 along the last axis): pairs of copies.
    let doubled = dense.as_ref().is_some_and(|d| d.iter().enumerate().all(|(i, &o)| o == d[0] + i / 2));
    let mut idx = vec![0usize; rank - 1];
    let mut previous: Option<(usize, usize)> = None;
    for start in (0..out.len()).step_by(width) {
        // The row's base offset, or None when an outer axis reads the pad.
        let base = idx.iter().enumerate().try_fold(0usize, |acc, (a, &i)| maps[a][i].map(|s| acc + s * st[a]));
        match (base, &dense) {
            (Some(b), _) if previous.is_some_and(|(pb, _)| pb == b) => {
                let (_, from) = previous.expect("checked");
                out.copy_within(from..from + width, start);
            }
            (Some(b), Some(d)) if run => out[start..start + width].copy_from_slice(&x[b + d[0]..][..width]),
            (Some(b), Some(d)) if doubled => {
                let row = &mut out[start..start + width];
                let src = &x[b + d[0]..][..width.div_ceil(2)];
                for (pair, &v) in row.chunks_exact_mut(2).zip(src) {
                    pair.copy_from_slice(&[v, v]);
                }
                if width % 2 == 1 {
                    row[width - 1] = src[width / 2];
                }
            }
            (Some(b), Some(d)) => {
                for (y, &o) in out[start..start + width].iter_mut().zip(d) {
                    *y = x[b + o];
                }
            }
            (Some(b), None) => {
                for (y, m) in out[start..start + width].iter_mut().zip(&last) {
                    *y = m.map_or(fill, |o| x[b + o]);
                }
            }
            (None, _) => out[start..start + width].fill(fill),
        }
        previous = base.map(|b| (b, start));
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            if idx[a] < out_shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// Concat along `axis`: every input has the rank and the dims of the others except along `axis`.
pub fn concat<T: Copy>(inputs: &[(&[T], &[usize])], axis: usize, out: &mut [T]) -> Result<Vec<usize>, CodesError> {
    let Some(&(_, first)) = inputs.first() else { return shape_err("Concat: no input".into()) };
    if axis >= first.len() {
        return shape_err(format!("Concat: axis {axis} of rank {}", first.len()));
    }
    let mut out_shape = first.to_vec();
    out_shape[axis] = 0;
    for &(x, s) in inputs {
        let same = s.len() == first.len() && s.iter().zip(first).enumerate().all(|(a, (u, v))| a == axis || u == v);
        if !same {
            return shape_err(format!("Concat: shapes {first:?} and {s:?} differ off axis {axis}"));
        }
        check_len("Concat input", x.len(), s)?;
        out_shape[axis] += s[axis];
    }
    check_len("Concat output", out.len(), &out_shape)?;
    let (outer, inner) = (numel(&first[..axis]), numel(&first[axis + 1..]));
    let mut o = 0;
    for b in 0..outer {
        for &(x, s) in inputs {
            let len = s[axis] * inner;
            out[o..o + len].copy_from_slice(&x[b * len..(b + 1) * len]);
            o += len;
        }
    }
    Ok(out_shape)
}

/// Transpose: output axis `i` is input axis `perm[i]`.
pub fn transpose<T: Copy>(x: &[T], shape: &[usize], perm: &[usize], out: &mut [T]) -> Result<Vec<usize>, CodesError> {
    let mut seen = vec![false; shape.len()];
    if perm.len() != shape.len() || perm.iter().any(|&p| p >= shape.len() || std::mem::replace(&mut seen[p], true)) {
        return shape_err(format!("Transpose: perm {perm:?} for rank {}", shape.len()));
    }
    check_len("Transpose input", x.len(), shape)?;
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    check_len("Transpose output", out.len(), &out_shape)?;
    let st = strides(shape);
    let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    permuted(x, &out_shape, &pst, out);
    Ok(out_shape)
}

/// `out[o] = x[Σ o_a·st[a]]` over the output shape `dims`.
fn permuted<T: Copy>(x: &[T], dims: &[usize], st: &[usize], out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    if dims.is_empty() {
        out[0] = x[0];
        return;
    }
    let rank = dims.len();
    let mut idx = vec![0usize; rank - 1];
    for row in out.chunks_exact_mut(dims[rank - 1]) {
        let base: usize = idx.iter().zip(st).map(|(i, s)| i * s).sum();
        if st[rank - 1] == 1 {
            // The output's last axis is the input's last too: one contiguous run.
            row.copy_from_slice(&x[base..][..row.len()]);
        } else {
            for (k, y) in row.iter_mut().enumerate() {
                *y = x[base + k * st[rank - 1]];
            }
        }
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            if idx[a] < dims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// How Pad fills outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode<T> {
    /// A given code (the generator passes the pad value's code, usually the zero point).
    Constant(T),
    Edge,
    Reflect,
}

/// Pad's index map for one axis of length `n`.
fn pad_map<T>(n: usize, begin: i64, end: i64, mode: PadMode<T>, axis: usize) -> Result<Vec<Option<usize>>, CodesError> {
    // i128: pads near the i64 limits cannot overflow (the caller checked the total length).
    let (ni, begin, end) = (n as i128, i128::from(begin), i128::from(end));
    let len = ni + begin + end;
    if len < 0 {
        return shape_err(format!("Pad: pads ({begin}, {end}) remove more than axis {axis}'s {n}"));
    }
    // Reflect with a crop on the same axis is ambiguous (crop first or mirror first?): refused.
    if matches!(mode, PadMode::Reflect) && (begin.min(end) < 0 || (begin.max(end) > 0 && begin.max(end) > ni - 1)) {
        return shape_err(format!("Pad: reflect pads ({begin}, {end}) on axis {axis} of {n} (0 to {})", ni - 1));
    }
    if matches!(mode, PadMode::Edge) && n == 0 && len > 0 {
        return shape_err(format!("Pad: edge padding of the empty axis {axis}"));
    }
    Ok((0..len)
        .map(|o| {
            let i = o - begin;
            match mode {
                _ if (0..ni).contains(&i) => Some(i as usize),
                PadMode::Constant(_) => None,
                PadMode::Edge => Some(i.clamp(0, ni - 1) as usize),
                PadMode::Reflect => Some(if i < 0 { -i } else { 2 * (ni - 1) - i } as usize),
            }
        })
        .collect())
}

/// The output shape of [`pad`].
pub fn pad_shape(shape: &[usize], pads: &[i64]) -> Result<Vec<usize>, CodesError> {
    if pads.len() != 2 * shape.len() {
        return shape_err(format!("Pad: {} pads for rank {}", pads.len(), shape.len()));
    }
    let r = shape.len();
    (0..r)
        .map(|a| {
            let len = shape[a] as i128 + i128::from(pads[a]) + i128::from(pads[a + r]);
            usize::try_from(len).or_else(|_| shape_err(format!("Pad: pads ({}, {}) remove more than axis {a}'s {}", pads[a], pads[a + r], shape[a])))
        })
        .collect()
}

/// Pad with `pads` = begins then ends (ONNX order; negative values crop).
pub fn pad<T: Copy>(x: &[T], shape: &[usize], pads: &[i64], mode: PadMode<T>, out: &mut [T]) -> Result<(), CodesError> {
    let out_shape = pad_shape(shape, pads)?;
    check_len("Pad input", x.len(), shape)?;
    check_len("Pad output", out.len(), &out_shape)?;
    let r = shape.len();
    let maps = (0..r).map(|a| pad_map(shape[a], pads[a], pads[a + r], mode, a)).collect::<Result<Vec<_>, _>>()?;
    let fill = if let PadMode::Constant(c) = mode { Some(c) } else { None };
    map_axes(x, shape, &maps, fill, out);
    Ok(())
}

/// ONNX Resize `coordinate_transformation_mode` (the ones nearest resizing of codes needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinateTransform {
    HalfPixel,
    Asymmetric,
    AlignCorners,
    PytorchHalfPixel,
}

/// ONNX Resize `nearest_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Resize's target: per-axis scales, or output sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResizeTarget<'a> {
    Scales(&'a [f32]),
    Sizes(&'a [usize]),
}

/// The output shape and the f32 scale of every axis, as ONNX Runtime derives them: from scales,
/// `out = trunc(fl32(scale·in))`; from sizes, `scale = fl32(out / in)`.
pub fn resize_shape(shape: &[usize], target: ResizeTarget) -> Result<(Vec<usize>, Vec<f32>), CodesError> {
    match target {
        ResizeTarget::Scales(s) => {
            if s.len() != shape.len() || s.iter().any(|&v| !(v.is_finite() && v > 0.0)) {
                return shape_err(format!("Resize: scales {s:?} for shape {shape:?} (positive finite, one per axis)"));
            }
            Ok((shape.iter().zip(s).map(|(&n, &v)| (v * n as f32) as usize).collect(), s.to_vec()))
        }
        ResizeTarget::Sizes(z) => {
            if z.len() != shape.len() || shape.iter().zip(z).any(|(&n, &o)| n == 0 && o > 0) {
                return shape_err(format!("Resize: sizes {z:?} for shape {shape:?}"));
            }
            Ok((z.to_vec(), shape.iter().zip(z).map(|(&n, &o)| if n == 0 { 1.0 } else { o as f32 / n as f32 }).collect()))
        }
    }
}

/// The input index nearest resizing reads for output index `o` (ORT's f32 arithmetic).
pub fn nearest_index(o: usize, scale: f32, out_len: usize, in_len: usize, transform: CoordinateTransform, mode: NearestMode) -> usize {
    let (x, lr, lo) = (o as f32, out_len as f32, in_len as f32);
    let c = match transform {
        CoordinateTransform::HalfPixel => (x + 0.5) / scale - 0.5,
        CoordinateTransform::Asymmetric => x / scale,
        CoordinateTransform::AlignCorners if out_len == 1 => 0.0,
        CoordinateTransform::AlignCorners => x * (lo - 1.0) / (lr - 1.0),
        CoordinateTransform::PytorchHalfPixel if out_len > 1 => (x + 0.5) / scale - 0.5,
        CoordinateTransform::PytorchHalfPixel => 0.0,
    };
    let i = match mode {
        NearestMode::RoundPreferFloor if c == (c as i64) as f32 + 0.5 => c.floor() as i64,
        NearestMode::RoundPreferFloor | NearestMode::RoundPreferCeil => c.round() as i64,
        NearestMode::Floor => c.floor() as i64,
        NearestMode::Ceil => c.ceil() as i64,
    };
    i.clamp(0, in_len as i64 - 1) as usize
}

/// Resize with `mode = nearest`.
pub fn resize_nearest<T: Copy>(
    x: &[T],
    shape: &[usize],
    target: ResizeTarget,
    transform: CoordinateTransform,
    mode: NearestMode,
    out: &mut [T],
) -> Result<(), CodesError> {
    let (out_shape, scales) = resize_shape(shape, target)?;
    check_len("Resize input", x.len(), shape)?;
    check_len("Resize output", out.len(), &out_shape)?;
    let maps: Vec<Vec<Option<usize>>> =
        (0..shape.len()).map(|a| (0..out_shape[a]).map(|o| Some(nearest_index(o, scales[a], out_shape[a], shape[a], transform, mode))).collect()).collect();
    map_axes(x, shape, &maps, None, out);
    Ok(())
}

/// Slice's index map per axis (ONNX clamping); `axes` empty means `0..starts.len()`, `steps`
/// empty means 1.
fn slice_maps(shape: &[usize], starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Result<Vec<Vec<Option<usize>>>, CodesError> {
    let r = shape.len() as i64;
    let bad = |m: String| shape_err(format!("Slice: {m} (shape {shape:?}, starts {starts:?}, ends {ends:?}, axes {axes:?}, steps {steps:?})"));
    if ends.len() != starts.len() || (!axes.is_empty() && axes.len() != starts.len()) || (!steps.is_empty() && steps.len() != starts.len()) {
        return bad("parameter lengths differ".into());
    }
    let mut maps: Vec<Vec<Option<usize>>> = shape.iter().map(|&d| (0..d).map(Some).collect()).collect();
    let mut seen = vec![false; shape.len()];
    for i in 0..starts.len() {
        let a = axes.get(i).copied().unwrap_or(i as i64);
        let a = if a < 0 { a + r } else { a };
        if !(0..r).contains(&a) || std::mem::replace(&mut seen[a as usize], true) {
            return bad(format!("axis {} invalid or repeated", axes.get(i).copied().unwrap_or(i as i64)));
        }
        let step = steps.get(i).copied().unwrap_or(1);
        if step == 0 {
            return bad("step 0".into());
        }
        let d = shape[a as usize] as i64;
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (start, end) = if step > 0 {
            (norm(starts[i]).clamp(0, d), norm(ends[i]).clamp(0, d))
        } else {
            (norm(starts[i]).clamp(0, (d - 1).max(0)), norm(ends[i]).clamp(-1, d - 1))
        };
        let span = if step > 0 { end - start } else { start - end };
        let count = (span.max(0) as u64).div_ceil(step.unsigned_abs()) as i64;
        // An empty axis yields no element whatever the start (d = 0 clamps start to 0).
        let count = if d == 0 { 0 } else { count };
        maps[a as usize] = (0..count).map(|k| Some((start + k * step) as usize)).collect();
    }
    Ok(maps)
}

/// The output shape of [`slice()`].
pub fn slice_shape(shape: &[usize], starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Result<Vec<usize>, CodesError> {
    Ok(slice_maps(shape, starts, ends, axes, steps)?.iter().map(Vec::len).collect())
}

/// ONNX Slice (opset ≥ 10 inputs; negative axes, starts and ends count from the end).
pub fn slice<T: Copy>(x: &[T], shape: &[usize], starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64], out: &mut [T]) -> Result<(), CodesError> {
    let maps = slice_maps(shape, starts, ends, axes, steps)?;
    check_len("Slice input", x.len(), shape)?;
    let out_shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    check_len("Slice output", out.len(), &out_shape)?;
    map_axes(x, shape, &maps, None, out);
    Ok(())
}

/// ONNX Expand: `x` broadcast to `out_shape` (numpy rules: right-aligned, an extent 1 stretches;
/// `out_shape` is already the broadcast of the input shape and the requested one).
pub fn expand<T: Copy>(x: &[T], shape: &[usize], out_shape: &[usize], out: &mut [T]) -> Result<(), CodesError> {
    check_len("Expand input", x.len(), shape)?;
    check_len("Expand output", out.len(), out_shape)?;
    if shape.len() > out_shape.len() {
        return shape_err(format!("Expand: shape {shape:?} has more axes than {out_shape:?}"));
    }
    let lead = out_shape.len() - shape.len();
    let full: Vec<usize> = std::iter::repeat_n(1, lead).chain(shape.iter().copied()).collect();
    let mut maps = Vec::with_capacity(out_shape.len());
    for (a, (&d, &n)) in full.iter().zip(out_shape).enumerate() {
        maps.push(match d {
            _ if d == n => (0..n).map(Some).collect(),
            1 => vec![Some(0); n],
            _ => return shape_err(format!("Expand: axis {a} of {shape:?} does not stretch to {n}")),
        });
    }
    map_axes(x, &full, &maps, None, out);
    Ok(())
}

/// The output shape of [`gather`]: `shape[..axis] ++ indices_shape ++ shape[axis + 1..]`.
pub fn gather_shape(shape: &[usize], axis: usize, indices_shape: &[usize]) -> Result<Vec<usize>, CodesError> {
    if axis >= shape.len() {
        return shape_err(format!("Gather: axis {axis} of rank {}", shape.len()));
    }
    Ok([&shape[..axis], indices_shape, &shape[axis + 1..]].concat())
}

/// ONNX Gather along `axis`; an index `i < 0` reads `i + shape[axis]`; out of range is refused.
pub fn gather<T: Copy>(x: &[T], shape: &[usize], axis: usize, indices: &[i64], indices_shape: &[usize], out: &mut [T]) -> Result<(), CodesError> {
    let out_shape = gather_shape(shape, axis, indices_shape)?;
    check_len("Gather input", x.len(), shape)?;
    check_len("Gather indices", indices.len(), indices_shape)?;
    check_len("Gather output", out.len(), &out_shape)?;
    let d = shape[axis] as i64;
    let along = indices
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + d } else { i };
            if (0..d).contains(&j) { Ok(Some(j as usize)) } else { shape_err(format!("Gather: index {i} outside axis {axis} of {d}")) }
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The indices flattened into one axis: the same row-major layout as the output shape.
    let mut maps: Vec<Vec<Option<usize>>> = shape.iter().map(|&n| (0..n).map(Some).collect()).collect();
    maps[axis] = along;
    map_axes(x, shape, &maps, None, out);
    Ok(())
}
