//! AVX-512 VNNI: `vpdpbusd` multiplies 4 u8 × i8 pairs per i32 lane and adds them to the lane
//! without saturation (wrapping, like the portable path). One packed row of a panel is one zmm.
//! Tile: up to 6 rows × 4 panels (64 columns): 24 accumulators, 4 weight vectors and one
//! broadcast fit the 32 zmm registers. A single-row product (GEMV) takes 8 panels per tile, so
//! that 8 independent accumulators cover `vpdpbusd`'s latency.
//!
//! A is read in place, row by row (`vpbroadcastd` of 4 bytes of each row of the tile): no copy,
//! unless K is not a multiple of 4 (rows padded with zeros, which add nothing). Rows 4 KiB apart
//! measured no slower: the tile's 6 lines of A share an L1 set, but 12 ways hold them. The
//! tile keeps its accumulators in registers over K blocks of [`KC`] groups (all of K up to 4096):
//! the 4 panels' weights stream from L2, which measured faster than L1-sized blocks whose
//! accumulators go through memory between blocks. Rows come in blocks of [`A_BLOCK`] bytes that
//! stay in L2 while the panels stream past; every tile prefetches its share of the next block of
//! weights into L2, so that only the first comes from memory without warning. The zero-point
//! corrections `+ K·za·zb[n] − za·Σ_k b[k][n] − zb[n]·Σ_k a[m][k]` are applied in registers after
//! the last K block (wrapping i32, the integers `gemm::correct_zero_points` computes on the other
//! paths), the column part computed once per call and the row sums only when some `zb[n]` is
//! nonzero, and the caller's epilogue then sees each finished 6 × 64 block while it is in L1.

use super::{Epilogue, Finished, Fix};
use crate::pack::{KR, NR, PackedB};
use std::arch::x86_64::*;

const MR: usize = 6;
const NP: usize = 4;
/// Panels per tile when the whole product has one row.
const NP_GEMV: usize = 8;
/// Groups of 4 k per block (K up to 4096 in one): 4 panels × 1024 × 64 bytes = 256 KiB of
/// weights, read from L2 by every row tile. Blocks of 128 (32 KiB, in L1) measured slower: each
/// block beyond the first reloads and stores the tile's 24 accumulators (M = 64, K = N = 4096:
/// 86 % of the instruction peak with 128, 92 % with 1024; `examples/gemm_cycles`).
const KC: usize = 1024;
/// Bytes of A per block of rows: with the 256 KiB block of weights and the next one being
/// prefetched, within L2 (2 MiB on the Intel host this was set on; on Zen 4's 1 MiB, blocks of
/// 256 KiB measured the same at M = 256, K = N = 4096).
const A_BLOCK: usize = 512 * 1024;

/// `c = (a − za)·(b − zb)` for `m` rows of `a` (`m × k` u8, row-major) into `c` (`m × n`), then
/// `epilogue` on each finished block.
///
/// # Safety
/// The host has AVX-512 F, BW and VNNI (a [`crate::Kernels`] of that path proves it).
pub unsafe fn gemm(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32], epilogue: &mut Epilogue) {
    let (k, n, k4) = (b.k(), b.n(), b.k4());
    assert!(a.len() == m * k && c.len() == m * n && b.col_sums().len() == n && b.zero_points().len() == n);
    let lda = k4 * KR;
    let a = crate::gemm::padded(a, m, k, lda);
    let rows = b.zero_points().iter().any(|&z| z != 0);
    // SAFETY: the caller guarantees AVX-512 F/BW; padding adds zeros, which change no sum.
    let rowsums: Vec<i32> = if rows { a.chunks_exact(lda).map(|r| unsafe { byte_sum(r) }).collect() } else { Vec::new() };
    let panels = b.panels();
    // Per column, padded to whole panels: `K·za·zb − za·Σ_k b` (wrapping) and `zb`.
    let (colfix, zb) = crate::gemm::column_corrections(za, b);
    let (np_max, kc) = if m == 1 { (NP_GEMV, k4) } else { (NP, KC) };
    // Rows per block: the block's A stays in L2 while every panel group streams past it.
    let mc = (A_BLOCK / lda).max(MR) / MR * MR;
    let mut m0 = 0;
    while m0 < m {
        let mb = mc.min(m - m0);
        let tiles = mb.div_ceil(MR);
        let mut p0 = 0;
        while p0 < panels {
            let np = np_max.min(panels - p0);
            let cols = (n - p0 * NR).min(np * NR);
            let last_cols = cols - (np - 1) * NR;
            let mut q0 = 0;
            while q0 < k4 {
                let kq = kc.min(k4 - q0);
                let last = q0 + kq == k4;
                // The next block of weights: the same panels deeper, the next panels' first
                // block, or the first panels' for the next block of rows.
                let next = if !last {
                    Some((p0, q0 + kq, np, kc.min(k4 - q0 - kq)))
                } else if p0 + np < panels {
                    Some((p0 + np, 0, np_max.min(panels - p0 - np), kc.min(k4)))
                } else if m0 + mb < m {
                    Some((0, 0, np_max.min(panels), kc.min(k4)))
                } else {
                    None
                };
                // Lines of the next block (np2 panels × kq2 rows of 64 bytes), spread over the tiles.
                let (pf_lines, pf_per_tile) = next.map_or((0, 0), |(_, _, np2, kq2)| (np2 * kq2, (np2 * kq2).div_ceil(tiles)));
                for t in 0..tiles {
                    let (r0, mr) = (m0 + t * MR, MR.min(m0 + mb - (m0 + t * MR)));
                    let pf = next.map(|(p2, q2, _, kq2)| Prefetch {
                        base: b.data()[p2 * b.panel_stride() + q2 * NR * KR..].as_ptr(),
                        first: (t * pf_per_tile).min(pf_lines),
                        end: ((t + 1) * pf_per_tile).min(pf_lines),
                        per_panel: kq2,
                    });
                    let tile = Tile {
                        a: a[r0 * lda + q0 * KR..].as_ptr(),
                        lda,
                        b: b.data()[p0 * b.panel_stride() + q0 * NR * KR..].as_ptr(),
                        pstride: b.panel_stride(),
                        k4: kq,
                        c: c[r0 * n + p0 * NR..].as_mut_ptr(),
                        ldc: n,
                        mask: if last_cols == NR { 0xffff } else { (1u16 << last_cols) - 1 },
                        accumulate: q0 > 0,
                        fix: last.then(|| Fix {
                            colfix: colfix[p0 * NR..].as_ptr(),
                            zb: zb[p0 * NR..].as_ptr(),
                            rowsums: if rows { rowsums[r0..].as_ptr() } else { std::ptr::null() },
                        }),
                        pf,
                    };
                    // SAFETY: the caller guarantees the CPU features; the assert above and the
                    // loop bounds keep every read inside the tile's `mr` rows of A (groups
                    // q0..q0+kq of rows of `lda` bytes), the packed panels p0..p0+np (groups
                    // q0..q0+kq of each), the padded column corrections (columns
                    // p0·16..(p0+np)·16) and the tile's row sums; the mask keeps every read and
                    // write of `c` inside rows r0..r0+mr and columns p0·16..p0·16+cols.
                    // Prefetches read nothing.
                    unsafe { dispatch(mr, np, &tile) };
                    if last {
                        epilogue(Finished::of(c, n, r0, mr, p0 * NR, cols));
                    }
                }
                q0 += kq;
            }
            p0 += np;
        }
        m0 += mb;
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

/// Lines of the next block of weights a tile prefetches: lines `first..end` of `np2` panels of
/// `per_panel` lines each, panel after panel.
struct Prefetch {
    base: *const i8,
    first: usize,
    end: usize,
    per_panel: usize,
}

struct Tile {
    /// Row 0 of the tile at its first group; rows `lda` bytes apart.
    a: *const u8,
    lda: usize,
    b: *const i8,
    pstride: usize,
    k4: usize,
    c: *mut i32,
    ldc: usize,
    /// Lanes of the last panel inside the product's columns.
    mask: __mmask16,
    /// Add to `c` (a later K block) rather than overwrite it.
    accumulate: bool,
    /// The last K block: the corrections.
    fix: Option<Fix>,
    pf: Option<Prefetch>,
}

macro_rules! dispatch_tiles {
    ($mr:expr, $np:expr, $t:expr; $($m:literal)*) => {
        match ($mr, $np) {
            $( ($m, 1) => tile::<$m, 1>($t), ($m, 2) => tile::<$m, 2>($t), ($m, 3) => tile::<$m, 3>($t), ($m, 4) => tile::<$m, 4>($t), )*
            _ => unreachable!("tile {}x{} outside 6x4 and 1x8", $mr, $np),
        }
    };
}

/// # Safety
/// As [`tile`].
unsafe fn dispatch(mr: usize, np: usize, t: &Tile) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match (mr, np) {
            (1, 5) => tile::<1, 5>(t),
            (1, 6) => tile::<1, 6>(t),
            (1, 7) => tile::<1, 7>(t),
            (1, 8) => tile::<1, 8>(t),
            _ => dispatch_tiles!(mr, np, t; 1 2 3 4 5 6),
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VNNI present; `t.a` readable for `MR` rows of `k4·4` bytes at stride `lda`;
/// `t.b` readable for `NP` panels of `k4·64` bytes at stride `pstride`; `t.c` writable for `MR`
/// rows at stride `ldc` of `NP` panels of 16 i32, the last one under `t.mask` (readable too when
/// `t.accumulate`); with `t.fix`, `colfix` and `zb` readable for `NP·16` values and `rowsums`
/// (when not null) for `MR`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const MR: usize, const NP: usize>(t: &Tile) {
    // SAFETY: the function's contract bounds every pointer offset below; unaligned (and, in the
    // last panel, masked) loads and stores only; prefetches do not fault.
    unsafe {
        let mask = |p: usize| if p + 1 == NP { t.mask } else { 0xffff };
        let mut acc = [[_mm512_setzero_si512(); NP]; MR];
        if t.accumulate {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (p, v) in acc.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_epi32(mask(p), t.c.add(r * t.ldc + p * NR));
                }
            }
        }
        let rows: [*const u8; MR] = std::array::from_fn(|r| t.a.add(r * t.lda));
        // The prefetches: `left` lines from panel `pf_p`, line `pf_l` (no division in the loop).
        let (mut left, mut pf_p, mut pf_l, pf_base, per_panel) = match &t.pf {
            Some(pf) => (pf.end - pf.first, pf.first / pf.per_panel, pf.first % pf.per_panel, pf.base, pf.per_panel),
            None => (0, 0, 0, std::ptr::null(), 1),
        };
        for q in 0..t.k4 {
            if left > 0 {
                _mm_prefetch::<_MM_HINT_T1>(pf_base.add(pf_p * t.pstride + pf_l * NR * KR));
                left -= 1;
                pf_l += 1;
                if pf_l == per_panel {
                    (pf_p, pf_l) = (pf_p + 1, 0);
                }
            }
            let mut bv = [_mm512_setzero_si512(); NP];
            for (p, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_si512(t.b.add(p * t.pstride + q * NR * KR).cast());
            }
            for (acc, row) in acc.iter_mut().zip(&rows) {
                let av = _mm512_set1_epi32(row.add(q * KR).cast::<i32>().read_unaligned());
                for (acc, bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, *bv);
                }
            }
        }
        if let Some(f) = &t.fix {
            for p in 0..NP {
                let col = _mm512_loadu_si512(f.colfix.add(p * NR).cast());
                let zb = _mm512_loadu_si512(f.zb.add(p * NR).cast());
                for (r, acc) in acc.iter_mut().enumerate() {
                    // + K·za·zb − za·colsum, then − zb·rowsum: wrapping, as on every path.
                    acc[p] = _mm512_add_epi32(acc[p], col);
                    if !f.rowsums.is_null() {
                        acc[p] = _mm512_sub_epi32(acc[p], _mm512_mullo_epi32(zb, _mm512_set1_epi32(*f.rowsums.add(r))));
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
