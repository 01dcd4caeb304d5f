//! Depthwise convolution (one input channel per group, any channel multiplier), direct: each
//! output plane sums `(x − zx)·(w − zw)` over the taps, read from a copy of the input framed with
//! `zx` (padded taps add `(zx − zx)·w = 0`, as in DQ→Conv), 64 outputs along the output at a
//! time held in registers across the taps (one flat run per depth slice when the stride is 1). No im2col and no GEMM panel holding one
//! useful column. Exact products (|·| ≤ 255·255) and i32 sums wrapping modulo 2^32, like the GEMM
//! path: the same integers.

use super::Geometry;
use crate::isa::{Isa, Kernels};

/// One output plane `out` (`[od·oh·ow]`) from one input plane `x` (`[id·ih·iw]`), the weights `w`
/// (`[kd·kh·kw]`, int8 domain) and their zero point `zw`.
/// Returns the line pitch of `out`: output line `l` (of `od·oh`) is `out[l·pitch..][..ow]`.
#[allow(clippy::too_many_arguments)] // the plane's operands, spelled out
pub(super) fn plane(kernels: Kernels, g: &Geometry, x: &[u8], zx: u8, w: &[i8], zw: i32, out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI; the
        // function only lets the compiler use AVX-512 instructions for safe code.
        Isa::Avx512Vnni => unsafe { plane_avx512(g, x, zx, w, zw, out, padded) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { plane_avx2(g, x, zx, w, zw, out, padded) },
        _ => plane_generic(g, x, zx, w, zw, out, padded, sum_taps),
    }
}

/// The tap sums are [`sum_taps_avx2`]'s (AVX-512 F implies AVX2): handed [`sum_taps`] itself,
/// the compiler called it out of line through its `Fn` shim, built without the target feature
/// (SSE2 multiplies, a third of PP-OCR's recognizer on a Sapphire Rapids host).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn plane_avx512(g: &Geometry, x: &[u8], zx: u8, w: &[i8], zw: i32, out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    // SAFETY: this function runs only where AVX-512 F was checked (its caller's contract), which
    // implies AVX2.
    plane_generic(g, x, zx, w, zw, out, padded, |d, s, o, w, z| unsafe { sum_taps_avx2(d, s, o, w, z) })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Geometry, x: &[u8], zx: u8, w: &[i8], zw: i32, out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    // SAFETY: this function runs only where AVX2 was checked (its caller's contract).
    plane_generic(g, x, zx, w, zw, out, padded, |d, s, o, w, z| unsafe { sum_taps_avx2(d, s, o, w, z) })
}

/// Output indices `o` along one axis whose input coordinate `o·stride + offset − pad` lies in
/// `0..input`, as a range (empty when none does).
pub(super) fn inside(output: usize, input: usize, stride: usize, offset: usize, pad: usize) -> std::ops::Range<usize> {
    if input + pad <= offset {
        return 0..0;
    }
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = ((input - 1 + pad - offset) / stride + 1).min(output);
    lo.min(hi)..hi
}

/// The input plane copied into `padded`, framed with `zx` so that every tap of every output reads
/// inside it (`pitch`-wide lines, one spare line so that the flat stride-1 loop below may run past
/// a line's end); then `out[line·pitch + x] = Σ_taps (padded[…] − zx)·w` ([`sum_taps`]). With
/// stride 1 along the two inner axes each tap reads one flat run per depth slice (columns past
/// `ow` are computed and never read); otherwise one run per output line, reading a phase of the
/// lines when the last axis' stride exceeds 1.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the plane's operands and the path's tap sum
fn plane_generic(
    g: &Geometry,
    x: &[u8],
    zx: u8,
    w: &[i8],
    zw: i32,
    out: &mut Vec<i32>,
    padded: &mut Vec<u8>,
    sum_taps: impl Fn(&mut [i32], &[u8], &[usize], &[i32], i32),
) -> usize {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, pw] = g.pads;
    // Extents the taps reach, from coordinate −pad.
    let span = |o: usize, s: usize, k: usize, d: usize| (o - 1) * s + (k - 1) * d + 1;
    let (ez, ey, pitch) = (span(od, sd, kd, dd), span(oh, sh, kh, dh) + 1, span(ow, sw, kw, dw).max(ow));
    padded.clear();
    padded.resize(ez * ey * pitch, zx);
    for z in 0..id.min(ez.saturating_sub(pd)) {
        for y in 0..ih.min((ey - 1).saturating_sub(ph)) {
            let n = iw.min(pitch.saturating_sub(pw));
            padded[((z + pd) * ey + y + ph) * pitch + pw..][..n].copy_from_slice(&x[(z * ih + y) * iw..][..n]);
        }
    }
    // Stride > 1 along the last axis: the framed lines split into `sw` phases (phase r holds
    // columns r, r + sw, …) after the framed plane, so that every tap reads a contiguous run.
    let framed = ez * ey * pitch;
    let phase = pitch.div_ceil(sw);
    if sw > 1 {
        padded.resize(framed + ez * ey * sw * phase, zx);
        let (src, dst) = padded.split_at_mut(framed);
        for (line, dst) in src.chunks_exact(pitch).zip(dst.chunks_exact_mut(sw * phase)) {
            for (r, dst) in dst.chunks_exact_mut(phase).enumerate() {
                for (d, &v) in dst.iter_mut().zip(line[r..].iter().step_by(sw)) {
                    *d = v;
                }
            }
        }
    }
    let lines = od * oh;
    // Every output line's first `ow` columns are written below (the rest are never read): the
    // buffer's old contents need no clearing.
    out.resize(lines * pitch, 0);
    let zx = i32::from(zx);
    // The nonzero taps: (tz, ty, tx), w − zw, and their offsets in `padded` for the run at hand
    // (on the stack up to 64 taps: this runs once per channel).
    const STACK: usize = 64;
    let (mut at_stack, mut w_stack, mut o_stack) = ([[0usize; 3]; STACK], [0i32; STACK], [0usize; STACK]);
    let (mut at_heap, mut w_heap, mut o_heap) = (Vec::new(), Vec::new(), Vec::new());
    let all = kd * kh * kw;
    let (coords, weights, offsets) = if all <= STACK {
        (&mut at_stack[..], &mut w_stack[..], &mut o_stack[..])
    } else {
        at_heap.resize(all, [0; 3]);
        w_heap.resize(all, 0);
        o_heap.resize(all, 0);
        (&mut at_heap[..], &mut w_heap[..], &mut o_heap[..])
    };
    let mut n = 0;
    // The taps `w − zw` (|·| ≤ 255), the zero ones left out; their coordinates counted, not
    // divided out (this runs once per channel, and OCR's planes are a few lines).
    let mut t = 0;
    for tz in 0..kd {
        for ty in 0..kh {
            for tx in 0..kw {
                let tap = i32::from(w[t]) - zw;
                if tap != 0 {
                    (coords[n], weights[n]) = ([tz, ty, tx], tap);
                    n += 1;
                }
                t += 1;
            }
        }
    }
    let (live, weights, offsets) = (&mut coords[..n], &weights[..n], &mut offsets[..n]);
    if sh == 1 && sw == 1 {
        // Every tap's run over a depth slice is flat: `oh·pitch` framed bytes from its offset.
        // The last slice's runs may end past the spare line: framed with more `zx` (adding
        // (zx − zx)·w = 0).
        let at = |z: usize, [tz, ty, tx]: [usize; 3]| ((z * sd + tz * dd) * ey + ty * dh) * pitch + tx * dw;
        let need = live.iter().map(|&t| at(od - 1, t) + oh * pitch).max().unwrap_or(0);
        if padded.len() < need {
            padded.resize(need, zx as u8);
        }
        for (z, dst) in out.chunks_exact_mut(oh * pitch).enumerate() {
            for (o, &t) in offsets.iter_mut().zip(&*live) {
                *o = at(z, t);
            }
            sum_taps(dst, padded, offsets, weights, zx);
        }
    } else {
        // Column x·sw + tx·dw of a framed line: phase (tx·dw) mod sw, index x + (tx·dw) div sw.
        // Per tap once (no division per line): its framed line within the window and its column
        // offset, in place of its coordinates.
        for t in live.iter_mut() {
            let [tz, ty, tx] = *t;
            let col = if sw == 1 { tx * dw } else { tx * dw % sw * phase + tx * dw / sw };
            *t = [tz * dd * ey + ty * dh, col, 0];
        }
        for (l, dst) in out.chunks_exact_mut(pitch).enumerate() {
            let (z, y) = (l / oh, l % oh);
            let first = z * sd * ey + y * sh;
            for (o, &[line, col, _]) in offsets.iter_mut().zip(&*live) {
                *o = if sw == 1 { (first + line) * pitch + col } else { framed + (first + line) * sw * phase + col };
            }
            sum_taps(&mut dst[..ow], padded, offsets, weights, zx);
        }
    }
    pitch
}

/// `dst[i] = Σ_t (src[offsets[t] + i] − zx)·weights[t]`, wrapping, per 64 outputs held in
/// registers across the taps (one store per output, not one per tap). Every product is exact and
/// the wrapping sum is the same integer in any order.
#[inline(always)]
fn sum_taps(dst: &mut [i32], src: &[u8], offsets: &[usize], weights: &[i32], zx: i32) {
    const CH: usize = 64;
    let n = dst.len();
    for (c, d) in dst.chunks_mut(CH).enumerate() {
        let base = c * CH;
        if let Ok(d) = <&mut [i32; CH]>::try_from(&mut *d) {
            let mut acc = [0i32; CH];
            for (&off, &w) in offsets.iter().zip(weights) {
                let s: &[u8; CH] = src[off + base..][..CH].try_into().expect("64 bytes");
                for (a, &v) in acc.iter_mut().zip(s) {
                    *a = a.wrapping_add((i32::from(v) - zx) * w);
                }
            }
            *d = acc;
        } else {
            let m = n - base;
            let mut acc = [0i32; CH];
            for (&off, &w) in offsets.iter().zip(weights) {
                for (a, &v) in acc[..m].iter_mut().zip(&src[off + base..][..m]) {
                    *a = a.wrapping_add((i32::from(v) - zx) * w);
                }
            }
            d.copy_from_slice(&acc[..m]);
        }
    }
}

/// [`sum_taps`] with `vpmaddwd`, two taps at a time: 16 bytes of each tap's run interleaved
/// (`vpunpck{l,h}bw`) and widened (`vpmovzxbw`) into `(x1, x2)` i16 pairs, multiplied by the
/// broadcast pair `(w1, w2)` and summed in i32, 16 outputs per pair and step, 64 held in registers
/// across the taps (an odd last tap paired with itself at weight 0). The codes go in unshifted:
/// `Σ (x − zx)·w = Σ x·w − zx·Σ w`, the same integer modulo 2^32 (each pair `|x1·w1 + x2·w2| ≤
/// 2·255·255` is exact in i32, the sums wrap as the portable ones do). Outputs past the last
/// multiple of 16 are the last 16 computed again (overlapping), or one by one in runs under 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_taps_avx2(dst: &mut [i32], src: &[u8], offsets: &[usize], weights: &[i32], zx: i32) {
    use std::arch::x86_64::*;
    const CH: usize = 64;
    let n = dst.len();
    // Every run read is inside `src` (the caller frames it): `off + n ≤ src.len()`.
    assert!(offsets.iter().all(|&o| o + n <= src.len()));
    // The taps in pairs: offsets and the weights packed as (low w1, high w2) per i32 lane (|w| ≤
    // 255: i16s).
    let pair = |t: usize| {
        let (o, w) = (&offsets[2 * t..(2 * t + 2).min(offsets.len())], &weights[2 * t..(2 * t + 2).min(offsets.len())]);
        let (o2, w2) = if o.len() == 2 { (o[1], w[1]) } else { (o[0], 0) };
        (o[0], o2, _mm256_set1_epi32((w[0] & 0xffff) | (w2 << 16)))
    };
    let correction = _mm256_set1_epi32(zx.wrapping_mul(weights.iter().fold(0i32, |s, &w| s.wrapping_add(w))));
    let full = n / 16 * 16;
    let mut base = 0;
    // Blocks of 64 outputs, then of 16: the block's accumulators a fixed-size array (registers).
    while base + CH <= full {
        // SAFETY: AVX2 (this function's feature); `base + 64 ≤ full ≤ n` and every run inside `src`.
        unsafe { block::<4>(dst, src, base, offsets.len().div_ceil(2), &pair, correction) };
        base += CH;
    }
    while base < full {
        // SAFETY: as above, `base + 16 ≤ full`.
        unsafe { block::<1>(dst, src, base, offsets.len().div_ceil(2), &pair, correction) };
        base += 16;
    }
    if full < n && n >= 16 {
        // The last 16 outputs again, overlapping the blocks before: the same sums, rewritten.
        // SAFETY: as above, `n − 16 + 16 = n`.
        unsafe { block::<1>(dst, src, n - 16, offsets.len().div_ceil(2), &pair, correction) };
        return;
    }
    for (i, d) in dst.iter_mut().enumerate().skip(full) {
        *d = offsets.iter().zip(weights).fold(0i32, |a, (&o, &w)| a.wrapping_add((i32::from(src[o + i]) - zx) * w));
    }
}

/// `M` × 16 outputs of [`sum_taps_avx2`] from `base`: the tap pairs `pair(0..pairs)` summed in
/// `2M` accumulators, then `zx·Σw` subtracted and stored. The caller guarantees AVX2, `base +
/// 16M ≤ dst.len()` and `o + base + 16M ≤ src.len()` for every offset `o` of the pairs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block<const M: usize>(
    dst: &mut [i32],
    src: &[u8],
    base: usize,
    pairs: usize,
    pair: &impl Fn(usize) -> (usize, usize, std::arch::x86_64::__m256i),
    correction: std::arch::x86_64::__m256i,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_si256(); 2]; M];
    for t in 0..pairs {
        let (o1, o2, w) = pair(t);
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `o + base + 16j + 16 ≤ o + base + 16M ≤ src.len()` (caller).
            let (a, b) =
                unsafe { (_mm_loadu_si128(src.as_ptr().add(o1 + base + 16 * j).cast()), _mm_loadu_si128(src.as_ptr().add(o2 + base + 16 * j).cast())) };
            acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), w));
            acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b)), w));
        }
    }
    for (k, a) in acc.iter().flatten().enumerate() {
        // SAFETY: `base + 8k + 8 ≤ base + 16M ≤ dst.len()` (caller).
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().add(base + 8 * k).cast(), _mm256_sub_epi32(*a, correction)) };
    }
}
