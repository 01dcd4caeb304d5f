//! Convolution on codes, NCHW, 1-D/2-D/3-D: groups (depthwise included), strides, pads (filled
//! with the input zero point, so padded taps contribute `(za − za)·w = 0` as in DQ→Conv),
//! dilations. Each image and group runs as one GEMM with the output channels as rows and the
//! output positions as columns (`direct`: activations packed per block of positions straight from
//! the input planes, weights `[Cout/groups][Cin/groups · Π kernel]` — ONNX's layout — packed
//! once), so the result rows are NCHW planes; depthwise (one input channel per group) runs tap by
//! tap (`depthwise`). The packed weights are built by one function ([`PackedConv::from_i8`],
//! [`PackedConv::from_u8`]), called at load or by the compiler, whose output a generated crate
//! borrows from its weight blob ([`PackedConv::from_packed`]): no second copy at run time.
//! Output: i32 accumulators ([`PackedConv::run`]) or, fused into the same pass, the correctly
//! rounded requantization ([`PackedConv::run_requant`]) — the same integers and codes on every
//! path.

mod depthwise;
pub(crate) mod direct;
pub(crate) mod shifted;

use crate::gemm::GemmError;
use crate::isa::{Isa, Kernels};
use crate::pack::{KR, PackError};
use crate::requant::{Certified, CodeOut, Output, count_fallbacks, row_uniform};
use crate::split::{RowSplit, safe_rows};
pub use direct::Scratch;
use direct::{Sink, Weights};
use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

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

/// A convolution with its weights packed in the layout its lowering reads: packed at load
/// ([`Self::from_i8`], [`Self::from_u8`]) or ahead, by the same function, and borrowed
/// ([`Self::from_packed`]: a generated crate's weight blob holds [`Self::data`], [`Self::sums`]
/// and [`Self::zero_points`]; nothing is copied at load).
#[derive(Clone, Debug)]
pub struct PackedConv {
    params: ConvParams,
    lowering: Lowering,
    /// `[Cout][row]` i8 (int8 domain), a group's channels one after the other: per channel the
    /// GEMM row (`k4·4` bytes, zero past K) for [`Lowering::Gemm`] and [`Lowering::Shifted`] (in
    /// its own order), the taps `[Π kernel]` for [`Lowering::Depthwise`].
    weights: Cow<'static, [i8]>,
    /// `Σ_k w` per output channel (the GEMM lowerings' zero-point correction); empty for depthwise.
    sums: Vec<i32>,
    /// Weight zero point per output channel (int8 domain).
    zero_points: Vec<i32>,
    /// The pair split of the shifted rows for `vpmaddubsw` ([`RowSplit`]), made from the bytes
    /// on first use by the AVX2 path, or stored ahead ([`PackedConv::with_split`]).
    split: OnceLock<Option<RowSplit>>,
    /// The split's pair-safe rows stored ahead (a generated crate's blob): the AVX2 path reads
    /// them in place of a copy of the group's rows per call, and never reads `weights`.
    safe: Option<&'static [i8]>,
}

/// How the convolution runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lowering {
    /// One direct GEMM per group.
    Gemm,
    /// Every column phase read ([`Lowering::phases_read`]: stride 1 along the innermost axis,
    /// or yolov8n's 3×3 stride 2): one GEMM per group over the input framed and interleaved
    /// once per image, its columns split into the stride's phases (`shifted`), the weights in
    /// its order.
    Shifted,
    /// One input channel per group: direct, with the taps `w − zw` per output channel.
    Depthwise,
}

impl Lowering {
    /// The lowering of a convolution (a function of its attributes only: the packer and
    /// [`PackedConv::from_packed`] agree on it).
    fn of(p: &ConvParams) -> Lowering {
        if p.in_channels == p.groups {
            Lowering::Depthwise
        } else if Lowering::phases_read(p) {
            Lowering::Shifted
        } else {
            Lowering::Gemm
        }
    }

    /// Whether the taps read every column phase of the input (stride 1 along the innermost
    /// axis, or undilated taps at least as many as the stride): then the shifted lowering's
    /// framed copy holds no column the convolution skips, and its one copy per image replaces
    /// the direct lowering's gathers (9 per position block for 3×3), which took twice the
    /// tile's time on yolov8n's stride-2 convolutions. A strided convolution of fewer than 4
    /// input channels per group keeps the gathers: its channels are padded to 4 in the copy,
    /// which then outgrows L2 on a large image (yolov8n's 3 → 16 first layer at 640 × 640,
    /// 3 alternating runs under load: 5.2 / 6.3 / 6.2 ms direct, 5.6 / 7.3 / 8.0 ms shifted).
    fn phases_read(p: &ConvParams) -> bool {
        let (sw, kw, dw) = (p.strides[p.strides.len() - 1], p.kernel[p.kernel.len() - 1], p.dilations[p.dilations.len() - 1]);
        sw == 1 || (dw == 1 && sw <= kw && p.in_channels / p.groups >= 4)
    }

    /// The reduction depth of one packed row and the row's length in bytes.
    fn row(self, p: &ConvParams) -> (usize, usize) {
        let k = match self {
            Lowering::Shifted => shifted::depth(p.in_channels / p.groups, p.kernel.iter().product()),
            Lowering::Gemm | Lowering::Depthwise => p.depth(),
        };
        (k, if self == Lowering::Depthwise { k } else { k.div_ceil(KR) * KR })
    }
}

impl PackedConv {
    /// int8 weights `[Cout][Cin/groups][kernel…]`, zero points one per tensor or one per output channel.
    pub fn from_i8(params: ConvParams, weights: &[i8], zero_points: &[i8]) -> Result<PackedConv, ConvError> {
        PackedConv::pack(params, weights.len(), zero_points.len(), |i| weights[i], |z| i32::from(zero_points[z]))
    }

    /// uint8 weights `[Cout][Cin/groups][kernel…]`, zero points one per tensor or one per output
    /// channel: stored shifted to int8 (`w − 128`, zero points likewise), the same products.
    pub fn from_u8(params: ConvParams, weights: &[u8], zero_points: &[u8]) -> Result<PackedConv, ConvError> {
        PackedConv::pack(params, weights.len(), zero_points.len(), |i| (i32::from(weights[i]) - 128) as i8, |z| i32::from(zero_points[z]) - 128)
    }

    /// `weight(i)`: weight `i` in the int8 domain; `zero_point(z)`: zero point `z` likewise.
    fn pack(params: ConvParams, len: usize, zps: usize, weight: impl Fn(usize) -> i8, zero_point: impl Fn(usize) -> i32) -> Result<PackedConv, ConvError> {
        let (lowering, k, ldw) = PackedConv::layout(&params)?;
        let (depth, cout) = (params.depth(), params.out_channels);
        if len != cout * depth {
            return Err(ConvError::Pack(PackError::Length { expected: cout * depth, got: len }));
        }
        if zps != 1 && zps != cout {
            return Err(ConvError::Pack(PackError::ZeroPoints { columns: cout, got: zps }));
        }
        let (cig, taps) = (params.in_channels / params.groups, params.kernel.iter().product());
        let mut weights = vec![0i8; cout * ldw];
        for (co, row) in weights.chunks_exact_mut(ldw).enumerate() {
            for (i, v) in row[..k].iter_mut().enumerate() {
                let at = if lowering == Lowering::Shifted { shifted::source(i, cig, taps) } else { Some(i) };
                *v = at.map_or(0, |at| weight(co * depth + at));
            }
        }
        // |Σ| ≤ K·128 with K ≤ 2^24 (checked by `layout`): no overflow.
        let sums =
            if lowering == Lowering::Depthwise { Vec::new() } else { weights.chunks_exact(ldw).map(|r| r.iter().map(|&v| i32::from(v)).sum()).collect() };
        let zero_points = (0..cout).map(|co| zero_point(if zps == 1 { 0 } else { co })).collect();
        Ok(PackedConv { params, lowering, weights: Cow::Owned(weights), sums, zero_points, split: OnceLock::new(), safe: None })
    }

    /// Weights packed ahead (a generated crate's blob holds [`Self::data`], [`Self::sums`] and
    /// [`Self::zero_points`] of the `PackedConv` the compiler built with [`Self::from_i8`] or
    /// [`Self::from_u8`] for the same `params`), borrowed as they are. The layout is checked
    /// (length, 64-byte alignment, one sum and zero point per output channel); the bytes are not
    /// read here.
    pub fn from_packed(params: ConvParams, data: &'static [i8], sums: Vec<i32>, zero_points: Vec<i32>) -> Result<PackedConv, ConvError> {
        let (lowering, _, ldw) = PackedConv::layout(&params)?;
        let cout = params.out_channels;
        if data.len() != cout * ldw {
            return Err(ConvError::Pack(PackError::Length { expected: cout * ldw, got: data.len() }));
        }
        if data.as_ptr().align_offset(64) != 0 {
            return Err(ConvError::Pack(PackError::Unaligned));
        }
        let want_sums = if lowering == Lowering::Depthwise { 0 } else { cout };
        if sums.len() != want_sums || zero_points.len() != cout {
            return Err(ConvError::Params(format!(
                "conv weights packed ahead: {} sums and {} zero points for {cout} output channels, expected {want_sums} and {cout}",
                sums.len(),
                zero_points.len()
            )));
        }
        Ok(PackedConv { params, lowering, weights: Cow::Borrowed(data), sums, zero_points, split: OnceLock::new(), safe: None })
    }

    /// The lowering, a packed row's reduction depth and its length in bytes, of valid `params`.
    fn layout(params: &ConvParams) -> Result<(Lowering, usize, usize), ConvError> {
        params.check()?;
        let lowering = Lowering::of(params);
        let (k, ldw) = lowering.row(params);
        if k > 1 << 24 {
            return Err(ConvError::Pack(PackError::Depth(k)));
        }
        Ok((lowering, k, ldw))
    }

    /// The packed weights (`[Cout][row]`, see the struct).
    pub fn data(&self) -> &[i8] {
        &self.weights
    }

    /// `Σ_k w` per output channel in the int8 domain (empty for a depthwise convolution).
    pub fn sums(&self) -> &[i32] {
        &self.sums
    }

    /// Weight zero point per output channel, in the int8 domain.
    pub fn zero_points(&self) -> &[i32] {
        &self.zero_points
    }

    /// Group `g`'s weights as the GEMM lowerings read them.
    fn group(&self, g: usize) -> Weights<'_> {
        let (k, ldw) = self.lowering.row(&self.params);
        let cog = self.params.out_channels / self.params.groups;
        Weights { k, w: &self.weights[g * cog * ldw..][..cog * ldw], sums: &self.sums[g * cog..][..cog], zero_points: &self.zero_points[g * cog..][..cog] }
    }

    pub fn params(&self) -> &ConvParams {
        &self.params
    }

    /// The pair split the `kernels` path runs the shifted rows with (AVX2 only: `vpmaddubsw` on
    /// pair-safe rows, [`RowSplit`]), made on first use; `None` on the other paths, for the other
    /// lowerings, and where too many pairs break a bound (the i16 tile then).
    fn pair_split(&self, kernels: Kernels) -> Option<&RowSplit> {
        let (_, ldw) = self.lowering.row(&self.params);
        (cfg!(target_arch = "x86_64") && kernels.isa() == Isa::Avx2 && self.lowering == Lowering::Shifted)
            .then(|| self.split.get_or_init(|| RowSplit::of(&self.weights, ldw)).as_ref())
            .flatten()
    }

    /// The AVX2 path's pair split made now, for a compiler to store with the weights: the
    /// pair-safe rows (as [`Self::data`]) and the split as words (`split::RowSplit::to_words`);
    /// `None` where that path runs no split (lowerings other than the shifted one, weights with
    /// more than one broken pair in 16). The same split the path makes on first use.
    pub fn split_ahead(&self) -> Option<(Vec<i8>, Vec<i32>, Vec<i32>)> {
        if self.lowering != Lowering::Shifted {
            return None;
        }
        let (_, ldw) = self.lowering.row(&self.params);
        let split = RowSplit::of(&self.weights, ldw)?;
        let mut safe = Vec::new();
        safe_rows(&self.weights, ldw, &split, 0, &mut safe);
        let (starts, entries) = split.to_words();
        Some((safe, starts, entries))
    }

    /// `self` with the pair split stored ahead ([`Self::split_ahead`] of the same weights),
    /// borrowed from a blob as [`Self::from_packed`] borrows the weights and trusted as it trusts
    /// their sums: the split's shape is checked (`split::RowSplit::from_words`) and the rows' length,
    /// but the rows are not compared with the weights, which would make both resident. The AVX2
    /// path then reads the safe rows only.
    pub fn with_split(mut self, safe: &'static [i8], starts: &[i32], entries: &[i32]) -> Result<PackedConv, ConvError> {
        let (_, ldw) = self.lowering.row(&self.params);
        if self.lowering != Lowering::Shifted || safe.len() != self.weights.len() {
            return Err(ConvError::Params(format!(
                "conv pair split stored ahead: {} safe bytes for {} weights of the {:?} lowering (the shifted one only)",
                safe.len(),
                self.weights.len(),
                self.lowering
            )));
        }
        let split = RowSplit::from_words(starts, entries, self.weights.len() / ldw, ldw / KR).map_err(ConvError::Params)?;
        self.split = OnceLock::from(Some(split));
        self.safe = Some(safe);
        Ok(self)
    }

    /// How many weights the `kernels` path's pair split changes: `None` where it runs no split
    /// (paths other than AVX2, lowerings other than the shifted one, weights with more than one
    /// broken pair in 16) — for tests and benchmarks.
    pub fn split_entries(&self, kernels: Kernels) -> Option<usize> {
        self.pair_split(kernels).map(RowSplit::len)
    }

    /// Accumulators `Σ (x − zx)(w − zw)` of input `x` (`[batch][Cin][input…]` codes), NCHW into `out`
    /// (`[batch][Cout][output…]`, sized from [`ConvParams::output`]).
    pub fn run(&self, kernels: Kernels, x: &[u8], batch: usize, input: &[usize], zx: u8, out: &mut [i32]) -> Result<(), ConvError> {
        let plane = self.check_run(x, batch, input, out.len())?;
        let mut s = Scratch::default();
        for (b, out) in out.chunks_exact_mut((self.params.out_channels * plane).max(1)).enumerate().take(batch) {
            self.image(kernels, x, b, input, zx, &mut s, &mut Accs { out, plane });
        }
        Ok(())
    }

    /// The convolution requantized: `out` (`[batch][Cout][output…]` codes) gets, per output
    /// channel `co`, `sat(rne((acc + bias[co])·sx·sw[co]/sy) + zy)` of its accumulators, the
    /// certified form of `rq` (exact fallback where the f64 value lies near a rounding boundary),
    /// applied per tile while the sums are in cache: the codes `run` then
    /// [`crate::requant::requantize`] give. Returns the number of fallbacks (also counted in
    /// [`crate::requant::fallback_hits`]).
    #[allow(clippy::too_many_arguments)] // the convolution's operands, spelled out
    pub fn run_requant<C: CodeOut>(
        &self,
        kernels: Kernels,
        x: &[u8],
        batch: usize,
        input: &[usize],
        zx: u8,
        rq: &ConvRequant,
        out: &mut [C],
        s: &mut Scratch,
    ) -> Result<u64, ConvError> {
        let cout = self.params.out_channels;
        if (rq.forms.len() != 1 && rq.forms.len() != cout) || rq.bias.len() != cout || rq.output.code() != C::CODE {
            return Err(ConvError::Params(format!(
                "conv requantization: {} forms and {} biases for {cout} channels, {:?} output into {:?} codes",
                rq.forms.len(),
                rq.bias.len(),
                rq.output.code(),
                C::CODE
            )));
        }
        let plane = self.check_run(x, batch, input, out.len())?;
        let mut fallbacks = 0;
        for (b, out) in out.chunks_exact_mut((cout * plane).max(1)).enumerate().take(batch) {
            let mut sink = Codes { kernels, bound: self.params.depth() as u64 * 255 * 255, out, plane, rq, fallbacks: 0 };
            self.image(kernels, x, b, input, zx, s, &mut sink);
            fallbacks += sink.fallbacks;
        }
        count_fallbacks(fallbacks);
        Ok(fallbacks)
    }

    /// Checks the operands' sizes; returns the output plane's size.
    fn check_run(&self, x: &[u8], batch: usize, input: &[usize], out: usize) -> Result<usize, ConvError> {
        let p = &self.params;
        let output = p.output(input)?;
        let (in_sp, out_sp): (usize, usize) = (input.iter().product(), output.iter().product());
        if x.len() != batch * p.in_channels * in_sp {
            return Err(ConvError::Input(format!("conv input: {} codes, expected {}", x.len(), batch * p.in_channels * in_sp)));
        }
        if out != batch * p.out_channels * out_sp {
            return Err(ConvError::Input(format!("conv output: {out} slots, expected {}", batch * p.out_channels * out_sp)));
        }
        Ok(out_sp)
    }

    /// Image `b` into `sink`, channel by channel (sizes checked by the caller).
    #[allow(clippy::too_many_arguments)] // the convolution's operands, spelled out
    fn image<S: Sink>(&self, kernels: Kernels, x: &[u8], b: usize, input: &[usize], zx: u8, s: &mut Scratch, sink: &mut S) {
        let p = &self.params;
        let output = p.output(input).expect("checked by the caller");
        let geometry = Geometry::new(p, input, &output);
        let in_sp: usize = input.iter().product();
        let (cig, cog, k) = (p.in_channels / p.groups, p.out_channels / p.groups, p.depth());
        let x = &x[b * p.in_channels * in_sp..][..p.in_channels * in_sp];
        match self.lowering {
            Lowering::Gemm => {
                for g in 0..p.groups {
                    direct::group(kernels, &geometry, &self.group(g), &x[g * cig * in_sp..][..cig * in_sp], zx, g * cog, s, sink);
                }
            }
            Lowering::Shifted => {
                // A pointwise convolution (1×…×1, strides 1, no pads) reads its planes as one line.
                let pointwise = p.kernel.iter().chain(&p.strides).all(|&v| v == 1) && p.pads_begin.iter().chain(&p.pads_end).all(|&v| v == 0);
                let geometry = if pointwise { Geometry::line(in_sp) } else { geometry };
                let split = self.pair_split(kernels);
                let (_, ldw) = self.lowering.row(p);
                for g in 0..p.groups {
                    let x = &x[g * cig * in_sp..][..cig * in_sp];
                    let split = split.map(|split| GroupSplit { split, row0: g * cog, safe: self.safe.map(|safe| &safe[g * cog * ldw..][..cog * ldw]) });
                    shifted::group(kernels, &geometry, &self.group(g), split, k, x, zx, g * cog, s, sink);
                }
            }
            Lowering::Depthwise => {
                let (mut plane, mut padded) = (std::mem::take(&mut s.plane), std::mem::take(&mut s.padded));
                let ow = output.last().copied().unwrap_or(1);
                for co in 0..p.out_channels {
                    let taps = &self.weights[co * k..][..k];
                    let pitch = depthwise::plane(kernels, &geometry, &x[co / cog * in_sp..][..in_sp], zx, taps, self.zero_points[co], &mut plane, &mut padded);
                    emit(kernels, sink, co, &mut plane, pitch, ow);
                }
                (s.plane, s.padded) = (plane, padded);
            }
        }
    }
}

/// A group's share of the AVX2 path's pair split: the convolution's split, the group's first
/// row in it, and the group's pair-safe rows where they were stored ahead.
#[derive(Clone, Copy)]
struct GroupSplit<'a> {
    split: &'a RowSplit,
    row0: usize,
    safe: Option<&'a [i8]>,
}

/// The requantization [`PackedConv::run_requant`] applies: one certified form per output channel
/// (or one for all), one bias code per channel (at scale `sx·sw`), the output's zero point and type.
#[derive(Clone, Debug)]
pub struct ConvRequant {
    pub forms: Vec<Certified>,
    pub bias: Vec<i32>,
    pub output: Output,
}

/// i32 accumulators, NCHW.
struct Accs<'a> {
    out: &'a mut [i32],
    plane: usize,
}

impl Sink for Accs<'_> {
    #[inline(always)]
    fn row(&mut self, co: usize, p0: usize, v: &[i32]) {
        self.out[co * self.plane + p0..][..v.len()].copy_from_slice(v);
    }
}

/// Codes, NCHW, requantized per channel.
struct Codes<'a, C> {
    kernels: Kernels,
    /// The accumulators' bound: K products of two differences of codes, each at most 255.
    bound: u64,
    out: &'a mut [C],
    plane: usize,
    rq: &'a ConvRequant,
    fallbacks: u64,
}

impl<C: CodeOut> Sink for Codes<'_, C> {
    #[inline(always)]
    fn row(&mut self, co: usize, p0: usize, v: &[i32]) {
        let form = &self.rq.forms[if self.rq.forms.len() == 1 { 0 } else { co }];
        self.fallbacks += row_uniform(self.kernels, v, self.bound, self.rq.bias[co], form, self.rq.output, &mut self.out[co * self.plane + p0..][..v.len()]);
    }
}

/// A plane of lines `ow` wide at `pitch` into `sink`, in an instance of the kernel path
/// (vectorized requantization): the lines moved together first (in place), so that the sink
/// takes the plane as one run rather than one call per line (OCR's and the small CNNs' lines
/// are 16–64 wide).
fn emit<S: Sink>(kernels: Kernels, sink: &mut S, co: usize, v: &mut [i32], pitch: usize, ow: usize) {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI; the
        // function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { emit_avx512(sink, co, v, pitch, ow) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { emit_avx2(sink, co, v, pitch, ow) },
        _ => emit_generic(sink, co, v, pitch, ow),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn emit_avx512<S: Sink>(sink: &mut S, co: usize, v: &mut [i32], pitch: usize, ow: usize) {
    emit_generic(sink, co, v, pitch, ow)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn emit_avx2<S: Sink>(sink: &mut S, co: usize, v: &mut [i32], pitch: usize, ow: usize) {
    emit_generic(sink, co, v, pitch, ow)
}

#[inline(always)]
fn emit_generic<S: Sink>(sink: &mut S, co: usize, v: &mut [i32], pitch: usize, ow: usize) {
    let lines = v.len() / pitch;
    if pitch != ow {
        for l in 1..lines {
            v.copy_within(l * pitch..l * pitch + ow, l * ow);
        }
    }
    sink.row(co, 0, &v[..lines * ow]);
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

    /// A pointwise convolution over planes of `n` positions, as one line.
    fn line(n: usize) -> Geometry {
        Geometry { input: [1, 1, n], output: [1, 1, n], kernel: [1; 3], strides: [1; 3], dilations: [1; 3], pads: [0; 3] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes leaked at a 64-byte boundary (+ `shift`), as a generated crate's static blob holds them.
    fn leak(bytes: &[i8], shift: usize) -> &'static [i8] {
        let data = vec![0i8; bytes.len() + shift + 64];
        let start = data.as_ptr().align_offset(64) + shift;
        let data = Vec::leak(data);
        data[start..][..bytes.len()].copy_from_slice(bytes);
        &data[start..][..bytes.len()]
    }

    fn params(cin: usize, cout: usize, groups: usize, kernel: &[usize], stride: usize, pad: usize) -> ConvParams {
        let r = kernel.len();
        ConvParams {
            in_channels: cin,
            out_channels: cout,
            groups,
            kernel: kernel.to_vec(),
            strides: vec![stride; r],
            dilations: vec![1; r],
            pads_begin: vec![pad; r],
            pads_end: vec![pad; r],
        }
    }

    /// Weights packed ahead and borrowed give the accumulators of the ones packed at load, on
    /// every path, for every lowering (GEMM, shifted, depthwise), u8 and i8 weights, zero points
    /// per tensor and per channel.
    #[test]
    fn packed_ahead_is_packed_at_load() {
        let cases = [
            (params(6, 10, 1, &[3, 1], 2, 1), Lowering::Gemm),
            (params(6, 10, 1, &[3, 3], 2, 1), Lowering::Shifted),
            (params(3, 16, 1, &[3, 3], 2, 1), Lowering::Gemm),
            (params(5, 6, 1, &[2, 3, 3], 3, 1), Lowering::Shifted),
            (params(6, 8, 2, &[3, 2], 1, 1), Lowering::Shifted),
            (params(5, 7, 1, &[1, 1], 1, 0), Lowering::Shifted),
            (params(4, 8, 4, &[3, 3], 1, 1), Lowering::Depthwise),
            (params(3, 3, 3, &[5], 2, 2), Lowering::Depthwise),
        ];
        for (p, lowering) in cases {
            let depth = p.depth();
            let input: Vec<usize> = vec![9; p.kernel.len()];
            let x: Vec<u8> = (0..2 * p.in_channels * input.iter().product::<usize>()).map(|i| ((i * 37 + 5) % 256) as u8).collect();
            let w: Vec<i8> = (0..p.out_channels * depth).map(|i| ((i * 73 + 11) % 251) as i8).collect();
            let u: Vec<u8> = w.iter().map(|&v| v as u8).collect();
            let zps: Vec<i8> = (0..p.out_channels).map(|c| ((c * 7) % 100) as i8 - 9).collect();
            let uzps: Vec<u8> = zps.iter().map(|&z| z as u8).collect();
            let out_len = 2 * p.out_channels * p.output(&input).unwrap().iter().product::<usize>();
            for load in [
                PackedConv::from_i8(p.clone(), &w, &zps).unwrap(),
                PackedConv::from_u8(p.clone(), &u, &uzps).unwrap(),
                PackedConv::from_i8(p.clone(), &w, &zps[..1]).unwrap(),
            ] {
                assert_eq!(load.lowering, lowering, "{p:?}");
                let ahead = PackedConv::from_packed(p.clone(), leak(load.data(), 0), load.sums().to_vec(), load.zero_points().to_vec()).unwrap();
                assert!(matches!(ahead.weights, Cow::Borrowed(_)));
                for kernels in Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()) {
                    let (mut want, mut got) = (vec![0i32; out_len], vec![1i32; out_len]);
                    load.run(kernels, &x, 2, &input, 3, &mut want).unwrap();
                    ahead.run(kernels, &x, 2, &input, 3, &mut got).unwrap();
                    assert_eq!(got, want, "{kernels:?} {p:?}");
                }
            }
        }
    }

    #[test]
    fn packed_ahead_with_another_layout_is_refused() {
        let p = params(6, 10, 1, &[3, 1], 2, 1);
        let load = PackedConv::from_i8(p.clone(), &[1; 10 * 18], &[0]).unwrap();
        let (data, sums, zps) = (load.data(), load.sums().to_vec(), load.zero_points().to_vec());
        let err = |r: Result<PackedConv, ConvError>| r.map(|_| ()).unwrap_err();
        assert!(matches!(err(PackedConv::from_packed(p.clone(), leak(&data[1..], 0), sums.clone(), zps.clone())), ConvError::Pack(PackError::Length { .. })));
        assert!(matches!(err(PackedConv::from_packed(p.clone(), leak(data, 1), sums.clone(), zps.clone())), ConvError::Pack(PackError::Unaligned)));
        assert!(matches!(err(PackedConv::from_packed(p.clone(), leak(data, 0), sums[1..].to_vec(), zps.clone())), ConvError::Params(_)));
        assert!(matches!(err(PackedConv::from_packed(p.clone(), leak(data, 0), sums.clone(), vec![0])), ConvError::Params(_)));
        // Another lowering of the same weights: stride 1 (every column read) selects the shifted layout, whose rows differ in length.
        let shifted = ConvParams { strides: vec![1, 1], ..p.clone() };
        assert!(matches!(err(PackedConv::from_packed(shifted, leak(data, 0), sums.clone(), zps.clone())), ConvError::Pack(PackError::Length { .. })));
        assert!(matches!(err(PackedConv::from_packed(ConvParams { groups: 4, ..p }, leak(data, 0), sums, zps)), ConvError::Params(_)));
    }
}
