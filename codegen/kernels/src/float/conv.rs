//! f32 convolution (ONNX Conv), NCHW, 1-D/2-D/3-D: groups (depthwise included), strides, explicit
//! pads (zeros), dilations, optional bias. The attributes are [`ConvParams`], shared with the
//! integer convolution.
//!
//! Evaluation order of every output element `y[n][co][p…]`: `s = +0`, then
//! `s = s + w[co][ci][t…]·x[n][g·Cin/G + ci][p·stride + t·dilation − pad…]` over the group's
//! reduction index (ci, t…) in ONNX's weight order (input channel, then kernel taps row-major),
//! padded taps included as products with +0; then `y = s + bias[co]` when a bias is given. Every
//! product and sum rounded on its own, no FMA. It runs as im2col per image and group (skipped for
//! a 1×1 kernel with unit strides and no pads) into a `K × positions` matrix and [`product`] (`sgemm`'s order) with
//! the weights as A, whose documented order this is, on the kernel path given (the same bits on
//! every path). A depthwise convolution (one input channel per group, K = the taps) runs directly
//! instead: taps outermost, each added to a row of accumulators along the output's last axis —
//! the same order per output, padded taps included as `w·(+0)`.
//!
//! When the group is P2-exact (all products and partial sums exact), the result is ONNX Runtime's
//! whatever order it uses; otherwise this is a fixed order that differs from MLAS's by rounding.

use super::dq::Operand;
use super::gemm::{Matrix, product};
use super::{ShapeError, bail, check_len, numel};
use crate::conv::ConvParams;
use crate::isa::Kernels;

/// `out = Conv(x, w, bias)`. `x`: `[batch][in_channels][input…]`; `w`:
/// `[out_channels][in_channels/groups][kernel…]`; `bias`: `[out_channels]`; `out`:
/// `[batch][out_channels][ConvParams::output(input)…]`.
#[allow(clippy::too_many_arguments)] // the path, the attributes and ONNX's three inputs with the input's layout
pub fn conv(
    kernels: Kernels,
    p: &ConvParams,
    x: &[f32],
    batch: usize,
    input: &[usize],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    conv_operands(kernels, p, x, batch, input, w.into(), bias.map(Operand::from), out)
}

/// [`conv`] with weights and bias that may be codes decoded on the fly (dequantized constants):
/// the weights as A of [`product`] (a row tile decoded per block), a depthwise channel's taps
/// decoded into a buffer of `taps` elements, the bias one element per output channel — the same
/// operations in the same order, so the same bits.
#[allow(clippy::too_many_arguments)] // the path, the attributes and ONNX's three inputs with the input's layout
pub fn conv_operands(
    kernels: Kernels,
    p: &ConvParams,
    x: &[f32],
    batch: usize,
    input: &[usize],
    w: Operand<'_>,
    bias: Option<Operand<'_>>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    let output = p.output(input).map_err(|e| ShapeError(e.to_string()))?;
    if p.groups == 0 || !p.in_channels.is_multiple_of(p.groups) || !p.out_channels.is_multiple_of(p.groups) {
        bail!("Conv: {} groups do not divide {} input and {} output channels", p.groups, p.in_channels, p.out_channels);
    }
    if [&p.strides, &p.dilations, &p.pads_begin, &p.pads_end].iter().any(|v| v.len() != input.len()) || p.strides.iter().chain(&p.dilations).any(|&s| s == 0) {
        bail!("Conv: strides, dilations and pads need {} positive entries", input.len());
    }
    let (cig, cog) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let taps = numel(&p.kernel);
    let depth = cig * taps;
    let (in_size, out_size) = (numel(input), numel(&output));
    check_len("Conv input", x.len(), &[batch, p.in_channels, in_size])?;
    check_len("Conv weights", w.len(), &[p.out_channels, depth])?;
    check_len("Conv output", out.len(), &[batch, p.out_channels, out_size])?;
    if let Some(b) = bias {
        check_len("Conv bias", b.len(), &[p.out_channels])?;
    }
    if cig == 1 && taps > 1 {
        let mut wc = vec![0f32; taps];
        for n in 0..batch {
            for co in 0..p.out_channels {
                let xc = &x[(n * p.in_channels + co / cog) * in_size..][..in_size];
                let yc = &mut out[(n * p.out_channels + co) * out_size..][..out_size];
                let wc = match w {
                    Operand::F32(w) => &w[co * taps..][..taps],
                    Operand::Codes(_) => {
                        w.decode(co * taps, &mut wc);
                        &wc[..]
                    }
                };
                depthwise(p, xc, input, &output, wc, yc);
                if let Some(bias) = bias {
                    let bv = bias.get(co);
                    yc.iter_mut().for_each(|y| *y += bv);
                }
            }
        }
        return Ok(());
    }
    let direct = taps == 1 && p.strides.iter().all(|&s| s == 1) && p.pads_begin.iter().chain(&p.pads_end).all(|&q| q == 0);
    let mut col = if direct { Vec::new() } else { vec![0f32; depth * out_size] };
    for n in 0..batch {
        for g in 0..p.groups {
            let xg = &x[(n * p.in_channels + g * cig) * in_size..][..cig * in_size];
            let b = if direct {
                xg
            } else {
                im2col(p, xg, cig, input, &output, &mut col);
                &col
            };
            let yg = &mut out[(n * p.out_channels + g * cog) * out_size..][..cog * out_size];
            let wg = Matrix { data: w, offset: g * cog * depth, transposed: false };
            product(kernels, cog, out_size, depth, wg, Matrix::plain(b.into()), yg)?;
            if let Some(bias) = bias {
                for (co, row) in yg.chunks_mut(out_size.max(1)).enumerate() {
                    let bv = bias.get(g * cog + co);
                    row.iter_mut().for_each(|y| *y += bv);
                }
            }
        }
    }
    Ok(())
}

/// Extents padded to 3 axes (leading `fill`s), so one loop nest serves 1-D to 3-D.
fn lift(v: &[usize], fill: usize) -> [usize; 3] {
    let mut r = [fill; 3];
    r[3 - v.len()..].copy_from_slice(v);
    r
}

/// One channel of a depthwise convolution: for each output row, `s = +0` per position, then
/// `s = s + w[t]·x` for the taps t in order (x = +0 in the pads).
fn depthwise(p: &ConvParams, x: &[f32], input: &[usize], output: &[usize], w: &[f32], y: &mut [f32]) {
    let (inp, outp, ker) = (lift(input, 1), lift(output, 1), lift(&p.kernel, 1));
    let (st, di, pb) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    let mut rows = y.chunks_mut(outp[2].max(1));
    for od in 0..outp[0] {
        for oh in 0..outp[1] {
            let acc = rows.next().expect("one output row per (od, oh)");
            acc.fill(0.0);
            let mut t = 0;
            for kd in 0..ker[0] {
                let id = (od * st[0] + kd * di[0]) as isize - pb[0] as isize;
                for kh in 0..ker[1] {
                    let ih = (oh * st[1] + kh * di[1]) as isize - pb[1] as isize;
                    let plane = (0..inp[0] as isize).contains(&id) && (0..inp[1] as isize).contains(&ih);
                    let line = if plane { &x[(id as usize * inp[1] + ih as usize) * inp[2]..][..inp[2]] } else { &[][..] };
                    for kw in 0..ker[2] {
                        let wv = w[t];
                        t += 1;
                        // Output positions whose tap is inside the row: `lo..hi` (all outside when
                        // the plane is); the others add w·(+0).
                        let shift = kw * di[2];
                        let (lo, hi) = if plane { inside(shift, pb[2], st[2], inp[2], outp[2]) } else { (0, 0) };
                        acc[..lo].iter_mut().for_each(|s| *s += wv * 0.0);
                        if hi > lo && st[2] == 1 {
                            let from = lo + shift - pb[2];
                            acc[lo..hi].iter_mut().zip(&line[from..from + (hi - lo)]).for_each(|(s, &xv)| *s += wv * xv);
                        } else if hi > lo {
                            acc[lo..hi].iter_mut().enumerate().for_each(|(j, s)| *s += wv * line[(lo + j) * st[2] + shift - pb[2]]);
                        }
                        acc[hi..].iter_mut().for_each(|s| *s += wv * 0.0);
                    }
                }
            }
        }
    }
}

/// The output positions `o` whose input index `o·stride + shift − pad` lies in `0..input`.
fn inside(shift: usize, pad: usize, stride: usize, input: usize, output: usize) -> (usize, usize) {
    // o·stride + shift ≥ pad  and  o·stride + shift < input + pad.
    let lo = pad.saturating_sub(shift).div_ceil(stride).min(output);
    let hi = if input + pad > shift { (input + pad - shift).div_ceil(stride).min(output) } else { 0 };
    (lo, hi.max(lo))
}

/// Row `(ci, t…)` of `col`, column `p…`: the input under tap t at output position p, or +0 in the pads.
fn im2col(p: &ConvParams, x: &[f32], channels: usize, input: &[usize], output: &[usize], col: &mut [f32]) {
    let (inp, outp, ker) = (lift(input, 1), lift(output, 1), lift(&p.kernel, 1));
    let (st, di, pb) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    let in_size = inp.iter().product::<usize>();
    let out_size = outp.iter().product::<usize>();
    let mut row = 0;
    for c in 0..channels {
        let xc = &x[c * in_size..][..in_size];
        for kd in 0..ker[0] {
            for kh in 0..ker[1] {
                for kw in 0..ker[2] {
                    let dst = &mut col[row * out_size..][..out_size];
                    row += 1;
                    let mut o = 0;
                    for od in 0..outp[0] {
                        let id = (od * st[0] + kd * di[0]) as isize - pb[0] as isize;
                        for oh in 0..outp[1] {
                            let ih = (oh * st[1] + kh * di[1]) as isize - pb[1] as isize;
                            let plane = (0..inp[0] as isize).contains(&id) && (0..inp[1] as isize).contains(&ih);
                            let line = if plane { &xc[(id as usize * inp[1] + ih as usize) * inp[2]..][..inp[2]] } else { &[][..] };
                            for ow in 0..outp[2] {
                                let iw = (ow * st[2] + kw * di[2]) as isize - pb[2] as isize;
                                dst[o] = if plane && (0..inp[2] as isize).contains(&iw) { line[iw as usize] } else { 0.0 };
                                o += 1;
                            }
                        }
                    }
                }
            }
        }
    }
}
