//! MatMul of two code tensors (attention's `QKᵀ` and `AV`), requantized:
//! `y = sat(rne(sa·sb·Σ_k (a[m][k] − za)(b[k][n] − zb) / sy) + zy)`.
//!
//! Neither operand is a constant, so nothing is packed ahead: per batch, both are offset by their
//! zero points into i32, accumulated as outer products (`acc[i][·] += (a[i][k] − za)·(b[k][·] −
//! zb)` along B's contiguous rows, which the compiler vectorizes: 16 i32 lanes under AVX-512F, 8
//! under AVX2, 4 on the portable path; integer sums, so the order changes no bit), then requantized
//! by the certified form ([`Form::Certified`]: the exact rational wherever f64 is not provably
//! far from a rounding boundary), so the output is the correctly rounded code.
//!
//! On AVX-512 VNNI the sums come from `vpdpbusd` instead (4 u8 × i8 products per i32 lane per
//! instruction, tiles of 4 rows × 64 columns in registers over all of K): per batch A is encoded
//! as u8 and B as i8 in groups of 4 k (`Bytes`), the zero points moved to row and column
//! corrections (`bytes.rs`). On AVX2 they come from `vpmaddwd` on i16 pairs of the centred codes
//! (`pairs.rs`: 16 products per instruction, tiles of 6 rows × 16 columns). Same integers, so the
//! same codes; `vpmulld` outer products were ~12 % of the MiniLM encoder's time on a VNNI host and
//! 7.5 % on an AVX2 one.
//!
//! | condition | why |
//! |---|---|
//! | `K ≤ max_k` ([`max_k`]: the largest K whose `K·max|a − za|·max|b − zb|` fits i32) | the i32 sum is exact only there; a longer K (a symbolic sequence) is a run-time error, never a wrapped sum |
//! | both operands rank ≥ 2, batch dims broadcast as numpy's (ONNX MatMul) | the shapes ONNX MatMul takes, but rank 1 |
//! | AVX2: every centred operand in [−32767, 32767], checked per batch (else the i32 path) | `pairs.rs`: a `vpmaddwd` pair sum stays below 2^31, the wrapping accumulation is the i32 path's |
//! | VNNI: `a8 = a − min(A)` ∈ u8, `b8 = b − min(B) − 128` ∈ i8, checked per batch (else the i32 path) | `vpdpbusd`'s operand types; then `Σ(a − za)(b − zb) = Σ a8·b8 − zb8·Σ a8 − za8·Σ b8 + K·za8·zb8` with `za8 = za − min(A)`, `zb8 = zb − min(B) − 128`, in wrapping i32: equal modulo 2^32, so equal under `max_k` |
//!
//! The accumulation wraps (no overflow check in debug builds); under the bound it is exact.

#[cfg(target_arch = "x86_64")]
mod bytes;
#[cfg(target_arch = "x86_64")]
mod pairs;

use crate::isa::{Isa, Kernels};
#[cfg(target_arch = "x86_64")]
use bytes::Bytes;
#[cfg(target_arch = "x86_64")]
use pairs::Pairs;

use crate::requant::{Certified, Code, CodeOut, Form, Output, Plan, Ratio, RequantError, requantize};

/// The largest K for which `Σ_k (a − za)(b − zb)` cannot leave i32, for any codes of the two
/// types: `⌊(2^31 − 1) / (max|a − za|·max|b − zb|)⌋`. The proofs use this function too.
pub fn max_k(za: i32, a: Code, zb: i32, b: Code) -> usize {
    let far = |z: i32, c: Code| i64::from((z - c.min()).abs().max((c.max() - z).abs())).max(1);
    usize::try_from(i64::from(i32::MAX) / (far(za, a) * far(zb, b))).unwrap_or(usize::MAX)
}

/// One MatMul's parameters.
#[derive(Clone, Debug)]
pub struct MatMulCodes {
    za: i32,
    zb: i32,
    /// The operands' code types (the VNNI path's byte encodings of them).
    codes: (Code, Code),
    max_k: usize,
    plan: Plan,
}

impl MatMulCodes {
    /// `a` and `b` the operands' code types (their zero points in that type's range), `y` the
    /// output's; every scale positive and finite.
    #[allow(clippy::too_many_arguments)] // the group's parameters, spelled out
    pub fn new(sa: f32, za: i32, a: Code, sb: f32, zb: i32, b: Code, sy: f32, zy: i32, y: Code) -> Result<MatMulCodes, RequantError> {
        let output = Output::new(zy, y)?;
        let ratio = Ratio::new(sa, sb, sy)?;
        let in_range = |z: i32, c: Code| (c.min()..=c.max()).contains(&z);
        if !in_range(za, a) || !in_range(zb, b) {
            return Err(RequantError::Shape(format!("zero points {za}, {zb} outside their code types")));
        }
        Ok(MatMulCodes { za, zb, codes: (a, b), max_k: max_k(za, a, zb, b), plan: Plan { output, form: Form::Certified(vec![Certified::new(ratio)]) } })
    }

    /// `out = requant(a × b)` with ONNX MatMul's shapes (rank ≥ 2 each, batch dims broadcast).
    pub fn run<A, B, C>(&self, kernels: Kernels, a: &[A], a_shape: &[usize], b: &[B], b_shape: &[usize], out: &mut [C]) -> Result<(), RequantError>
    where
        A: Copy + Into<i32>,
        B: Copy + Into<i32>,
        C: CodeOut,
    {
        let shape = |what: String| Err(RequantError::Shape(format!("MatMul of codes: {what}")));
        let (ra, rb) = (a_shape.len(), b_shape.len());
        if ra < 2 || rb < 2 {
            return shape(format!("operands of rank {ra} and {rb} (2 or more each)"));
        }
        let (m, k, n) = (a_shape[ra - 2], a_shape[ra - 1], b_shape[rb - 1]);
        if b_shape[rb - 2] != k {
            return shape(format!("{a_shape:?} × {b_shape:?}"));
        }
        if k > self.max_k {
            return shape(format!("K = {k} beyond {}, the largest whose sums the i32 accumulator holds exactly", self.max_k));
        }
        let batch = Broadcast::new(&a_shape[..ra - 2], &b_shape[..rb - 2])
            .ok_or_else(|| RequantError::Shape(format!("MatMul of codes: batch dims of {a_shape:?} and {b_shape:?} do not broadcast")))?;
        if a.len() != a_shape.iter().product::<usize>() || b.len() != b_shape.iter().product::<usize>() || out.len() != batch.count * m * n {
            return shape(format!("{} × {} elements for {a_shape:?} × {b_shape:?}, {} outputs", a.len(), b.len(), out.len()));
        }
        // The i32 operands are sized when a batch first takes that path.
        let (mut a32, mut b32, mut acc) = (Vec::new(), Vec::new(), vec![0i32; m * n]);
        #[cfg(target_arch = "x86_64")]
        let (mut bytes, mut pairs) = (Bytes::default(), Pairs::default());
        for (i, y) in out.chunks_exact_mut((m * n).max(1)).enumerate().take(batch.count) {
            let (ia, ib) = batch.operands(i);
            #[cfg(target_arch = "x86_64")]
            if kernels.isa() == Isa::Avx512Vnni && bytes.pack(self, &a[ia * m * k..(ia + 1) * m * k], m, k, &b[ib * k * n..(ib + 1) * k * n], n) {
                // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512
                // F/BW/VNNI; `pack` sized the buffers for (m, k, n).
                unsafe { bytes.products(m, n, &mut acc) };
                if m * n > 0 {
                    requantize(kernels, &self.plan, &acc, n, None, y)?;
                }
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2.
            if kernels.isa() == Isa::Avx2 && unsafe { pairs.pack(self, &a[ia * m * k..(ia + 1) * m * k], m, k, &b[ib * k * n..(ib + 1) * k * n], n) } {
                // SAFETY: as above; `pack` sized the buffers for (m, k, n).
                unsafe { pairs.products(m, n, &mut acc) };
                requantize(kernels, &self.plan, &acc, n, None, y)?;
                continue;
            }
            a32.resize(m * k, 0);
            b32.resize(k * n, 0);
            a32.iter_mut().zip(&a[ia * m * k..(ia + 1) * m * k]).for_each(|(d, &v)| *d = v.into() - self.za);
            b32.iter_mut().zip(&b[ib * k * n..(ib + 1) * k * n]).for_each(|(d, &v)| *d = v.into() - self.zb);
            match kernels.isa() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512
                // F/BW/VNNI; the function only lets the compiler use AVX-512F for safe code.
                Isa::Avx512Vnni => unsafe { products_avx512(&a32, &b32, k, n, &mut acc) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above, AVX2 was checked.
                Isa::Avx2 => unsafe { products_avx2(&a32, &b32, k, n, &mut acc) },
                _ => products(&a32, &b32, k, n, &mut acc),
            }
            if m * n > 0 {
                requantize(kernels, &self.plan, &acc, n, None, y)?;
            }
        }
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn products_avx512(a: &[i32], b: &[i32], k: usize, n: usize, acc: &mut [i32]) {
    products(a, b, k, n, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn products_avx2(a: &[i32], b: &[i32], k: usize, n: usize, acc: &mut [i32]) {
    products(a, b, k, n, acc)
}

/// `acc[i][j] = Σ_k a[i][k]·b[k][j]` in wrapping i32 (exact under [`max_k`]; the operands are
/// centred 8-bit codes, so each product fits), row by row of B.
#[inline(always)]
fn products(a: &[i32], b: &[i32], k: usize, n: usize, acc: &mut [i32]) {
    for (acc_row, a_row) in acc.chunks_exact_mut(n.max(1)).zip(a.chunks_exact(k.max(1))) {
        acc_row.fill(0);
        for (&av, b_row) in a_row.iter().zip(b.chunks_exact(n.max(1))) {
            // A `for` loop: `for_each` (an out-of-line `Zip::fold`) would lose the target features.
            for (c, &bv) in acc_row.iter_mut().zip(b_row) {
                *c = c.wrapping_add(av * bv);
            }
        }
    }
}

/// Numpy broadcasting of two batch shapes: the operands' batch indices of each output batch.
struct Broadcast {
    count: usize,
    dims: Vec<usize>,
    a_strides: Vec<usize>,
    b_strides: Vec<usize>,
}

impl Broadcast {
    fn new(a: &[usize], b: &[usize]) -> Option<Broadcast> {
        let rank = a.len().max(b.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (a, b) = (pad(a), pad(b));
        let dims = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                if x == y || y == 1 {
                    Some(x)
                } else if x == 1 {
                    Some(y)
                } else {
                    None
                }
            })
            .collect::<Option<Vec<_>>>()?;
        // Row-major strides of each operand's batch, 0 along a broadcast dim.
        let strides = |s: &[usize]| {
            let mut st = vec![0; rank];
            let mut step = 1;
            for d in (0..rank).rev() {
                st[d] = if s[d] == 1 { 0 } else { step };
                step *= s[d];
            }
            st
        };
        Some(Broadcast { count: dims.iter().product(), a_strides: strides(&a), b_strides: strides(&b), dims })
    }

    fn operands(&self, mut i: usize) -> (usize, usize) {
        let (mut ia, mut ib) = (0, 0);
        for d in (0..self.dims.len()).rev() {
            let c = i % self.dims[d];
            i /= self.dims[d];
            ia += c * self.a_strides[d];
            ib += c * self.b_strides[d];
        }
        (ia, ib)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Isa;
    use crate::requant::requant_exact;

    /// Seeded codes (xorshift): reproducible without a dependency.
    fn codes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 56) as u8
            })
            .collect()
    }

    /// Codes of `code` as i32 (the operand type the kernels take generically), seeded; with
    /// `extreme`, the code farthest from the zero point `z` everywhere (the largest products).
    fn typed(code: Code, z: i32, len: usize, seed: u64, extreme: bool) -> Vec<i32> {
        let far = if z - code.min() >= code.max() - z { code.min() } else { code.max() };
        codes(len, seed).into_iter().map(|c| if extreme { far } else { i32::from(c) + code.min() }).collect()
    }

    /// `Σ_k (a − za)(b − zb)` in i64, row-major `m × n`, asserted to fit i32.
    fn exact_sums(a: &[i32], za: i32, b: &[i32], zb: i32, (m, k, n): (usize, usize, usize)) -> Vec<i32> {
        let mut s = vec![0i32; m * n];
        for (e, s) in s.iter_mut().enumerate() {
            let (i, j) = (e / n, e % n);
            let v: i64 = (0..k).map(|kk| i64::from(a[i * k + kk] - za) * i64::from(b[kk * n + j] - zb)).sum();
            *s = i32::try_from(v).expect("the cases stay within max_k");
        }
        s
    }

    /// A's code type and zero point, B's, (m, k, n), and whether every code is the extreme one.
    type Case = (Code, i32, Code, i32, (usize, usize, usize), bool);

    /// Tails in every dimension (m not a multiple of the AVX2 tile's 6 rows or the VNNI tile's 4,
    /// n of 16 columns or of the 4-panel tile, k of 4), both code types on either side, zero points at the ends of their
    /// types, and K at the i32 bound with every product at its largest magnitude.
    fn cases() -> Vec<Case> {
        let (u, i) = (Code::U8, Code::I8);
        vec![
            (u, 121, u, 124, (64, 32, 64), false),
            (u, 0, u, 64, (64, 64, 32), false),
            (u, 0, u, 255, (5, 7, 17), false),
            (u, 255, u, 0, (1, 1, 1), false),
            (i, -128, i, 127, (9, 13, 33), false),
            (i, 127, u, 0, (6, 3, 80), false),
            (u, 0, i, -128, (4, 65, 16), false),
            (u, 3, i, 0, (7, 2, 113), false),
            (u, 0, u, 127, (3, max_k(0, u, 127, u), 17), true),
            (i, -128, i, 127, (2, max_k(-128, i, 127, i), 5), true),
            (i, 0, u, 255, (5, max_k(0, i, 255, u), 3), true),
        ]
    }

    #[test]
    fn every_path_gives_the_exact_sums_and_their_rounding_with_tails_extreme_zero_points_and_k_at_the_bound() {
        for (case, &(ca, za, cb, zb, (m, k, n), extreme)) in cases().iter().enumerate() {
            let (a, b) = (typed(ca, za, m * k, 3 + case as u64, extreme), typed(cb, zb, k * n, 5 + case as u64, extreme));
            let sums = exact_sums(&a, za, &b, zb, (m, k, n));
            if extreme {
                assert!(sums.iter().all(|&s| s.unsigned_abs() > (i32::MAX as u32) / 2 + 1), "case {case}: near the bound");
            }
            let (sa, sb) = (0.0213f32, 0.00391f32);
            let sy = sa * sb * (k as f32).sqrt() * 37.0;
            let mm = MatMulCodes::new(sa, za, ca, sb, zb, cb, sy, 128, Code::U8).unwrap();
            let (ratio, out_code) = (Ratio::new(sa, sb, sy).unwrap(), Output::new(128, Code::U8).unwrap());
            let want: Vec<u8> = sums.iter().map(|&s| requant_exact(s, 0, &ratio, out_code) as u8).collect();
            for kernels in Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()) {
                let mut y = vec![0u8; m * n];
                mm.run(kernels, &a, &[m, k], &b, &[k, n], &mut y).unwrap();
                assert_eq!(y, want, "case {case} on {kernels:?}");
                #[cfg(target_arch = "x86_64")]
                if kernels.isa() == Isa::Avx512Vnni {
                    // The integer sums themselves (the rounding above could hide an error).
                    let (mut bytes, mut acc) = (Bytes::default(), vec![0i32; m * n]);
                    assert!(bytes.pack(&mm, &a, m, k, &b, n), "case {case}");
                    // SAFETY: the path is available and `pack` returned true.
                    unsafe { bytes.products(m, n, &mut acc) };
                    assert_eq!(acc, sums, "case {case}: VNNI sums");
                }
                #[cfg(target_arch = "x86_64")]
                if kernels.isa() == Isa::Avx2 {
                    let (mut pairs, mut acc) = (Pairs::default(), vec![0i32; m * n]);
                    // SAFETY (both calls): the path is available.
                    assert!(unsafe { pairs.pack(&mm, &a, m, k, &b, n) }, "case {case}");
                    unsafe { pairs.products(m, n, &mut acc) };
                    assert_eq!(acc, sums, "case {case}: AVX2 sums");
                }
            }
        }
    }

    #[test]
    fn codes_a_path_cannot_encode_leave_it_for_the_i32_one() {
        let mm = MatMulCodes::new(1.0, 0, Code::U8, 1.0, 0, Code::I8, 1.0, 0, Code::I8).unwrap();
        // 256 is no u8, 128 no i8: the VNNI `pack` refuses them; 40000 and −32768 are no i16
        // pair half either (the AVX2 `pack` refuses those, it takes the first two); every path
        // computes the same codes.
        // The sums (257, 129, 40001, −32767) saturate the i8 output.
        for (a, b, in_i16, want) in [
            (vec![256, 1], vec![1, 1], true, 127),
            (vec![1, 1], vec![128, 1], true, 127),
            (vec![40000, 1], vec![1, 1], false, 127),
            (vec![1, 1], vec![-32768, 1], false, -128),
        ] {
            #[cfg(target_arch = "x86_64")]
            assert!(!Bytes::default().pack(&mm, &a, 1, 2, &b, 1));
            #[cfg(target_arch = "x86_64")]
            if Isa::available().contains(&Isa::Avx2) {
                // SAFETY: the host has AVX2.
                assert_eq!(unsafe { Pairs::default().pack(&mm, &a, 1, 2, &b, 1) }, in_i16, "{a:?} × {b:?}");
            }
            let runs: Vec<[i8; 1]> = Isa::available()
                .into_iter()
                .map(|isa| {
                    let mut y = [0i8; 1];
                    mm.run(Kernels::new(isa).unwrap(), &a, &[1, 2], &b, &[2, 1], &mut y).unwrap();
                    y
                })
                .collect();
            assert!(runs.iter().all(|y| *y == [want]), "{runs:?}");
        }
    }

    #[test]
    fn every_output_is_the_exact_rational_of_its_sum_on_broadcast_batches() {
        let (sa, sb, sy, za, zb, zy) = (0.0213f32, 0.00391f32, 0.00517f32, 131, 7, 128);
        let mm = MatMulCodes::new(sa, za, Code::U8, sb, zb, Code::U8, sy, zy, Code::U8).unwrap();
        let ratio = Ratio::new(sa, sb, sy).unwrap();
        let out_code = Output::new(zy, Code::U8).unwrap();
        // a: [2, 3, 5, 7] (batch 2×3), b: [3, 7, 4] (broadcast along the first batch dim).
        let (a_shape, b_shape) = ([2, 3, 5, 7], [3, 7, 4]);
        let a = codes(2 * 3 * 5 * 7, 1);
        let b = codes(3 * 7 * 4, 2);
        for kernels in Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()) {
            let mut y = vec![0u8; 2 * 3 * 5 * 4];
            mm.run(kernels, &a, &a_shape, &b, &b_shape, &mut y).unwrap();
            for (batch, block) in y.chunks(20).enumerate() {
                let (ia, ib) = (batch, batch % 3);
                for (e, &got) in block.iter().enumerate() {
                    let (i, j) = (e / 4, e % 4);
                    let acc: i32 = (0..7).map(|kk| (i32::from(a[ia * 35 + i * 7 + kk]) - za) * (i32::from(b[ib * 28 + kk * 4 + j]) - zb)).sum();
                    assert_eq!(i32::from(got), requant_exact(acc, 0, &ratio, out_code), "{kernels:?} batch {batch} ({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn k_beyond_the_i32_bound_is_an_error_not_a_wrapped_sum() {
        let k = max_k(0, Code::U8, 127, Code::U8);
        assert_eq!(k, (i32::MAX / (255 * 128)) as usize);
        let mm = MatMulCodes::new(1.0, 0, Code::U8, 1.0, 127, Code::U8, 1.0, 0, Code::U8).unwrap();
        let (a, b) = (vec![255u8; k + 1], vec![0u8; k + 1]);
        let mut y = [0u8; 1];
        let e = mm.run(Kernels::new(Isa::Portable).unwrap(), &a, &[1, k + 1], &b, &[k + 1, 1], &mut y).unwrap_err();
        assert!(format!("{e:?}").contains("beyond"), "{e:?}");
        mm.run(Kernels::new(Isa::Portable).unwrap(), &a[..k], &[1, k], &b[..k], &[k, 1], &mut y).unwrap();
        assert_eq!(y[0], 0, "−127·255·K saturates to 0");
    }

    #[test]
    fn shapes_that_do_not_match_are_errors() {
        let mm = MatMulCodes::new(1.0, 0, Code::U8, 1.0, 0, Code::I8, 1.0, 0, Code::I8).unwrap();
        let mut y = [0i8; 6];
        assert!(mm.run(Kernels::new(Isa::Portable).unwrap(), &[0u8; 6], &[2, 3], &[0i8; 6], &[2, 3], &mut y).is_err(), "inner dims 3 ≠ 2");
        assert!(mm.run(Kernels::new(Isa::Portable).unwrap(), &[0u8; 12], &[2, 2, 3], &[0i8; 18], &[3, 3, 2], &mut y).is_err(), "batch 2 vs 3");
        assert!(mm.run(Kernels::new(Isa::Portable).unwrap(), &[0u8; 3], &[3], &[0i8; 3], &[3, 1], &mut y).is_err(), "rank 1");
    }
}
