//! AVX-512 VNNI: `vpdpbusd` multiplies 4 u8 × i8 pairs per i32 lane and adds them to the lane
//! without saturation (wrapping, like the portable path). One packed row of a panel is one zmm.
//! Tile: up to 6 rows × 4 panels (64 columns): 24 accumulators, 4 weight vectors and one
//! broadcast fit the 32 zmm registers. A single-row product (GEMV) takes 8 panels per tile, so
//! that 8 independent accumulators cover `vpdpbusd`'s latency.
//!
//! A is packed once per call, per tile of 6 rows, `[tile][k4][row][4]`: the broadcasts of a tile
//! read one contiguous stream (and the row sums for the zero-point corrections come from the same
//! pass). K runs in blocks of [`KC`] groups, so that the 4 panels' block of weights (32 KiB) stays
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
    let tiles = m.div_ceil(MR);
    // Packed A: tile t at t·MR·k4·4, `[k4][rows of the tile][4]`, zero past K.
    let mut packed = vec![0u8; tiles * MR * k4 * KR];
    let mut rowsums = vec![0i32; tiles * MR];
    for (t, (dst, sums)) in packed.chunks_exact_mut(MR * k4 * KR).zip(rowsums.chunks_exact_mut(MR)).enumerate() {
        let rows = MR.min(m - t * MR);
        for (r, sum) in sums.iter_mut().enumerate().take(rows) {
            let src = &a[(t * MR + r) * k..][..k];
            // SAFETY: the caller guarantees AVX-512 F/BW.
            *sum = unsafe { byte_sum(src) };
            // Whole groups as 4-byte moves (a constant length: no memcpy call per group), then the tail.
            let full = src.chunks_exact(KR);
            let (tail, q_tail) = (full.remainder(), k / KR);
            for (q, group) in full.enumerate() {
                dst[(q * rows + r) * KR..][..KR].copy_from_slice(group);
            }
            if !tail.is_empty() {
                dst[(q_tail * rows + r) * KR..][..tail.len()].copy_from_slice(tail);
            }
        }
    }
    let fix = Fix {
        col_sums: b.col_sums().as_ptr(),
        zero_points: b.zero_points().as_ptr(),
        kza: (k as i32).wrapping_mul(i32::from(za)),
        za: i32::from(za),
        rows: b.zero_points().iter().any(|&z| z != 0),
    };
    let panels = b.panels();
    let (np_max, kc) = if m == 1 { (NP_GEMV, k4) } else { (NP, KC) };
    let mut p0 = 0;
    while p0 < panels {
        let np = np_max.min(panels - p0);
        let cols = (n - p0 * NR).min(np * NR);
        let mut q0 = 0;
        while q0 < k4 {
            let kq = kc.min(k4 - q0);
            let last = q0 + kq == k4;
            for t in 0..tiles {
                let (r0, mr) = (t * MR, MR.min(m - t * MR));
                let tile = Tile {
                    a: packed[t * MR * k4 * KR + q0 * mr * KR..].as_ptr(),
                    b: b.data()[p0 * b.panel_stride() + q0 * NR * KR..].as_ptr(),
                    pstride: b.panel_stride(),
                    k4: kq,
                    c: c[r0 * n + p0 * NR..].as_mut_ptr(),
                    ldc: n,
                    cols,
                    accumulate: q0 > 0,
                    fix: last.then_some((p0 * NR, rowsums[r0..].as_ptr())),
                };
                // SAFETY: the caller guarantees the CPU features; the assert above and the loop
                // bounds keep every read inside the packed tile (groups q0..q0+kq of `mr` rows),
                // the packed panels p0..p0+np (groups q0..q0+kq of each), the column sums and zero
                // points (columns p0·16..p0·16+cols) and the tile's row sums; `cols` keeps every
                // read and write of `c` inside rows r0..r0+mr.
                unsafe { dispatch(mr, np, &tile, &fix) };
                if last {
                    epilogue(c, r0, mr, p0 * NR, cols);
                }
            }
            q0 += kq;
        }
        p0 += np;
    }
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

struct Tile {
    /// The tile's packed A at its first group: `[k4][mr][4]`.
    a: *const u8,
    b: *const i8,
    pstride: usize,
    k4: usize,
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
/// AVX-512 F/BW/VNNI present; `t.a` readable for `k4·MR·4` bytes; `t.b` readable for `NP`
/// panels of `k4·64` bytes at stride `pstride`; `t.c` writable for `MR` rows of `t.cols` i32 at
/// stride `ldc` (readable too when `t.accumulate`), `(NP − 1)·16 < t.cols ≤ NP·16`; with
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
            let mut bv = [_mm512_setzero_si512(); NP];
            for (p, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_si512(t.b.add(p * t.pstride + q * NR * KR).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(t.a.add((q * MR + r) * KR).cast::<i32>().read_unaligned());
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
