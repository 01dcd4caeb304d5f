//! f32 matrix products: [`sgemm`] (the core), ONNX [`matmul`] (batched, numpy broadcasting of the
//! batch axes, 1-D operands promoted) and ONNX [`gemm`] (α, β, transposes, C broadcast).
//!
//! Evaluation order of every output element `C[i][j]`: `s = +0`, then `s = s + A[i][k]·B[k][j]`
//! for k = 0, 1, …, K−1 in that order, each product and each sum rounded on its own (no FMA, no
//! reassociation; K is blocked for the cache, but a block continues from the stored partial sum).
//! Gemm then computes `α·s` and, when C is given and β ≠ 0, `(α·s) + (β·c)` — three rounded
//! operations. The loops run over tiles of R rows × C columns of accumulators with the K loop
//! outermost, so the compiler vectorizes across columns (independent outputs) only. The kernel
//! path picks the tile (portable/SSE2 4 × 8, AVX2 4 × 24, AVX-512 4 × 64: the accumulators fit the
//! registers) and the instruction set for the same safe code; Rust never contracts `a·b + c` into
//! an FMA, under `#[target_feature]` neither, so every path and every optimisation level gives the
//! same bits (`tests/float_linear.rs` runs each path against a naive loop).
//!
//! When the products and partial sums are exact (power-of-two scales with few significant bits:
//! P2-exact groups), any order gives the same value, so these bits are also ONNX Runtime's (whose
//! MLAS kernels block K and use FMA where the CPU has it); otherwise they are a fixed, documented
//! evaluation that differs from ONNX Runtime's by rounding.

use super::{ShapeError, bail, broadcast_shape, check_len, numel};
use crate::isa::{Isa, Kernels};

/// `out = A·B`: `a` row-major `m × k`, `b` row-major `k × n`, `out` row-major `m × n`, on the
/// kernel path `kernels` (every path gives the same bits; only the tile differs).
pub fn sgemm(kernels: Kernels, m: usize, n: usize, k: usize, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("gemm A", a.len(), &[m, k])?;
    check_len("gemm B", b.len(), &[k, n])?;
    check_len("gemm output", out.len(), &[m, n])?;
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
        // the function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { blocks_avx512(m, n, k, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { blocks_avx2(m, n, k, a, b, out) },
        // SSE2 (x86-64's baseline): 4 × 8 accumulators, 8 xmm registers.
        _ => blocks::<4, 8>(m, n, k, a, b, out),
    }
    Ok(())
}

/// 4 × 64 accumulators: 16 zmm registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn blocks_avx512(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], out: &mut [f32]) {
    blocks::<4, 64>(m, n, k, a, b, out)
}

/// 4 × 24 accumulators: 12 ymm registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks_avx2(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], out: &mut [f32]) {
    blocks::<4, 24>(m, n, k, a, b, out)
}

/// Columns per block of B kept in cache across the row tiles of A.
const NC: usize = 512;
/// Depth per block: a `KC × NC` block of B is 512 KiB (L2).
const KC: usize = 256;

/// The product in blocks of `KC × NC` of B (kept in cache while every row tile of A passes over
/// it), each as `R × C` tiles (the last rows one at a time, the last columns as partial tiles),
/// each tile with its K loop outermost. A K block after the first continues from the partial
/// sums stored in `out` (f32 stores are exact), so every output's sum still runs k = 0, 1, …
/// in order from +0.
#[inline(always)]
fn blocks<const R: usize, const C: usize>(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], out: &mut [f32]) {
    if k == 0 {
        out.fill(0.0);
        return;
    }
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for kc in (0..k).step_by(KC) {
            let depth = KC.min(k - kc);
            let first = kc == 0;
            let b = &b[kc * n + jc..];
            let mut i0 = 0;
            while i0 < m {
                let rows = if m - i0 >= R { R } else { 1 };
                for j0 in (0..nc).step_by(C) {
                    let cols = C.min(nc - j0);
                    let (a, out) = (&a[i0 * k + kc..], &mut out[i0 * n + jc + j0..]);
                    match (rows == R, cols == C) {
                        (true, true) => tile::<R, C>(depth, k, a, &b[j0..], n, out, first),
                        (false, true) => tile::<1, C>(depth, k, a, &b[j0..], n, out, first),
                        _ => tile_edge::<R, C>(rows, cols, depth, k, a, &b[j0..], n, out, first),
                    }
                }
                i0 += rows;
            }
        }
    }
}

/// A full tile: `R × C` accumulators (kept in registers), starting from +0 (`first`) or from
/// the partial sums in `out`, then `depth` steps of K; `a` rows are `lda` apart, `b` and `out`
/// rows `ldb`.
#[allow(clippy::too_many_arguments)] // the tile's geometry
#[inline(always)]
fn tile<const R: usize, const C: usize>(depth: usize, lda: usize, a: &[f32], b: &[f32], ldb: usize, out: &mut [f32], first: bool) {
    let mut acc = [[0f32; C]; R];
    if !first {
        for (r, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&out[r * ldb..][..C]);
        }
    }
    for kk in 0..depth {
        let brow: &[f32; C] = b[kk * ldb..][..C].try_into().expect("a full tile row");
        for (r, row) in acc.iter_mut().enumerate() {
            let av = a[r * lda + kk];
            for (s, &bv) in row.iter_mut().zip(brow) {
                *s += av * bv;
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        out[r * ldb..][..C].copy_from_slice(row);
    }
}

/// A partial tile at the right edge: the same order, extents known at run time.
#[allow(clippy::too_many_arguments)] // the tile's geometry
#[inline(always)]
fn tile_edge<const R: usize, const C: usize>(
    rows: usize,
    cols: usize,
    depth: usize,
    lda: usize,
    a: &[f32],
    b: &[f32],
    ldb: usize,
    out: &mut [f32],
    first: bool,
) {
    let mut acc = [[0f32; C]; R];
    if !first {
        for (r, row) in acc.iter_mut().enumerate().take(rows) {
            row[..cols].copy_from_slice(&out[r * ldb..][..cols]);
        }
    }
    for kk in 0..depth {
        let brow = &b[kk * ldb..][..cols];
        for (r, row) in acc.iter_mut().enumerate().take(rows) {
            let av = a[r * lda + kk];
            for (s, &bv) in row[..cols].iter_mut().zip(brow) {
                *s += av * bv;
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        out[r * ldb..][..cols].copy_from_slice(&row[..cols]);
    }
}

/// Row-major transpose of an `r × c` matrix.
fn transpose(x: &[f32], r: usize, c: usize) -> Vec<f32> {
    let mut t = vec![0f32; x.len()];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = x[i * c + j];
        }
    }
    t
}

/// ONNX MatMul's output shape (numpy `matmul`: a 1-D A gains a leading 1, a 1-D B a trailing 1,
/// both dropped from the result; batch axes broadcast).
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if a.is_empty() || b.is_empty() {
        bail!("MatMul: scalar operand (shapes {a:?}, {b:?})");
    }
    let (am, bm) = (promote_a(a), promote_b(b));
    let (ra, rb) = (am.len(), bm.len());
    if am[ra - 1] != bm[rb - 2] {
        bail!("MatMul: shapes {a:?} and {b:?}: inner extents {} and {} differ", am[ra - 1], bm[rb - 2]);
    }
    let mut shape = broadcast_shape(&am[..ra - 2], &bm[..rb - 2])?;
    if a.len() > 1 {
        shape.push(am[ra - 2]);
    }
    if b.len() > 1 {
        shape.push(bm[rb - 1]);
    }
    Ok(shape)
}

fn promote_a(a: &[usize]) -> Vec<usize> {
    if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() }
}

fn promote_b(b: &[usize]) -> Vec<usize> {
    if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() }
}

/// ONNX MatMul: `out` has [`matmul_shape`]; each batch's product is one [`sgemm`].
pub fn matmul(kernels: Kernels, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("MatMul A", a.len(), a_shape)?;
    check_len("MatMul B", b.len(), b_shape)?;
    let shape = matmul_shape(a_shape, b_shape)?;
    check_len("MatMul output", out.len(), &shape)?;
    let (am, bm) = (promote_a(a_shape), promote_b(b_shape));
    let (ra, rb) = (am.len(), bm.len());
    let (m, k, n) = (am[ra - 2], am[ra - 1], bm[rb - 1]);
    let batch = broadcast_shape(&am[..ra - 2], &bm[..rb - 2])?;
    let (sa, sb) = (super::broadcast_strides(&am[..ra - 2], &batch), super::broadcast_strides(&bm[..rb - 2], &batch));
    let mut index = vec![0usize; batch.len()];
    for c in out.chunks_mut((m * n).max(1)).take(numel(&batch)) {
        let oa: usize = index.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let ob: usize = index.iter().zip(&sb).map(|(i, s)| i * s).sum();
        sgemm(kernels, m, n, k, &a[oa * m * k..][..m * k], &b[ob * k * n..][..k * n], c)?;
        for axis in (0..batch.len()).rev() {
            index[axis] += 1;
            if index[axis] < batch[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Ok(())
}

/// ONNX Gemm's attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmParams {
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl Default for GemmParams {
    fn default() -> GemmParams {
        GemmParams { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: false }
    }
}

/// ONNX Gemm: `out = α·op(A)·op(B) + β·C`, A and B 2-D (transposed into scratch copies when
/// `trans_*`), C (optional) unidirectionally broadcast to `M × N`.
#[allow(clippy::too_many_arguments)] // the path, the attributes and ONNX's three inputs with shapes
pub fn gemm(
    kernels: Kernels,
    p: &GemmParams,
    a: &[f32],
    a_shape: [usize; 2],
    b: &[f32],
    b_shape: [usize; 2],
    c: Option<(&[f32], &[usize])>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check_len("Gemm A", a.len(), &a_shape)?;
    check_len("Gemm B", b.len(), &b_shape)?;
    let (m, k) = if p.trans_a { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
    let (kb, n) = if p.trans_b { (b_shape[1], b_shape[0]) } else { (b_shape[0], b_shape[1]) };
    if k != kb {
        bail!("Gemm: A {a_shape:?} (transA {}) and B {b_shape:?} (transB {}): inner extents {k} and {kb} differ", p.trans_a, p.trans_b);
    }
    let ta = p.trans_a.then(|| transpose(a, a_shape[0], a_shape[1]));
    let tb = p.trans_b.then(|| transpose(b, b_shape[0], b_shape[1]));
    sgemm(kernels, m, n, k, ta.as_deref().unwrap_or(a), tb.as_deref().unwrap_or(b), out)?;
    let bias = match c {
        Some((c, c_shape)) if p.beta != 0.0 => {
            check_len("Gemm C", c.len(), c_shape)?;
            if c_shape.len() > 2 || broadcast_shape(c_shape, &[m, n])? != [m, n] {
                bail!("Gemm: C {c_shape:?} does not broadcast to [{m}, {n}]");
            }
            Some((c, super::broadcast_strides(c_shape, &[m, n])))
        }
        _ => None,
    };
    for (i, row) in out.chunks_mut(n.max(1)).take(m).enumerate() {
        match &bias {
            None => row.iter_mut().for_each(|y| *y *= p.alpha),
            Some((c, s)) => row.iter_mut().enumerate().for_each(|(j, y)| *y = *y * p.alpha + p.beta * c[i * s[0] + j * s[1]]),
        }
    }
    Ok(())
}
