//! A convolution group as one GEMM with the output channels as rows and the output positions as
//! columns: `y[co][pos] = Σ_k (x[k][pos] − zx)·(w[co][k] − zw[co])`, so every row of the result
//! is a run of one NCHW output plane (no `[pos][co]` block, no scatter), and its epilogue (the
//! zero-point corrections, then either the i32 store or the correctly rounded requantization) runs
//! per tile while the tile's sums are still in L1.
//!
//! The activations are packed per block of [`BLOCK`] output positions, `[panel][k4][16 positions][4 k]`
//! (one 64-byte row of a panel is what one `vpdpbusd` multiplies: u8 activations against the
//! broadcast i8 weights `w[co][4q..4q+4]`), straight from the input planes — the im2col row of
//! each tap `(c, kz, ky, kx)` is gathered line by line into a 4-row buffer and interleaved; taps
//! outside the input read `zx`. A block's panels (3 × k4 × 64 bytes) stay in L1 while every
//! output channel runs over them. Sums of products are exact and wrap modulo 2^32 on every path,
//! the corrections `− zx·Σ_k w + K·zx·zw − zw·Σ_k x` likewise: the same integers as the
//! definition, whichever path (portable, AVX2, AVX-512 VNNI) computed them.

use super::Geometry;
use super::depthwise::inside;
use crate::isa::{Isa, Kernels};
use crate::pack::KR;

/// Output positions per panel (one zmm of i32 sums).
pub(crate) const PANEL: usize = 16;
/// Output channels per tile.
pub(crate) const MR: usize = 8;
/// Panels per tile: 8 × 3 accumulators, 3 activation vectors and one broadcast fit 32 zmm.
pub(crate) const NP: usize = 3;
/// Output positions per tile.
const BLOCK: usize = NP * PANEL;
/// Bytes of packed activations per block: the block stays in L1 while every channel runs over it.
const BLOCK_BYTES: usize = 24 << 10;
/// Tiles per block at most (small K: fewer, longer gathers).
const MAX_TILES: usize = 8;

/// One im2col row (a K index): its input plane and, per axis, the tap's offset `t·dilation` and
/// the output indices whose input coordinate lies inside the input.
#[derive(Clone, Debug)]
struct Tap {
    plane: usize,
    offset: [usize; 3],
    inside: [std::ops::Range<usize>; 3],
}

/// One group's weights as the GEMM reads them, `[co][k4·4]` i8 (zero past K), with their row
/// sums and zero points (uint8 weights shifted to int8 with their zero points, as in
/// [`crate::PackedB`]): a view of [`super::PackedConv`]'s packed rows.
pub(super) struct Weights<'a> {
    pub(super) k: usize,
    pub(super) w: &'a [i8],
    pub(super) sums: &'a [i32],
    pub(super) zero_points: &'a [i32],
}

impl Weights<'_> {
    pub(super) fn rows(&self) -> usize {
        self.sums.len()
    }

    pub(super) fn k4(&self) -> usize {
        self.k.div_ceil(KR)
    }
}

/// Where the exact accumulators of a run of positions of one output channel go.
pub(super) trait Sink {
    /// Channel `co` (of the image), positions `p0..p0 + v.len()` of its plane.
    fn row(&mut self, co: usize, p0: usize, v: &[i32]);
}

/// Buffers of a run, reused across calls.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    taps: Vec<Tap>,
    panels: Vec<u8>,
    pub(super) lines: Vec<u8>,
    pub(super) sums: Vec<i32>,
    pub(super) offsets: super::shifted::Offsets,
    pub(super) spans: Vec<[usize; 3]>,
    pub(super) plane: Vec<i32>,
    pub(super) padded: Vec<u8>,
    /// The group's weights widened to i16 (the AVX2 tiles broadcast them with one load).
    pub(super) wide: Vec<i16>,
    /// A tile's rows made pair-safe (the AVX2 shifted tiles with `vpmaddubsw`).
    pub(super) safe: Vec<i8>,
    /// A block's corrected accumulators per row (the shifted lowering's runs to the sink).
    pub(super) runs: Vec<i32>,
}

/// One group of one image: `x` its input planes, rows written to `sink` as channels
/// `co_base..co_base + w.rows()`.
#[allow(clippy::too_many_arguments)] // the group's operands, spelled out
pub(super) fn group<S: Sink>(kernels: Kernels, g: &Geometry, w: &Weights, x: &[u8], zx: u8, co_base: usize, s: &mut Scratch, sink: &mut S) {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI.
        Isa::Avx512Vnni => unsafe { group_vnni(g, w, x, zx, co_base, s, sink) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked; the function only lets the compiler use AVX2 for safe code.
        Isa::Avx2 => unsafe { group_avx2(g, w, x, zx, co_base, s, sink) },
        _ => group_generic(g, w, w.w, x, zx, co_base, s, sink, tile_portable),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_vnni<S: Sink>(g: &Geometry, w: &Weights, x: &[u8], zx: u8, co_base: usize, s: &mut Scratch, sink: &mut S) {
    group_generic(g, w, w.w, x, zx, co_base, s, sink, |t, out| {
        // SAFETY: this instance only runs where AVX-512 F/BW/VNNI were checked; `group_generic`
        // hands out tiles whose operands lie inside the packed panels and weight rows.
        unsafe { crate::micro::conv_vnni::tile(t, out) }
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_avx2<S: Sink>(g: &Geometry, w: &Weights, x: &[u8], zx: u8, co_base: usize, s: &mut Scratch, sink: &mut S) {
    let mut wide = std::mem::take(&mut s.wide);
    widen(w.w, &mut wide);
    group_generic(g, w, &wide, x, zx, co_base, s, sink, |t, out| {
        // SAFETY: this instance only runs where AVX2 was checked; `tile` checks the operands'
        // bounds itself.
        unsafe { crate::micro::conv_avx2::tile(t, out) }
    });
    s.wide = wide;
}

/// A group's weights as i16 into `wide` (once per call: the AVX2 tiles' rows).
#[inline(always)]
pub(super) fn widen(w: &[i8], wide: &mut Vec<i16>) {
    wide.clear();
    wide.extend(w.iter().map(|&v| i16::from(v)));
}

/// One tile's operands: `mr` weight rows of `k4·4` weights (i8, or widened to i16 for the AVX2
/// tile) from `w`, `np` packed panels of `k4·64` bytes from `x`.
pub(crate) struct Tile<'a, W = i8> {
    pub w: &'a [W],
    pub x: &'a [u8],
    pub k4: usize,
    pub mr: usize,
    pub np: usize,
}

/// The raw sums `Σ_k x·w` of a tile into `out[r][p·16 + lane]` (wrapping).
fn tile_portable(t: &Tile, out: &mut [[i32; BLOCK]; MR]) {
    let (ldw, pstride) = (t.k4 * KR, t.k4 * PANEL * KR);
    for (r, out) in out.iter_mut().enumerate().take(t.mr) {
        let w = &t.w[r * ldw..][..ldw];
        for p in 0..t.np {
            let x = &t.x[p * pstride..][..pstride];
            let mut lanes = [0i32; PANEL];
            for (wq, xq) in w.chunks_exact(KR).zip(x.chunks_exact(PANEL * KR)) {
                for (lane, xs) in lanes.iter_mut().zip(xq.chunks_exact(KR)) {
                    for j in 0..KR {
                        // |x·w| ≤ 255·128 fits i16: narrow multiplies vectorize on baseline x86-64.
                        *lane = lane.wrapping_add(i32::from(i16::from(xs[j]) * i16::from(wq[j])));
                    }
                }
            }
            out[p * PANEL..][..PANEL].copy_from_slice(&lanes);
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn group_generic<S: Sink, W>(
    g: &Geometry,
    w: &Weights,
    rows: &[W],
    x: &[u8],
    zx: u8,
    co_base: usize,
    s: &mut Scratch,
    sink: &mut S,
    tile: impl Fn(&Tile<W>, &mut [[i32; BLOCK]; MR]),
) {
    let [od, oh, ow] = g.output;
    let out_sp = od * oh * ow;
    let (k, k4) = (w.k, w.k4());
    let (ldw, pstride) = (k4 * KR, k4 * PANEL * KR);
    let tiles = (BLOCK_BYTES / (NP * pstride)).clamp(1, MAX_TILES).min(out_sp.div_ceil(BLOCK));
    let block = tiles * BLOCK;
    s.panels.resize(tiles * NP * pstride, 0);
    s.lines.resize(KR * block, 0);
    s.sums.resize(block, 0);
    taps(g, k, g.input.iter().product(), s);
    // Σ_k x per position, only when some weight zero point needs it (symmetric weights do not).
    let need_sums = w.zero_points.iter().any(|&z| z != 0);
    let zxi = i32::from(zx);
    // Per channel: K·zx·zw − zx·Σ_k w (wrapping, like every sum here).
    let kzx = (k as i32).wrapping_mul(zxi);
    let mut acc = [[0i32; BLOCK]; MR];
    let mut b0 = 0;
    while b0 < out_sp {
        let blen = block.min(out_sp - b0);
        pack(g, x, k4, zx, b0, blen, block, need_sums, s);
        let mut t0 = 0;
        while t0 < blen {
            let len = BLOCK.min(blen - t0);
            let np = len.div_ceil(PANEL);
            let panels = &s.panels[t0 / PANEL * pstride..][..np * pstride];
            let sums = &s.sums[t0..][..len];
            let mut c0 = 0;
            while c0 < w.rows() {
                let mr = MR.min(w.rows() - c0);
                tile(&Tile { w: &rows[c0 * ldw..][..mr * ldw], x: panels, k4, mr, np }, &mut acc);
                for (r, row) in acc.iter_mut().enumerate().take(mr) {
                    let co = c0 + r;
                    let zw = w.zero_points[co];
                    let corr = kzx.wrapping_mul(zw).wrapping_sub(zxi.wrapping_mul(w.sums[co]));
                    let row = &mut row[..len];
                    if need_sums {
                        for (v, &xs) in row.iter_mut().zip(sums) {
                            *v = v.wrapping_add(corr).wrapping_sub(zw.wrapping_mul(xs));
                        }
                    } else {
                        row.iter_mut().for_each(|v| *v = v.wrapping_add(corr));
                    }
                    sink.row(co_base + co, b0 + t0, row);
                }
                c0 += mr;
            }
            t0 += len;
        }
        b0 += blen;
    }
}

/// The table of the K rows of the im2col matrix (ONNX's weight order: channel, then kernel
/// offsets), input planes of `in_sp` codes.
fn taps(g: &Geometry, k: usize, in_sp: usize, s: &mut Scratch) {
    let [kd, kh, kw] = g.kernel;
    let per_channel = kd * kh * kw;
    let axis = |a: usize, t: usize| (t * g.dilations[a], inside(g.output[a], g.input[a], g.strides[a], t * g.dilations[a], g.pads[a]));
    s.taps.clear();
    s.taps.extend((0..k).map(|kk| {
        let t = kk % per_channel;
        let (tz, ty, tx) = (t / (kh * kw), t / kw % kh, t % kw);
        let ((oz, iz), (oy, iy), (ox, ix)) = (axis(0, tz), axis(1, ty), axis(2, tx));
        Tap { plane: kk / per_channel * in_sp, offset: [oz, oy, ox], inside: [iz, iy, ix] }
    }));
}

/// Packs positions `p0..p0 + len` of the im2col matrix into `s.panels` (`[panel][k4][16][4]`,
/// panels of a block of `block` positions) and, if `sums`, their column sums `Σ_k x[k][pos]`
/// into `s.sums` (positions past `len` hold leftovers of earlier blocks: finite sums never stored).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack(g: &Geometry, x: &[u8], k4: usize, zx: u8, p0: usize, len: usize, block: usize, sums: bool, s: &mut Scratch) {
    let pstride = k4 * PANEL * KR;
    let panels = len.div_ceil(PANEL);
    if sums {
        s.sums.fill(0);
    }
    for q in 0..k4 {
        for j in 0..KR {
            let dst = &mut s.lines[j * block..][..len];
            match s.taps.get(q * KR + j) {
                Some(tap) => gather(g, &x[tap.plane..], tap, zx, p0, dst),
                // Past K: zero activations against zero weights (and nothing in the sums).
                None => dst.fill(0),
            }
        }
        let (l0, rest) = s.lines.split_at(block);
        let (l1, rest) = rest.split_at(block);
        let (l2, l3) = rest.split_at(block);
        for (p, panel) in s.panels.chunks_exact_mut(pstride).enumerate().take(panels) {
            let lo = p * PANEL;
            let dst: &mut [u8; PANEL * KR] = (&mut panel[q * PANEL * KR..][..PANEL * KR]).try_into().expect("one packed row");
            let row = |l: &[u8]| -> [u8; PANEL] { l[lo..][..PANEL].try_into().expect("one panel") };
            let (a, b, c, d) = (row(l0), row(l1), row(l2), row(l3));
            for i in 0..PANEL {
                dst[KR * i..][..KR].copy_from_slice(&[a[i], b[i], c[i], d[i]]);
            }
            if sums {
                for (i, v) in s.sums[lo..][..PANEL].iter_mut().enumerate() {
                    *v += i32::from(a[i]) + i32::from(b[i]) + i32::from(c[i]) + i32::from(d[i]);
                }
            }
        }
    }
}

/// Row `tap` of one input channel's im2col matrix at positions `p0..p0 + dst.len()`.
#[inline(always)]
fn gather(g: &Geometry, plane: &[u8], tap: &Tap, zx: u8, p0: usize, dst: &mut [u8]) {
    let [_, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let [sd, sh, sw] = g.strides;
    let [pd, ph, pw] = g.pads;
    let [zs, ys, xs] = &tap.inside;
    let [tz, ty, tx] = tap.offset;
    let end = p0 + dst.len();
    if sw == 1 && sh == 1 && ow == iw && oh == ih {
        return gather_shifted(g, plane, tap, zx, p0, dst);
    }
    let mut pos = p0;
    let (mut line, mut x0) = (pos / ow, pos % ow);
    while pos < end {
        // The output line `line` = (z, y), columns x0..x1 of it inside the block.
        let x1 = ow.min(x0 + end - pos);
        let d = &mut dst[pos - p0..][..x1 - x0];
        let (z, y) = (line / oh, line % oh);
        if zs.contains(&z) && ys.contains(&y) && !xs.is_empty() {
            let (iz, iy) = (z * sd + tz - pd, y * sh + ty - ph);
            let src = &plane[(iz * ih + iy) * iw..][..iw];
            // Output columns x0..x1 against the inside range xs.
            let (a, b) = (xs.start.clamp(x0, x1), xs.end.clamp(x0, x1));
            d[..a - x0].fill(zx);
            d[b - x0..].fill(zx);
            if a < b {
                let first = a * sw + tx - pw;
                let d = &mut d[a - x0..b - x0];
                if sw == 1 {
                    d.copy_from_slice(&src[first..][..b - a]);
                } else if sw == 2 {
                    // Every other byte, as pairs (the compiler vectorizes the pairs' first bytes;
                    // `step_by` checked every element): the last one alone, its pair may end the line.
                    let (last, head) = d.split_last_mut().expect("a < b");
                    for (d, pair) in head.iter_mut().zip(src[first..].chunks_exact(2)) {
                        *d = pair[0];
                    }
                    *last = src[first + 2 * head.len()];
                } else {
                    for (d, v) in d.iter_mut().zip(src[first..].iter().step_by(sw)) {
                        *d = *v;
                    }
                }
            }
        } else {
            d.fill(zx);
        }
        pos += x1 - x0;
        (line, x0) = (line + 1, 0);
    }
}

/// [`gather`] where the output lines are the input's lines shifted (stride 1 along the two inner
/// axes, as many and as wide lines as the input: "same" padding): the tap reads the plane at one
/// offset per depth slice, so a run of lines is one copy; then the lines and columns outside the
/// input are set to `zx`.
#[inline(always)]
fn gather_shifted(g: &Geometry, plane: &[u8], tap: &Tap, zx: u8, p0: usize, dst: &mut [u8]) {
    let [_, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let [sd, _, _] = g.strides;
    let [pd, ph, pw] = g.pads;
    let [zs, ys, xs] = &tap.inside;
    let [tz, ty, tx] = tap.offset;
    let (end, slab) = (p0 + dst.len(), oh * ow);
    let in_sp = plane.len().min(g.input.iter().product());
    let mut pos = p0;
    while pos < end {
        let z = pos / slab;
        let slab_end = end.min((z + 1) * slab);
        if !zs.contains(&z) || ys.is_empty() || xs.is_empty() {
            dst[pos - p0..slab_end - p0].fill(zx);
            pos = slab_end;
            continue;
        }
        let iz = z * sd + tz - pd;
        // Input index − output position, for every inside tap of this slice.
        let shift = ((iz * ih) as isize - (z * oh) as isize + ty as isize - ph as isize) * iw as isize + tx as isize - pw as isize;
        let (va, vb) = ((z * slab + ys.start * ow).clamp(pos, slab_end), (z * slab + ys.end * ow).clamp(pos, slab_end));
        // Positions whose index falls inside the plane (the others are outside columns, patched below).
        let lo = (va as isize).max(-shift).min(vb as isize) as usize;
        let hi = ((in_sp as isize - shift).min(vb as isize)).max(lo as isize) as usize;
        dst[pos - p0..lo - p0].fill(zx);
        dst[hi - p0..slab_end - p0].fill(zx);
        if lo < hi {
            dst[lo - p0..hi - p0].copy_from_slice(&plane[(lo as isize + shift) as usize..][..hi - lo]);
        }
        // Column by column (a few per tap: the pads), strided stores rather than a short fill per line.
        for col in (0..xs.start).chain(xs.end..ow) {
            let first = va - va % ow + col;
            let first = if first < va { first + ow } else { first };
            for pos in (first..vb).step_by(ow) {
                dst[pos - p0] = zx;
            }
        }
        pos = slab_end;
    }
}
