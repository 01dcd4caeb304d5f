//! Depthwise convolution (one input channel per group, any channel multiplier), direct: each
//! output plane accumulates `(x − zx)·(w − zw)` tap by tap over a copy of the input framed with
//! `zx` (padded taps add `(zx − zx)·w = 0`, as in DQ→Conv), the inner loop running along the
//! output (one flat loop per tap when the stride is 1). No im2col and no GEMM panel holding one
//! useful column. Exact products (|·| ≤ 255·255) and i32 sums wrapping modulo 2^32, like the GEMM
//! path: the same integers.

use super::Geometry;
use crate::isa::{Isa, Kernels};

/// One output plane `out` (`[od·oh·ow]`) from one input plane `x` (`[id·ih·iw]`) and the taps
/// `w − zw` (`[kd·kh·kw]`).
/// Returns the line pitch of `out`: output line `l` (of `od·oh`) is `out[l·pitch..][..ow]`.
pub(super) fn plane(kernels: Kernels, g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI; the
        // function only lets the compiler use AVX-512 instructions for safe code.
        Isa::Avx512Vnni => unsafe { plane_avx512(g, x, zx, taps, out, padded) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { plane_avx2(g, x, zx, taps, out, padded) },
        _ => plane_generic(g, x, zx, taps, out, padded),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn plane_avx512(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    plane_generic(g, x, zx, taps, out, padded)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
    plane_generic(g, x, zx, taps, out, padded)
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
/// a line's end); then, tap by tap, `out[line·pitch + x] += (padded[…] − zx)·w`. With stride 1
/// along the two inner axes the update of a tap is one flat loop over the depth slice (columns
/// past `ow` are computed and never read); otherwise one loop per output line, reading a phase
/// of the lines when the last axis' stride exceeds 1.
#[inline(always)]
fn plane_generic(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut Vec<i32>, padded: &mut Vec<u8>) -> usize {
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
    out.clear();
    out.resize(lines * pitch, 0);
    let zx = i32::from(zx);
    for tz in 0..kd {
        for ty in 0..kh {
            for tx in 0..kw {
                let w = taps[(tz * kh + ty) * kw + tx];
                if w == 0 {
                    continue;
                }
                for z in 0..od {
                    let base = ((z * sd + tz * dd) * ey + ty * dh) * pitch + tx * dw;
                    let dst = &mut out[z * oh * pitch..][..oh * pitch];
                    if sh == 1 && sw == 1 {
                        for (o, &v) in dst.iter_mut().zip(&padded[base..]) {
                            *o = o.wrapping_add((i32::from(v) - zx) * w);
                        }
                    } else {
                        // Column x·sw + tx·dw of a framed line: phase (tx·dw) mod sw, index x + (tx·dw) div sw.
                        let (r, c0) = (tx * dw % sw, tx * dw / sw);
                        for (y, dst) in dst.chunks_exact_mut(pitch).enumerate() {
                            let line = (z * sd + tz * dd) * ey + ty * dh + y * sh;
                            let src = if sw == 1 { &padded[line * pitch + tx * dw..][..ow] } else { &padded[framed + (line * sw + r) * phase + c0..][..ow] };
                            for (o, &v) in dst[..ow].iter_mut().zip(src) {
                                *o = o.wrapping_add((i32::from(v) - zx) * w);
                            }
                        }
                    }
                }
            }
        }
    }
    pitch
}
