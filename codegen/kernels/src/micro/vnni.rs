//! AVX-512 VNNI: `vpdpbusd` multiplies 4 u8 × i8 pairs per i32 lane and adds them to the lane
//! without saturation (wrapping, like the portable path). One packed row of a panel is one zmm.
//! Tile: up to 6 rows × 4 panels (64 columns): 24 accumulators, 4 weight vectors and one
//! broadcast fit the 32 zmm registers. A single-row product (GEMV) takes 8 panels per tile, so
//! that 8 independent accumulators cover `vpdpbusd`'s latency.

use crate::pack::{KR, NR, PackedB};
use std::arch::x86_64::*;

const MR: usize = 6;
const NP: usize = 4;
/// Panels per tile when the whole product has one row.
const NP_GEMV: usize = 8;
/// Groups of 4 k per block: 4 panels × 128 × 64 bytes = 32 KiB of weights, inside L1.
const KC: usize = 128;

/// Raw sums of rows `a` (`m` rows of `lda ≥ k4·4` bytes, zero-padded) into `c` (`m × n`).
///
/// # Safety
/// The host has AVX-512 F, BW and VNNI (a [`crate::Kernels`] of that path proves it).
pub unsafe fn raw(a: &[u8], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
    let (n, k4) = (b.n(), b.k4());
    assert!(a.len() >= (m.max(1) - 1) * lda + k4 * KR && c.len() >= m * n && lda >= k4 * KR);
    let panels = b.panels();
    let np_max = if m == 1 { NP_GEMV } else { NP };
    let mut p0 = 0;
    while p0 < panels {
        let np = np_max.min(panels - p0);
        // K in blocks of KC groups, so that the panels' block stays in L1 across all row tiles.
        let mut q0 = 0;
        while q0 < k4 {
            let kq = KC.min(k4 - q0);
            let mut r0 = 0;
            while r0 < m {
                let mr = MR.min(m - r0);
                let t = Tile {
                    a: a[r0 * lda + q0 * KR..].as_ptr(),
                    lda,
                    b: b.data()[p0 * b.panel_stride() + q0 * NR * KR..].as_ptr(),
                    pstride: b.panel_stride(),
                    k4: kq,
                    c: c[r0 * n + p0 * NR..].as_mut_ptr(),
                    ldc: n,
                    cols: (n - p0 * NR).min(np * NR),
                    accumulate: q0 > 0,
                };
                // SAFETY: the caller guarantees the CPU features; the asserts above and the loop
                // bounds keep every read inside `a` (rows r0..r0+mr, bytes q0·4..(q0+kq)·4 of
                // each) and the packed panels p0..p0+np (groups q0..q0+kq of each), and `t.cols`
                // keeps every read and write of `c` inside rows r0..r0+mr.
                unsafe { dispatch(mr, np, &t) };
                r0 += mr;
            }
            q0 += kq;
        }
        p0 += np;
    }
}

struct Tile {
    a: *const u8,
    lda: usize,
    b: *const i8,
    pstride: usize,
    k4: usize,
    c: *mut i32,
    ldc: usize,
    cols: usize,
    /// Add to `c` (a later K block) rather than overwrite it.
    accumulate: bool,
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
/// rows of `t.cols` i32 at stride `ldc` (readable too when `t.accumulate`), `(NP − 1)·16 < t.cols ≤ NP·16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const MR: usize, const NP: usize>(t: &Tile) {
    // SAFETY: the function's contract bounds every pointer offset below; unaligned loads and
    // stores only.
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
                let av = _mm512_set1_epi32(t.a.add(r * t.lda + q * KR).cast::<i32>().read_unaligned());
                for (acc, bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, *bv);
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
