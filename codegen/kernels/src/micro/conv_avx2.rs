//! AVX2 tiles of the convolution ([`crate::conv`]: packed panels, [`tile`], and the shifted
//! layout read in place, [`tile_shifted`]), exact: `vpmaddwd` multiplies i16 activations by i16
//! weights, summing products in pairs into i32: |x·w| ≤ 255·128, so a pair never leaves i32
//! (`vpmaddubsw` saturates pairs to int16 and is not used). The sums wrap modulo 2^32 like the
//! portable path's, so every order gives the same integers.
//!
//! Register tile: up to 6 output channels × 8 positions. Per reduction step (4 channels), the 8
//! positions' 32 activation bytes are widened once (two `vpmovzxbw`, each a ymm of 4 positions
//! × 4 channels) and serve every row; each row's 4 weights come from the group's weights widened
//! to i16 once per call (`conv::direct::widen`), so their broadcast is one load
//! (`vpbroadcastq ymm, m64`) with no ALU work. The loop is then 2 widenings, 12 `vpmaddwd` and 12
//! `vpaddd` per 6 rows — about 2.2 vector uops per `vpmaddwd` where the earlier row-pair tile
//! (activations widened per row pair, weights widened and broadcast per row and step: 3.25) left
//! the multiplier ports idle a third of the time. 12 accumulators, 2 activation vectors and the
//! broadcast fit the 16 ymm registers. Each i32 lane holds half of one position's sum (channels
//! 0–1, 2–3 of the step); `vphaddd` adds the halves once per tile. A shifted panel of a line of 8
//! positions or fewer runs its first 8 only (yolov8n at 64×64 has lines of 8, 4 and 2: conv_bench
//! `3x3 s1 64->64 @8` 97.0 → 55.1 µs with the sink's runs merged per line).

use crate::conv::direct::{MR, NP, PANEL, Tile};
use crate::conv::shifted::Tile as Shifted;
use crate::pack::KR;
use std::arch::x86_64::*;

/// Output channels per register tile.
const ROWS: usize = 6;
/// Output positions per register tile (two ymm of four positions × two half sums).
const COLS: usize = 8;

/// The raw sums of tile `t` (packed panels: step `q` of panel `p` at `p·k4·64 + q·64`; the
/// weights widened to i16) into `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
#[target_feature(enable = "avx2")]
pub unsafe fn tile(t: &Tile<i16>, out: &mut [[i32; NP * PANEL]; MR]) {
    assert!(t.mr <= MR && t.np <= NP && t.w.len() >= t.mr * t.k4 * KR && t.x.len() >= t.np * t.k4 * PANEL * KR);
    let pstride = t.k4 * PANEL * KR;
    // SAFETY: the assert bounds every read: rows of `k4·4` weights, panels of `k4·64`
    // activation bytes.
    unsafe { rows(t.w, t.k4 * KR, t.mr, t.np, t.k4, |p| t.x.as_ptr().add(p * pstride), |_| PANEL, |q| q * PANEL * KR, out) }
}

/// The raw sums of tile `t` (the shifted layout: step `q` of panel `p` at `bases[p] + offsets[q]`;
/// the weights widened to i16) into `out[r][p·16 + lane]`.
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
#[target_feature(enable = "avx2")]
pub unsafe fn tile_shifted(t: &Shifted<i16>, out: &mut [[i32; NP * PANEL]; MR]) {
    t.check();
    let offsets = t.offsets.list();
    // SAFETY: `check` bounds every read: rows of `k4·4` weights, 64 bytes at
    // `bases[p] + offset` with every offset at most the span.
    unsafe { rows(t.w, offsets.len() * KR, t.mr, t.np, offsets.len(), |p| t.x.as_ptr().add(t.bases[p]), |p| t.lens[p], |q| offsets[q], out) }
}

/// `mr` weight rows of `ldw` i16 × `np` panels of `steps` steps: panel `p`'s step `q` at
/// `panel(p) + step(q)` (64 bytes: 16 positions × 4 channels), in register tiles of
/// [`ROWS`] × [`COLS`]; a register tile of positions at or past `used(p)` is skipped (its sums
/// are not read: a shifted panel of a line of 8 or fewer positions costs half).
///
/// # Safety
/// AVX2 present; every such address readable for 64 bytes, `w` for `mr·ldw` i16.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // the tile's operands, spelled out
unsafe fn rows(
    w: &[i16],
    ldw: usize,
    mr: usize,
    np: usize,
    steps: usize,
    panel: impl Fn(usize) -> *const u8,
    used: impl Fn(usize) -> usize,
    step: impl Fn(usize) -> usize,
    out: &mut [[i32; NP * PANEL]; MR],
) {
    for p in 0..np {
        for half in 0..used(p).div_ceil(COLS) {
            let col = p * PANEL + half * COLS;
            // SAFETY: forwarded from the caller: the 32 bytes of this half of each 64-byte step.
            let x = unsafe { panel(p).add(half * COLS * KR) };
            let mut r = 0;
            while r < mr {
                let n = (mr - r).min(ROWS);
                let w = &w[r * ldw..];
                let out = &mut out[r..];
                // SAFETY: forwarded from the caller (`n` rows of `w` remain).
                unsafe {
                    match n {
                        1 => block::<1>(x, steps, &step, w, ldw, out, col),
                        2 => block::<2>(x, steps, &step, w, ldw, out, col),
                        3 => block::<3>(x, steps, &step, w, ldw, out, col),
                        4 => block::<4>(x, steps, &step, w, ldw, out, col),
                        5 => block::<5>(x, steps, &step, w, ldw, out, col),
                        _ => block::<ROWS>(x, steps, &step, w, ldw, out, col),
                    }
                }
                r += n;
            }
        }
    }
}

/// `R` rows × 8 positions: `out[r][col..col + 8]` gets the sums of the 8 positions whose step
/// `q` is the 32 bytes at `x + step(q)` against row `r`'s weights `w[r·ldw + 4q..][..4]`.
///
/// # Safety
/// AVX2 present; `x + step(q)` readable for 32 bytes, `w` for `R·ldw` i16 with `4·steps ≤ ldw`.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)] // the tile's operands, spelled out
#[inline]
unsafe fn block<const R: usize>(x: *const u8, steps: usize, step: &impl Fn(usize) -> usize, w: &[i16], ldw: usize, out: &mut [[i32; NP * PANEL]], col: usize) {
    assert!(w.len() >= (R - 1) * ldw + steps * KR && out.len() >= R && col + COLS <= NP * PANEL);
    let w = w.as_ptr();
    // SAFETY: the assert bounds the weights and the stores, the caller the activations;
    // unaligned loads and stores only.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for q in 0..steps {
            let at = x.add(step(q));
            let xv = [_mm256_cvtepu8_epi16(_mm_loadu_si128(at.cast())), _mm256_cvtepu8_epi16(_mm_loadu_si128(at.add(16).cast()))];
            for (r, acc) in acc.iter_mut().enumerate() {
                // The step's 4 weights, repeated over the register: one load.
                let wv = _mm256_set1_epi64x(w.add(r * ldw + q * KR).cast::<i64>().read_unaligned());
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(xv[0], wv));
                acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(xv[1], wv));
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            // Halves added: [p0 p1 p4 p5 | p2 p3 p6 p7], then the 64-bit pairs in order.
            let sums = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(acc[0], acc[1]));
            _mm256_storeu_si256(out[col..].as_mut_ptr().cast(), sums);
        }
    }
}
