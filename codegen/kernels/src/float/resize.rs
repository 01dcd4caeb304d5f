//! Resize (ONNX opset 11+ without `tf_crop_and_resize`): nearest on any axes, linear on the last
//! two axes (bilinear for NCHW images, linear for 1-D when the height is unchanged).
//!
//! Evaluation order, in f32 as ONNX Runtime's `upsamplebase.h`/`upsample.cc` (an axis with scale
//! 1 maps `x ↦ x` exactly):
//! - Original coordinate of output index `x`, with `s` the axis scale: `half_pixel`
//!   `((x + 0.5)/s) − 0.5`; `pytorch_half_pixel` the same when the output extent is > 1, else 0;
//!   `align_corners` `x·(in − 1)/(out − 1)` (0 when out = 1); `asymmetric` `x/s`;
//!   `tf_half_pixel_for_nn` `(x + 0.5)/s`.
//! - Nearest: `round_prefer_floor` (a tie `⌊c⌋ + 0.5` goes down, else round half away),
//!   `round_prefer_ceil` (half away from zero), `floor`, `ceil`; then clamped to `[0, in − 1]`.
//! - Linear: `c` clamped to `[0, in − 1]`, `x1 = ⌊c⌋`, `x2 = min(x1 + 1, in − 1)`,
//!   `dx1 = |c − x1|`, `dx2 = |c − x2|` (both ½ when `x1 = x2`), likewise `dy1`, `dy2`; then
//!   `y = dx2·dy2·X11 + dx1·dy2·X21 + dx2·dy1·X12 + dx1·dy1·X22`, left to right (each product
//!   `(dx·dy)·X`), `X21` being the column `x2` of row `y1`.

use super::{ShapeError, bail, check_len, numel};

/// `coordinate_transformation_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coordinates {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
}

/// `nearest_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// The original coordinate of output index `x` along an axis of extents `input → output`, scale `s`.
pub fn original(mode: Coordinates, x: usize, s: f32, input: usize, output: usize) -> f32 {
    if s == 1.0 {
        return x as f32;
    }
    let x = x as f32;
    match mode {
        Coordinates::HalfPixel => (x + 0.5) / s - 0.5,
        Coordinates::PytorchHalfPixel => {
            if output > 1 {
                (x + 0.5) / s - 0.5
            } else {
                0.0
            }
        }
        Coordinates::AlignCorners => {
            if output == 1 {
                0.0
            } else {
                x * (input as f32 - 1.0) / (output as f32 - 1.0)
            }
        }
        Coordinates::Asymmetric => x / s,
        Coordinates::TfHalfPixelForNn => (x + 0.5) / s,
    }
}

fn nearest_index(mode: Nearest, c: f32, input: usize) -> usize {
    let i = match mode {
        Nearest::RoundPreferFloor => {
            if c == c.floor() + 0.5 {
                c.floor()
            } else {
                c.round()
            }
        }
        Nearest::RoundPreferCeil => c.round(),
        Nearest::Floor => c.floor(),
        Nearest::Ceil => c.ceil(),
    };
    if i.is_nan() || i < 0.0 { 0 } else { (i as usize).min(input - 1) }
}

fn check(x: &[f32], input: &[usize], output: &[usize], scales: &[f32], out: &[f32]) -> Result<(), ShapeError> {
    if input.len() != output.len() || scales.len() != input.len() {
        bail!("Resize: input {input:?}, output {output:?} and {} scales differ in rank", scales.len());
    }
    if input.iter().zip(output).any(|(&i, &o)| i == 0 && o > 0) || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        bail!("Resize: input {input:?} → output {output:?} with scales {scales:?}: need positive scales and non-empty input axes");
    }
    check_len("Resize input", x.len(), input)?;
    check_len("Resize output", out.len(), output)
}

/// Nearest-neighbour Resize over every axis: `scales[a]` is the axis scale (ONNX `scales`, or
/// `output/input` as f32 when the model gives `sizes`).
pub fn resize_nearest(
    x: &[f32],
    input: &[usize],
    output: &[usize],
    scales: &[f32],
    coords: Coordinates,
    mode: Nearest,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check(x, input, output, scales, out)?;
    let rank = input.len();
    // Per axis: the input offset (index · stride) of each output index.
    let mut stride = 1;
    let mut maps = vec![Vec::new(); rank];
    for a in (0..rank).rev() {
        maps[a] = (0..output[a]).map(|o| nearest_index(mode, original(coords, o, scales[a], input[a], output[a]), input[a]) * stride).collect();
        stride *= input[a];
    }
    let mut index = vec![0usize; rank];
    for y in out.iter_mut() {
        *y = x[index.iter().zip(&maps).map(|(&i, m)| m[i]).sum::<usize>()];
        for a in (0..rank).rev() {
            index[a] += 1;
            if index[a] < output[a] {
                break;
            }
            index[a] = 0;
        }
    }
    Ok(())
}

/// One axis of linear interpolation: `(i1, i2, d1, d2)` per output index.
fn linear_axis(coords: Coordinates, s: f32, input: usize, output: usize) -> Vec<(usize, usize, f32, f32)> {
    (0..output)
        .map(|o| {
            let c = original(coords, o, s, input, output);
            let c = 0f32.max(c.min((input - 1) as f32));
            let i1 = (c as usize).min(input - 1);
            let i2 = (i1 + 1).min(input - 1);
            if i1 == i2 { (i1, i2, 0.5, 0.5) } else { (i1, i2, (c - i1 as f32).abs(), (c - i2 as f32).abs()) }
        })
        .collect()
}

/// Linear Resize of the last two axes (every leading axis must keep its extent with scale 1).
pub fn resize_linear(x: &[f32], input: &[usize], output: &[usize], scales: &[f32], coords: Coordinates, out: &mut [f32]) -> Result<(), ShapeError> {
    check(x, input, output, scales, out)?;
    let rank = input.len();
    if rank < 2 {
        bail!("Resize linear: input {input:?} needs at least 2 axes (height and width)");
    }
    if (0..rank - 2).any(|a| input[a] != output[a] || scales[a] != 1.0) {
        bail!("Resize linear: only the last two axes may change (input {input:?}, output {output:?}, scales {scales:?})");
    }
    let (ih, iw, oh, ow) = (input[rank - 2], input[rank - 1], output[rank - 2], output[rank - 1]);
    let ys = linear_axis(coords, scales[rank - 2], ih, oh);
    let xs = linear_axis(coords, scales[rank - 1], iw, ow);
    let planes = numel(&input[..rank - 2]);
    for (xp, yp) in x.chunks(ih * iw).zip(out.chunks_mut((oh * ow).max(1))).take(planes) {
        for (row, &(y1, y2, dy1, dy2)) in yp.chunks_mut(ow.max(1)).zip(&ys) {
            let (r1, r2) = (&xp[y1 * iw..][..iw], &xp[y2 * iw..][..iw]);
            for (v, &(x1, x2, dx1, dx2)) in row.iter_mut().zip(&xs) {
                *v = dx2 * dy2 * r1[x1] + dx1 * dy2 * r1[x2] + dx2 * dy1 * r2[x1] + dx1 * dy1 * r2[x2];
            }
        }
    }
    Ok(())
}
