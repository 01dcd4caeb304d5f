//! The AVX-512 VNNI sums of [`super::MatMulCodes`]: both operands re-encoded per batch as the
//! bytes `vpdpbusd` takes, tiles of [`MR`] rows × [`NP`] panels of 16 columns in registers over
//! all of K.

use super::MatMulCodes;
use std::arch::x86_64::*;

/// Rows of a VNNI tile; with [`NP`] panels of 16 columns, 16 accumulators, [`NP`] weight
/// vectors and one broadcast in the 32 zmm registers.
const MR: usize = 4;
/// Panels of 16 columns per VNNI tile.
const NP: usize = 4;

/// One batch's operands for `vpdpbusd` (u8 × i8, 4 pairs per i32 lane, wrapping): `a − za =
/// a8 − za8` with `a8 = a − min(A)` a u8, and `b − zb = b8 − zb8` with `b8 = b − min(B) − 128` an
/// i8, so `Σ_k (a − za)(b − zb) = Σ_k a8·b8 − zb8·Σ_k a8 − za8·Σ_k b8 + K·za8·zb8`. Every term is
/// taken in wrapping i32: the result is the exact sum modulo 2^32, and under [`max_k`] the exact
/// sum is in i32, so it is that sum, the other paths' integers.
#[derive(Default)]
pub(super) struct Bytes {
    /// `a8`, each row padded with zeros to `4·k4` bytes, rows padded with zeros to a multiple of
    /// [`MR`] (zeros add nothing to a sum).
    a: Vec<u8>,
    /// `b8` in groups of 4 k: byte t of word `q·ldb + j` (little-endian) is `b8[4q + t][j]`
    /// (`ldb` = N rounded up to 16), zero beyond K and N; one group of a panel of 16 columns is
    /// one zmm.
    b: Vec<u32>,
    /// `zb8·Σ_k a8[i][k]` per row.
    rows: Vec<i32>,
    /// `K·za8·zb8 − za8·Σ_k b8[k][j]` per column, zero on the padding.
    cols: Vec<i32>,
    k4: usize,
}

impl Bytes {
    /// Encodes one batch (`a` m × k, `b` k × n); false when a dimension is 0 or a code lies
    /// outside its declared type (the i32 path then computes the batch).
    pub(super) fn pack<A: Copy + Into<i32>, B: Copy + Into<i32>>(&mut self, mm: &MatMulCodes, a: &[A], m: usize, k: usize, b: &[B], n: usize) -> bool {
        if m == 0 || k == 0 || n == 0 {
            return false;
        }
        let (oa, ob) = (mm.codes.0.min(), mm.codes.1.min() + 128);
        let (za8, zb8) = (mm.za - oa, mm.zb - ob);
        let (k4, ldb) = (k.div_ceil(4), n.div_ceil(16) * 16);
        let lda = 4 * k4;
        self.k4 = k4;
        self.a.clear();
        self.a.resize(m.div_ceil(MR) * MR * lda, 0);
        self.b.clear();
        self.b.resize(k4 * ldb, 0);
        self.rows.clear();
        self.rows.resize(m, 0);
        // Any bit above the low 8 of a code's byte value: outside its type.
        let mut outside = 0u32;
        for ((dst, src), fix) in self.a.chunks_exact_mut(lda).zip(a.chunks_exact(k)).zip(&mut self.rows) {
            let mut sum = 0i32;
            for (d, &v) in dst.iter_mut().zip(src) {
                let c = v.into().wrapping_sub(oa);
                outside |= c as u32 >> 8;
                *d = c as u8;
                sum = sum.wrapping_add(c);
            }
            *fix = zb8.wrapping_mul(sum);
        }
        let mut sums = vec![0i32; ldb];
        // Row by row into the words' bytes (contiguous loads and stores: they vectorize).
        for (kk, src) in b.chunks_exact(n).enumerate() {
            let (words, shift) = (&mut self.b[(kk / 4) * ldb..][..n], 8 * (kk % 4));
            for ((w, &v), s) in words.iter_mut().zip(src).zip(&mut sums) {
                let c = v.into().wrapping_sub(ob);
                outside |= c.wrapping_add(128) as u32 >> 8;
                *w |= (c as u32 & 0xff) << shift;
                *s = s.wrapping_add(c);
            }
        }
        let kzz = (k as i32).wrapping_mul(za8).wrapping_mul(zb8);
        self.cols.clear();
        self.cols.extend(sums.iter().enumerate().map(|(j, &s)| if j < n { kzz.wrapping_sub(za8.wrapping_mul(s)) } else { 0 }));
        outside == 0
    }

    /// `acc[i][j] = Σ_k (a − za)(b − zb)` (wrapping i32) for the packed batch, `m × n`.
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VNNI; `pack(.., m, _, .., n)` returned true.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn products(&self, m: usize, n: usize, acc: &mut [i32]) {
        let panels = n.div_ceil(16);
        assert!(acc.len() == m * n && self.a.len() == m.div_ceil(MR) * MR * 4 * self.k4);
        assert!(self.b.len() == self.k4 * panels * 16 && self.cols.len() == panels * 16 && self.rows.len() == m);
        for i0 in (0..m).step_by(MR) {
            let mut p0 = 0;
            while p0 < panels {
                let np = NP.min(panels - p0);
                // SAFETY: the tiles read within the sizes asserted above (their comments).
                unsafe {
                    match np {
                        4 => self.tile::<4>(i0, p0, m, n, acc),
                        3 => self.tile::<3>(i0, p0, m, n, acc),
                        2 => self.tile::<2>(i0, p0, m, n, acc),
                        _ => self.tile::<1>(i0, p0, m, n, acc),
                    }
                }
                p0 += np;
            }
        }
    }

    /// Rows `i0..i0 + MR` (those below `m` stored) × panels `p0..p0 + P` of `acc`, accumulators
    /// in registers over all of K, the corrections added before the (masked) stores.
    ///
    /// # Safety
    /// As [`Bytes::products`], whose asserts bound every access: `a` holds `i0 + MR` padded rows
    /// of `4·k4` bytes, `b` `k4` groups of `ldb ≥ 16·(p0 + P)` columns, `cols` `ldb` entries,
    /// and the stores are masked to the columns below `n` of the rows below `m`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn tile<const P: usize>(&self, i0: usize, p0: usize, m: usize, n: usize, acc: &mut [i32]) {
        let (lda, ldb) = (4 * self.k4, self.cols.len());
        let mut c = [[_mm512_setzero_si512(); P]; MR];
        // SAFETY (all pointer reads and writes): the bounds in the function's contract.
        unsafe {
            let a = self.a.as_ptr().add(i0 * lda);
            for q in 0..self.k4 {
                let bq = self.b.as_ptr().add(q * ldb + p0 * 16);
                let mut w = [_mm512_setzero_si512(); P];
                for (p, w) in w.iter_mut().enumerate() {
                    *w = _mm512_loadu_si512(bq.add(p * 16).cast());
                }
                for (r, c) in c.iter_mut().enumerate() {
                    let x = _mm512_set1_epi32(a.add(r * lda + 4 * q).cast::<i32>().read_unaligned());
                    for (c, &w) in c.iter_mut().zip(&w) {
                        *c = _mm512_dpbusd_epi32(*c, x, w);
                    }
                }
            }
            for (r, c) in c.iter().enumerate().take(m - i0) {
                let i = i0 + r;
                let fix = _mm512_set1_epi32(self.rows[i]);
                for (p, &c) in c.iter().enumerate() {
                    let j = (p0 + p) * 16;
                    let v = _mm512_sub_epi32(_mm512_add_epi32(c, _mm512_loadu_si512(self.cols.as_ptr().add(j).cast())), fix);
                    let live = (n - j).min(16);
                    _mm512_mask_storeu_epi32(acc.as_mut_ptr().add(i * n + j), (u32::MAX >> (32 - live)) as u16, v);
                }
            }
        }
    }
}
