//! AVX-512 VNNI: `vpdpbusd` multiplies 4 u8 × i8 pairs per i32 lane and adds them to the lane
//! without saturation (wrapping, like the portable path). One packed row of a panel is one zmm.
//! Tile: up to 6 rows × 4 panels (64 columns): 24 accumulators, 4 weight vectors and one
//! broadcast fit the 32 zmm registers. A single-row product (GEMV) takes 8 panels per tile, so
//! that 8 independent accumulators cover `vpdpbusd`'s latency.
//!
//! A's rows are copied once per call to 64-byte aligned rows (one memcpy each, the row sums for
//! the zero-point corrections from the same pass); the broadcasts read them in place (an
//! interleaving per tile cost more than it saved). K runs in blocks of [`KC`] groups, so that the
//! 4 panels' block of weights (32 KiB) stays
//! in L1 while every row tile of A streams past it from L2. The zero-point corrections
//! `+ K·za·zb[n] − za·Σ_k b[k][n] − zb[n]·Σ_k a[m][k]` are applied in registers after the last
//! K block (wrapping i32, the integers `gemm::correct_zero_points` computes on the other paths),
//! and the caller's epilogue then sees each finished 6 × 64 block while it is in L1.

use super::Epilogue;
use crate::pack::{KR, NR, PackedB};
use std::arch::x86_64::*;

const MR: usize = 6;
const NP: usize = 4;
/// Panels per tile when the whole product has one row.
const NP_GEMV: usize = 8;
/// Groups of 4 k per block: 4 panels × 128 × 64 bytes = 32 KiB of weights, two thirds of L1
/// (48 KiB here), the rest for a tile's activations (3 KiB) and its block of C: K = 1024 runs in
/// two blocks (each block reloads and stores the tile's accumulators).
const KC: usize = 128;

/// `c = (a − za)·(b − zb)` for `m` rows of `a` (`m × k` u8, row-major) into `c` (`m × n`), then
/// `epilogue` on each finished block.
///
/// # Safety
/// The host has AVX-512 F, BW and VNNI (a [`crate::Kernels`] of that path proves it).
pub unsafe fn gemm(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32], epilogue: &mut Epilogue) {
    let (k, n, k4) = (b.k(), b.n(), b.k4());
    assert!(a.len() == m * k && c.len() == m * n && b.col_sums().len() == n && b.zero_points().len() == n);
    let lda = row_stride(k4);
    // A's rows copied once (one memcpy each) to 64-byte aligned rows of `lda` bytes, zero past K.
    let mut buffer = vec![0u8; m * lda + 63];
    let start = buffer.as_ptr().align_offset(64).min(63);
    let rows = &mut buffer[start..][..m * lda];
    let mut rowsums = vec![0i32; m];
    for ((dst, src), sum) in rows.chunks_exact_mut(lda).zip(a.chunks_exact(k)).zip(&mut rowsums) {
        dst[..k].copy_from_slice(src);
        // SAFETY: the caller guarantees AVX-512 F/BW.
        *sum = unsafe { byte_sum(src) };
    }
    let fix = Fix {
        col_sums: b.col_sums().as_ptr(),
        zero_points: b.zero_points().as_ptr(),
        kza: (k as i32).wrapping_mul(i32::from(za)),
        za: i32::from(za),
        rows: b.zero_points().iter().any(|&z| z != 0),
    };
    let (panels, pstride) = (b.panels(), b.panel_stride());
    let (np_max, kc) = if m == 1 { (NP_GEMV, k4) } else { (NP, KC) };
    let tiles = m.div_ceil(MR);
    // Blocks in the order they run: panels p0..p0+np, groups q0..q0+kq.
    let blocks: Vec<(usize, usize, usize, usize)> =
        (0..panels).step_by(np_max).flat_map(|p0| (0..k4).step_by(kc).map(move |q0| (p0, np_max.min(panels - p0), q0, kc.min(k4 - q0)))).collect();
    for (i, &(p0, np, q0, kq)) in blocks.iter().enumerate() {
        let cols = (n - p0 * NR).min(np * NR);
        let last = q0 + kq == k4;
        // The next block's weights are prefetched into L2 while this block runs: its first tile
        // then does not wait on L3 (K = N = 4096: 16 MiB of weights stream through each call).
        let next = blocks.get(i + 1).filter(|_| m > 1);
        for t in 0..tiles {
            let (r0, mr) = (t * MR, MR.min(m - t * MR));
            let pf = match next {
                // Lines ordered group-major (group g of panel p is line g·np1 + p), spread evenly
                // over the tiles, at most one per group of this tile: a few prefetches in flight
                // at a time, not a burst that would hold the fill buffers the tile's loads need.
                Some(&(p1, np1, q1, kq1)) => {
                    let (total, per) = (np1 * kq1, (np1 * kq1).div_ceil(tiles).min(kq));
                    let first = (t * per).min(total);
                    Prefetch { base: b.data()[p1 * pstride + q1 * NR * KR..].as_ptr(), stride: pstride, panels: np1, first, lines: per.min(total - first) }
                }
                _ => Prefetch { base: b.data().as_ptr(), stride: 0, panels: 1, first: 0, lines: 0 },
            };
            // The next tile's block of C, into L1 (it is read back, or written, when that tile ends).
            let (pc, pc_rows) = if t + 1 < tiles { (c[(r0 + MR) * n + p0 * NR..].as_ptr(), MR.min(m - r0 - MR)) } else { (c.as_ptr(), 0) };
            let tile = Tile {
                pc,
                pc_lines: pc_rows * np,
                a: rows[r0 * lda + q0 * KR..].as_ptr(),
                lda,
                b: b.data()[p0 * pstride + q0 * NR * KR..].as_ptr(),
                pstride,
                k4: kq,
                pf,
                c: c[r0 * n + p0 * NR..].as_mut_ptr(),
                ldc: n,
                cols,
                accumulate: q0 > 0,
                fix: last.then_some((p0 * NR, rowsums[r0..].as_ptr())),
            };
            // SAFETY: the caller guarantees the CPU features; the assert above and the block
            // bounds keep every read inside the copied rows r0..r0+mr (groups q0..q0+kq), the
            // packed panels p0..p0+np (groups q0..q0+kq of each), the column sums and zero points
            // (columns p0·16..p0·16+cols) and the tile's row sums, and every prefetch inside the
            // next block (`lines` ≤ its np1·kq1 lines, and ≤ kq) or the next tile's rows of `c`
            // (`pc_rows` rows after r0+mr, `np` panels: (np − 1)·16 < cols); `cols` keeps every
            // read and write of `c` inside rows r0..r0+mr.
            unsafe { dispatch(mr, np, &tile, &fix) };
            if last {
                epilogue(c, r0, mr, p0 * NR, cols);
            }
        }
    }
}

/// Bytes per copied row of A: K rounded up to whole cache lines, plus one line when that is a
/// multiple of 4 KiB (rows exactly 4 KiB apart would share the L1 sets, as in [`crate::pack`]).
fn row_stride(k4: usize) -> usize {
    let bytes = (k4 * KR).next_multiple_of(64);
    if bytes.is_multiple_of(4096) { bytes + 64 } else { bytes }
}

/// `Σ v` as i32, wrapping like every sum here (|Σ| ≤ 2^24·255 < 2^32: the exact sum modulo
/// 2^32): `vpsadbw` against zero adds 8 bytes per u64 lane.
///
/// # Safety
/// AVX-512 F and BW present.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn byte_sum(v: &[u8]) -> i32 {
    let chunks = v.chunks_exact(64);
    let tail: u64 = chunks.remainder().iter().map(|&x| u64::from(x)).sum();
    let mut acc = _mm512_setzero_si512();
    for c in chunks {
        // SAFETY: `c` holds 64 bytes, one zmm (unaligned load).
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(unsafe { _mm512_loadu_si512(c.as_ptr().cast()) }, _mm512_setzero_si512()));
    }
    (_mm512_reduce_add_epi64(acc) as u64 + tail) as u32 as i32
}

/// The zero-point corrections' operands.
struct Fix {
    col_sums: *const i32,
    zero_points: *const i32,
    /// `K·za`, wrapping.
    kza: i32,
    za: i32,
    /// Some column has a nonzero weight zero point (the row-sum term is needed).
    rows: bool,
}

/// Lines `first..first + lines` of `panels` panels at `stride` from `base`, group-major: line `l`
/// is group `l / panels` of panel `l % panels`.
struct Prefetch {
    base: *const i8,
    stride: usize,
    panels: usize,
    first: usize,
    lines: usize,
}

struct Tile {
    /// The tile's first row of A at its first group; rows `lda` bytes apart.
    a: *const u8,
    lda: usize,
    b: *const i8,
    pstride: usize,
    k4: usize,
    /// Lines of the next block's weights to prefetch into L2, one per group.
    pf: Prefetch,
    /// Lines `q < pc_lines` of the next tile's C (row `q / NP`, panel `q % NP`, at `ldc`) are
    /// prefetched into L1.
    pc: *const i32,
    pc_lines: usize,
    c: *mut i32,
    ldc: usize,
    cols: usize,
    /// Add to `c` (a later K block) rather than overwrite it.
    accumulate: bool,
    /// The last K block: the first column and the tile's row sums, for the corrections.
    fix: Option<(usize, *const i32)>,
}

macro_rules! dispatch_tiles {
    ($mr:expr, $np:expr, $t:expr, $f:expr; $($m:literal)*) => {
        match ($mr, $np) {
            $( ($m, 1) => tile::<$m, 1>($t, $f), ($m, 2) => tile::<$m, 2>($t, $f), ($m, 3) => tile::<$m, 3>($t, $f), ($m, 4) => tile::<$m, 4>($t, $f), )*
            _ => unreachable!("tile {}x{} outside 6x4 and 1x8", $mr, $np),
        }
    };
}

/// # Safety
/// As [`tile`].
unsafe fn dispatch(mr: usize, np: usize, t: &Tile, f: &Fix) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match (mr, np) {
            (1, 5) => tile::<1, 5>(t, f),
            (1, 6) => tile::<1, 6>(t, f),
            (1, 7) => tile::<1, 7>(t, f),
            (1, 8) => tile::<1, 8>(t, f),
            _ => dispatch_tiles!(mr, np, t, f; 1 2 3 4 5 6),
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VNNI present; `t.a` readable for `MR` rows of `k4·4` bytes at stride `t.lda`; `t.b` readable for `NP`
/// panels of `k4·64` bytes at stride `pstride`; `t.c` writable for `MR` rows of `t.cols` i32 at
/// stride `ldc` (readable too when `t.accumulate`), `(NP − 1)·16 < t.cols ≤ NP·16`; `t.pf`'s
/// lines and `t.pc`'s `pc_lines` lines inside their buffers, `t.pf.lines ≤ k4`; with
/// `t.fix = Some((c0, rowsums))`, `f.col_sums`/`f.zero_points` readable at `c0..c0 + t.cols`
/// and `rowsums` for `MR` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const MR: usize, const NP: usize>(t: &Tile, f: &Fix) {
    // SAFETY: the function's contract bounds every pointer offset below; unaligned (and, past
    // the last column, masked) loads and stores only.
    unsafe {
        let mask = |p: usize| -> __mmask16 {
            // Lanes past the last column are masked off (the packed zeros there are never stored).
            let cols = t.cols.saturating_sub(p * NR).min(NR);
            if cols == NR { 0xffff } else { (1u16 << cols) - 1 }
        };
        let mut acc = [[_mm512_setzero_si512(); NP]; MR];
        if t.accumulate {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (p, v) in acc.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_epi32(mask(p), t.c.add(r * t.ldc + p * NR));
                }
            }
        }
        for q in 0..t.k4 {
            if q < t.pf.lines {
                let line = t.pf.first + q;
                _mm_prefetch::<_MM_HINT_T1>(t.pf.base.add((line % t.pf.panels) * t.pf.stride + (line / t.pf.panels) * NR * KR));
            }
            if q < t.pc_lines {
                _mm_prefetch::<_MM_HINT_T0>(t.pc.add((q / NP) * t.ldc + (q % NP) * NR).cast());
            }
            let mut bv = [_mm512_setzero_si512(); NP];
            for (p, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_si512(t.b.add(p * t.pstride + q * NR * KR).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(t.a.add(r * t.lda + q * KR).cast::<i32>().read_unaligned());
                for (acc, bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, *bv);
                }
            }
        }
        if let Some((c0, rowsums)) = t.fix {
            for p in 0..NP {
                let m = mask(p);
                let zb = _mm512_maskz_loadu_epi32(m, f.zero_points.add(c0 + p * NR));
                let cs = _mm512_maskz_loadu_epi32(m, f.col_sums.add(c0 + p * NR));
                // K·za·zb − za·colsum, then − zb·rowsum per row: wrapping, as on every path.
                let col = _mm512_sub_epi32(_mm512_mullo_epi32(zb, _mm512_set1_epi32(f.kza)), _mm512_mullo_epi32(cs, _mm512_set1_epi32(f.za)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    acc[p] = _mm512_add_epi32(acc[p], col);
                    if f.rows {
                        acc[p] = _mm512_sub_epi32(acc[p], _mm512_mullo_epi32(zb, _mm512_set1_epi32(*rowsums.add(r))));
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let row = t.c.add(r * t.ldc);
            for (p, v) in acc.iter().enumerate() {
                _mm512_mask_storeu_epi32(row.add(p * NR), mask(p), *v);
            }
        }
    }
}
