//! AVX2 tiles of the convolution ([`crate::conv`]: packed panels, [`tile`], and the shifted
//! layout read in place, [`tile_shifted`] and [`tile_split`]), exact: `vpmaddwd` multiplies i16
//! activations by i16 weights, summing products in pairs into i32: |x·w| ≤ 255·128, so a pair
//! never leaves i32; `vpmaddubsw` (u8 × i8, which saturates pairs to int16) only on pair-safe rows
//! (`crate::split::RowSplit`), whose pairs cannot saturate. The sums wrap modulo 2^32 like the
//! portable path's, so every order gives the same integers.
//!
//! Register tile: up to 6 output channels × 8 positions (pair-safe rows on a panel's 16: 5 × 16).
//! i16 rows ([`Wide`]): per reduction step
//! (4 channels), the 8 positions' 32 activation bytes are widened once (two `vpmovzxbw`, each a
//! ymm of 4 positions × 4 channels) and serve every row; each row's 4 weights come from the
//! group's weights widened to i16 once per call (`conv::direct::widen`), so their broadcast is one
//! load (`vpbroadcastq ymm, m64`) with no ALU work. The loop is then 2 widenings, 12 `vpmaddwd`
//! and 12 `vpaddd` per 6 rows — about 2.2 vector uops per `vpmaddwd` where the earlier row-pair
//! tile (activations widened per row pair, weights widened and broadcast per row and step: 3.25)
//! left the multiplier ports idle a third of the time. 12 accumulators, 2 activation vectors and
//! the broadcast fit the 16 ymm registers. Each i32 lane holds half of one position's sum
//! (channels 0–1, 2–3 of the step); `vphaddd` adds the halves once per tile. Pair-safe i8 rows
//! ([`Split`], the shifted layout where the weights allow): the 32 bytes in one register, per row
//! `vpbroadcastd`, `vpmaddubsw`, `vpmaddwd` by ones (a position's whole sum per lane), `vpaddd`,
//! then the row's few excess steps the same way (conv_bench, bell-shaped weights, Zen 3: 3×3
//! 32→32 at 80×80 1263 → 1147 µs, 64→64 at 40×40 1032 → 943 µs). A shifted panel of a line of 8
//! positions or fewer runs its first 8 only (yolov8n at 64×64 has lines of 8, 4 and 2:
//! conv_bench `3x3 s1 64->64 @8` 97.0 → 55.1 µs with the sink's runs merged per line).

use crate::conv::direct::{MR, NP, PANEL, Tile};
use crate::conv::shifted::Tile as Shifted;
use crate::pack::KR;
use crate::split::RowSplit;
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
    let wide = Wide { w: t.w, ldw: t.k4 * KR, steps: t.k4, step: |q| q * PANEL * KR };
    // SAFETY: the assert bounds every read: rows of `k4·4` weights, panels of `k4·64`
    // activation bytes.
    unsafe { rows(&wide, t.mr, t.np, |p| t.x.as_ptr().add(p * pstride), |_| PANEL, out) }
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
    let wide = Wide { w: t.w, ldw: offsets.len() * KR, steps: offsets.len(), step: |q| offsets[q] };
    // SAFETY: `check` bounds every read: rows of `k4·4` weights, 64 bytes at
    // `bases[p] + offset` with every offset at most the span.
    unsafe { rows(&wide, t.mr, t.np, |p| t.x.as_ptr().add(t.bases[p]), |p| t.lens[p], out) }
}

/// The raw sums of tile `t` (the shifted layout) with `vpmaddubsw`: `t.w` holds pair-safe rows
/// (`crate::split::safe_rows`), `split`'s rows from `row0` their excess, added back after each
/// row's sum ([`Split`]). The same integers as [`tile_shifted`] when every pair of `t.w` is
/// pair-safe ([`crate::split::pair_safe`]; otherwise a pair saturates: wrong sums, never an
/// out-of-bounds read).
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
#[target_feature(enable = "avx2")]
pub unsafe fn tile_split(t: &Shifted<i8>, split: &RowSplit, row0: usize, out: &mut [[i32; NP * PANEL]; MR]) {
    t.check();
    let offsets = t.offsets.list();
    let split = Split { w: t.w, ldw: offsets.len() * KR, steps: offsets.len(), step: |q| offsets[q], split, row0 };
    // SAFETY: `check` bounds every read: rows of `k4·4` weights, 64 bytes at `bases[p] +
    // offset` with every offset at most the span; an excess step indexes `offsets` (checked).
    unsafe { rows(&split, t.mr, t.np, |p| t.x.as_ptr().add(t.bases[p]), |p| t.lens[p], out) }
}

/// A register tile of `R` rows × `8·H` positions: `out[r][col..col + 8·H]` gets the sums of the
/// positions whose step `q` is the `32·H` bytes at `x + step(q)` against rows `r0..r0 + R`.
trait Block {
    /// Rows per register tile of a whole panel (`H` = 2: both halves share each row's weight
    /// broadcast), 0 where the block runs halves only.
    const PANEL_ROWS: usize;

    /// # Safety
    /// AVX2 present; `x + step(q)` readable for `32·H` bytes for every step.
    unsafe fn block<const R: usize, const H: usize>(&self, x: *const u8, r0: usize, out: &mut [[i32; NP * PANEL]], col: usize);
}

/// `mr` rows × `np` panels of `block` (panel `p`'s 16 positions from `panel(p)`): a panel whose
/// positions past its first 8 are used in register tiles of [`Block::PANEL_ROWS`] rows × 16
/// positions where the block has them, otherwise in tiles of [`ROWS`] × [`COLS`], a half at or
/// past `used(p)` skipped (its sums are not read: a shifted panel of a line of 8 or fewer
/// positions costs half).
///
/// # Safety
/// AVX2 present; every step of every panel readable for 64 bytes.
#[target_feature(enable = "avx2")]
unsafe fn rows<B: Block>(
    block: &B,
    mr: usize,
    np: usize,
    panel: impl Fn(usize) -> *const u8,
    used: impl Fn(usize) -> usize,
    out: &mut [[i32; NP * PANEL]; MR],
) {
    for p in 0..np {
        if B::PANEL_ROWS > 0 && used(p) > COLS {
            // SAFETY: forwarded from the caller: the 64 bytes of each step.
            unsafe { row_tiles::<B, 2>(block, mr, B::PANEL_ROWS, panel(p), out, p * PANEL) };
            continue;
        }
        for half in 0..used(p).div_ceil(COLS) {
            // SAFETY: forwarded from the caller: the 32 bytes of this half of each 64-byte step.
            unsafe { row_tiles::<B, 1>(block, mr, ROWS, panel(p).add(half * COLS * KR), out, p * PANEL + half * COLS) };
        }
    }
}

/// Rows `0..mr` in register tiles of up to `rows` rows × `8·H` positions from `x`, as even as
/// the count allows (16 rows by 5: 4, 4, 4, 4, not 5, 5, 5, 1, whose last tile loads the
/// activations for one row).
///
/// # Safety
/// AVX2 present; `x + step(q)` readable for `32·H` bytes for every step.
#[target_feature(enable = "avx2")]
unsafe fn row_tiles<B: Block, const H: usize>(block: &B, mr: usize, rows: usize, x: *const u8, out: &mut [[i32; NP * PANEL]; MR], col: usize) {
    let tiles = mr.div_ceil(rows);
    let mut r = 0;
    for t in 0..tiles {
        let n = mr / tiles + usize::from(t < mr % tiles);
        let out = &mut out[r..];
        // SAFETY: forwarded from the caller.
        unsafe {
            match n {
                1 => block.block::<1, H>(x, r, out, col),
                2 => block.block::<2, H>(x, r, out, col),
                3 => block.block::<3, H>(x, r, out, col),
                4 => block.block::<4, H>(x, r, out, col),
                5 => block.block::<5, H>(x, r, out, col),
                _ => block.block::<ROWS, H>(x, r, out, col),
            }
        }
        r += n;
    }
}

/// Rows of i16 weights (`ldw` per row, `steps` steps of 4): per step, the 8 positions' 32
/// activation bytes widened once (two `vpmovzxbw`), each row's 4 weights broadcast by one load,
/// two `vpmaddwd` per row; each i32 lane holds half a position's sum until `vphaddd`.
struct Wide<'a, F> {
    w: &'a [i16],
    ldw: usize,
    steps: usize,
    step: F,
}

impl<F: Fn(usize) -> usize> Block for Wide<'_, F> {
    /// Halves only: two activation vectors per half already share each broadcast (a panel's
    /// 16 positions would need 4, and 12 accumulators for 3 rows: no register left).
    const PANEL_ROWS: usize = 0;

    #[inline(always)]
    unsafe fn block<const R: usize, const H: usize>(&self, x: *const u8, r0: usize, out: &mut [[i32; NP * PANEL]], col: usize) {
        debug_assert_eq!(H, 1);
        // SAFETY: forwarded (AVX2 present, the activations readable).
        unsafe { block_wide::<R, F>(self, x, r0, out, col) }
    }
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block_wide<const R: usize, F: Fn(usize) -> usize>(b: &Wide<F>, x: *const u8, r0: usize, out: &mut [[i32; NP * PANEL]], col: usize) {
    let (ldw, steps) = (b.ldw, b.steps);
    let w = &b.w[r0 * ldw..];
    assert!(w.len() >= (R - 1) * ldw + steps * KR && out.len() >= R && col + COLS <= NP * PANEL);
    let w = w.as_ptr();
    // SAFETY: the assert bounds the weights and the stores, the caller the activations;
    // unaligned loads and stores only.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for q in 0..steps {
            let at = x.add((b.step)(q));
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

/// Pair-safe i8 rows and their excess: per step, the 8 positions' 32 activation bytes in one
/// register against each row's 4 weights (`vpbroadcastd`): `vpmaddubsw` (two pairs of products
/// per position, exact: the pairs are safe), `vpmaddwd` by ones (the position's sum in its i32
/// lane), `vpaddd` — 3 vector operations per row where the i16 rows take 4 and two widenings.
/// Then each of the row's excess steps the same way with its excess word (one weight of a pair
/// nonzero: |a·e| ≤ 255·128, exact).
struct Split<'a, F> {
    w: &'a [i8],
    ldw: usize,
    steps: usize,
    step: F,
    split: &'a RowSplit,
    row0: usize,
}

impl<F: Fn(usize) -> usize> Block for Split<'_, F> {
    /// 10 accumulators, 2 activation vectors, the broadcast, the ones and a product (15 of 16
    /// ymm, as the GEMM's split tile).
    const PANEL_ROWS: usize = 5;

    #[inline(always)]
    unsafe fn block<const R: usize, const H: usize>(&self, x: *const u8, r0: usize, out: &mut [[i32; NP * PANEL]], col: usize) {
        // SAFETY: forwarded (AVX2 present, the activations readable).
        unsafe { block_split::<R, H, F>(self, x, r0, out, col) }
    }
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block_split<const R: usize, const H: usize, F: Fn(usize) -> usize>(b: &Split<F>, x: *const u8, r0: usize, out: &mut [[i32; NP * PANEL]], col: usize) {
    let (ldw, steps) = (b.ldw, b.steps);
    let w = &b.w[r0 * ldw..];
    assert!(w.len() >= (R - 1) * ldw + steps * KR && out.len() >= R && col + H * COLS <= NP * PANEL);
    let w = w.as_ptr();
    // SAFETY: the assert bounds the weights and the stores, the caller the activations (an
    // excess step is one of the steps); unaligned loads and stores only.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let product = |xv: __m256i, wv: __m256i| _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wv), ones);
        let mut acc = [[_mm256_setzero_si256(); H]; R];
        for q in 0..steps {
            let at = x.add((b.step)(q));
            let xv: [__m256i; H] = std::array::from_fn(|h| _mm256_loadu_si256(at.add(h * COLS * KR).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = _mm256_set1_epi32(w.add(r * ldw + q * KR).cast::<i32>().read_unaligned());
                for (acc, &xv) in acc.iter_mut().zip(&xv) {
                    *acc = _mm256_add_epi32(*acc, product(xv, wv));
                }
            }
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            for e in b.split.row(b.row0 + r0 + r) {
                let at = x.add((b.step)(e.q as usize));
                let wv = _mm256_set1_epi32(i32::from_le_bytes(e.word.map(|v| v as u8)));
                for (h, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_epi32(*acc, product(_mm256_loadu_si256(at.add(h * COLS * KR).cast()), wv));
                }
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            for (h, acc) in acc.iter().enumerate() {
                _mm256_storeu_si256(out[col + h * COLS..].as_mut_ptr().cast(), *acc);
            }
        }
    }
}
