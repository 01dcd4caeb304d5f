//! f32 transposed convolution (ONNX ConvTranspose), NCHW, 1-D/2-D/3-D: groups, strides, explicit
//! pads, dilations, output_padding, optional bias. The output extent is ONNX's (no `output_shape`:
//! the generator refuses it), `stride·(in − 1) + output_padding + (kernel − 1)·dilation + 1 −
//! pad_begin − pad_end` per axis.
//!
//! Evaluation order of every output element `y[n][co][o…]`: `s = +0`, then
//! `s = s + w[ci][co − g·Cout/G][t…]·x[n][ci][i…]` over the group's input channels ci ascending,
//! then the kernel taps t row-major, for the one input position i with `i·stride + t·dilation −
//! pad = o` on every axis (taps with no such i contribute nothing, not a `w·(+0)`); then
//! `y = s + bias[co]` when a bias is given. Every product and sum rounded on its own, no FMA. It
//! runs as a scatter (channel, tap, input position outermost to innermost), which reaches each
//! output's terms in exactly that order, on one scalar path: the same bits on every ISA.
//!
//! ONNX Runtime computes `Wᵀ·x` with MLAS (a sum over the input channels per tap) and then adds the
//! taps into the output (col2im): when the op is P2-exact (every product and partial sum exact) the
//! results are equal whatever the orders; otherwise they differ by rounding.

use super::dq::Operand;
use super::{ShapeError, bail, check_len, numel};

/// A ConvTranspose's attributes with its channel counts (`out_channels` = the weights' second
/// extent times `groups`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTransposeParams {
    pub in_channels: usize,
    pub out_channels: usize,
    pub groups: usize,
    /// Kernel extent per spatial axis (1 to 3 axes).
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    /// Extra extent added at the end of each output axis (ONNX `output_padding`).
    pub output_padding: Vec<usize>,
}

impl ConvTransposeParams {
    /// The output's spatial extents for `input`'s.
    pub fn output(&self, input: &[usize]) -> Result<Vec<usize>, ShapeError> {
        let rank = self.kernel.len();
        if !(1..=3).contains(&rank) {
            bail!("ConvTranspose: {rank} spatial axes, expected 1 to 3");
        }
        let fields = [&self.strides, &self.dilations, &self.pads_begin, &self.pads_end, &self.output_padding];
        if input.len() != rank || fields.iter().any(|v| v.len() != rank) {
            bail!("ConvTranspose: input {input:?}, strides, dilations, pads and output_padding need {rank} entries");
        }
        if self.strides.iter().chain(&self.dilations).chain(&self.kernel).any(|&s| s == 0) {
            bail!("ConvTranspose: strides, dilations and kernel extents must be positive");
        }
        (0..rank)
            .map(|d| {
                let full = self.strides[d] * input[d].saturating_sub(1) + self.output_padding[d] + (self.kernel[d] - 1) * self.dilations[d] + 1;
                match full.checked_sub(self.pads_begin[d] + self.pads_end[d]) {
                    Some(o) if o > 0 && input[d] > 0 => Ok(o),
                    _ => bail!("ConvTranspose: axis {d} of extent {} gives an empty output", input[d]),
                }
            })
            .collect()
    }
}

/// Extents padded to 3 axes (leading `fill`s), so one loop nest serves 1-D to 3-D.
fn lift(v: &[usize], fill: usize) -> [usize; 3] {
    let mut r = [fill; 3];
    r[3 - v.len()..].copy_from_slice(v);
    r
}

/// The input positions `i` (a range) whose output `i·stride + shift − pad` lies in `0..output`.
fn reached(shift: usize, pad: usize, stride: usize, input: usize, output: usize) -> std::ops::Range<usize> {
    // i·stride + shift ≥ pad  and  i·stride + shift < output + pad.
    let lo = pad.saturating_sub(shift).div_ceil(stride).min(input);
    let hi = if output + pad > shift { (output + pad - shift).div_ceil(stride).min(input) } else { 0 };
    lo..hi.max(lo)
}

/// `out = ConvTranspose(x, w, bias)`. `x`: `[batch][in_channels][input…]`; `w`:
/// `[in_channels][out_channels/groups][kernel…]`; `bias`: `[out_channels]`; `out`:
/// `[batch][out_channels][ConvTransposeParams::output(input)…]`.
pub fn conv_transpose(
    p: &ConvTransposeParams,
    x: &[f32],
    batch: usize,
    input: &[usize],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    conv_transpose_operands(p, x, batch, input, w.into(), bias.map(Operand::from), out)
}

/// [`conv_transpose`] with weights and bias that may be codes decoded on the fly (dequantized
/// constants): one (input channel, output channel) pair's taps decoded into a buffer of `taps`
/// elements, the bias one element per output channel — the same operations in the same order.
pub fn conv_transpose_operands(
    p: &ConvTransposeParams,
    x: &[f32],
    batch: usize,
    input: &[usize],
    w: Operand<'_>,
    bias: Option<Operand<'_>>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    let output = p.output(input)?;
    if p.groups == 0 || !p.in_channels.is_multiple_of(p.groups) || !p.out_channels.is_multiple_of(p.groups) {
        bail!("ConvTranspose: {} groups do not divide {} input and {} output channels", p.groups, p.in_channels, p.out_channels);
    }
    let (cig, cog) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let taps = numel(&p.kernel);
    let (in_size, out_size) = (numel(input), numel(&output));
    check_len("ConvTranspose input", x.len(), &[batch, p.in_channels, in_size])?;
    check_len("ConvTranspose weights", w.len(), &[p.in_channels, cog, taps])?;
    check_len("ConvTranspose output", out.len(), &[batch, p.out_channels, out_size])?;
    if let Some(b) = bias {
        check_len("ConvTranspose bias", b.len(), &[p.out_channels])?;
    }
    let (inp, outp, ker) = (lift(input, 1), lift(&output, 1), lift(&p.kernel, 1));
    let (st, di, pb) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    out.fill(0.0);
    let mut wc = vec![0f32; taps];
    for n in 0..batch {
        for ci in 0..p.in_channels {
            let g = ci / cig;
            let xc = &x[(n * p.in_channels + ci) * in_size..][..in_size];
            for col in 0..cog {
                let co = g * cog + col;
                let yc = &mut out[(n * p.out_channels + co) * out_size..][..out_size];
                w.decode((ci * cog + col) * taps, &mut wc);
                let mut t = 0;
                for kd in 0..ker[0] {
                    let rd = reached(kd * di[0], pb[0], st[0], inp[0], outp[0]);
                    for kh in 0..ker[1] {
                        let rh = reached(kh * di[1], pb[1], st[1], inp[1], outp[1]);
                        for kw in 0..ker[2] {
                            let wv = wc[t];
                            t += 1;
                            let rw = reached(kw * di[2], pb[2], st[2], inp[2], outp[2]);
                            for id in rd.clone() {
                                let od = id * st[0] + kd * di[0] - pb[0];
                                for ih in rh.clone() {
                                    let oh = ih * st[1] + kh * di[1] - pb[1];
                                    let xrow = &xc[(id * inp[1] + ih) * inp[2]..][..inp[2]];
                                    let yrow = &mut yc[(od * outp[1] + oh) * outp[2]..][..outp[2]];
                                    for iw in rw.clone() {
                                        yrow[iw * st[2] + kw * di[2] - pb[2]] += wv * xrow[iw];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(bias) = bias {
            for co in 0..p.out_channels {
                let bv = bias.get(co);
                out[(n * p.out_channels + co) * out_size..][..out_size].iter_mut().for_each(|y| *y += bv);
            }
        }
    }
    Ok(())
}
