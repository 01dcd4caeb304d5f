//! AVX2, exact: A is widened to i16 once per call (`vpmovzxbw`), each 16-byte slice of a packed
//! panel row (4 columns × 4 k) is widened in registers (`vpmovsxbw`), and `vpmaddwd` multiplies
//! with a broadcast of 4 i16 activations, summing products in pairs into i32: |a·b| ≤ 255·128, so
//! a pair never leaves i32. (`vpmaddubsw`, MLAS's and oneDNN's AVX2 u8×s8 instruction, saturates
//! pairs to int16 and is not used.) Each i32 lane holds half of one column's sum; the halves are
//! added when the tile is stored.
//!
//! K runs in blocks of [`KC`] groups (the tile adds to `c` after the first).
//!
//! Tiles: 6 rows × 8 columns (12 accumulators, 2 weight vectors, 1 broadcast: 15 of 16 ymm), or
//! for one or two rows 16 columns, so that GEMV keeps 8 independent accumulators per row.

use crate::pack::{KR, NR, PackedB};
use std::arch::x86_64::*;

/// Groups of 4 k per block: a 6-row tile's activations (6 × 1 KiB × 2) and 16 columns' weights
/// (16 KiB) stay in L1 while the tile runs; the activations of all rows stay in L2 across the columns.
const KC: usize = 128;

/// Raw sums of rows `a` (`m` rows of `lda ≥ k4·4` i16, zero-padded) into `c` (`m × n`).
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it).
pub unsafe fn raw(a: &[i16], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
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
            let cols = t.cols.saturating_sub(8 * j).min(8) as i32;
            _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
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
