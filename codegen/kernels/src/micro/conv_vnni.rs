//! AVX-512 VNNI tile of the direct convolution ([`crate::conv`]): output channels as rows (their
//! four weights of a K group broadcast), 16 output positions per zmm (one packed row of an
//! activation panel). `vpdpbusd` takes the u8 activations as its unsigned operand and the i8
//! weights as its signed one: exact products, i32 sums wrapping like the portable path.
//! Up to 8 rows × 3 panels: 24 accumulators, 3 activation vectors and one broadcast. Two
//! forms: packed panels ([`tile`]) and panels read in place from the shifted layout ([`tile_shifted`]).

use crate::conv::direct::{MR, NP, PANEL, Tile};
use crate::conv::shifted::Tile as Shifted;
use crate::pack::KR;
use std::arch::x86_64::*;

/// The raw sums of tile `t` into `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX-512 F, BW and VNNI (a [`crate::Kernels`] of that path proves it).
pub unsafe fn tile(t: &Tile, out: &mut [[i32; NP * PANEL]; MR]) {
    assert!(t.mr <= MR && t.np <= NP && t.w.len() >= t.mr * t.k4 * KR && t.x.len() >= t.np * t.k4 * PANEL * KR);
    macro_rules! rows {
        ($($m:literal)*) => {
            match (t.mr, t.np) {
                $( ($m, 1) => tile_n::<$m, 1>(t, out), ($m, 2) => tile_n::<$m, 2>(t, out), ($m, 3) => tile_n::<$m, 3>(t, out), )*
                _ => unreachable!("tile {}x{} outside 8x3", t.mr, t.np),
            }
        };
    }
    // SAFETY: the caller guarantees the CPU features; the assert bounds every read (rows of
    // `k4·4` weight bytes, panels of `k4·64` activation bytes) and `out` is a whole tile.
    unsafe { rows!(1 2 3 4 5 6 7 8) }
}

/// # Safety
/// As [`tile`], with `M ≤ t.mr` rows and `P ≤ t.np` panels readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_n<const M: usize, const P: usize>(t: &Tile, out: &mut [[i32; NP * PANEL]; MR]) {
    let (ldw, pstride) = (t.k4 * KR, t.k4 * PANEL * KR);
    let (w, x) = (t.w.as_ptr(), t.x.as_ptr());
    // SAFETY: offsets stay below `M·ldw` in `w` and `P·pstride` in `x` (the caller's bounds);
    // unaligned loads and stores only.
    unsafe {
        let mut acc = [[_mm512_setzero_si512(); P]; M];
        for q in 0..t.k4 {
            let mut xv = [_mm512_setzero_si512(); P];
            for (p, xv) in xv.iter_mut().enumerate() {
                *xv = _mm512_loadu_si512(x.add(p * pstride + q * PANEL * KR).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_epi32(w.add(r * ldw + q * KR).cast::<i32>().read_unaligned());
                for (acc, xv) in acc.iter_mut().zip(&xv) {
                    *acc = _mm512_dpbusd_epi32(*acc, *xv, wv);
                }
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            for (p, v) in acc.iter().enumerate() {
                _mm512_storeu_si512(out[p * PANEL..].as_mut_ptr().cast(), *v);
            }
        }
    }
}

/// The raw sums of a tile of the shifted layout ([`crate::conv::shifted`]) into `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX-512 F, BW and VNNI (a [`crate::Kernels`] of that path proves it).
pub unsafe fn tile_shifted(t: &Shifted, out: &mut [[i32; NP * PANEL]; MR]) {
    t.check();
    macro_rules! rows {
        ($($m:literal)*) => {
            match (t.mr, t.np) {
                $( ($m, 1) => shifted_n::<$m, 1>(t, out), ($m, 2) => shifted_n::<$m, 2>(t, out), ($m, 3) => shifted_n::<$m, 3>(t, out), )*
                _ => unreachable!("tile {}x{} outside 8x3", t.mr, t.np),
            }
        };
    }
    // SAFETY: the caller guarantees the CPU features; `check` bounds every read (rows of
    // `k4·4` weight bytes, 64 bytes at `bases[p] + offset` with every offset at most the span).
    unsafe { rows!(1 2 3 4 5 6 7 8) }
}

/// # Safety
/// As [`tile_shifted`], with `M ≤ t.mr` rows and `P ≤ t.np` panels readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn shifted_n<const M: usize, const P: usize>(t: &Shifted, out: &mut [[i32; NP * PANEL]; MR]) {
    let offsets = t.offsets.list();
    let ldw = offsets.len() * KR;
    let (w, x) = (t.w.as_ptr(), t.x.as_ptr());
    // SAFETY: offsets stay below `M·ldw` in `w` and `bases[p] + span + 64` in `x` (checked);
    // unaligned loads and stores only.
    unsafe {
        let xb: [*const u8; P] = std::array::from_fn(|p| x.add(t.bases[p]));
        let mut acc = [[_mm512_setzero_si512(); P]; M];
        for (q, &off) in offsets.iter().enumerate() {
            let mut xv = [_mm512_setzero_si512(); P];
            for (xv, xb) in xv.iter_mut().zip(&xb) {
                *xv = _mm512_loadu_si512(xb.add(off).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_epi32(w.add(r * ldw + q * KR).cast::<i32>().read_unaligned());
                for (acc, xv) in acc.iter_mut().zip(&xv) {
                    *acc = _mm512_dpbusd_epi32(*acc, *xv, wv);
                }
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            for (p, v) in acc.iter().enumerate() {
                _mm512_storeu_si512(out[p * PANEL..].as_mut_ptr().cast(), *v);
            }
        }
    }
}
