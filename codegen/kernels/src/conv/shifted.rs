//! A convolution group whose taps read every column of the input (stride 1 along the innermost
//! axis, or a stride up to the undilated kernel width: `Lowering::phases_read`), without im2col:
//! the group's input is copied once per image into a framed, channel-interleaved layout
//! `[c4][z][y][phase][x / sw][4]` (four input channels per 4-byte cell, the pads filled with `zx`,
//! channels past `Cin/groups` with 0; framed column `u·sw + phase` at cell `u` of its phase), so
//! the im2col panel of 16 consecutive output positions of a line, for a reduction step `q` =
//! (group of four channels, tap), is one contiguous 64-byte load at `base(line, x0) + offset(q)`
//! (tap column `tx` of output column `x` is cell `x + tx / sw` of phase `tx mod sw`) — exactly
//! what one `vpdpbusd` multiplies against the broadcast weights `w[co][4q..4q+4]`. No per-tap
//! gather, no per-block packing: the earlier path ([`super::direct`]) spent 10× the VNNI tile's
//! time gathering 48-position runs when K is large (RivaGAN's 11×11 kernels, K = 3872), and on
//! AVX2 twice the tile's time on yolov8n's 3×3 stride-2 convolutions (before the phases, which
//! they now take: conv_bench, AVX2, fastest of 3 alternating runs: `3x3 s2 32->64 @16` 83.8 → 38.3 µs,
//! `16->32 @160` 1597 → 1000 µs, `64->128 @40` 1020 → 801 µs; slower only for 3 input channels,
//! padded to 4, at 640×640: 4000 → 5330 µs).
//!
//! The reduction runs over the channels padded to a multiple of four (`q` in channel-group-major,
//! tap-minor order); the padded channels hold weight 0 and activation 0, so they add nothing to
//! `Σ x·w`, `Σ w` or `Σ x`. The sums are exact integers wrapping modulo 2^32 — the same on every
//! path and in every order — and the corrections `− zx·Σ_k w + K·zx·zw − zw·Σ_k x` (K the real
//! depth) are those of [`super::direct`]: the same accumulators as the definition.
//!
//! Output lines are covered by panels of 16 positions; the last panel of a line may run past it
//! (into the frame or the next line: read, never stored), the buffer carries 64 bytes of slack.
//!
//! On AVX2 a 32-byte load holds 8 positions' cells, which is what `vpmaddubsw` multiplies
//! against a broadcast step of 4 weights: where the rows split into a pair-safe part and a short
//! excess (`crate::split::RowSplit`, most real weights), the group's rows are read as a
//! generated crate stored them ahead, or made safe once per call, and run that way
//! ([`crate::micro::conv_avx2::tile_split`]); elsewhere the weights are widened to i16 once per
//! call and the activations per step (`vpmaddwd`).

use super::direct::{MR, NP, PANEL, Scratch, Sink, Weights};
use super::{Geometry, GroupSplit};
use crate::isa::{Isa, Kernels};
use crate::pack::KR;
#[cfg(target_arch = "x86_64")]
use crate::split::safe_rows;

/// Panels per block: every output-channel tile runs over the block's panels before the next.
const BLOCK_PANELS: usize = 8 * NP;

/// The reduction depth of a row in this layout: the group's `cig` channels padded to a multiple
/// of four, times the taps.
pub(super) fn depth(cig: usize, taps: usize) -> usize {
    cig.div_ceil(KR) * KR * taps
}

/// Element `i` of a channel's row in this layout (`[q][4]` with `q` = channel group × taps + tap:
/// `w[c4·4 + j][tap]` at `(q, j)`): its index in the channel's ONNX weights `[cig][taps]`, or
/// `None` where `c4·4 + j` is past the group's channels (weight 0).
pub(super) fn source(i: usize, cig: usize, taps: usize) -> Option<usize> {
    let (q, j) = (i / KR, i % KR);
    let c = q / taps * KR + j;
    (c < cig).then_some(c * taps + q % taps)
}

/// Byte offsets of the reduction steps in the interleaved input, with their maximum (every
/// entry is at most `span`: the one constructor, [`Offsets::set`], computes it).
#[derive(Clone, Debug, Default)]
pub struct Offsets {
    list: Vec<usize>,
    span: usize,
}

impl Offsets {
    /// The offsets of `groups` channel groups `stride` bytes apart, each with the taps' offsets
    /// `taps` (computed once, not per group: the list has one entry per group and tap, 576 for
    /// yolov8n's 256-channel 3×3 convolutions, remade per call).
    fn set(&mut self, taps: impl Iterator<Item = usize>, groups: usize, stride: usize) {
        self.list.clear();
        self.list.extend(taps);
        let n = self.list.len();
        self.list.reserve(n * groups.saturating_sub(1));
        for g in 1..groups {
            for i in 0..n {
                let o = self.list[i] + g * stride;
                self.list.push(o);
            }
        }
        self.span = self.list.iter().copied().max().unwrap_or(0);
    }

    pub(crate) fn list(&self) -> &[usize] {
        &self.list
    }

    pub(crate) fn span(&self) -> usize {
        self.span
    }
}

/// One tile's operands: `mr` weight rows of `offsets.list().len()·4` bytes from `w`, `np` panels
/// of the interleaved input `x` starting at `bases[p]` (step `q` of panel `p` at `bases[p] + offsets[q]`),
/// of which the caller reads the first `lens[p]` positions (a tile may leave the others unwritten:
/// the AVX2 tile skips a panel's second 8 positions on lines of 8 or fewer).
pub(crate) struct Tile<'a, W = i8> {
    pub w: &'a [W],
    pub x: &'a [u8],
    pub bases: [usize; NP],
    pub lens: [usize; NP],
    pub offsets: &'a Offsets,
    pub mr: usize,
    pub np: usize,
}

impl<W> Tile<'_, W> {
    /// Every read of the tile lies inside its operands (checked before any kernel runs).
    pub(crate) fn check(&self) {
        let k4 = self.offsets.list().len();
        assert!(self.mr <= MR && self.np <= NP && self.w.len() >= self.mr * k4 * KR && self.lens.iter().all(|&l| l <= PANEL));
        assert!(self.bases[..self.np].iter().all(|&b| b + self.offsets.span() + PANEL * KR <= self.x.len()));
    }
}

/// One group of one image (see the module): rows to `sink` as channels `co_base..co_base + w.rows()`.
/// `split`: the AVX2 path's pair split of the group's rows (then `vpmaddubsw` on pair-safe rows,
/// [`crate::micro::conv_avx2::tile_split`]).
#[allow(clippy::too_many_arguments)] // the group's operands, spelled out
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(super) fn group<S: Sink>(
    kernels: Kernels,
    g: &Geometry,
    w: &Weights,
    split: Option<GroupSplit<'_>>,
    depth: usize,
    x: &[u8],
    zx: u8,
    co_base: usize,
    s: &mut Scratch,
    sink: &mut S,
) {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI.
        Isa::Avx512Vnni => unsafe { group_vnni(g, w, depth, x, zx, co_base, s, sink) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked; the function only lets the compiler use AVX2 for safe code.
        Isa::Avx2 => unsafe {
            match split {
                Some(split) => group_split(g, w, split, depth, x, zx, co_base, s, sink),
                None => group_avx2(g, w, depth, x, zx, co_base, s, sink),
            }
        },
        _ => group_generic(g, w, w.w, depth, x, zx, co_base, s, sink, |t, _, out| tile_portable(t, out)),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_vnni<S: Sink>(g: &Geometry, w: &Weights, depth: usize, x: &[u8], zx: u8, co_base: usize, s: &mut Scratch, sink: &mut S) {
    group_generic(g, w, w.w, depth, x, zx, co_base, s, sink, |t, _, out| {
        // SAFETY: this instance only runs where AVX-512 F/BW/VNNI were checked; `tile` checks
        // the operands' bounds itself.
        unsafe { crate::micro::conv_vnni::tile_shifted(t, out) }
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_avx2<S: Sink>(g: &Geometry, w: &Weights, depth: usize, x: &[u8], zx: u8, co_base: usize, s: &mut Scratch, sink: &mut S) {
    let mut wide = std::mem::take(&mut s.wide);
    super::direct::widen(w.w, &mut wide);
    group_generic(g, w, &wide, depth, x, zx, co_base, s, sink, |t, _, out| {
        // SAFETY: this instance only runs where AVX2 was checked; `tile_shifted` checks the
        // operands' bounds itself.
        unsafe { crate::micro::conv_avx2::tile_shifted(t, out) }
    });
    s.wide = wide;
}

/// The AVX2 group with `vpmaddubsw`: the group's pair-safe rows as stored ahead, or made into
/// `s.safe` once per call (one byte per weight, where the i16 tile widens to two), their excess
/// added by the tile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_split<S: Sink>(
    g: &Geometry,
    w: &Weights,
    split: GroupSplit<'_>,
    depth: usize,
    x: &[u8],
    zx: u8,
    co_base: usize,
    s: &mut Scratch,
    sink: &mut S,
) {
    let mut made = std::mem::take(&mut s.safe);
    let safe = match split.safe {
        Some(safe) => safe,
        None => {
            safe_rows(w.w, w.k4() * KR, split.split, split.row0, &mut made);
            &made
        }
    };
    group_generic(g, w, safe, depth, x, zx, co_base, s, sink, |t, c0, out| {
        // SAFETY: this instance only runs where AVX2 was checked; `tile_split` checks the
        // operands' bounds itself; the rows are pair-safe (`safe_rows`, now or ahead), the
        // split's rows from `row0 + c0` theirs.
        unsafe { crate::micro::conv_avx2::tile_split(t, split.split, split.row0 + c0, out) }
    });
    s.safe = made;
}

/// The raw sums `Σ_q x·w` of a tile into `out[r][p·16 + lane]` (wrapping).
fn tile_portable(t: &Tile, out: &mut [[i32; NP * PANEL]; MR]) {
    t.check();
    let ldw = t.offsets.list().len() * KR;
    for (r, out) in out.iter_mut().enumerate().take(t.mr) {
        let w = &t.w[r * ldw..][..ldw];
        for p in 0..t.np {
            let mut lanes = [0i32; PANEL];
            for (wq, &off) in w.chunks_exact(KR).zip(t.offsets.list()) {
                let xq: &[u8; PANEL * KR] = t.x[t.bases[p] + off..][..PANEL * KR].try_into().expect("one panel row");
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

/// The group over the path's `tile(t, c0, acc)`: the raw sums of tile `t`, whose rows are
/// `rows`' from row `c0`, into `acc`; then the zero-point corrections and the sink, per run.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn group_generic<S: Sink, W>(
    g: &Geometry,
    w: &Weights,
    rows: &[W],
    depth: usize,
    x: &[u8],
    zx: u8,
    co_base: usize,
    s: &mut Scratch,
    sink: &mut S,
    mut tile: impl FnMut(&Tile<W>, usize, &mut [[i32; NP * PANEL]; MR]),
) {
    let [od, oh, ow] = g.output;
    if od * oh * ow == 0 {
        return;
    }
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    // The framed extents the output reads (the pads' part of them holds `zx`); a framed line is
    // stored as its `sw` column phases of `wq` cells each.
    let (dp, hp, wq) = ((od - 1) * sd + (kd - 1) * dd + 1, (oh - 1) * sh + (kh - 1) * dh + 1, ((ow - 1) * sw + (kw - 1) * dw + 1).div_ceil(sw));
    let lw = sw * wq;
    let c4n = w.k4() / (kd * kh * kw);
    let cells = dp * hp * lw;
    interleave(g, x, zx, c4n, [dp, hp, wq], s);
    // Tap (tz, ty, tx) of output column x reads framed column `x·sw + tx·dw`: cell
    // `x + tx·dw / sw` of phase `tx·dw mod sw`.
    let taps = (0..kd * kh * kw).map(|t| {
        let tx = t % kw * dw;
        ((t / (kh * kw) * dd * hp + t / kw % kh * dh) * lw + tx % sw * wq + tx / sw) * KR
    });
    s.offsets.set(taps, c4n, dp * hp * lw * KR);
    // The panels: (byte base in the interleaved input, first output position, length). Short
    // lines (stride 1 along both inner axes, one depth slice) in panels over the framed plane
    // read as one flat line where that computes fewer positions: output (y, x) is flat position
    // `y·lw + x`, whose taps are at the same offsets; the positions of the frame (`x ≥ ow`) are
    // computed and dropped (yolov8n's 3×3 convolutions on planes of 2×2 and 4×4 compute 8 and 24
    // positions for their 4 and 16 where a panel per line computes 16 and 32).
    let flat_lanes = (oh - 1) * lw + ow;
    let halves = |n: usize| (0..n).step_by(PANEL).map(|x0| (n - x0).min(PANEL).div_ceil(PANEL / 2)).sum::<usize>();
    let flat = sw == 1 && sh == 1 && od == 1 && halves(flat_lanes) < oh * halves(ow);
    s.spans.clear();
    if flat {
        for f0 in (0..flat_lanes).step_by(PANEL) {
            s.spans.push([f0 * KR, f0 / lw * ow + (f0 % lw).min(ow), PANEL.min(flat_lanes - f0)]);
        }
    } else {
        for line in 0..od * oh {
            let (z, y) = (line / oh, line % oh);
            for x0 in (0..ow).step_by(PANEL) {
                s.spans.push([((z * sd * hp + y * sh) * lw + x0) * KR, line * ow + x0, PANEL.min(ow - x0)]);
            }
        }
    }
    // Σ_k x per output position, only when some weight zero point needs it.
    let need_sums = w.zero_points.iter().any(|&z| z != 0);
    s.sums.clear();
    if need_sums {
        // Per framed cell, the sum over the channel groups (the same cells as the panels read,
        // `cells + PANEL` from each group's start); then per panel, the taps' cells added 16
        // positions at a time (the taps' cell offsets: group 0's entries of `s.offsets`).
        let mut cell_sums = vec![0i32; cells + PANEL];
        for c4 in 0..c4n {
            let group = &s.padded[c4 * cells * KR..][..(cells + PANEL) * KR];
            for (a, c) in cell_sums.iter_mut().zip(group.chunks_exact(KR)) {
                *a = c.iter().fold(*a, |a, &v| a.wrapping_add(i32::from(v)));
            }
        }
        let taps = &s.offsets.list()[..kd * kh * kw];
        for &[base, _, _] in &s.spans {
            let mut lanes = [0i32; PANEL];
            for &off in taps {
                let cs: &[i32; PANEL] = cell_sums[base / KR + off / KR..][..PANEL].try_into().expect("one panel");
                for (a, &c) in lanes.iter_mut().zip(cs) {
                    *a = a.wrapping_add(c);
                }
            }
            s.sums.extend_from_slice(&lanes);
        }
    }
    let zxi = i32::from(zx);
    let kzx = (depth as i32).wrapping_mul(zxi);
    let ldw = w.k4() * KR;
    let mut acc = [[0i32; NP * PANEL]; MR];
    // Per row, the block's outputs corrected and in order (the frame's positions dropped): the
    // spans of a block are consecutive output positions (a line's panels, then the next line's;
    // or the flat line's valid positions), so each row goes to the sink as one run of up to
    // 384 — one requantization call per row and block, not per tile of 48.
    const RUN: usize = BLOCK_PANELS * PANEL;
    let mut runs = std::mem::take(&mut s.runs);
    runs.resize(MR * RUN, 0);
    for b0 in (0..s.spans.len()).step_by(BLOCK_PANELS) {
        let b1 = (b0 + BLOCK_PANELS).min(s.spans.len());
        let mut c0 = 0;
        while c0 < w.rows() {
            let mr = MR.min(w.rows() - c0);
            let mut len = 0;
            for t0 in (b0..b1).step_by(NP) {
                let np = NP.min(b1 - t0);
                let (mut bases, mut lens) = ([0; NP], [0; NP]);
                for ((b, l), span) in bases.iter_mut().zip(&mut lens).zip(&s.spans[t0..t0 + np]) {
                    (*b, *l) = (span[0], span[2]);
                }
                tile(&Tile { w: &rows[c0 * ldw..][..mr * ldw], x: &s.padded, bases, lens, offsets: &s.offsets, mr, np }, c0, &mut acc);
                let mut n = 0;
                for (r, row) in acc.iter().enumerate().take(mr) {
                    let co = c0 + r;
                    let zw = w.zero_points[co];
                    let corr = kzx.wrapping_mul(zw).wrapping_sub(zxi.wrapping_mul(w.sums[co]));
                    let run = &mut runs[r * RUN + len..][..np * PANEL];
                    n = 0;
                    for (p, span) in s.spans[t0..t0 + np].iter().enumerate() {
                        let (v, sums) = (&row[p * PANEL..][..span[2]], &s.sums[if need_sums { (t0 + p) * PANEL } else { 0 }..]);
                        if flat {
                            let f0 = span[0] / KR;
                            for (l, &v) in v.iter().enumerate().filter(|&(l, _)| (f0 + l) % lw < ow) {
                                let xs = if need_sums { sums[l] } else { 0 };
                                run[n] = v.wrapping_add(corr).wrapping_sub(zw.wrapping_mul(xs));
                                n += 1;
                            }
                        } else if need_sums {
                            for ((d, &v), &xs) in run[n..][..v.len()].iter_mut().zip(v).zip(sums) {
                                *d = v.wrapping_add(corr).wrapping_sub(zw.wrapping_mul(xs));
                            }
                            n += v.len();
                        } else {
                            for (d, &v) in run[n..][..v.len()].iter_mut().zip(v) {
                                *d = v.wrapping_add(corr);
                            }
                            n += v.len();
                        }
                    }
                }
                len += n;
            }
            for r in 0..mr {
                sink.row(co_base + c0 + r, s.spans[b0][1], &runs[r * RUN..][..len]);
            }
            c0 += mr;
        }
    }
    s.runs = runs;
}

/// The group's input planes `x` (`[c][z][y][x]`) into `s.padded`, `[c4][z][y][phase][x / sw][4]`
/// over the framed extents (`ext`: depth, height, cells per column phase; `sw` phases per line,
/// framed column `u·sw + phase` at cell `u` of its phase), with 64 bytes of slack at the end.
fn interleave(g: &Geometry, x: &[u8], zx: u8, c4n: usize, ext: [usize; 3], s: &mut Scratch) {
    let [id, ih, iw] = g.input;
    let [pd, ph, pw] = g.pads;
    let sw = g.strides[2];
    let [dp, hp, wq] = ext;
    let lw = sw * wq;
    let channels = x.len() / (id * ih * iw).max(1);
    s.padded.clear();
    s.padded.resize(c4n * dp * hp * lw * KR + PANEL * KR, 0);
    s.lines.resize(iw, 0);
    s.lines.fill(0);
    for c4 in 0..c4n {
        let fill: [u8; KR] = std::array::from_fn(|j| if c4 * KR + j < channels { zx } else { 0 });
        for z in 0..dp {
            for y in 0..hp {
                let row = &mut s.padded[((c4 * dp + z) * hp + y) * lw * KR..][..lw * KR];
                let (zi, yi) = (z.wrapping_sub(pd), y.wrapping_sub(ph));
                if zi >= id || yi >= ih {
                    row.chunks_exact_mut(KR).for_each(|c| c.copy_from_slice(&fill));
                    continue;
                }
                let line = |j: usize| {
                    let c = c4 * KR + j;
                    if c < channels { &x[((c * id + zi) * ih + yi) * iw..][..iw] } else { &s.lines[..iw] }
                };
                let lines = [line(0), line(1), line(2), line(3)];
                for (phase, cells) in row.chunks_exact_mut(wq * KR).enumerate() {
                    // Stride 1 (one phase) separately: the compiler then interleaves contiguous runs.
                    if sw == 1 {
                        phase_cells(cells, &lines, fill, 1, phase, pw);
                    } else {
                        phase_cells(cells, &lines, fill, sw, phase, pw);
                    }
                }
            }
        }
    }
}

/// The cells `u` of one column phase of a framed line: input column `u·sw + phase − pw` of the
/// four `lines`, or `fill` where that column lies in the pads.
#[inline(always)]
fn phase_cells(cells: &mut [u8], lines: &[&[u8]; KR], fill: [u8; KR], sw: usize, phase: usize, pw: usize) {
    let (wq, iw) = (cells.len() / KR, lines[0].len());
    // Cells holding input: lo..hi (framed columns pw..pw + iw).
    let lo = pw.saturating_sub(phase).div_ceil(sw).min(wq);
    let hi = (pw + iw).saturating_sub(phase).div_ceil(sw).clamp(lo, wq);
    cells[..lo * KR].chunks_exact_mut(KR).for_each(|c| c.copy_from_slice(&fill));
    cells[hi * KR..].chunks_exact_mut(KR).for_each(|c| c.copy_from_slice(&fill));
    if lo < hi {
        let first = lo * sw + phase - pw;
        let run = &mut cells[lo * KR..hi * KR];
        // Stride 1: the columns are contiguous in every line, 16 interleaved at a time by unpacks.
        let done = if sw == 1 { interleave_run(run, lines, first) } else { 0 };
        for (u, c) in run.chunks_exact_mut(KR).enumerate().skip(done) {
            let col = first + u * sw;
            c.copy_from_slice(&[lines[0][col], lines[1][col], lines[2][col], lines[3][col]]);
        }
    }
}

/// Cells `u` of `run` from columns `first + u` of the four lines, 16 at a time (SSE2, every
/// x86-64 host: bytes of two lines unpacked into pairs, pairs of two into cells); returns how many
/// cells it wrote (a multiple of 16, the caller writes the rest).
#[cfg(target_arch = "x86_64")]
fn interleave_run(run: &mut [u8], lines: &[&[u8]; KR], first: usize) -> usize {
    use std::arch::x86_64::*;
    let n = run.len() / KR / 16 * 16;
    assert!(lines.iter().all(|l| l.len() >= first + n));
    for (u, cells) in run[..n * KR].chunks_exact_mut(16 * KR).enumerate() {
        let at = first + 16 * u;
        // SAFETY: SSE2 is part of x86-64; the assert bounds the 16 bytes read from each line at
        // `at`, and `cells` holds 64 bytes; unaligned loads and stores only.
        unsafe {
            let [a, b, c, d] = lines.map(|l| _mm_loadu_si128(l.as_ptr().add(at).cast()));
            let (ab, cd) = ([_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)], [_mm_unpacklo_epi8(c, d), _mm_unpackhi_epi8(c, d)]);
            let out = cells.as_mut_ptr().cast::<__m128i>();
            _mm_storeu_si128(out, _mm_unpacklo_epi16(ab[0], cd[0]));
            _mm_storeu_si128(out.add(1), _mm_unpackhi_epi16(ab[0], cd[0]));
            _mm_storeu_si128(out.add(2), _mm_unpacklo_epi16(ab[1], cd[1]));
            _mm_storeu_si128(out.add(3), _mm_unpackhi_epi16(ab[1], cd[1]));
        }
    }
    n
}

/// Elsewhere the caller's loop writes every cell.
#[cfg(not(target_arch = "x86_64"))]
fn interleave_run(_: &mut [u8], _: &[&[u8]; KR], _: usize) -> usize {
    0
}
