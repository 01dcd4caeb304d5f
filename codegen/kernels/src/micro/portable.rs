//! Plain Rust: the definition the SIMD paths must equal (wrapping i32 arithmetic, as the hardware does).

use crate::pack::{KR, NR, PackedB};

/// Raw sums of rows `a` (`m` rows of `lda ≥ k4·4` bytes, zero-padded) into `c` (`m × n`, row-major).
pub fn raw(a: &[u8], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
    let (n, k4, data) = (b.n(), b.k4(), b.data());
    for row in 0..m {
        let a_row = &a[row * lda..row * lda + k4 * KR];
        for panel in 0..b.panels() {
            let mut acc = [0i32; NR];
            let p = &data[panel * b.panel_stride()..][..k4 * NR * KR];
            for (q, aq) in a_row.chunks_exact(KR).enumerate() {
                let bq = &p[q * NR * KR..][..NR * KR];
                for (lane, acc) in acc.iter_mut().enumerate() {
                    for j in 0..KR {
                        let prod = i32::from(aq[j]) * i32::from(bq[lane * KR + j]);
                        *acc = acc.wrapping_add(prod);
                    }
                }
            }
            let c0 = panel * NR;
            let cols = NR.min(n - c0);
            c[row * n + c0..][..cols].copy_from_slice(&acc[..cols]);
        }
    }
}
