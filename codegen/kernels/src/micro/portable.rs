//! Plain Rust: the definition the SIMD paths must equal (wrapping i32 arithmetic, as the hardware does).
//! Written lane-wise over one 64-byte packed row (lane `4·column + j`) so that the compiler can
//! vectorize it with baseline instructions; the four lanes of a column are added at the end.

use crate::pack::{KR, NR, PackedB};

/// Raw sums of rows `a` (`m` rows of `lda ≥ k4·4` bytes, zero-padded) into `c` (`m × n`, row-major).
pub fn raw(a: &[u8], lda: usize, m: usize, b: &PackedB, c: &mut [i32]) {
    let (n, k4, data) = (b.n(), b.k4(), b.data());
    for row in 0..m {
        let a_row = &a[row * lda..row * lda + k4 * KR];
        for panel in 0..b.panels() {
            let mut lanes = [[0i32; KR]; NR];
            let p = &data[panel * b.panel_stride()..][..k4 * NR * KR];
            for (aq, bq) in a_row.chunks_exact(KR).zip(p.chunks_exact(NR * KR)) {
                let aq: [i16; KR] = [0, 1, 2, 3].map(|j| i16::from(aq[j]));
                for (lane, w) in lanes.iter_mut().zip(bq.chunks_exact(KR)) {
                    for j in 0..KR {
                        // |a·w| ≤ 255·128 fits i16 (baseline x86-64 has 16-bit vector multiplies only).
                        lane[j] = lane[j].wrapping_add(i32::from(aq[j] * i16::from(w[j])));
                    }
                }
            }
            let c0 = panel * NR;
            for (col, sums) in lanes.iter().enumerate().take(n - c0) {
                c[row * n + c0 + col] = sums.iter().fold(0i32, |s, &v| s.wrapping_add(v));
            }
        }
    }
}
