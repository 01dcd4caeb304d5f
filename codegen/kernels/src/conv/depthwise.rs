//! Depthwise convolution (one input channel per group, any channel multiplier), direct: each
//! output plane accumulates `(x − zx)·(w − zw)` tap by tap over the output rows, the inner loop
//! running along the output row (contiguous when the stride is 1). No im2col and no 16-column
//! GEMM panel holding one useful column. Exact products (|·| ≤ 255·255) and i32 sums wrapping
//! modulo 2^32, like the GEMM path: the same integers. Taps outside the input read `zx` and add 0,
//! so they are skipped.

use super::Geometry;
use crate::isa::{Isa, Kernels};

/// One output plane `out` (`[od·oh·ow]`) from one input plane `x` (`[id·ih·iw]`) and the taps
/// `w − zw` (`[kd·kh·kw]`).
pub(super) fn plane(kernels: Kernels, g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut [i32]) {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI; the
        // function only lets the compiler use AVX-512 instructions for safe code.
        Isa::Avx512Vnni => unsafe { plane_avx512(g, x, zx, taps, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { plane_avx2(g, x, zx, taps, out) },
        _ => plane_generic(g, x, zx, taps, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn plane_avx512(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut [i32]) {
    plane_generic(g, x, zx, taps, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut [i32]) {
    plane_generic(g, x, zx, taps, out)
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

#[inline(always)]
fn plane_generic(g: &Geometry, x: &[u8], zx: u8, taps: &[i32], out: &mut [i32]) {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, pw] = g.pads;
    let zx = i32::from(zx);
    out.fill(0);
    for tz in 0..kd {
        for ty in 0..kh {
            for tx in 0..kw {
                let w = taps[(tz * kh + ty) * kw + tx];
                let xs = inside(ow, iw, sw, tx * dw, pw);
                if w == 0 || xs.is_empty() {
                    continue;
                }
                for z in inside(od, id, sd, tz * dd, pd) {
                    let iz = z * sd + tz * dd - pd;
                    for y in inside(oh, ih, sh, ty * dh, ph) {
                        let iy = y * sh + ty * dh - ph;
                        let row = &x[(iz * ih + iy) * iw..][..iw];
                        let dst = &mut out[(z * oh + y) * ow..][..ow];
                        let first = xs.start * sw + tx * dw - pw;
                        if sw == 1 {
                            let src = &row[first..first + xs.len()];
                            for (o, &v) in dst[xs.clone()].iter_mut().zip(src) {
                                *o = o.wrapping_add((i32::from(v) - zx) * w);
                            }
                        } else {
                            for (o, v) in dst[xs.clone()].iter_mut().zip(row[first..].iter().step_by(sw)) {
                                *o = o.wrapping_add((i32::from(*v) - zx) * w);
                            }
                        }
                    }
                }
            }
        }
    }
}
