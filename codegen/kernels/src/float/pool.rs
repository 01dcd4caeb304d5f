//! f32 pooling, NCHW, 1-D/2-D/3-D: MaxPool, AveragePool (count_include_pad, ceil_mode, dilations),
//! GlobalAveragePool, GlobalMaxPool.
//!
//! Evaluation order, per output element, with the window's taps `i = o·stride − pad_begin + t·dilation`
//! visited row-major (last axis fastest):
//! - Max: `m = −∞`, then `m = v` whenever `v > m`: a NaN tap is skipped (ORT 1.31.1 keeps or drops
//!   a NaN depending on its place in the window: probed, not reproduced); an all-padding window
//!   gives −∞.
//! - Average: `s = +0`, `s = s + v` over the taps inside the input, then `y = s / count` (one
//!   IEEE division, as MLAS and ORT's pool functors do): `count` is the number of taps inside the
//!   input, or with `count_include_pad` the number of taps before the padded end
//!   (`in + pad_end`, so a ceil_mode window hanging past it counts only up to it: ORT's
//!   `AveragePool` functors, opset 19); a window with no tap inside gives +0.
//! - Global: `s = +0`, `s = s + v` over the spatial positions in order, `y = s / count`; max as above.
//!
//! Output extents as ORT's `ComputeOutputSize`: `⌊(in + pads − dilation·(k − 1) − 1)/stride⌋ + 1`,
//! with ceil_mode the ceiling, minus one if the last window would start at or past `in + pad_begin`.

use super::{ShapeError, bail, check_len, numel};

/// Pool attributes (explicit pads; one entry per spatial axis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolParams {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    pub ceil_mode: bool,
    /// AveragePool only.
    pub count_include_pad: bool,
}

impl PoolParams {
    /// Output extents for spatial input extents `input`.
    pub fn output(&self, input: &[usize]) -> Result<Vec<usize>, ShapeError> {
        let rank = input.len();
        if !(1..=3).contains(&rank) || [&self.kernel, &self.strides, &self.dilations, &self.pads_begin, &self.pads_end].iter().any(|v| v.len() != rank) {
            bail!("pool: {rank} spatial axes; kernel, strides, dilations and pads need as many entries (1 to 3)");
        }
        if self.kernel.iter().chain(&self.strides).chain(&self.dilations).any(|&v| v == 0) {
            bail!("pool: kernel extents, strides and dilations must be positive");
        }
        (0..rank)
            .map(|i| {
                let span = self.dilations[i] * (self.kernel[i] - 1) + 1;
                let padded = input[i] + self.pads_begin[i] + self.pads_end[i];
                if padded < span {
                    bail!("pool: axis {i}: padded extent {padded} below the dilated kernel {span}");
                }
                let num = padded - span;
                let mut out = num / self.strides[i] + 1;
                if self.ceil_mode {
                    out = num.div_ceil(self.strides[i]) + 1;
                    if (out - 1) * self.strides[i] >= input[i] + self.pads_begin[i] {
                        out -= 1;
                    }
                }
                Ok(out)
            })
            .collect()
    }
}

/// Extents lifted to 3 axes (leading `fill`s).
fn lift(v: &[usize], fill: usize) -> [usize; 3] {
    let mut r = [fill; 3];
    r[3 - v.len()..].copy_from_slice(v);
    r
}

/// Which pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Average,
}

/// `out = Pool(x)`: `x` is `[planes][input…]` (planes = batch·channels), `out` `[planes][output…]`.
pub fn pool(kind: PoolKind, p: &PoolParams, x: &[f32], planes: usize, input: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
    let output = p.output(input)?;
    let (in_size, out_size) = (numel(input), numel(&output));
    check_len("pool input", x.len(), &[planes, in_size])?;
    check_len("pool output", out.len(), &[planes, out_size])?;
    let (inp, outp, ker) = (lift(input, 1), lift(&output, 1), lift(&p.kernel, 1));
    let (st, di, pb, pe) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0), lift(&p.pads_end, 0));
    // Per axis and output index: the input indices of the taps (None in the padding), and the
    // number of taps before the padded end (count_include_pad's divisor factor).
    let taps: Vec<Vec<(Vec<Option<usize>>, usize)>> = (0..3)
        .map(|a| {
            (0..outp[a])
                .map(|o| {
                    let start = (o * st[a]) as isize - pb[a] as isize;
                    let end = (inp[a] + pe[a]) as isize;
                    let idx: Vec<Option<usize>> =
                        (0..ker[a]).map(|t| start + (t * di[a]) as isize).map(|i| (0..inp[a] as isize).contains(&i).then_some(i as usize)).collect();
                    let padded = (0..ker[a]).filter(|&t| start + ((t * di[a]) as isize) < end).count();
                    (idx, padded)
                })
                .collect()
        })
        .collect();
    for (xp, yp) in x.chunks(in_size.max(1)).zip(out.chunks_mut(out_size.max(1))).take(planes) {
        let mut o = 0;
        for (d, h) in taps[0].iter().flat_map(|d| taps[1].iter().map(move |h| (d, h))) {
            for w in &taps[2] {
                let mut acc = match kind {
                    PoolKind::Max => f32::NEG_INFINITY,
                    PoolKind::Average => 0.0,
                };
                let mut count = 0usize;
                for id in d.0.iter().flatten() {
                    for ih in h.0.iter().flatten() {
                        let line = &xp[(id * inp[1] + ih) * inp[2]..][..inp[2]];
                        for iw in w.0.iter().flatten() {
                            let v = line[*iw];
                            match kind {
                                PoolKind::Max => {
                                    if v > acc {
                                        acc = v
                                    }
                                }
                                PoolKind::Average => acc += v,
                            }
                            count += 1;
                        }
                    }
                }
                if kind == PoolKind::Average && count > 0 {
                    let divisor = if p.count_include_pad { d.1 * h.1 * w.1 } else { count };
                    acc /= divisor as f32;
                }
                yp[o] = acc;
                o += 1;
            }
        }
    }
    Ok(())
}

/// GlobalAveragePool / GlobalMaxPool: `x` is `[planes][size]`, `out` `[planes]`.
pub fn global_pool(kind: PoolKind, x: &[f32], planes: usize, size: usize, out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("global pool input", x.len(), &[planes, size])?;
    check_len("global pool output", out.len(), &[planes])?;
    if size == 0 {
        bail!("global pool: empty spatial extent");
    }
    for (y, plane) in out.iter_mut().zip(x.chunks(size)) {
        *y = match kind {
            PoolKind::Max => plane.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m }),
            PoolKind::Average => plane.iter().fold(0.0f32, |s, &v| s + v) / size as f32,
        };
    }
    Ok(())
}
