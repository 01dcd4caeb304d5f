//! AVX2 tiles of the convolution ([`crate::conv`]: packed panels, [`tile`], and the shifted
//! layout read in place, [`tile_shifted`]), exact: one 64-byte panel row of activations (16
//! output positions × 4 reduction steps) is widened to i16 in four registers
//! (`vpmovzxbw`), each row's four weights of the step to i16 and broadcast, and `vpmaddwd`
//! multiplies them, summing products in pairs into i32: |x·w| ≤ 255·128, so a pair never leaves
//! i32 (`vpmaddubsw` saturates pairs to int16 and is not used). Each i32 lane holds half of one
//! position's sum; the halves are added when the tile is stored. The sums wrap modulo 2^32 like
//! the portable path's, so every order gives the same integers. Rows in pairs: 8 accumulators,
//! 4 activation vectors and the broadcasts fit the 16 ymm registers.

use crate::conv::direct::{MR, NP, PANEL, Tile};
use crate::conv::shifted::Tile as Shifted;
use crate::pack::KR;
use std::arch::x86_64::*;

/// The raw sums of tile `t` (packed panels: step `q` of panel `p` at `p·k4·64 + q·64`) into
/// `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
#[target_feature(enable = "avx2")]
pub unsafe fn tile(t: &Tile, out: &mut [[i32; NP * PANEL]; MR]) {
    assert!(t.mr <= MR && t.np <= NP && t.w.len() >= t.mr * t.k4 * KR && t.x.len() >= t.np * t.k4 * PANEL * KR);
    let pstride = t.k4 * PANEL * KR;
    // SAFETY: the assert bounds every read: rows of `k4·4` weight bytes, panels of `k4·64`
    // activation bytes.
    unsafe { rows(t.w, t.k4 * KR, t.mr, t.np, t.k4, |p| t.x.as_ptr().add(p * pstride), |q| q * PANEL * KR, out) }
}

/// The raw sums of tile `t` (the shifted layout: step `q` of panel `p` at `bases[p] + offsets[q]`)
/// into `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
#[target_feature(enable = "avx2")]
pub unsafe fn tile_shifted(t: &Shifted, out: &mut [[i32; NP * PANEL]; MR]) {
    t.check();
    let offsets = t.offsets.list();
    // SAFETY: `check` bounds every read: rows of `k4·4` weight bytes, 64 bytes at
    // `bases[p] + offset` with every offset at most the span.
    unsafe { rows(t.w, offsets.len() * KR, t.mr, t.np, offsets.len(), |p| t.x.as_ptr().add(t.bases[p]), |q| offsets[q], out) }
}

/// `mr` weight rows of `ldw` bytes × `np` panels of `steps` steps: panel `p`'s step `q` at
/// `panel(p) + step(q)`, rows in pairs.
///
/// # Safety
/// AVX2 present; every such address readable for 64 bytes, `w` for `mr·ldw` bytes.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // the tile's operands, spelled out
unsafe fn rows(
    w: &[i8],
    ldw: usize,
    mr: usize,
    np: usize,
    steps: usize,
    panel: impl Fn(usize) -> *const u8,
    step: impl Fn(usize) -> usize,
    out: &mut [[i32; NP * PANEL]; MR],
) {
    for p in 0..np {
        let mut r = 0;
        while r < mr {
            let n = (mr - r).min(2);
            let w0 = w[r * ldw..].as_ptr();
            // The second row reads the first's weights when there is none (its sums are dropped).
            let w1 = if n == 2 { w[(r + 1) * ldw..].as_ptr() } else { w0 };
            // SAFETY: forwarded from the caller.
            let sums = unsafe { pair(panel(p), steps, &step, [w0, w1]) };
            for (i, sums) in sums.iter().enumerate().take(n) {
                for (lane, o) in out[r + i][p * PANEL..][..PANEL].iter_mut().enumerate() {
                    *o = sums[2 * lane].wrapping_add(sums[2 * lane + 1]);
                }
            }
            r += n;
        }
    }
}

/// Two weight rows against one panel: per row, 32 half sums (position `l`'s halves at `2l`,
/// `2l + 1`).
///
/// # Safety
/// AVX2 present; `x + step(q)` readable for 64 bytes and each row for `steps·4` bytes.
#[target_feature(enable = "avx2")]
unsafe fn pair(x: *const u8, steps: usize, step: &impl Fn(usize) -> usize, w: [*const i8; 2]) -> [[i32; 2 * PANEL]; 2] {
    // SAFETY: forwarded from the caller; unaligned loads and stores only.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 4]; 2];
        for q in 0..steps {
            let at = x.add(step(q));
            let xv: [__m256i; 4] = std::array::from_fn(|k| _mm256_cvtepu8_epi16(_mm_loadu_si128(at.add(16 * k).cast())));
            for (acc, w) in acc.iter_mut().zip(w) {
                // The step's 4 weights as i16, repeated over the register (one per position's 4 activations).
                let four = _mm_cvtepi8_epi16(_mm_cvtsi32_si128(w.add(q * KR).cast::<i32>().read_unaligned()));
                let wv = _mm256_broadcastq_epi64(four);
                for (acc, xv) in acc.iter_mut().zip(&xv) {
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(*xv, wv));
                }
            }
        }
        let mut sums = [[0i32; 2 * PANEL]; 2];
        for (sums, acc) in sums.iter_mut().zip(&acc) {
            for (k, v) in acc.iter().enumerate() {
                _mm256_storeu_si256(sums[8 * k..].as_mut_ptr().cast(), *v);
            }
        }
        sums
    }
}
