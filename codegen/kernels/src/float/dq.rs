//! Float operands stored as quantized codes: a constant weight (or bias) that ONNX dequantizes
//! (`DequantizeLinear` of an initializer) and a float op reads. The program keeps only the codes,
//! the scales and the zero points (a quarter of the floats' bytes for 8-bit codes); the float
//! kernels decode each element where they read it, in a register or a small per-block workspace
//! (GEMM blocks, a run of 64 element-wise operands, a channel's BatchNormalization parameters), so
//! no float copy of a quantized weight exists at run time, not even for one call (issue 12).
//!
//! | condition | why |
//! |---|---|
//! | element `i` decodes to `fl32(fl32(q[i] − zp[c])·s[c])`, `c = (i / inner) mod channels` | ONNX Runtime's DequantizeLinear (and the generator's former fold, `codegen/src/rust/values.rs`): `q − zp` is an exact integer (i32 for 8-bit codes, i64 for int32 codes), its conversion to f32 rounds once, the product once; the decoded f32 is the folded copy's bit for bit |
//! | a kernel reads the decoded values in the order it read the float copy | only where the value is stored changes, so every sum is the same sequence of rounded operations and the output bits do not move |
//! | one scale: per tensor; one zero point (or none: 0) for every channel | as DequantizeLinear broadcasts a scalar scale / zero point |

use super::{ShapeError, bail};
use std::borrow::Cow;

/// The stored codes: 8-bit codes borrowed from the generated crate's weight blob (never copied,
/// so only the pages a kernel reads become resident) or owned.
#[derive(Clone, Debug)]
pub enum Codes {
    U8(Cow<'static, [u8]>),
    I8(Cow<'static, [i8]>),
    /// Biases (int32 codes at scale `s_x·s_w`).
    I32(Vec<i32>),
}

impl Codes {
    pub fn len(&self) -> usize {
        match self {
            Codes::U8(v) => v.len(),
            Codes::I8(v) => v.len(),
            Codes::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A dequantized constant: codes with per-tensor or per-channel scales and zero points.
#[derive(Clone, Debug)]
pub struct Dequantized {
    codes: Codes,
    scales: Vec<f32>,
    /// Empty (all 0), one, or one per channel.
    zero_points: Vec<i64>,
    /// Elements per step of the channel index: the product of the dims after the axis.
    inner: usize,
}

impl Dequantized {
    /// `scales` has 1 (per tensor) or `channels` entries; `zero_points` none, 1 or as many as
    /// `scales`; `inner` is the number of elements per channel step (the dims after the axis).
    pub fn new(codes: Codes, scales: Vec<f32>, zero_points: Vec<i64>, inner: usize) -> Result<Dequantized, ShapeError> {
        let channels = scales.len();
        if channels == 0 || ![0, 1, channels].contains(&zero_points.len()) {
            bail!("dequantized constant: {channels} scales and {} zero points", zero_points.len());
        }
        if channels > 1 && (inner == 0 || !codes.len().is_multiple_of(channels * inner)) {
            bail!("dequantized constant: {} codes are not {channels} channels of {inner}", codes.len());
        }
        Ok(Dequantized { codes, scales, zero_points, inner: inner.max(1) })
    }

    pub fn len(&self) -> usize {
        self.codes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// The scale and zero point of channel `c`.
    #[inline(always)]
    fn params(&self, c: usize) -> (f32, i64) {
        let z = match self.zero_points.len() {
            0 => 0,
            1 => self.zero_points[0],
            _ => self.zero_points[c],
        };
        (self.scales[c], z)
    }

    /// Elements `start .. start + out.len()`, decoded into `out`: one channel's run at a time, so
    /// the channel index is computed once per run, not per element.
    #[inline]
    pub fn decode(&self, start: usize, out: &mut [f32]) {
        let channels = self.scales.len();
        let (mut i, mut o) = (start, 0);
        while o < out.len() {
            let (c, run) = if channels == 1 { (0, out.len() - o) } else { ((i / self.inner) % channels, (self.inner - i % self.inner).min(out.len() - o)) };
            let (s, z) = self.params(c);
            let dst = &mut out[o..o + run];
            match &self.codes {
                // q − zp is exact in i32 for 8-bit codes and any zero point DequantizeLinear allows.
                Codes::U8(v) => dst.iter_mut().zip(&v[i..i + run]).for_each(|(d, &q)| *d = (i32::from(q) - z as i32) as f32 * s),
                Codes::I8(v) => dst.iter_mut().zip(&v[i..i + run]).for_each(|(d, &q)| *d = (i32::from(q) - z as i32) as f32 * s),
                Codes::I32(v) => dst.iter_mut().zip(&v[i..i + run]).for_each(|(d, &q)| *d = (i64::from(q) - z) as f32 * s),
            }
            i += run;
            o += run;
        }
    }

    /// Every element, decoded: the float copy a kernel reading the codes never holds (the
    /// reference the kernels' tests compare the decoding paths with).
    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = vec![0f32; self.len()];
        self.decode(0, &mut v);
        v
    }

    /// Element `i`, decoded in a register: [`Self::decode`]'s formula for one element.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        let channels = self.scales.len();
        let (s, z) = self.params(if channels == 1 { 0 } else { (i / self.inner) % channels });
        match &self.codes {
            Codes::U8(v) => (i32::from(v[i]) - z as i32) as f32 * s,
            Codes::I8(v) => (i32::from(v[i]) - z as i32) as f32 * s,
            Codes::I32(v) => (i64::from(v[i]) - z) as f32 * s,
        }
    }
}

/// A float operand as a kernel reads it: f32 elements, or codes decoded on the fly.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    F32(&'a [f32]),
    Codes(&'a Dequantized),
}

impl Operand<'_> {
    pub fn len(&self) -> usize {
        match self {
            Operand::F32(v) => v.len(),
            Operand::Codes(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i`.
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Operand::F32(v) => v[i],
            Operand::Codes(d) => d.get(i),
        }
    }

    /// Elements `start .. start + out.len()` into `out`.
    pub fn decode(&self, start: usize, out: &mut [f32]) {
        match self {
            Operand::F32(v) => out.copy_from_slice(&v[start..start + out.len()]),
            Operand::Codes(d) => d.decode(start, out),
        }
    }
}

impl<'a> From<&'a [f32]> for Operand<'a> {
    fn from(v: &'a [f32]) -> Operand<'a> {
        Operand::F32(v)
    }
}

impl<'a> From<&'a Dequantized> for Operand<'a> {
    fn from(d: &'a Dequantized) -> Operand<'a> {
        Operand::Codes(d)
    }
}

/// Where element `i` of a Q/DQ input of shape `shape` finds its parameters when they are
/// tensors known at run time: `scale_shape` is one element (per tensor), the dim of `axis` (per
/// axis, `block` 0), or `shape` with that dim divided by `block`, rounded up (blocked). Shared
/// by [`dequantize_by`] and [`crate::codes::qdq::quantize_by`].
#[derive(Clone, Copy, Debug)]
pub struct ParamIndex {
    per_tensor: bool,
    /// The extent of `axis`.
    d: usize,
    /// Elements after `axis` (1 when `axis` is the last).
    pub inner: usize,
    block: usize,
}

impl ParamIndex {
    /// The layout, checked: `scale` elements in `scale_shape`, `zero_points` (if any) as many.
    pub fn new(shape: &[usize], scale: usize, scale_shape: &[usize], zero_points: Option<usize>, axis: usize, block: usize) -> Result<ParamIndex, ShapeError> {
        super::check_len("Q/DQ scale", scale, scale_shape)?;
        if zero_points.is_some_and(|z| z != scale) {
            bail!("Q/DQ: {} zero points for {scale} scales", zero_points.unwrap_or(0));
        }
        if axis >= shape.len().max(1) && scale > 1 {
            bail!("Q/DQ: axis {axis} of a rank-{} input", shape.len());
        }
        let d = shape.get(axis).copied().unwrap_or(1);
        let inner: usize = shape.iter().skip(axis + 1).product();
        let per_tensor = scale == 1 && (block == 0 || scale_shape.iter().product::<usize>() == 1 && d <= block);
        if !per_tensor {
            let ok = if block == 0 {
                scale_shape == [d]
            } else {
                scale_shape.len() == shape.len() && scale_shape.iter().enumerate().all(|(a, &s)| s == if a == axis { d.div_ceil(block) } else { shape[a] })
            };
            if !ok {
                bail!("Q/DQ: scale {scale_shape:?} for input {shape:?} (axis {axis}, block {block})");
            }
        }
        Ok(ParamIndex { per_tensor, d, inner, block })
    }

    /// The index of element `i`'s scale (and zero point).
    #[inline]
    pub fn at(&self, i: usize) -> usize {
        let (d, inner, block) = (self.d, self.inner, self.block);
        if self.per_tensor {
            0
        } else if block == 0 {
            (i / inner) % d
        } else {
            let (outer, along, r) = (i / (d * inner), (i / inner) % d, i % inner);
            (outer * d.div_ceil(block) + along / block) * inner + r
        }
    }
}

/// DequantizeLinear of codes known at run time with parameters known at run time (the gathered
/// rows of an embedding table and their gathered scales, `gather-before-dequantize`; a row's
/// graph-made scale and zero point under `--contract exact`): `x` of shape `shape`, `scale` of
/// shape `scale_shape` as [`ParamIndex`] reads them.
/// Element i decodes to `fl32(fl32(q − zp)·s)` with its parameters, as [`Dequantized`].
#[allow(clippy::too_many_arguments)] // DequantizeLinear's operands and attributes
pub fn dequantize_by<T: Copy + Into<i32>>(
    x: &[T],
    shape: &[usize],
    scale: &[f32],
    scale_shape: &[usize],
    zero_point: Option<&[T]>,
    axis: usize,
    block: usize,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    super::check_len("DequantizeLinear input", x.len(), shape)?;
    super::check_len("DequantizeLinear output", out.len(), shape)?;
    let p = ParamIndex::new(shape, scale.len(), scale_shape, zero_point.map(<[T]>::len), axis, block)?;
    for (i, (o, &q)) in out.iter_mut().zip(x).enumerate() {
        let c = p.at(i);
        let z = zero_point.map_or(0, |z| z[c].into());
        *o = (q.into() - z) as f32 * scale[c];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator's fold (`codegen/src/rust/values.rs` `dequantize`), written out: what every
    /// decoded element must equal bit for bit.
    fn folded(q: &[i64], scales: &[f32], zps: &[i64], inner: usize) -> Vec<u32> {
        let zp = |c: usize| zps.get(if zps.len() == 1 { 0 } else { c }).copied().unwrap_or(0);
        q.iter()
            .enumerate()
            .map(|(i, &v)| {
                let c = if scales.len() == 1 { 0 } else { (i / inner) % scales.len() };
                ((v - zp(c)) as f32 * scales[c]).to_bits()
            })
            .collect()
    }

    #[test]
    fn decoding_equals_the_fold_per_tensor_and_per_channel() {
        let q: Vec<i64> = (0..60).map(|i| (i * 37 + 11) % 256).collect();
        let scales = [0.0173f32, 3.1e-3, 0.5, 7.7e-5];
        for (scales, zps, inner) in
            [(&scales[..1], vec![128], 1), (&scales[..], vec![3, 250, 0, 128], 5), (&scales[..3], vec![], 20), (&scales[..], vec![7], 15)]
        {
            let d = Dequantized::new(Codes::U8(q.iter().map(|&v| v as u8).collect::<Vec<_>>().into()), scales.to_vec(), zps.clone(), inner).unwrap();
            let want = folded(&q, scales, &zps, inner);
            for start in [0, 1, 4, 13, 59] {
                for len in [0, 1, 6, 60 - start].into_iter().filter(|&l| start + l <= 60) {
                    let mut out = vec![f32::NAN; len];
                    d.decode(start, &mut out);
                    let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want[start..start + len], "start {start} len {len} inner {inner}");
                }
            }
            let got: Vec<u32> = (0..60).map(|i| d.get(i).to_bits()).collect();
            assert_eq!(got, want, "get, inner {inner}");
        }
    }

    #[test]
    fn int8_and_int32_codes_decode_as_the_fold() {
        let q8: Vec<i64> = (-128..128).collect();
        let d = Dequantized::new(Codes::I8(q8.iter().map(|&v| v as i8).collect::<Vec<_>>().into()), vec![0.01, 0.3], vec![-5, 9], 128).unwrap();
        let mut out = vec![0f32; 256];
        d.decode(0, &mut out);
        assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), folded(&q8, &[0.01, 0.3], &[-5, 9], 128));
        assert_eq!((0..256).map(|i| d.get(i).to_bits()).collect::<Vec<_>>(), folded(&q8, &[0.01, 0.3], &[-5, 9], 128), "get");
        // int32 codes beyond f32's 24-bit integers: q − zp rounds once to f32, as the fold.
        let q32: Vec<i64> = vec![i64::from(i32::MAX), i64::from(i32::MIN), 16_777_217, -3, 0];
        let d = Dequantized::new(Codes::I32(q32.iter().map(|&v| v as i32).collect()), vec![1.3e-6], vec![], 1).unwrap();
        let mut out = vec![0f32; 5];
        d.decode(0, &mut out);
        assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), folded(&q32, &[1.3e-6], &[], 1));
        assert_eq!((0..5).map(|i| d.get(i).to_bits()).collect::<Vec<_>>(), folded(&q32, &[1.3e-6], &[], 1), "get");
    }

    #[test]
    fn dequantize_by_reads_blocked_and_per_axis_parameters() {
        // [4, 1, 2] codes, blocks of 2 along axis 0: scales [2, 1, 2].
        let q: Vec<u8> = vec![1, 2, 3, 4, 5, 6, 7, 8];
        let (s, z) = ([0.5f32, 0.25, 2.0, 4.0], [1u8, 0, 2, 3]);
        let mut out = vec![0f32; 8];
        dequantize_by(&q, &[4, 1, 2], &s, &[2, 1, 2], Some(&z), 0, 2, &mut out).unwrap();
        // element (a, 0, c): block a / 2, column c.
        let want: Vec<f32> = (0..8)
            .map(|i| {
                let c = (i / 2 / 2) * 2 + i % 2;
                (i32::from(q[i]) - i32::from(z[c])) as f32 * s[c]
            })
            .collect();
        assert_eq!(out, want);
        // The per-row form (one block spanning the axis) and per axis.
        dequantize_by(&q, &[4, 1, 2], &s[..1], &[1, 1, 1], None, 0, 4, &mut out).unwrap();
        assert_eq!(out, q.iter().map(|&v| f32::from(v) * 0.5).collect::<Vec<_>>());
        dequantize_by(&q, &[4, 2], &s, &[4], Some(&z), 0, 0, &mut out).unwrap();
        assert_eq!(out[7], (8.0 - 3.0) * 4.0);
        assert!(dequantize_by(&q, &[4, 1, 2], &s, &[2, 2, 1], None, 0, 2, &mut out).is_err());
    }

    #[test]
    fn inconsistent_parameters_are_refused() {
        assert!(Dequantized::new(Codes::U8(vec![0; 6].into()), vec![], vec![], 1).is_err());
        assert!(Dequantized::new(Codes::U8(vec![0; 6].into()), vec![1.0, 2.0], vec![1, 2, 3], 3).is_err());
        assert!(Dequantized::new(Codes::U8(vec![0; 7].into()), vec![1.0, 2.0], vec![], 3).is_err());
    }
}
