//! Pooling on codes, NCHW-style layout `[N, C, spatial...]` with 1 to 3 spatial axes; explicit
//! pads (the generator resolves `auto_pad`), strides, dilations, `ceil_mode` as ONNX Runtime
//! sizes them (`(in + pads − dil·(k−1) − 1)/stride + 1`, rounded up under `ceil_mode`, minus one
//! when the last window would start in the end padding).
//!
//! | op | result | why it is the QDQ group's real value |
//! |---|---|---|
//! | [`max_pool`] | the largest code among the window's input taps; pads never win; a window with no input tap gives the type's lowest code (ORT's float MaxPool gives `lowest()`, which quantizes to it) | dequantization is increasing (s > 0): the max of codes is the code of the max; input and output share scale and zero point |
//! | [`average_pool`] | `sat(rne(sx·Σ(x − zx) / (count·sy)) + zy)` | the exact mean of the dequantized window; pads are real 0 (code zx) and add nothing to the sum |
//! | [`global_average_pool`] | the same over the whole spatial plane | |
//!
//! `count` is the number of input taps, or with `count_include_pad` the taps inside the padded
//! extent `[−pad_begin, in + pad_end)` (the ceil_mode overhang beyond the end pad never counts),
//! per axis multiplied, as ONNX Runtime divides. A window with no input tap averages to 0 (code zy).
//! The sum is exact in i64 and the rounding exact in i128 ([`mean_exact`], the definition).

use super::rational::{dyadic, rne_clamped};
use super::shape::check_len;
use super::{CodesError, QCode, Quant, numel, shape_err};

/// Window geometry over the spatial axes; `pads` holds the begins then the ends (ONNX order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolParams {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub ceil_mode: bool,
}

impl PoolParams {
    /// Stride 1, no pads, no dilation, floor mode.
    pub fn new(kernel: &[usize]) -> PoolParams {
        let d = kernel.len();
        PoolParams { kernel: kernel.to_vec(), strides: vec![1; d], pads: vec![0; 2 * d], dilations: vec![1; d], ceil_mode: false }
    }

    fn check(&self, shape: &[usize]) -> Result<(), CodesError> {
        let d = self.kernel.len();
        let ok = (1..=3).contains(&d)
            && shape.len() == d + 2
            && self.strides.len() == d
            && self.dilations.len() == d
            && self.pads.len() == 2 * d
            && self.kernel.iter().chain(&self.strides).chain(&self.dilations).all(|&v| v >= 1)
            // Every attribute below 2^31 keeps the window arithmetic inside i64.
            && self.kernel.iter().chain(&self.strides).chain(&self.dilations).chain(&self.pads).all(|&v| v <= i32::MAX as usize);
        if ok {
            Ok(())
        } else {
            shape_err(format!("pool: {self:?} on input shape {shape:?} (1 to 3 spatial axes, kernel/strides/dilations 1 to 2^31 − 1, pads below 2^31)"))
        }
    }
}

/// The output shape `[N, C, out...]`.
pub fn pool_output_shape(p: &PoolParams, shape: &[usize]) -> Result<Vec<usize>, CodesError> {
    p.check(shape)?;
    let d = p.kernel.len();
    let mut out = shape[..2].to_vec();
    for a in 0..d {
        // u128: nothing overflows; output sizes beyond 2^31 are refused.
        let w = |v: usize| v as u128;
        let (inp, s, (pb, pe)) = (w(shape[a + 2]), w(p.strides[a]), (w(p.pads[a]), w(p.pads[a + d])));
        let span = w(p.dilations[a]) * (w(p.kernel[a]) - 1) + 1;
        if inp + pb + pe < span {
            return shape_err(format!("pool: window of {span} wider than the padded axis {a} ({inp} + {pb} + {pe})"));
        }
        let num = inp + pb + pe - span;
        let mut o = if p.ceil_mode { num.div_ceil(s) + 1 } else { num / s + 1 };
        // ceil_mode: the last window must start inside the input or the begin padding.
        if p.ceil_mode && (o - 1) * s >= inp + pb {
            o -= 1;
        }
        if o > i32::MAX as u128 {
            return shape_err(format!("pool: {o} outputs along axis {a}"));
        }
        let o = o as usize;
        out.push(o);
    }
    Ok(out)
}

/// One spatial axis: for each output index, its input taps `first + j·dil` for `j < count` (the
/// window's positions inside the input: consecutive multiples of the dilation) and its
/// include-pad count.
struct Axis {
    first: Vec<usize>,
    count: Vec<usize>,
    dil: usize,
    padded: Vec<usize>,
}

impl Axis {
    /// The input taps of output `o`.
    fn taps(&self, o: usize) -> impl Iterator<Item = usize> + Clone + '_ {
        (0..self.count[o]).map(move |j| self.first[o] + j * self.dil)
    }
}

/// The windows of each spatial axis, led by trivial axes (a single tap, count 1) up to three, so
/// that one loop nest serves 1-D to 3-D and the innermost axis is the input's last (contiguous)
/// one; with the input's stride of the middle axis and its line width.
fn axes(p: &PoolParams, shape: &[usize], out: &[usize]) -> (Vec<Axis>, usize, usize) {
    let d = p.kernel.len();
    let mut v: Vec<Axis> = (0..d)
        .map(|a| {
            let (inp, s, k, dil) = (shape[a + 2] as i64, p.strides[a] as i64, p.kernel[a] as i64, p.dilations[a] as i64);
            let (pb, pe) = (p.pads[a] as i64, p.pads[a + d] as i64);
            let n = out[a + 2];
            let mut ax = Axis { first: Vec::with_capacity(n), count: Vec::with_capacity(n), dil: dil as usize, padded: Vec::with_capacity(n) };
            for o in 0..n as i64 {
                let start = o * s - pb;
                // Taps j with 0 ≤ start + j·dil < inp: j from ⌈−start/dil⌉ (0 when start ≥ 0) up to
                // ⌈(inp − start)/dil⌉, within 0..k.
                let lo = if start >= 0 { 0 } else { (-start + dil - 1) / dil }.min(k);
                let hi = if inp > start { ((inp - start + dil - 1) / dil).min(k) } else { 0 }.max(lo);
                // No tap (a window wholly in the padding): first 0, a position every line has.
                ax.first.push(if hi > lo { (start + lo * dil) as usize } else { 0 });
                ax.count.push((hi - lo) as usize);
                // Taps inside the padded extent: start + j·dil < inp + pe.
                ax.padded.push(if inp + pe > start { ((inp + pe - start + dil - 1) / dil).min(k) } else { 0 } as usize);
            }
            ax
        })
        .collect();
    while v.len() < 3 {
        v.insert(0, Axis { first: vec![0], count: vec![1], dil: 1, padded: vec![1] });
    }
    let mut dims = vec![1; 3 - d];
    dims.extend_from_slice(&shape[2..]);
    (v, dims[1] * dims[2], dims[2])
}

/// Whether an axis' windows are pairs of adjacent inputs at even positions (2 wide, stride 2, no
/// pad inside: the common 2×2 pooling), every one counting 2 with or without its pads.
fn paired(a: &Axis) -> bool {
    a.dil == 1 && a.count.iter().zip(&a.padded).all(|(&n, &p)| n == 2 && p == 2) && a.first.iter().enumerate().all(|(i, &f)| f == 2 * i)
}

/// Whether the windows are 2×2 at stride 2 over 2-D planes (`ax` from [`axes`]): a trivial outer
/// axis, paired lines and paired columns ([`paired`]); output line `i` reads input lines `2i`
/// and `2i + 1` (an odd last input line is read by none).
fn quads(ax: &[Axis]) -> bool {
    ax[0].count == [1] && ax[0].first == [0] && paired(&ax[1]) && paired(&ax[2])
}

/// Each output of [`quads`] windows (over planes of `plane` codes in lines of `w`, `out` in
/// lines of `ow`) as `f` of its four codes, read in place: no line buffer and no loop over taps
/// per output line (the pooling of small CNNs, lines of 8 or 16 codes).
fn each_quad<X: Copy, Y>(x: &[X], plane: usize, w: usize, ax: &[Axis], out: &mut [Y], f: impl Fn([X; 4]) -> Y) {
    let (oh, ow) = (ax[1].count.len(), ax[2].count.len());
    for (y, base) in out.chunks_exact_mut(oh * ow).zip(x.chunks_exact(plane.max(1))) {
        for (y, lines) in y.chunks_exact_mut(ow).zip(base.chunks_exact(2 * w)) {
            let (a, b) = lines.split_at(w);
            for (y, (a, b)) in y.iter_mut().zip(a.chunks_exact(2).zip(b.chunks_exact(2))) {
                *y = f([a[0], a[1], b[0], b[1]]);
            }
        }
    }
}

/// MaxPool on codes (input and output share their quantization parameters). Separable, as max
/// is: per output line of the two outer axes, the elementwise max of the window's input lines
/// (vectorized), then per output along the innermost axis the max of that line's taps. Windows
/// hold only input taps (pads never win); an empty window gives the type's lowest code.
pub fn max_pool<T: QCode>(x: &[T], shape: &[usize], p: &PoolParams, out: &mut [T]) -> Result<(), CodesError> {
    p.check(shape)?;
    check_len("pool input", x.len(), shape)?;
    let out_shape = pool_output_shape(p, shape)?;
    check_len("pool output", out.len(), &out_shape)?;
    let (ax, s1, w) = axes(p, shape, &out_shape);
    let plane = numel(&shape[2..]);
    let lowest = T::saturate(i64::from(T::MIN));
    let mut line = vec![lowest; w];
    // Windows of two adjacent inputs at even columns along the last axis (2 wide, stride 2, no
    // pad: the common 2×2 pooling): each output the max of one pair of the line.
    let (first, count, dil) = (&ax[2].first, &ax[2].count, ax[2].dil);
    let pairs = paired(&ax[2]);
    if quads(&ax) {
        let max = |a: T, b: T| if b > a { b } else { a };
        each_quad(x, plane, w, &ax, out, |[a0, a1, b0, b1]| max(max(a0, a1), max(b0, b1)));
        return Ok(());
    }
    let mut o = 0;
    for c in 0..shape[0] * shape[1] {
        let base = &x[c * plane..][..plane];
        for o0 in 0..ax[0].count.len() {
            for o1 in 0..ax[1].count.len() {
                // The window's first input line, then the max with each other one.
                let mut started = false;
                for i in ax[0].taps(o0) {
                    for j in ax[1].taps(o1) {
                        let row = &base[i * s1 + j * w..][..w];
                        if started {
                            for (l, &v) in line.iter_mut().zip(row) {
                                if v > *l {
                                    *l = v;
                                }
                            }
                        } else {
                            line.copy_from_slice(row);
                            started = true;
                        }
                    }
                }
                if !started {
                    line.fill(lowest);
                }
                let y = &mut out[o..][..count.len()];
                if pairs {
                    for (y, p) in y.iter_mut().zip(line.chunks_exact(2)) {
                        *y = if p[1] > p[0] { p[1] } else { p[0] };
                    }
                } else {
                    for (y, (&f, &n)) in y.iter_mut().zip(first.iter().zip(count)) {
                        *y = line[f..].iter().step_by(dil).take(n).fold(lowest, |m, &v| if v > m { v } else { m });
                    }
                }
                o += count.len();
            }
        }
    }
    Ok(())
}

/// The mean's requantization: `rne(sx·sum/(count·sy))` with `sum = Σ(x − zx)`.
struct Mean {
    mx: i128,
    shift: i32,
    my: i128,
    zy: i64,
}

impl Mean {
    fn new<X: QCode, Y: QCode>(qx: Quant, qy: Quant) -> Result<Mean, CodesError> {
        let (qx, qy) = (qx.check::<X>("pool input")?, qy.check::<Y>("pool output")?);
        let ((mx, ex), (my, ey)) = (dyadic(qx.scale)?, dyadic(qy.scale)?);
        Ok(Mean { mx, shift: ex - ey, my, zy: i64::from(qy.zero_point) })
    }

    fn code<Y: QCode>(&self, sum: i64, count: usize) -> Y {
        let r = if count == 0 { 0 } else { rne_clamped(self.mx * i128::from(sum), self.shift, self.my * count as i128) };
        Y::saturate(r as i64 + self.zy)
    }

    /// The rate `R = mx·2^shift/(my·count)` in f64 for windows of `count` taps, with the bound
    /// `|sum| ≤ 255·count` of their sums ([`Rate`]); `None` beyond [`RATE_COUNTS`].
    fn rate(&self, count: usize) -> Option<Rate> {
        if count == 0 || count > RATE_COUNTS {
            return None;
        }
        // |shift| < 300 (f32 exponents): 2^shift is a normal f64, built from its bits, and
        // `mx·2^shift` (mx < 2^24) and `my·count` (< 2^36) are exact: one rounding, the division.
        let pow = f64::from_bits(((1023 + self.shift) as u64) << 52);
        let (num, den) = (self.mx as f64 * pow, (self.my * count as i128) as f64);
        let r = num / den;
        // Exact when the odd part of `my·count` divides `mx`'s: `R = q·2^k`, `q ≤ mx < 2^24`.
        let d = self.my * count as i128;
        let (mo, dodd) = (self.mx >> self.mx.trailing_zeros(), d >> d.trailing_zeros());
        Some(Rate { r, exact: mo % dodd == 0 })
    }

    /// [`Mean::code`] through `rate` (made for this `count`): the f64 value `v = fl(sum·R)` where
    /// it decides, the exact form elsewhere ([`Rate`]).
    #[inline(always)]
    fn code_at<Y: QCode>(&self, rate: &Rate, sum: i64, count: usize) -> Y {
        // |sum| ≤ 255·count < 2^21: exact in f64.
        let v = (sum as f64 * rate.r).clamp(-1_048_576.0, 1_048_576.0);
        let r = (v + SHIFT) - SHIFT;
        if !rate.exact && ((v - r).abs() - 0.5).abs() <= v.abs() * NEAR {
            return self.code(sum, count);
        }
        Y::saturate(r as i64 + self.zy)
    }
}

/// Counts up to which [`average_pool`] makes a [`Rate`] per count (each run, one division each).
const RATE_COUNTS: usize = 4096;

/// 1.5·2^52: f64's spacing is 1 from 2^52 to 2^53, so `(v + SHIFT) − SHIFT` rounds `v`
/// (|v| ≤ 2^20) to the nearest integer, ties to even, exactly.
const SHIFT: f64 = 6_755_399_441_055_744.0;

/// 2^-50: the relative bound on `|fl(sum·R̃) − sum·R|` used by [`Mean::code_at`].
const NEAR: f64 = 1.0 / 1_125_899_906_842_624.0;

/// The f64 form of one window count's mean. `R̃ = fl(R) = R(1 + e1)`, `v = fl(sum·R̃) = sum·R(1 +
/// e1)(1 + e2)`, `|e| ≤ u = 2^-53`: `|v − x| ≤ |x|·(2u + u²)` for the exact `x = sum·R`, below
/// `|v|·2^-50`. Off every half-integer by more than that, `rne(v) = rne(x)`; within it, the exact
/// form decides. With `exact` (`R = q·2^k`, `q < 2^24` odd) `R̃ = R` and `sum·q` < 2^45 is exact:
/// `v = x`, whose rounding to even is the exact one, ties included. Values beyond ±2^20 are
/// clamped there before rounding: `x` is then beyond ±2^10 too, and every code saturates alike
/// (the zero point is a code).
struct Rate {
    r: f64,
    exact: bool,
}

/// The definition [`average_pool`] and [`global_average_pool`] apply to each window (the function
/// the proofs call): `sat(rne(sx·sum/(count·sy)) + zy)` with `sum = Σ(x − zx)`; count 0 gives zy.
/// Exact for every i64 sum and usize count (`|mx·sum| < 2^87`, `my·count < 2^88`).
pub fn mean_exact<X: QCode, Y: QCode>(sum: i64, count: usize, qx: Quant, qy: Quant) -> Result<Y, CodesError> {
    Ok(Mean::new::<X, Y>(qx, qy)?.code(sum, count))
}

/// Largest window count: keeps the i64 window sum (at most 255·count) far from overflow.
const MAX_COUNT: usize = 1 << 40;

/// AveragePool on codes, requantized from `qx` to `qy` (see the module header).
pub fn average_pool<X: QCode, Y: QCode>(
    x: &[X],
    shape: &[usize],
    p: &PoolParams,
    count_include_pad: bool,
    qx: Quant,
    qy: Quant,
    out: &mut [Y],
) -> Result<(), CodesError> {
    p.check(shape)?;
    check_len("pool input", x.len(), shape)?;
    if numel(&p.kernel) >= MAX_COUNT {
        return shape_err(format!("pool: kernel {:?} beyond 2^40 taps", p.kernel));
    }
    let mean = Mean::new::<X, Y>(qx, qy)?;
    let out_shape = pool_output_shape(p, shape)?;
    check_len("pool output", out.len(), &out_shape)?;
    let (plane, zx) = (numel(&shape[2..]), i64::from(qx.zero_point));
    // One rate per count a window can have (at most the kernel's taps), made for this run.
    let rates: Vec<Option<Rate>> = (0..=numel(&p.kernel).min(RATE_COUNTS)).map(|c| mean.rate(c)).collect();
    // Separable, as max_pool: per output line of the two outer axes the sum of the window's
    // input lines (exact in i64: at most 255·2^40), then per output along the innermost axis the
    // sum of that line's taps.
    let (ax, s1, w) = axes(p, shape, &out_shape);
    if let (true, Some(Some(rate))) = (quads(&ax), rates.get(4)) {
        // Every window counts 4.
        each_quad(x, plane, w, &ax, out, |q| mean.code_at(rate, q.iter().map(|v| i64::from(v.value())).sum::<i64>() - 4 * zx, 4));
        return Ok(());
    }
    let mut line = vec![0i64; w];
    let mut o = 0;
    for c in 0..shape[0] * shape[1] {
        let base = &x[c * plane..][..plane];
        for o0 in 0..ax[0].count.len() {
            for o1 in 0..ax[1].count.len() {
                line.fill(0);
                for i in ax[0].taps(o0) {
                    for j in ax[1].taps(o1) {
                        for (l, &v) in line.iter_mut().zip(&base[i * s1 + j * w..][..w]) {
                            *l += i64::from(v.value());
                        }
                    }
                }
                let (outer, outer_padded) = (ax[0].count[o0] * ax[1].count[o1], ax[0].padded[o0] * ax[1].padded[o1]);
                for (o2, y) in out[o..][..ax[2].count.len()].iter_mut().enumerate() {
                    let n = outer * ax[2].count[o2];
                    let sum = ax[2].taps(o2).map(|k| line[k]).sum::<i64>() - zx * n as i64;
                    // No input tap: the mean is 0 under both counts.
                    let count = if n == 0 {
                        0
                    } else if count_include_pad {
                        outer_padded * ax[2].padded[o2]
                    } else {
                        n
                    };
                    *y = match rates.get(count) {
                        Some(Some(rate)) => mean.code_at(rate, sum, count),
                        _ => mean.code(sum, count),
                    };
                }
                o += ax[2].count.len();
            }
        }
    }
    Ok(())
}

/// GlobalAveragePool on codes: one mean per `[n, c]` plane, output shape `[N, C, 1, ...]`.
pub fn global_average_pool<X: QCode, Y: QCode>(x: &[X], shape: &[usize], qx: Quant, qy: Quant, out: &mut [Y]) -> Result<(), CodesError> {
    if shape.len() < 3 {
        return shape_err(format!("GlobalAveragePool: input shape {shape:?} has no spatial axis"));
    }
    check_len("pool input", x.len(), shape)?;
    check_len("pool output", out.len(), &shape[..2])?;
    let plane = numel(&shape[2..]);
    if plane >= MAX_COUNT {
        return shape_err(format!("GlobalAveragePool: plane of {plane} elements beyond 2^40"));
    }
    let mean = Mean::new::<X, Y>(qx, qy)?;
    let zx = i64::from(qx.zero_point);
    if plane == 0 {
        out.fill(mean.code(0, 0));
        return Ok(());
    }
    for (y, xs) in out.iter_mut().zip(x.chunks_exact(plane)) {
        let sum: i64 = xs.iter().map(|v| i64::from(v.value()) - zx).sum();
        *y = mean.code(sum, plane);
    }
    Ok(())
}
