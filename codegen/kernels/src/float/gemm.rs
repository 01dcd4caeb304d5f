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

use super::dq::Operand;
use super::{ShapeError, bail, broadcast_shape, check_len, numel};
use crate::isa::{Isa, Kernels};

/// `out = A·B`: `a` row-major `m × k`, `b` row-major `k × n`, `out` row-major `m × n`, on the
/// kernel path `kernels` (every path gives the same bits; only the tile differs).
pub fn sgemm(kernels: Kernels, m: usize, n: usize, k: usize, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("gemm A", a.len(), &[m, k])?;
    check_len("gemm B", b.len(), &[k, n])?;
    product(kernels, m, n, k, Matrix::plain(a.into()), Matrix::plain(b.into()), out)
}

/// A matrix operand of [`product`]: the elements of `data` from `offset` on, row-major, or
/// (`transposed`) the transpose of the row-major matrix stored there. Elements are read where
/// they are stored when they are f32 in place; otherwise a block at a time is decoded (codes,
/// [`Operand::Codes`]) or gathered (transposed) into a workspace of one cache block.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub data: Operand<'a>,
    pub offset: usize,
    pub transposed: bool,
}

impl<'a> Matrix<'a> {
    /// `data` as it is stored, row-major.
    pub fn plain(data: Operand<'a>) -> Matrix<'a> {
        Matrix { data, offset: 0, transposed: false }
    }

    /// The f32 elements in place, from `offset` on, when no decoding or gathering is needed.
    fn direct(&self) -> Option<&'a [f32]> {
        match self.data {
            Operand::F32(v) if !self.transposed => Some(&v[self.offset..]),
            _ => None,
        }
    }

    /// Elements `(r0 + r, c0 + c)` for `r < rows`, `c < cols` of the `total_rows × total_cols`
    /// matrix into `out` (rows `ldo` apart).
    #[allow(clippy::too_many_arguments)] // the block's geometry
    fn block(&self, r0: usize, rows: usize, c0: usize, cols: usize, total_rows: usize, total_cols: usize, out: &mut [f32], ldo: usize) {
        if !self.transposed {
            for r in 0..rows {
                self.data.decode(self.offset + (r0 + r) * total_cols + c0, &mut out[r * ldo..][..cols]);
            }
            return;
        }
        // Stored `total_cols × total_rows`: logical column c is a stored row, read in runs.
        let mut run = [0f32; 64];
        for c in 0..cols {
            for r in (0..rows).step_by(run.len()) {
                let len = run.len().min(rows - r);
                self.data.decode(self.offset + (c0 + c) * total_rows + r0 + r, &mut run[..len]);
                for (i, &v) in run[..len].iter().enumerate() {
                    out[(r + i) * ldo + c] = v;
                }
            }
        }
    }

    fn check(&self, what: &str, rows: usize, cols: usize) -> Result<(), ShapeError> {
        if self.offset + rows * cols > self.data.len() {
            bail!("{what}: {} elements from {}, shape [{rows}, {cols}] needs {}", self.data.len(), self.offset, rows * cols);
        }
        Ok(())
    }
}

/// `out = A·B` with A `m × k`, B `k × n` read as [`Matrix`] operands: [`sgemm`]'s order, so its
/// bits — a decoded element is the same f32 the float copy held, only where it is stored differs.
pub fn product(kernels: Kernels, m: usize, n: usize, k: usize, a: Matrix<'_>, b: Matrix<'_>, out: &mut [f32]) -> Result<(), ShapeError> {
    a.check("gemm A", m, k)?;
    b.check("gemm B", k, n)?;
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
unsafe fn blocks_avx512(m: usize, n: usize, k: usize, a: Matrix<'_>, b: Matrix<'_>, out: &mut [f32]) {
    blocks::<4, 64>(m, n, k, a, b, out)
}

/// 4 × 24 accumulators: 12 ymm registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks_avx2(m: usize, n: usize, k: usize, a: Matrix<'_>, b: Matrix<'_>, out: &mut [f32]) {
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
/// in order from +0. A B block that is not f32 in place is decoded once into `bw` (`KC × NC`),
/// an A row tile into `aw` (`R × KC`) per B block: the tiles then read the same values.
#[inline(always)]
fn blocks<const R: usize, const C: usize>(m: usize, n: usize, k: usize, a: Matrix<'_>, b: Matrix<'_>, out: &mut [f32]) {
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let (mut aw, mut bw) = (Vec::new(), Vec::new());
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for kc in (0..k).step_by(KC) {
            let depth = KC.min(k - kc);
            let first = kc == 0;
            let (bb, ldb) = match b.direct() {
                Some(b) => (&b[kc * n + jc..], n),
                None => {
                    bw.resize(depth * nc, 0.0);
                    b.block(kc, depth, jc, nc, k, n, &mut bw, nc);
                    (&bw[..], nc)
                }
            };
            let mut i0 = 0;
            while i0 < m {
                let rows = if m - i0 >= R { R } else { 1 };
                let (aa, lda) = match a.direct() {
                    Some(a) => (&a[i0 * k + kc..], k),
                    None => {
                        aw.resize(rows * depth, 0.0);
                        a.block(i0, rows, kc, depth, m, k, &mut aw, depth);
                        (&aw[..], depth)
                    }
                };
                for j0 in (0..nc).step_by(C) {
                    let cols = C.min(nc - j0);
                    let out = &mut out[i0 * n + jc + j0..];
                    match (rows == R, cols == C) {
                        (true, true) => tile::<R, C>(depth, lda, aa, &bb[j0..], ldb, out, n, first),
                        (false, true) => tile::<1, C>(depth, lda, aa, &bb[j0..], ldb, out, n, first),
                        _ => tile_edge::<R, C>(rows, cols, depth, lda, aa, &bb[j0..], ldb, out, n, first),
                    }
                }
                i0 += rows;
            }
        }
    }
}

/// A full tile: `R × C` accumulators (kept in registers), starting from +0 (`first`) or from
/// the partial sums in `out`, then `depth` steps of K; `a` rows are `lda` apart, `b` rows `ldb`,
/// `out` rows `ldo`.
#[allow(clippy::too_many_arguments)] // the tile's geometry
#[inline(always)]
fn tile<const R: usize, const C: usize>(depth: usize, lda: usize, a: &[f32], b: &[f32], ldb: usize, out: &mut [f32], ldo: usize, first: bool) {
    let mut acc = [[0f32; C]; R];
    if !first {
        for (r, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&out[r * ldo..][..C]);
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
        out[r * ldo..][..C].copy_from_slice(row);
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
    ldo: usize,
    first: bool,
) {
    let mut acc = [[0f32; C]; R];
    if !first {
        for (r, row) in acc.iter_mut().enumerate().take(rows) {
            row[..cols].copy_from_slice(&out[r * ldo..][..cols]);
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
        out[r * ldo..][..cols].copy_from_slice(&row[..cols]);
    }
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
    matmul_operands(kernels, a.into(), a_shape, b.into(), b_shape, out)
}

/// [`matmul`] with operands that may be codes decoded on the fly (a dequantized constant
/// weight): the same products in the same order, so the same bits.
pub fn matmul_operands(kernels: Kernels, a: Operand<'_>, a_shape: &[usize], b: Operand<'_>, b_shape: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
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
        let a = Matrix { data: a, offset: oa * m * k, transposed: false };
        let b = Matrix { data: b, offset: ob * k * n, transposed: false };
        product(kernels, m, n, k, a, b, c)?;
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

/// ONNX Gemm: `out = α·op(A)·op(B) + β·C`, A and B 2-D (a transposed operand read through
/// [`Matrix`], a block at a time), C (optional) unidirectionally broadcast to `M × N`.
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
    gemm_operands(kernels, p, a.into(), a_shape, b.into(), b_shape, c.map(|(c, s)| (c.into(), s)), out)
}

/// [`gemm`] with operands that may be codes decoded on the fly (a dequantized constant weight or
/// bias): the same operations in the same order, so the same bits.
#[allow(clippy::too_many_arguments)] // the path, the attributes and ONNX's three inputs with shapes
pub fn gemm_operands(
    kernels: Kernels,
    p: &GemmParams,
    a: Operand<'_>,
    a_shape: [usize; 2],
    b: Operand<'_>,
    b_shape: [usize; 2],
    c: Option<(Operand<'_>, &[usize])>,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check_len("Gemm A", a.len(), &a_shape)?;
    check_len("Gemm B", b.len(), &b_shape)?;
    let (m, k) = if p.trans_a { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
    let (kb, n) = if p.trans_b { (b_shape[1], b_shape[0]) } else { (b_shape[0], b_shape[1]) };
    if k != kb {
        bail!("Gemm: A {a_shape:?} (transA {}) and B {b_shape:?} (transB {}): inner extents {k} and {kb} differ", p.trans_a, p.trans_b);
    }
    let (a, b) = (Matrix { data: a, offset: 0, transposed: p.trans_a }, Matrix { data: b, offset: 0, transposed: p.trans_b });
    product(kernels, m, n, k, a, b, out)?;
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
            Some((c, s)) => row.iter_mut().enumerate().for_each(|(j, y)| *y = *y * p.alpha + p.beta * c.get(i * s[0] + j * s[1])),
        }
    }
    Ok(())
}
