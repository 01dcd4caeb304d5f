//! The AVX2 sums of [`super::MatMulCodes`]: `vpmaddwd` on i16 pairs of the centred codes
//! (`a − za`, `b − zb`), 16 products per instruction where the i32 outer products' `vpmulld`
//! gives 8 at half the throughput. Per batch A is encoded as pairs of consecutive k per i32 word
//! (`[m][k/2]`) and B as the same pairs per column (`[k/2][n]`), so a broadcast word of A against
//! 8 words of B gives 8 complete column sums; tiles of [`MR`] rows × [`NP`] panels of 8 columns in
//! registers over all of K (12 accumulators, 2 weight vectors, 1 broadcast).
//!
//! | condition | why |
//! |---|---|
//! | every centred operand in [−32767, 32767], checked per batch (else the i32 path) | each product is below 2^30 in magnitude, so a pair's sum is below 2^31: `vpmaddwd` is exact (only two products of (−2^15)² leave i32); the accumulation then wraps as the i32 path's does, giving the same sum modulo 2^32, exact under [`super::max_k`] |
//! | K odd: the last pair's high half is 0 on both sides | a zero product adds nothing |

use super::MatMulCodes;
use std::arch::x86_64::*;

/// Rows of a tile: 12 accumulators, 2 weight vectors and 1 broadcast in 15 of 16 ymm (4 rows
/// ran the MiniLM encoder's attention products at about 70 GOPS).
const MR: usize = 6;
/// Panels of 8 columns per tile.
const NP: usize = 2;

/// One batch's operands as i16 pairs (low half the even k).
#[derive(Default)]
pub(super) struct Pairs {
    /// `a − za`, rows of `k2 = ⌈K/2⌉` words, rows padded with zeros to a multiple of [`MR`].
    a: Vec<u32>,
    /// `b − zb`: word `q·ldb + j` holds k = 2q, 2q + 1 of column j (`ldb` = N rounded up to 8),
    /// zero beyond K and N.
    b: Vec<u32>,
    k2: usize,
    ldb: usize,
}

/// The smallest and largest centred operand seen, to check against the i16 range once per batch
/// (no branch per element: the packing loops vectorize).
struct Range(i32, i32);

impl Range {
    /// `v − z` as a pair half (its low 16 bits), recording it.
    #[inline(always)]
    fn half(&mut self, v: i32, z: i32) -> u32 {
        let c = v.wrapping_sub(z);
        (self.0, self.1) = (self.0.min(c), self.1.max(c));
        u32::from(c as u16)
    }

    fn in_i16(&self) -> bool {
        self.0 >= -32767 && self.1 <= 32767
    }
}

impl Pairs {
    /// Encodes one batch (`a` m × k, `b` k × n); false when a dimension is 0 or a centred
    /// operand leaves [−32767, 32767] (the i32 path then computes the batch). Every word of the
    /// buffers is written, padding included (no clearing pass first), and two rows of B make
    /// one row of words (no read-modify-write); under AVX2 the loops vectorize on 32-byte
    /// vectors (baseline SSE2 code for the same loops took 3 % of the MiniLM encoder's time).
    ///
    /// # Safety
    /// The host has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack<A: Copy + Into<i32>, B: Copy + Into<i32>>(&mut self, mm: &MatMulCodes, a: &[A], m: usize, k: usize, b: &[B], n: usize) -> bool {
        if m == 0 || k == 0 || n == 0 {
            return false;
        }
        let (k2, ldb) = (k.div_ceil(2), n.div_ceil(8) * 8);
        (self.k2, self.ldb) = (k2, ldb);
        self.a.resize(m.div_ceil(MR) * MR * k2, 0);
        self.b.resize(k2 * ldb, 0);
        let mut range = Range(0, 0);
        let (rows, padding) = self.a.split_at_mut(m * k2);
        for (dst, src) in rows.chunks_exact_mut(k2).zip(a.chunks_exact(k)) {
            for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = range.half(pair[0].into(), mm.za) | range.half(pair[1].into(), mm.za) << 16;
            }
            if k % 2 == 1 {
                dst[k2 - 1] = range.half(src[k - 1].into(), mm.za);
            }
        }
        padding.fill(0);
        // Rows 2q and 2q + 1 of B into row q of words (contiguous loads and stores).
        for (q, words) in self.b.chunks_exact_mut(ldb).enumerate() {
            let (words, padding) = words.split_at_mut(n);
            let low = &b[2 * q * n..][..n];
            if 2 * q + 1 < k {
                for ((w, &lo), &hi) in words.iter_mut().zip(low).zip(&b[(2 * q + 1) * n..][..n]) {
                    *w = range.half(lo.into(), mm.zb) | range.half(hi.into(), mm.zb) << 16;
                }
            } else {
                for (w, &lo) in words.iter_mut().zip(low) {
                    *w = range.half(lo.into(), mm.zb);
                }
            }
            padding.fill(0);
        }
        range.in_i16()
    }

    /// `acc[i][j] = Σ_k (a − za)(b − zb)` (wrapping i32) for the packed batch, `m × n`.
    ///
    /// # Safety
    /// The host has AVX2; `pack(.., m, _, .., n)` returned true.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn products(&self, m: usize, n: usize, acc: &mut [i32]) {
        let panels = n.div_ceil(8);
        assert!(acc.len() == m * n && self.a.len() == m.div_ceil(MR) * MR * self.k2);
        assert!(self.b.len() == self.k2 * self.ldb && self.ldb == panels * 8);
        for i0 in (0..m).step_by(MR) {
            let mut p0 = 0;
            while p0 < panels {
                let np = NP.min(panels - p0);
                // SAFETY: the tiles read within the sizes asserted above (their comments).
                unsafe {
                    match np {
                        2 => self.tile::<2>(i0, p0, m, n, acc),
                        _ => self.tile::<1>(i0, p0, m, n, acc),
                    }
                }
                p0 += np;
            }
        }
    }

    /// Rows `i0..i0 + MR` (those below `m` stored) × panels `p0..p0 + P` of `acc`, accumulators
    /// in registers over all of K.
    ///
    /// # Safety
    /// As [`Pairs::products`], whose asserts bound every access: `a` holds `i0 + MR` padded rows
    /// of `k2` words, `b` `k2` groups of `ldb ≥ 8·(p0 + P)` columns, and the stores are masked to
    /// the columns below `n` of the rows below `m`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile<const P: usize>(&self, i0: usize, p0: usize, m: usize, n: usize, acc: &mut [i32]) {
        let (k2, ldb) = (self.k2, self.ldb);
        let mut c = [[_mm256_setzero_si256(); P]; MR];
        // SAFETY (all pointer reads and writes): the bounds in the function's contract.
        unsafe {
            let a: [*const u32; MR] = std::array::from_fn(|r| self.a.as_ptr().add((i0 + r) * k2));
            for q in 0..k2 {
                let bq = self.b.as_ptr().add(q * ldb + p0 * 8);
                let w: [__m256i; P] = std::array::from_fn(|p| _mm256_loadu_si256(bq.add(p * 8).cast()));
                for (c, a) in c.iter_mut().zip(&a) {
                    let x = _mm256_set1_epi32(a.add(q).read() as i32);
                    for (c, &w) in c.iter_mut().zip(&w) {
                        *c = _mm256_add_epi32(*c, _mm256_madd_epi16(x, w));
                    }
                }
            }
            // The columns below n of each panel: whole panels by plain stores, the last one masked.
            let cols: [usize; P] = std::array::from_fn(|p| n.saturating_sub((p0 + p) * 8).min(8));
            for (r, c) in c.iter().enumerate().take(m - i0) {
                let row = acc.as_mut_ptr().add((i0 + r) * n + p0 * 8);
                for ((p, &c), &cols) in c.iter().enumerate().zip(&cols) {
                    if cols == 8 {
                        _mm256_storeu_si256(row.add(p * 8).cast(), c);
                    } else {
                        _mm256_maskstore_epi32(row.add(p * 8), crate::micro::avx2::lanes_below(cols), c);
                    }
                }
            }
        }
    }
}
