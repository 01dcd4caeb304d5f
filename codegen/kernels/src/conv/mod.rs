//! Convolution on codes, NCHW, 1-D/2-D/3-D: groups (depthwise included), strides, pads (filled
//! with the input zero point, so padded taps contribute `(za − za)·w = 0` as in DQ→Conv),
//! dilations. im2col per image and group into rows of `Cin/groups · Π kernel` codes, then
//! [`gemm_u8`] against the group's weights packed once (`[Cout/groups][Cin/groups · Π kernel]`,
//! ONNX's weight layout, read as [`Layout::NK`]); depthwise (one input channel per group) runs
//! directly (`depthwise`). Output: i32 accumulators, NCHW, the same integers either way.

mod depthwise;

use crate::gemm::{GemmError, gemm_u8};
use crate::isa::Kernels;
use crate::pack::{Layout, PackError, PackedB};
use std::fmt;
use std::ops::Range;

/// The attributes of one convolution (ONNX `Conv` with explicit pads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvParams {
    pub in_channels: usize,
    pub out_channels: usize,
    pub groups: usize,
    /// Kernel extent per spatial axis (1 to 3 axes).
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Padding before each spatial axis.
    pub pads_begin: Vec<usize>,
    /// Padding after each spatial axis.
    pub pads_end: Vec<usize>,
}

/// Why a convolution cannot be set up or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConvError {
    Params(String),
    Input(String),
    Pack(PackError),
    Gemm(GemmError),
}

impl fmt::Display for ConvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvError::Params(s) | ConvError::Input(s) => f.write_str(s),
            ConvError::Pack(e) => write!(f, "conv weights: {e}"),
            ConvError::Gemm(e) => write!(f, "conv: {e}"),
        }
    }
}

impl std::error::Error for ConvError {}

impl ConvParams {
    fn check(&self) -> Result<(), ConvError> {
        let rank = self.kernel.len();
        let bad = |s: String| Err(ConvError::Params(s));
        if !(1..=3).contains(&rank) {
            return bad(format!("conv: {rank} spatial axes, expected 1 to 3"));
        }
        if [&self.strides, &self.dilations, &self.pads_begin, &self.pads_end].iter().any(|v| v.len() != rank) {
            return bad(format!("conv: strides, dilations and pads need {rank} entries each"));
        }
        if self.groups == 0 || !self.in_channels.is_multiple_of(self.groups) || !self.out_channels.is_multiple_of(self.groups) || self.out_channels == 0 {
            return bad(format!("conv: {} groups do not divide {} input and {} output channels", self.groups, self.in_channels, self.out_channels));
        }
        if self.kernel.iter().chain(&self.strides).chain(&self.dilations).any(|&v| v == 0) {
            return bad("conv: kernel extents, strides and dilations must be positive".into());
        }
        Ok(())
    }

    /// Reduction depth of one group: `Cin/groups · Π kernel`.
    fn depth(&self) -> usize {
        self.in_channels / self.groups * self.kernel.iter().product::<usize>()
    }

    /// Output extent per spatial axis for an input of `input` extents.
    pub fn output(&self, input: &[usize]) -> Result<Vec<usize>, ConvError> {
        if input.len() != self.kernel.len() {
            return Err(ConvError::Input(format!("conv: input has {} spatial axes, kernel {}", input.len(), self.kernel.len())));
        }
        (0..input.len())
            .map(|i| {
                let span = self.dilations[i] * (self.kernel[i] - 1) + 1;
                let padded = input[i] + self.pads_begin[i] + self.pads_end[i];
                if padded < span {
                    Err(ConvError::Input(format!("conv: axis {i}: padded extent {padded} below the dilated kernel {span}")))
                } else {
                    Ok((padded - span) / self.strides[i] + 1)
                }
            })
            .collect()
    }
}

/// A convolution with its weights packed per group.
#[derive(Clone, Debug)]
pub struct PackedConv {
    params: ConvParams,
    lowering: Lowering,
}

/// How the convolution runs.
#[derive(Clone, Debug)]
enum Lowering {
    /// im2col and one GEMM per group, weights packed per group.
    Gemm(Vec<PackedB>),
    /// One input channel per group: direct, with the taps `w − zw` per output channel (`[Cout][Π kernel]`).
    Depthwise(Vec<i32>),
}

impl PackedConv {
    /// int8 weights `[Cout][Cin/groups][kernel…]`, zero points one per tensor or one per output channel.
    pub fn from_i8(params: ConvParams, weights: &[i8], zero_points: &[i8]) -> Result<PackedConv, ConvError> {
        let tap = |i: usize, z: usize| i32::from(weights[i]) - i32::from(zero_points[z]);
        PackedConv::pack(params, weights.len(), zero_points.len(), tap, |w, k, n, z| PackedB::from_i8(&weights[w], k, n, Layout::NK, &zero_points[z]))
    }

    /// uint8 weights `[Cout][Cin/groups][kernel…]`, zero points one per tensor or one per output channel.
    pub fn from_u8(params: ConvParams, weights: &[u8], zero_points: &[u8]) -> Result<PackedConv, ConvError> {
        let tap = |i: usize, z: usize| i32::from(weights[i]) - i32::from(zero_points[z]);
        PackedConv::pack(params, weights.len(), zero_points.len(), tap, |w, k, n, z| PackedB::from_u8(&weights[w], k, n, Layout::NK, &zero_points[z]))
    }

    /// `tap(i, z)`: weight `i` minus zero point `z`; `pack(weights, k, n, zero points)`: one group's GEMM operand.
    fn pack(
        params: ConvParams,
        len: usize,
        zps: usize,
        tap: impl Fn(usize, usize) -> i32,
        pack: impl Fn(Range<usize>, usize, usize, Range<usize>) -> Result<PackedB, PackError>,
    ) -> Result<PackedConv, ConvError> {
        params.check()?;
        let (k, cog) = (params.depth(), params.out_channels / params.groups);
        if len != params.out_channels * k {
            return Err(ConvError::Pack(PackError::Length { expected: params.out_channels * k, got: len }));
        }
        if zps != 1 && zps != params.out_channels {
            return Err(ConvError::Pack(PackError::ZeroPoints { columns: params.out_channels, got: zps }));
        }
        let zp = |co: usize| if zps == 1 { 0 } else { co };
        let lowering = if params.in_channels == params.groups {
            Lowering::Depthwise((0..len).map(|i| tap(i, zp(i / k))).collect())
        } else {
            let groups = (0..params.groups)
                .map(|g| pack(g * cog * k..(g + 1) * cog * k, k, cog, if zps == 1 { 0..1 } else { g * cog..(g + 1) * cog }))
                .collect::<Result<_, _>>()
                .map_err(ConvError::Pack)?;
            Lowering::Gemm(groups)
        };
        Ok(PackedConv { params, lowering })
    }

    pub fn params(&self) -> &ConvParams {
        &self.params
    }

    /// Accumulators `Σ (x − zx)(w − zw)` of input `x` (`[batch][Cin][input…]` codes), NCHW into `out`
    /// (`[batch][Cout][output…]`, sized from [`ConvParams::output`]).
    pub fn run(&self, kernels: Kernels, x: &[u8], batch: usize, input: &[usize], zx: u8, out: &mut [i32]) -> Result<(), ConvError> {
        let p = &self.params;
        let output = p.output(input)?;
        let (in_sp, out_sp): (usize, usize) = (input.iter().product(), output.iter().product());
        if x.len() != batch * p.in_channels * in_sp {
            return Err(ConvError::Input(format!("conv input: {} codes, expected {}", x.len(), batch * p.in_channels * in_sp)));
        }
        if out.len() != batch * p.out_channels * out_sp {
            return Err(ConvError::Input(format!("conv output: {} slots, expected {}", out.len(), batch * p.out_channels * out_sp)));
        }
        let geometry = Geometry::new(p, input, &output);
        let (cig, cog, k) = (p.in_channels / p.groups, p.out_channels / p.groups, p.depth());
        let groups = match &self.lowering {
            Lowering::Gemm(groups) => groups,
            Lowering::Depthwise(taps) => {
                for b in 0..batch {
                    for co in 0..p.out_channels {
                        let xg = &x[(b * p.in_channels + co / cog) * in_sp..][..in_sp];
                        let dst = &mut out[(b * p.out_channels + co) * out_sp..][..out_sp];
                        depthwise::plane(kernels, &geometry, xg, zx, &taps[co * k..][..k], dst);
                    }
                }
                return Ok(());
            }
        };
        let mut cols = vec![0u8; out_sp * k];
        let mut acc = vec![0i32; out_sp * cog];
        for b in 0..batch {
            for (g, packed) in groups.iter().enumerate() {
                let xg = &x[(b * p.in_channels + g * cig) * in_sp..][..cig * in_sp];
                geometry.im2col(xg, cig, zx, &mut cols);
                gemm_u8(kernels, &cols, out_sp, zx, packed, &mut acc).map_err(ConvError::Gemm)?;
                let og = &mut out[(b * p.out_channels + g * cog) * out_sp..][..cog * out_sp];
                for (pos, row) in acc.chunks_exact(cog).enumerate() {
                    for (co, &v) in row.iter().enumerate() {
                        og[co * out_sp + pos] = v;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Spatial axes normalised to three (leading axes of extent 1), so one loop nest serves 1-D to 3-D.
struct Geometry {
    input: [usize; 3],
    output: [usize; 3],
    kernel: [usize; 3],
    strides: [usize; 3],
    dilations: [usize; 3],
    pads: [usize; 3],
}

impl Geometry {
    fn new(p: &ConvParams, input: &[usize], output: &[usize]) -> Geometry {
        let lift = |v: &[usize], fill: usize| {
            let mut a = [fill; 3];
            a[3 - v.len()..].copy_from_slice(v);
            a
        };
        Geometry {
            input: lift(input, 1),
            output: lift(output, 1),
            kernel: lift(&p.kernel, 1),
            strides: lift(&p.strides, 1),
            dilations: lift(&p.dilations, 1),
            pads: lift(&p.pads_begin, 0),
        }
    }

    /// Rows of `cols`: output positions (row-major); columns: `(channel, kernel offset)` in
    /// ONNX's weight order. Taps outside the input read `zx`.
    fn im2col(&self, x: &[u8], channels: usize, zx: u8, cols: &mut [u8]) {
        let [id, ih, iw] = self.input;
        let [od, oh, ow] = self.output;
        let [kd, kh, kw] = self.kernel;
        let k = channels * kd * kh * kw;
        // Input coordinate of output o, kernel tap t on axis a, if inside the input.
        let at = |a: usize, o: usize, t: usize| -> Option<usize> {
            (o * self.strides[a] + t * self.dilations[a]).checked_sub(self.pads[a]).filter(|&i| i < self.input[a])
        };
        // The input column of each (output column, horizontal tap), computed once per call.
        let xs: Vec<Option<usize>> = (0..ow).flat_map(|xo| (0..kw).map(move |tx| at(2, xo, tx))).collect();
        // Where an output column's taps are kw consecutive input columns (stride-1 interior):
        // the first, so that its lines are plain copies.
        let runs: Vec<Option<usize>> = xs.chunks_exact(kw).map(|t| t[0].filter(|&i0| t.iter().enumerate().all(|(j, &t)| t == Some(i0 + j)))).collect();
        let mut row = 0;
        for z in 0..od {
            for y in 0..oh {
                for (taps, &run) in xs.chunks_exact(kw).zip(&runs) {
                    let dst = &mut cols[row * k..][..k];
                    // One line of kw taps per (channel, tz, ty), in ONNX's weight order.
                    let lines = (0..channels).flat_map(|c| (0..kd).flat_map(move |tz| (0..kh).map(move |ty| (c, tz, ty))));
                    for (d, (c, tz, ty)) in dst.chunks_exact_mut(kw).zip(lines) {
                        match (at(0, z, tz), at(1, y, ty)) {
                            (Some(iz), Some(iy)) => {
                                let line = &x[c * id * ih * iw + (iz * ih + iy) * iw..][..iw];
                                match run {
                                    // A 1-wide line (pointwise convolutions) is one byte: no memcpy call.
                                    Some(i0) if kw == 1 => d[0] = line[i0],
                                    Some(i0) => d.copy_from_slice(&line[i0..][..kw]),
                                    None => {
                                        for (d, t) in d.iter_mut().zip(taps) {
                                            *d = t.map_or(zx, |ix| line[ix]);
                                        }
                                    }
                                }
                            }
                            _ => d.fill(zx),
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}
