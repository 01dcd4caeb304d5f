//! AVX2 with `vpmaddubsw` (u8 × i8, 32 products per instruction, twice `vpmaddwd`'s), exact on
//! weights made pair-safe: `b = s + e` ([`crate::split`]), where no pair of `s` can saturate the
//! instruction's i16 sums for any u8 activations and the excess `e` is a short list per panel.
//!
//! Per call, A is copied in each of the three pairings of a group's 4 k ([`ORDERS`]: the split
//! chose one per group and panel, the one with the fewest broken pairs). Per panel of 16
//! columns: the packed bytes are copied into a scratch panel reordered by its pairings (`vpshufb`)
//! with the excess subtracted (`k4·64` bytes, in L1), then every tile of [`MR`] rows × 16 columns runs
//! over all of K — per group of 4 k: 2 weight loads, per row a `vpbroadcastd` of 4 activations,
//! 2 × (`vpmaddubsw`, `vpmaddwd` by ones, `vpaddd`), each group's activations from the copy of its
//! pairing, the scheme of ONNX Runtime's AVX2 U8S8
//! kernel, which applies it to the weights as they are and saturates — its zero-point
//! corrections added in registers ([`super::avx2::store_tile`]); then the excess of the panel is
//! added to its columns of `c`: `c[m][n] += e·a[m][k]` for each entry, 8 rows at a time from a
//! transposed copy of A (`vpmovzxbd`, `vpmulld`); then the epilogue (the requantization) sees
//! every [`EPILOGUE_PANELS`] finished panels of all rows. Every step is exact in i32 wrapping:
//! the integers of every other path.
//!
//! Measured on a Zen 3 host (MiniLM-L3 u8s8, 64 tokens; docs/rust-target-bench.md, session 16):
//! the tile loop runs at about 183 GOPS (the i16 tile's peak is 158), the excess (0.56 % of the
//! pairs after the pairings), the safe panels and the copies take back two thirds of that: the
//! encoder 5 % faster than with the i16 kernel.

use super::Corrections;
use super::avx2::{lanes_below, store_tile};
use super::{Epilogue, Finished, Fix};
use crate::pack::{KR, NR, PackedB};
use crate::split::{Excess, ORDERS, PairSplit, pair_safe};
use std::arch::x86_64::*;

/// Rows per tile: 10 accumulators, 2 weight vectors, the broadcast, the ones and a product (15
/// of 16 ymm; with 6 rows the compiler spills an accumulator).
const MR: usize = 5;
/// Panels per call of the epilogue (as the i16 path's).
const EPILOGUE_PANELS: usize = 4;
/// Rows per step of the excess correction (one ymm of i32).
const ROWS: usize = 8;

/// Bytes of the activations' copies (three pairings of `m × K`) up to which the split path runs:
/// each panel's tiles read them all, and from L3 beyond L2 (512 KiB on Zen 3) the tile waits on
/// them: 64 × 4096 × 4096 ran at 120 GOPS against 160 at K = 1536; blocks of K (the copies' block
/// in L1, `c` re-read per block) were slower still. Larger products keep the i16 kernel.
const MAX_COPIES: usize = 384 << 10;

/// Whether the split path takes `m` rows against `b` (the copies of A fit in L2).
pub fn fits(m: usize, b: &PackedB) -> bool {
    ORDERS.len() * m * b.k4() * KR <= MAX_COPIES
}

/// `c = (a − za)·(b − zb)` (the raw sums with `fix`'s corrections) for `m` rows of `a` (`lda ≥
/// k4·4` u8 each, zero past K), then `epilogue` on each finished block of all rows × 64 columns.
///
/// # Safety
/// The host has AVX2 (a [`crate::Kernels`] of that path proves it); `split` is `b`'s.
#[allow(clippy::too_many_arguments)] // the product's operands and its corrections
pub unsafe fn gemm(a: &[u8], lda: usize, m: usize, b: &PackedB, split: &PairSplit, c: &mut [i32], fix: &Corrections, epilogue: &mut Epilogue) {
    let k4 = b.k4();
    assert!(m > 0 && a.len() >= (m - 1) * lda + k4 * KR && c.len() >= m * b.n() && lda >= k4 * KR);
    assert!(fix.colfix.len() >= b.panels() * NR && fix.zb.len() >= b.panels() * NR && fix.rowsums.is_none_or(|r| r.len() >= m));
    // SAFETY: forwarded from the caller (AVX2); the asserts above bound the operands.
    unsafe { run(a, lda, m, b, split, c, fix, epilogue) }
}

/// # Safety
/// As [`gemm`], whose asserts bound the operands.
#[allow(clippy::too_many_arguments)] // as gemm
#[target_feature(enable = "avx2")]
unsafe fn run(a: &[u8], lda: usize, m: usize, b: &PackedB, split: &PairSplit, c: &mut [i32], fix: &Corrections, epilogue: &mut Epilogue) {
    let (n, k4, panels, stride) = (b.n(), b.k4(), b.panels(), b.panel_stride());
    let bytes = k4 * NR * KR;
    let mut scratch = vec![_mm256_setzero_si256(); bytes / 32];
    // SAFETY: the vectors are `bytes` bytes of plain integers.
    let safe = unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr().cast::<i8>(), bytes) };
    // SAFETY: AVX2 (the caller); `a` holds m rows of lda ≥ k4·4 bytes.
    let (at, mp) = unsafe { transposed(a, lda, m, b.k(), !split.is_empty()) };
    let shuffle = shuffles();
    // SAFETY: as above.
    let (sections, section) = unsafe { reordered(a, lda, m, k4, &shuffle) };
    let mut offsets = vec![0usize; k4];
    for panel in 0..panels {
        let c0 = panel * NR;
        let cols = (n - c0).min(NR);
        let orders = split.orders(panel);
        // SAFETY: AVX2 (the caller); the panel holds k4 groups, as `safe` does.
        unsafe { safe_panel(&b.data()[panel * stride..][..bytes], orders, split.panel(panel), &shuffle, safe) };
        for (q, (off, &o)) in offsets.iter_mut().zip(orders).enumerate() {
            *off = usize::from(o) * section + q * KR;
        }
        // The next panel is prefetched into L2 while the row tiles run, a few lines before each.
        let next = if panel + 1 < panels { &b.data()[(panel + 1) * stride..][..bytes] } else { &[] };
        let per = (next.len() / (NR * KR)).div_ceil(m.div_ceil(MR)) * NR * KR;
        let mut r0 = 0;
        while r0 < m {
            for line in next.iter().skip(r0 / MR * per).take(per).step_by(NR * KR) {
                _mm_prefetch::<_MM_HINT_T1>(std::ptr::from_ref(line));
            }
            let mr = MR.min(m - r0);
            let t = Tile {
                a: sections[r0 * lda..].as_ptr(),
                lda,
                offsets: offsets.as_ptr(),
                b: safe.as_ptr(),
                k4,
                c: c[r0 * n + c0..].as_mut_ptr(),
                ldc: n,
                cols,
                fix: Fix { colfix: fix.colfix[c0..].as_ptr(), zb: fix.zb[c0..].as_ptr(), rowsums: fix.rowsums.map_or(std::ptr::null(), |r| r[r0..].as_ptr()) },
            };
            // SAFETY: AVX2 (the caller); rows r0..r0+mr of each copy of `a` hold k4·4 bytes,
            // `offsets` holds k4 starts inside one copy's row, `safe` the panel's k4 groups;
            // `t.cols` keeps writes inside rows r0..r0+mr of `c`, columns c0..c0+cols; the
            // corrections hold the panel's 16 columns and the rows.
            unsafe {
                match mr {
                    1 => tile::<1>(&t),
                    2 => tile::<2>(&t),
                    3 => tile::<3>(&t),
                    4 => tile::<4>(&t),
                    _ => tile::<MR>(&t),
                }
            }
            r0 += mr;
        }
        // SAFETY: AVX2 (the caller); `at` holds K rows of `mp ≥ m` activations (multiple of 8).
        unsafe { add_excess(&at, mp, m, split.panel(panel), &mut c[c0..], n, cols) };
        if (panel + 1) % EPILOGUE_PANELS == 0 || panel + 1 == panels {
            let first = panel / EPILOGUE_PANELS * EPILOGUE_PANELS * NR;
            epilogue(Finished::of(c, n, 0, m, first, c0 + cols - first));
        }
    }
}

/// Byte shuffles putting each group of 4 in the order `ORDERS[p]` (8 groups per vector), made
/// once per product.
fn shuffles() -> [__m256i; 3] {
    ORDERS.map(|o| {
        let mut idx = [0i8; 32];
        for (g, chunk) in idx.chunks_exact_mut(KR).enumerate() {
            for (d, &i) in chunk.iter_mut().zip(&o) {
                // Within each 128-bit lane (vpshufb's reach): groups 0–3 of the lane.
                *d = ((g % 4) * KR + i) as i8;
            }
        }
        // SAFETY: `idx` is 32 bytes.
        unsafe { _mm256_loadu_si256(idx.as_ptr().cast()) }
    })
}

/// One panel's packed bytes reordered by `orders` and made pair-safe in `dst` (the excess
/// subtracted), by byte shuffles (the byte-by-byte definition is in `split`'s tests).
///
/// # Safety
/// AVX2 present; `src` and `dst` hold `orders.len()` groups of 64 bytes.
#[target_feature(enable = "avx2")]
unsafe fn safe_panel(src: &[i8], orders: &[u8], entries: &[Excess], shuffle: &[__m256i; 3], dst: &mut [i8]) {
    for ((d, s), &o) in dst.chunks_exact_mut(NR * KR).zip(src.chunks_exact(NR * KR)).zip(orders) {
        for half in 0..2 {
            // SAFETY: each group is 64 bytes: two vectors.
            unsafe {
                let v = _mm256_loadu_si256(s.as_ptr().add(32 * half).cast());
                _mm256_storeu_si256(d.as_mut_ptr().add(32 * half).cast(), _mm256_shuffle_epi8(v, shuffle[usize::from(o)]));
            }
        }
    }
    for x in entries {
        let at = x.at as usize;
        dst[at] = (i32::from(dst[at]) - i32::from(x.e)) as i8;
    }
    debug_assert!(dst.chunks_exact(2).all(|p| pair_safe(p[0], p[1])), "a pair left unsafe");
}

/// The rows of A in each pairing of [`ORDERS`] (copy `p` at `p·section`, rows of `lda` bytes):
/// a tile reads each group's activations from the copy its weights are ordered in.
///
/// # Safety
/// AVX2 present; `a` holds `m` rows of `lda = k4·4` bytes.
#[target_feature(enable = "avx2")]
unsafe fn reordered(a: &[u8], lda: usize, m: usize, k4: usize, shuffle: &[__m256i; 3]) -> (Vec<u8>, usize) {
    let section = m * lda;
    let whole = k4 * KR / 32 * 32;
    let fill = |base: *mut u8| {
        for p in 0..ORDERS.len() {
            for r in 0..m {
                let src = &a[r * lda..][..k4 * KR];
                // SAFETY: row r of copy p lies within the buffer (above); bytes j..j + 32 of
                // `src` exist.
                unsafe {
                    let dst = base.add(p * section + r * lda);
                    for j in (0..whole).step_by(32) {
                        let v = _mm256_loadu_si256(src.as_ptr().add(j).cast());
                        _mm256_storeu_si256(dst.add(j).cast(), _mm256_shuffle_epi8(v, shuffle[p]));
                    }
                    for g in whole / KR..k4 {
                        for (i, &o) in ORDERS[p].iter().enumerate() {
                            dst.add(g * KR + i).write(src[g * KR + o]);
                        }
                    }
                    dst.add(k4 * KR).write_bytes(0, lda - k4 * KR);
                }
            }
        }
    };
    // SAFETY: `fill` writes every byte (a row's bytes past its k4 groups with zeros): the rows r of
    // the copies p, `lda` bytes from `p·section + r·lda`, tile the `ORDERS.len()·section` bytes.
    (unsafe { written(ORDERS.len() * section, fill) }, section)
}

/// A transposed (`[K][mp]`, `mp` = m rounded up to [`ROWS`], zeros past m), when `needed`: 8 rows
/// × 8 k at a time by byte unpacks (a byte at a time cost as much as the excess itself).
///
/// # Safety
/// AVX2 present; `a` holds `m` rows of `lda ≥ k` bytes (the last may end after its k-th).
#[target_feature(enable = "avx2")]
unsafe fn transposed(a: &[u8], lda: usize, m: usize, k: usize, needed: bool) -> (Vec<u8>, usize) {
    if !needed {
        return (Vec::new(), 0);
    }
    let mp = m.next_multiple_of(ROWS);
    let k8 = k / 8 * 8;
    let fill = |base: *mut u8| {
        for r0 in (0..m).step_by(ROWS) {
            let rows = ROWS.min(m - r0);
            for k0 in (0..k8).step_by(8) {
                let v: [__m128i; 8] = std::array::from_fn(|r| {
                    if r < rows {
                        let src = &a[(r0 + r) * lda + k0..][..8];
                        // SAFETY: `src` is 8 bytes.
                        unsafe { _mm_loadl_epi64(src.as_ptr().cast()) }
                    } else {
                        _mm_setzero_si128()
                    }
                });
                let t = [0, 1, 2, 3].map(|i| _mm_unpacklo_epi8(v[2 * i], v[2 * i + 1]));
                let u = [_mm_unpacklo_epi16(t[0], t[1]), _mm_unpackhi_epi16(t[0], t[1]), _mm_unpacklo_epi16(t[2], t[3]), _mm_unpackhi_epi16(t[2], t[3])];
                // k0 + 2j and k0 + 2j + 1, each the 8 rows' bytes.
                let w = [_mm_unpacklo_epi32(u[0], u[2]), _mm_unpackhi_epi32(u[0], u[2]), _mm_unpacklo_epi32(u[1], u[3]), _mm_unpackhi_epi32(u[1], u[3])];
                for (j, w) in w.iter().enumerate() {
                    // SAFETY: rows k0 + 2j and k0 + 2j + 1 of `at` hold mp ≥ r0 + 8 bytes.
                    unsafe {
                        _mm_storel_epi64(base.add((k0 + 2 * j) * mp + r0).cast(), *w);
                        _mm_storel_epi64(base.add((k0 + 2 * j + 1) * mp + r0).cast(), _mm_unpackhi_epi64(*w, *w));
                    }
                }
            }
            for kk in k8..k {
                for r in 0..ROWS {
                    let v = if r < rows { a[(r0 + r) * lda + kk] } else { 0 };
                    // SAFETY: row kk of `at` holds mp ≥ r0 + 8 bytes.
                    unsafe { base.add(kk * mp + r0 + r).write(v) };
                }
            }
        }
    };
    // SAFETY: `fill` writes every byte: the blocks of 8 rows from 0 to mp cover every k of each
    // (k8 by the unpacks, the rest one by one, the rows past m with zeros).
    let at = unsafe { written(k * mp, fill) };
    (at, mp)
}

/// A buffer of `len` bytes filled by `write` through the pointer it is given, with no clearing
/// pass first (for A's copies and transpose that pass cost 1.4 % of the MiniLM encoder's time).
///
/// # Safety
/// `write` writes each of the `len` bytes from the pointer and nothing beyond them.
#[inline(always)]
unsafe fn written(len: usize, write: impl FnOnce(*mut u8)) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    write(out.as_mut_ptr());
    // SAFETY: `write` initialized all `len` bytes (the caller's obligation).
    unsafe { out.set_len(len) };
    out
}

/// `c[m][n] += e·a[m][k]` for each excess entry of one panel (`c` from the panel's first
/// column, `cols` of them), [`ROWS`] rows at a time: per entry the rows' activations widened to
/// i32 and multiplied by `e` into the entry's column, then the columns added into the rows.
///
/// # Safety
/// AVX2 present; `at` holds `k` rows of `mp` bytes for every entry's `k`, `mp ≥ m` a multiple of
/// [`ROWS`]; `c` holds `m` rows of stride `ldc ≥ cols`.
#[target_feature(enable = "avx2")]
unsafe fn add_excess(at: &[u8], mp: usize, m: usize, entries: &[Excess], c: &mut [i32], ldc: usize, cols: usize) {
    if entries.is_empty() {
        return;
    }
    for r0 in (0..m).step_by(ROWS) {
        let mut acc = [_mm256_setzero_si256(); NR];
        for x in entries {
            let col = &mut acc[x.col()];
            let rows = &at[x.k as usize * mp + r0..][..ROWS];
            // SAFETY: `rows` is 8 bytes.
            let v = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(rows.as_ptr().cast()) });
            *col = _mm256_add_epi32(*col, _mm256_mullo_epi32(v, _mm256_set1_epi32(i32::from(x.e))));
        }
        // Columns × rows to rows × columns, 8 × 8 at a time, then added into the rows of `c`
        // (plain loads and stores where the panel and the rows are whole: masked ones cost more
        // than the rest of the correction).
        let rows = ROWS.min(m - r0);
        for half in 0..2 {
            let cols = cols.saturating_sub(8 * half).min(8);
            if cols == 0 {
                break;
            }
            let t = transpose8(&acc[8 * half..][..8]);
            let base = c[r0 * ldc + 8 * half..].as_mut_ptr();
            // SAFETY: rows r0..r0 + rows of `c` exist (stride ldc).
            let row = |r: usize| unsafe { base.add(r * ldc) };
            if cols == 8 && rows == ROWS {
                for (r, v) in t.iter().enumerate() {
                    // SAFETY: row r0 + r of `c` holds 8 columns from `8·half`.
                    unsafe { _mm256_storeu_si256(row(r).cast(), _mm256_add_epi32(_mm256_loadu_si256(row(r).cast()), *v)) };
                }
            } else {
                let mask = lanes_below(cols);
                for (r, v) in t.iter().enumerate().take(rows) {
                    // SAFETY: row r0 + r of `c` holds `cols` columns from `8·half` (the mask).
                    unsafe { _mm256_maskstore_epi32(row(r), mask, _mm256_add_epi32(_mm256_maskload_epi32(row(r), mask), *v)) };
                }
            }
        }
    }
}

/// The 8 × 8 i32 matrix `v` (one row per vector) transposed.
#[target_feature(enable = "avx2")]
fn transpose8(v: &[__m256i]) -> [__m256i; 8] {
    let t: [__m256i; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[i / 2 * 2], v[i / 2 * 2 + 1]);
        if i % 2 == 0 { _mm256_unpacklo_epi32(a, b) } else { _mm256_unpackhi_epi32(a, b) }
    });
    // u[4h + j]: rows j and j + 4 (lanes 0–3, 4–7) of columns 4h..4h + 4.
    let u: [__m256i; 8] = std::array::from_fn(|i| {
        let (h, j) = (i / 4, i % 4);
        let (a, b) = (t[4 * h + j / 2], t[4 * h + j / 2 + 2]);
        if j % 2 == 0 { _mm256_unpacklo_epi64(a, b) } else { _mm256_unpackhi_epi64(a, b) }
    });
    std::array::from_fn(|i| if i < 4 { _mm256_permute2x128_si256::<0x20>(u[i], u[i + 4]) } else { _mm256_permute2x128_si256::<0x31>(u[i - 4], u[i]) })
}

struct Tile {
    /// Row 0 of the tile in the first reordered copy of A.
    a: *const u8,
    lda: usize,
    /// Per group, where its 4 activations start from a row's first byte (the copy of its pairing).
    offsets: *const usize,
    b: *const i8,
    k4: usize,
    c: *mut i32,
    ldc: usize,
    cols: usize,
    fix: Fix,
}

/// `MR` rows × 16 columns over all of K: each accumulator holds 8 whole column sums.
///
/// # Safety
/// AVX2 present; `t.a` readable for `MR` rows of `lda` bytes at stride `lda` from each
/// `t.offsets[q]` (`q < k4`) on, 4 bytes each; `t.b` readable
/// for `k4·64` bytes, every pair of them pair-safe ([`crate::split::pair_safe`]); `t.c` writable
/// for `MR` rows of `t.cols ≤ 16` i32 at stride `ldc`; `t.fix` as [`store_tile`] reads it.
#[target_feature(enable = "avx2")]
unsafe fn tile<const MR: usize>(t: &Tile) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; MR];
    // SAFETY: the function's contract bounds every pointer offset below; unaligned loads only.
    unsafe {
        for q in 0..t.k4 {
            let b0 = _mm256_loadu_si256(t.b.add(q * NR * KR).cast());
            let b1 = _mm256_loadu_si256(t.b.add(q * NR * KR + 32).cast());
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(t.a.add(r * t.lda + *t.offsets.add(q)).cast::<i32>().read_unaligned());
                // Pair-safe weights: each i16 pair sum is exact, `vpmaddwd` by ones adds two in i32.
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones));
                acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones));
            }
        }
        store_tile(&acc, Some(&t.fix), t.c, t.ldc, t.cols, false);
    }
}
