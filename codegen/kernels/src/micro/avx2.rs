//! AVX2, exact: A is widened to i16 once per call (`vpmovzxbw`) and `vpmaddwd` multiplies i16
//! activations by i16 weights, summing products in pairs into i32: |a·b| ≤ 255·128, so a pair
//! never leaves i32. (`vpmaddubsw`, MLAS's and oneDNN's AVX2 u8×s8 instruction, saturates pairs
//! to int16: from [`WIDE_ROWS`] rows, weights whose pairs mostly fit it are split and run by
//! [`super::avx2_split`] instead; the rest come here.)
//!
//! From [`WIDE_ROWS`] rows on ([`wide`]): per panel of 16 columns, per call, the weights are widened once
//! (`vpmovsxbw`) into a scratch block in pair order — vector `2p + h` holds columns `8h..8h + 8`
//! × k `2p, 2p + 1` — so that the 6 × 16 tile's inner loop is 2 aligned loads, 6 `vpbroadcastd`
//! of an activation pair, 12 `vpmaddwd` and 12 `vpaddd`: no widening or shuffle beside the
//! multiply-adds (Zen 3 runs `vpmaddwd` on two of its four FP pipes), each accumulator 8 whole
//! column sums (no half sums to add at the end), 12 accumulators + 2 weight vectors + 1
//! broadcast = 15 of 16 ymm. The tile with the weights widened in registers (6 rows × 8 columns
//! over the packed `[k/4][16][4]` slices, half sums) spent 2 `vpmovsxbw` per 12 multiply-adds
//! and reached about 75 % of the instruction peak on an L1-resident problem. The widening costs
//! one pass over the panel per call, shared by all rows. K runs whole
//! (up to [`KC_PAIRS`] pairs) with the accumulators in registers, then the tile is stored: the
//! panel's widened block (128 KiB at K = 4096) stays in L2 while the row tiles pass, and the
//! next panel's weights are prefetched into L2 meanwhile, spread over the tiles. Measured on
//! this host (`examples/gemm_cycles`, fastest calls under load): 64 × 1024 × 1024 and
//! 256 × 4096 × 4096 from about 120 and 43 GOPS to 133 and 68; L1-sized K blocks (`c` re-read
//! per block, 1, 2 or 4 panels per pass over A) measured no faster at K = N = 4096.
//! [`wide_gemm`] adds the zero-point corrections in the tile's registers after the last K block
//! (as the VNNI path does) and hands every 4 finished panels of all rows to the caller's
//! epilogue (the requantization) while they are in L1 or L2: no separate pass over `c` for
//! either. Per 6 × 16 tile the epilogue's calls cost more than they saved (MiniLM on a Zen 3
//! host: 8 % slower than the separate passes; per 4 panels 2–3 % faster).
//!
//! Fewer rows ([`narrow`]): the weights are widened in registers (each 16-byte slice of a packed
//! row, 4 columns × 4 k, by `vpmovsxbw`) and multiplied with a broadcast of 4 activations
//! (`vpbroadcastq`): each i32 lane holds half of one column's sum, the halves added when the tile
//! is stored. Tiles of 6 rows × 8 columns (12 accumulators, 2 weight vectors, 1 broadcast), or
//! for one or two rows 16 columns, so that GEMV keeps 8 independent accumulators per row; K in
//! blocks of [`KC`] groups (added into `c` after the first), the next panel's block prefetched
//! into L2 by the tiles. One-row products stream the weights once: widening them into memory
//! would double the bytes that bandwidth-bound product reads.

use super::{Corrections, Epilogue, Finished, Fix};
use crate::pack::{KR, NR, PackedB};
use std::arch::x86_64::*;

/// Groups of 4 k per block of the narrow path: a 6-row tile's activations (6 × 1 KiB × 2) and 16
/// columns' weights (16 KiB) stay in L1 while the tile runs; the activations of all rows stay in
/// L2 across the columns.
const KC: usize = 128;

/// Rows from which the weights are widened into memory ([`wide`]): below, the pass over each
/// panel costs more than the widening in registers saves (3 × 1024 × 1024: 106 → 52 GOPS, 12 rows
/// 98 → 83, 24 rows about even, 48 rows 101 → 116, fastest calls under load).
pub const WIDE_ROWS: usize = 32;
/// Panels per call of the wide path's epilogue (all rows × 64 columns, 16 KiB of `c` at 64 rows,
/// mostly in L1): per tile (6 × 16), the calls' own work cost more than the pass they save.
const EPILOGUE_PANELS: usize = 4;
/// Rows per tile of the wide path.
const MR: usize = 6;
/// Pairs of k per block of the wide path (even): K up to 4096 in one block, whose widened panel
/// (128 KiB) stays in L2 while the row tiles pass. Blocks of 128 or 256 pairs (in L1, `c`
/// re-read per block, two or four panels per pass over A) measured no faster (see the header).
const KC_PAIRS: usize = 2048;

/// Raw sums of rows `a` (`m` rows of `lda ≥ k4·4` i16, zero-padded) into `c` (`m × n`).
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
pub unsafe fn raw(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
    let k4 = b.k4();
    assert!(a.len() >= (m.max(1) - 1) * lda + k4 * KR && c.len() >= m * b.n() && lda >= k4 * KR);
    // SAFETY: forwarded from the caller (AVX2); the assert above bounds the operands.
    unsafe { if m >= WIDE_ROWS { wide(a, lda, m, b, c, None) } else { narrow(a, lda, m, b, c) } }
}

/// `c = (a − za)·(b − zb)` for [`WIDE_ROWS`] rows or more (the raw sums of [`raw`] with
/// `fix`'s corrections added in the tile's registers after its last K block, wrapping: the same
/// integers modulo 2^32), then `epilogue` on each finished block of all rows × 64 columns.
///
/// # Safety
/// As [`raw`]; `fix.colfix` and `fix.zb` hold `b.panels()·16` columns, `fix.rowsums` (if
/// given) `m` rows.
pub unsafe fn wide_gemm(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32], fix: &Corrections, epilogue: &mut Epilogue) {
    let k4 = b.k4();
    assert!(m >= WIDE_ROWS && a.len() >= (m - 1) * lda + k4 * KR && c.len() >= m * b.n() && lda >= k4 * KR);
    assert!(fix.colfix.len() >= b.panels() * NR && fix.zb.len() >= b.panels() * NR && fix.rowsums.is_none_or(|r| r.len() >= m));
    // SAFETY: forwarded from the caller (AVX2); the asserts above bound the operands.
    unsafe { wide(a, lda, m, b, c, Some((fix, epilogue))) }
}

/// Fewer than [`WIDE_ROWS`] rows: the weights widened in registers.
///
/// # Safety
/// As [`raw`].
unsafe fn narrow(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
    let (n, k4) = (b.n(), b.k4());
    assert!(a.len() >= (m.max(1) - 1) * lda + k4 * KR && c.len() >= m * n && lda >= k4 * KR);
    // Chunks of 4 columns per tile: 2 (8 columns, 6 rows) or, for GEMV-like calls, 4.
    let chunks = if m <= 2 { 4 } else { 2 };
    let mr_max = if m <= 2 { 2 } else { 6 };
    let width = chunks * 4;
    let mut q0 = 0;
    while q0 < k4 {
        let kq = KC.min(k4 - q0);
        let mut c0 = 0;
        while c0 < n {
            // SAFETY: forwarded from the caller (AVX2); the asserts above bound the block.
            unsafe { raw_block(a, lda, m, b, c, (q0, kq), c0, (chunks, mr_max)) };
            c0 += width;
        }
        q0 += kq;
    }
}

/// [`WIDE_ROWS`] rows or more. Panel by panel: the panel's weights are widened once into `scratch` in
/// pair order (each vector 8 columns × one pair of k), then every row tile runs over all of K
/// (blocks of [`KC_PAIRS`] beyond that, added into `c`), its accumulators in registers; with
/// `finish`, the tile adds the corrections after the last block and the epilogue sees it.
///
/// # Safety
/// As [`raw`] and [`wide_gemm`], whose asserts bound the operands.
#[target_feature(enable = "avx2")]
unsafe fn wide(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32], mut finish: Option<(&Corrections, &mut Epilogue)>) {
    let (n, k4, panels) = (b.n(), b.k4(), b.panels());
    let pairs = 2 * k4;
    let mut scratch = vec![_mm256_setzero_si256(); 2 * KC_PAIRS.min(pairs)];
    // Groups `p0/2..(p0 + kp)/2` of a panel: `kp/2` lines of 64 bytes.
    let block = |panel: usize, p0: usize, kp: usize| &b.data()[panel * b.panel_stride() + p0 / 2 * NR * KR..][..kp / 2 * NR * KR];
    for panel in 0..panels {
        let c0 = panel * NR;
        let mut p0 = 0;
        while p0 < pairs {
            // Even: whole groups of 4 k.
            let kp = KC_PAIRS.min(pairs - p0);
            // SAFETY: AVX2 (the caller); the block is `kp/2` groups, `scratch` holds `2·kp` vectors.
            unsafe { widen(block(panel, p0, kp).as_ptr(), kp / 2, scratch.as_mut_ptr()) };
            // The next block (one block deeper, or the next panel's first) is prefetched into L2
            // while the row tiles run, a few lines before each, so that its widening does not
            // wait on L3 or memory and no burst holds the fill buffers the tiles' loads need.
            let next = if p0 + kp < pairs {
                block(panel, p0 + kp, KC_PAIRS.min(pairs - p0 - kp))
            } else if panel + 1 < panels {
                block(panel + 1, 0, KC_PAIRS.min(pairs))
            } else {
                &[]
            };
            let per = (next.len() / (NR * KR)).div_ceil(m.div_ceil(MR)) * NR * KR;
            let mut r0 = 0;
            while r0 < m {
                for line in next.iter().skip(r0 / MR * per).take(per).step_by(NR * KR) {
                    _mm_prefetch::<_MM_HINT_T1>(std::ptr::from_ref(line));
                }
                let mr = MR.min(m - r0);
                let last = p0 + kp == pairs;
                let fix = finish.as_ref().filter(|_| last).map(|(fix, _)| Fix {
                    colfix: fix.colfix[c0..].as_ptr(),
                    zb: fix.zb[c0..].as_ptr(),
                    rowsums: fix.rowsums.map_or(std::ptr::null(), |r| r[r0..].as_ptr()),
                });
                let t = Wide {
                    a: a[r0 * lda + 2 * p0..].as_ptr(),
                    lda,
                    b: scratch.as_ptr(),
                    pairs: kp,
                    c: c[r0 * n + c0..].as_mut_ptr(),
                    ldc: n,
                    cols: (n - c0).min(NR),
                    accumulate: p0 > 0,
                    fix,
                };
                // SAFETY: AVX2 is guaranteed by the caller; rows r0..r0+mr of `a` hold pairs
                // p0..p0+kp (lda ≥ k4·4 = 2·pairs i16), `scratch` holds the block's pairs,
                // `t.cols` keeps reads and writes inside rows r0..r0+mr of `c`, columns
                // c0..c0+cols, and the corrections hold the panel's 16 columns and rows r0..r0+mr.
                unsafe {
                    match mr {
                        1 => wide_tile::<1>(&t),
                        2 => wide_tile::<2>(&t),
                        3 => wide_tile::<3>(&t),
                        4 => wide_tile::<4>(&t),
                        5 => wide_tile::<5>(&t),
                        _ => wide_tile::<MR>(&t),
                    }
                }
                r0 += mr;
            }
            p0 += kp;
        }
        // Every [`EPILOGUE_PANELS`] panels (and after the last), the finished columns of all rows.
        if let Some((_, epilogue)) = finish.as_mut().filter(|_| (panel + 1) % EPILOGUE_PANELS == 0 || panel + 1 == panels) {
            let first = panel / EPILOGUE_PANELS * EPILOGUE_PANELS * NR;
            epilogue(Finished::of(c, n, 0, m, first, (c0 + NR).min(n) - first));
        }
    }
}

/// One panel's `k4` groups (`[k4][16 columns][4 k]` i8 at `src`) into `2·k4` pairs of i16
/// vectors at `dst`: pair `p` (k = 2p, 2p + 1) is vectors `2p` (columns 0–7) and `2p + 1`
/// (columns 8–15), each lane one column's two weights.
///
/// # Safety
/// AVX2 present; `src` readable for `k4·64` bytes, `dst` writable for `4·k4` vectors.
#[target_feature(enable = "avx2")]
unsafe fn widen(src: *const i8, k4: usize, dst: *mut __m256i) {
    // Per 128-bit lane (4 columns × 4 k): the columns' first pairs to the low 8 bytes, their
    // second pairs to the high 8.
    let split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    for q in 0..k4 {
        for half in 0..2 {
            // SAFETY: within the function's contract (q < k4, half < 2).
            unsafe {
                let v = _mm256_loadu_si256(src.add(q * NR * KR + 32 * half).cast());
                // Lanes [first pairs of columns 0–3 | second pairs of 0–3 || same for 4–7] to
                // [first pairs of 0–7 | second pairs of 0–7].
                let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(v, split));
                dst.add(4 * q + half).write_unaligned(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)));
                dst.add(4 * q + 2 + half).write_unaligned(_mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)));
            }
        }
    }
}

struct Wide {
    a: *const i16,
    lda: usize,
    b: *const __m256i,
    pairs: usize,
    c: *mut i32,
    ldc: usize,
    cols: usize,
    /// Add to `c` (a later K block) rather than overwrite it.
    accumulate: bool,
    /// The zero-point corrections, added after the last K block.
    fix: Option<Fix>,
}

/// `MR` rows × 16 columns over all pairs: each accumulator holds 8 whole column sums.
///
/// # Safety
/// AVX2 present; `t.a` readable for `MR` rows of `2·pairs` i16 at stride `lda`; `t.b` readable
/// for `2·pairs` vectors; `t.c` writable for `MR` rows of `t.cols ≤ 16` i32 at stride `ldc`.
#[target_feature(enable = "avx2")]
unsafe fn wide_tile<const MR: usize>(t: &Wide) {
    // SAFETY: the function's contract bounds every pointer offset below.
    unsafe {
        if t.accumulate {
            // The tile's line of each row of `c`, read back at the end: in flight meanwhile.
            for r in 0..MR {
                _mm_prefetch::<_MM_HINT_T0>(t.c.add(r * t.ldc).cast());
            }
        }
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        for p in 0..t.pairs {
            let b0 = *t.b.add(2 * p);
            let b1 = *t.b.add(2 * p + 1);
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(t.a.add(r * t.lda + 2 * p).cast::<i32>().read_unaligned());
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(av, b0));
                acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(av, b1));
            }
        }
        store_tile(&acc, t.fix.as_ref(), t.c, t.ldc, t.cols, t.accumulate);
    }
}

/// The first `n` (≤ 8) i32 lanes of a ymm set, for masked loads and stores of a partial row.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn lanes_below(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// A 16-column tile's accumulators (`acc[r]`: columns 0–7 and 8–15 of row `r`) with the
/// corrections `fix` added (after the last K block) into rows of `c` (`cols ≤ 16` of them, added to
/// what is there with `accumulate`).
///
/// # Safety
/// AVX2 present; `c` writable (and readable with `accumulate`) for `MR` rows of `cols` i32 at
/// stride `ldc`; `fix`'s pointers readable for 16 columns and `MR` rows.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn store_tile<const MR: usize>(acc: &[[__m256i; 2]; MR], fix: Option<&Fix>, c: *mut i32, ldc: usize, cols: usize, accumulate: bool) {
    let mut acc = *acc;
    // SAFETY: the function's contract bounds every pointer offset below.
    unsafe {
        if let Some(fix) = fix {
            let colfix = [0, 1].map(|j| _mm256_loadu_si256(fix.colfix.add(8 * j).cast()));
            let zb = [0, 1].map(|j| _mm256_loadu_si256(fix.zb.add(8 * j).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                for j in 0..2 {
                    acc[j] = _mm256_add_epi32(acc[j], colfix[j]);
                    if !fix.rowsums.is_null() {
                        acc[j] = _mm256_sub_epi32(acc[j], _mm256_mullo_epi32(zb[j], _mm256_set1_epi32(*fix.rowsums.add(r))));
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let row = c.add(r * ldc);
            if cols == NR {
                for (j, &acc) in acc.iter().enumerate() {
                    let dst = row.add(8 * j).cast();
                    let sums = if accumulate { _mm256_add_epi32(acc, _mm256_loadu_si256(dst)) } else { acc };
                    _mm256_storeu_si256(dst, sums);
                }
            } else {
                for (j, &acc) in acc.iter().enumerate().take_while(|&(j, _)| 8 * j < cols) {
                    let mask = lanes_below(cols.saturating_sub(8 * j));
                    let dst = row.add(8 * j);
                    let sums = if accumulate { _mm256_add_epi32(acc, _mm256_maskload_epi32(dst, mask)) } else { acc };
                    _mm256_maskstore_epi32(dst, mask, sums);
                }
            }
        }
    }
}

/// Groups `q0..q0 + kq` of columns `c0..c0 + 4·chunks` (added to `c` after the first block), all rows.
///
/// # Safety
/// As [`raw`], whose asserts bound the reads and writes.
#[allow(clippy::too_many_arguments)] // one block's coordinates
#[inline(always)]
unsafe fn raw_block(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32], (q0, kq): (usize, usize), c0: usize, (chunks, mr_max): (usize, usize)) {
    let n = b.n();
    let width = chunks * 4;
    {
        let (panel, lane) = (c0 / NR, c0 % NR);
        // At a panel's first columns the tiles prefetch the next panel's block into L2, its
        // lines spread evenly over them (a few in flight at a time, not a burst holding the fill
        // buffers the tiles' loads need), so that its first tile does not wait on L3.
        let next = (lane == 0 && panel + 1 < b.panels()).then(|| b.data()[(panel + 1) * b.panel_stride() + q0 * NR * KR..].as_ptr());
        let per = kq.div_ceil(m.div_ceil(mr_max));
        let mut r0 = 0;
        while r0 < m {
            let mr = mr_max.min(m - r0);
            let first = (r0 / mr_max * per).min(kq);
            let (pf, pf_lines) = match next {
                Some(p) => (p.wrapping_add(first * NR * KR), per.min(kq - first)),
                _ => (b.data().as_ptr(), 0),
            };
            let t = Tile {
                pf,
                pf_lines,
                a: a[r0 * lda + q0 * KR..].as_ptr(),
                lda,
                b: b.data()[panel * b.panel_stride() + q0 * NR * KR + lane * KR..].as_ptr(),
                k4: kq,
                c: c[r0 * n + c0..].as_mut_ptr(),
                ldc: n,
                cols: (n - c0).min(width),
                accumulate: q0 > 0,
            };
            // SAFETY: AVX2 is guaranteed by the caller; the asserts and loop bounds keep reads
            // inside rows r0..r0+mr of `a` and inside one packed panel (columns lane..lane+width
            // ≤ 16 of it) and the next panel's block (groups q0..q0+kq: first + pf_lines ≤ kq),
            // and `t.cols` keeps writes inside rows r0..r0+mr of `c`.
            unsafe {
                match (chunks, mr) {
                    (4, 1) => tile::<1, 4>(&t),
                    (4, 2) => tile::<2, 4>(&t),
                    (2, 1) => tile::<1, 2>(&t),
                    (2, 2) => tile::<2, 2>(&t),
                    (2, 3) => tile::<3, 2>(&t),
                    (2, 4) => tile::<4, 2>(&t),
                    (2, 5) => tile::<5, 2>(&t),
                    (2, 6) => tile::<6, 2>(&t),
                    _ => unreachable!("tile {mr} rows x {chunks} chunks"),
                }
            }
            r0 += mr;
        }
    }
}

struct Tile {
    a: *const i16,
    lda: usize,
    b: *const i8,
    k4: usize,
    /// One line per group `q < pf_lines` from here is prefetched into L2 (the next panel's block).
    pf: *const i8,
    pf_lines: usize,
    c: *mut i32,
    ldc: usize,
    cols: usize,
    /// Add to `c` (a later K block) rather than overwrite it.
    accumulate: bool,
}

/// # Safety
/// AVX2 present; `t.a` readable for `MR` rows of `k4·4` i16 at stride `lda`; `t.b` readable at
/// `q·64 + 16·j` for `q < k4`, `j < CH` (within one panel); `t.c` writable for `MR` rows of
/// `t.cols ≤ 4·CH` i32 at stride `ldc` (readable too when `t.accumulate`); `CH` even.
#[target_feature(enable = "avx2")]
unsafe fn tile<const MR: usize, const CH: usize>(t: &Tile) {
    // SAFETY: the function's contract bounds every pointer offset below; unaligned loads only.
    const { assert!(CH.is_multiple_of(2), "chunks are summed in pairs") };
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); CH]; MR];
        for q in 0..t.k4 {
            if q < t.pf_lines {
                _mm_prefetch::<_MM_HINT_T1>(t.pf.add(q * NR * KR));
            }
            let mut bv = [_mm256_setzero_si256(); CH];
            for (j, bv) in bv.iter_mut().enumerate() {
                *bv = _mm256_cvtepi8_epi16(_mm_loadu_si128(t.b.add(q * NR * KR + 16 * j).cast()));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi64x(t.a.add(r * t.lda + q * KR).cast::<i64>().read_unaligned());
                for (acc, bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(av, *bv));
                }
            }
        }
        // Lanes 2c and 2c + 1 of chunk j hold column 4j + c's halves: `vphaddd` of chunks j, j + 1
        // sums them as columns 4j + [0, 1, 4, 5, 2, 3, 6, 7], `vpermq` puts them in order.
        let valid = |j: usize| -> __m256i {
            // Columns 8j.. of the tile that exist (the rest are neither read nor written).
            lanes_below(t.cols.saturating_sub(8 * j))
        };
        for (r, acc) in acc.iter().enumerate() {
            let row = t.c.add(r * t.ldc);
            for j in (0..CH / 2).take_while(|&j| 8 * j < t.cols) {
                let pair = _mm256_hadd_epi32(acc[2 * j], acc[2 * j + 1]);
                let mut sums = _mm256_permute4x64_epi64::<0b11_01_10_00>(pair);
                let mask = valid(j);
                let dst = row.add(8 * j);
                if t.accumulate {
                    sums = _mm256_add_epi32(sums, _mm256_maskload_epi32(dst, mask));
                }
                _mm256_maskstore_epi32(dst, mask, sums);
            }
        }
    }
}
