//! `C[m][n] = Σ_k (a[m][k] − za)(b[k][n] − zb[n])` for u8 activations and packed i8/u8 weights.
//!
//! Computed as the raw sums `Σ a·b` (the microkernel of the chosen path) plus the zero-point
//! corrections `− za·Σ_k b[k][n] − zb[n]·Σ_k a[m][k] + K·za·zb[n]`, the weight column sums coming
//! from [`PackedB`] (computed once). All arithmetic is i32 wrapping, on every path: the result is
//! the exact integer modulo 2^32, hence exact whenever the true value fits in i32 — which
//! [`accumulator_bound`] tells the caller (the compiler checks it from the actual weights).

use crate::isa::{Isa, Kernels};
use crate::micro;
use crate::pack::{KR, PackedB};
use crate::requant::{CodeOut, Columns, Form, Operands, Plan, Prepared, count_fallbacks, operands, requant_block, requantize};
use std::borrow::Cow;
use std::fmt;

/// Operands of the wrong size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GemmError {
    /// `a.len() != m·k`.
    A { expected: usize, got: usize },
    /// `c.len() != m·n`.
    C { expected: usize, got: usize },
    /// The requantization's plan, bias or output do not fit the product.
    Requant(String),
}

impl fmt::Display for GemmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GemmError::A { expected, got } => {
                write!(f, "activations: {got} codes, expected {expected}")
            }
            GemmError::C { expected, got } => {
                write!(f, "accumulators: {got} slots, expected {expected}")
            }
            GemmError::Requant(e) => write!(f, "requantization: {e}"),
        }
    }
}

impl std::error::Error for GemmError {}

/// The largest `|C[m][n]|` any u8 activation row can produce with these weights (per column, maximised):
/// `max_n Σ_k max(|0 − za|, |255 − za|)·|b[k][n] − zb[n]|`, as i64. C is exact when this is ≤ i32::MAX.
pub fn accumulator_bound(b: &PackedB, za: u8) -> i64 {
    let amax = i64::from(za.max(255 - za));
    let (k4, stride, data) = (b.k4(), b.panel_stride(), b.data());
    (0..b.n())
        .map(|col| {
            let p = &data[(col / crate::NR) * stride..][..stride];
            let zb = i64::from(b.zero_points()[col]);
            (0..b.k())
                .map(|k| {
                    debug_assert!(k / KR < k4);
                    let v = i64::from(p[((k / KR) * crate::NR + col % crate::NR) * KR + k % KR]);
                    amax * (v - zb).abs()
                })
                .sum::<i64>()
        })
        .max()
        .unwrap_or(0)
}

/// `c = (a − za)·(b − zb)` with `a` row-major `m × k`, `c` row-major `m × n`.
pub fn gemm_u8(kernels: Kernels, a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32]) -> Result<(), GemmError> {
    gemm_with(kernels, a, m, za, b, c, true, &mut |_| {})
}

/// The GEMM requantized: `out[m][n] = sat(rne((c[m][n] + bias[n])·sx·sw[n]/sy) + zy)` by `plan`
/// (what [`gemm_u8`] then [`requantize`] give, the same codes). With the certified form (the one
/// the generated code uses) each finished block of `c` is requantized right after the kernel
/// wrote it, while it is in L1 (the VNNI path, and the AVX2 one from 32 rows; the AMX tiles
/// requantize their own 32 × 128 buffer and leave `c` alone); `c` is the caller's `m × n`
/// scratch. Returns the number of exact fallbacks (also counted in
/// [`crate::requant::fallback_hits`]).
#[allow(clippy::too_many_arguments)] // the product's and the requantization's operands
pub fn gemm_u8_requant<C: CodeOut>(
    kernels: Kernels,
    a: &[u8],
    m: usize,
    za: u8,
    b: &PackedB,
    plan: &Plan,
    bias: Option<&[i32]>,
    c: &mut [i32],
    out: &mut [C],
) -> Result<u64, GemmError> {
    let n = b.n();
    if bias.is_some_and(|b| b.len() != n) {
        return Err(GemmError::Requant(format!("a bias of {:?} for {n} columns", bias.map(<[i32]>::len))));
    }
    let bias: Vec<i32> = bias.map_or_else(|| vec![0; n], <[i32]>::to_vec);
    let ops = match &plan.form {
        Form::Certified(f) if fused(kernels) && (f.len() == 1 || f.len() == n) => Some(operands(&bias, f)),
        _ => None,
    };
    requantized(kernels, a, m, za, b, plan, &bias, ops.as_ref(), c, out)
}

/// [`gemm_u8_requant`] with the requantization made once ([`Prepared`]: its bias has one code
/// per column of `b`).
#[allow(clippy::too_many_arguments)] // the product's and the requantization's operands
pub fn gemm_u8_requant_prepared<C: CodeOut>(
    kernels: Kernels,
    a: &[u8],
    m: usize,
    za: u8,
    b: &PackedB,
    rq: &Prepared,
    c: &mut [i32],
    out: &mut [C],
) -> Result<u64, GemmError> {
    requantized(kernels, a, m, za, b, rq.plan(), rq.bias(), rq.operands(), c, out)
}

/// Whether the path requantizes finished blocks of the product (the fused form): VNNI and AVX2.
fn fused(kernels: Kernels) -> bool {
    matches!(kernels.isa(), Isa::Avx512Vnni | Isa::Avx2)
}

/// The fused form where the path has it (VNNI or AVX2, certified, the plan's operands at hand),
/// the product then [`requantize`] otherwise.
#[allow(clippy::too_many_arguments)] // the product's and the requantization's operands
fn requantized<C: CodeOut>(
    kernels: Kernels,
    a: &[u8],
    m: usize,
    za: u8,
    b: &PackedB,
    plan: &Plan,
    bias: &[i32],
    ops: Option<&Operands>,
    c: &mut [i32],
    out: &mut [C],
) -> Result<u64, GemmError> {
    let n = b.n();
    let (forms, ops) = match (&plan.form, ops) {
        (Form::Certified(f), Some(ops)) if fused(kernels) => (f, ops),
        _ => {
            gemm_u8(kernels, a, m, za, b, c)?;
            return requantize(kernels, plan, c, n, Some(bias), out).map(|s| s.fallbacks).map_err(|e| GemmError::Requant(e.to_string()));
        }
    };
    if C::CODE != plan.output.code() || out.len() != m * n || (forms.len() != 1 && forms.len() != n) || bias.len() != n {
        return Err(GemmError::Requant(format!(
            "{:?} plan of {} forms into {} {:?} codes, bias of {}, for {m} × {n}",
            plan.output.code(),
            forms.len(),
            out.len(),
            C::CODE,
            bias.len()
        )));
    }
    let cs = Columns::new(ops, bias, forms, plan.output);
    let mut fallbacks = 0;
    gemm_with(kernels, a, m, za, b, c, false, &mut |f| {
        fallbacks += requant_block(kernels, f, n, &cs, out);
    })?;
    count_fallbacks(fallbacks);
    Ok(fallbacks)
}

/// The product, then `epilogue` on finished blocks (per tile on the VNNI path, per 32 × 128 block
/// on the AMX tiles, on the AVX2 one from [`micro::avx2::WIDE_ROWS`] rows, once on the whole of
/// `c` otherwise). Without `fill_c` the epilogue is all the caller wants and `c` is scratch: the
/// AMX tiles then keep each block in a buffer of their own, in L1, and never write `c`.
#[allow(clippy::too_many_arguments)] // the product's operands and what becomes of it
fn gemm_with(kernels: Kernels, a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32], fill_c: bool, epilogue: &mut micro::Epilogue) -> Result<(), GemmError> {
    let (k, n) = (b.k(), b.n());
    if a.len() != m * k {
        return Err(GemmError::A { expected: m * k, got: a.len() });
    }
    if c.len() != m * n {
        return Err(GemmError::C { expected: m * n, got: c.len() });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if kernels.path() == Isa::Avx512Amx && m >= micro::amx::MIN_ROWS && k >= micro::amx::MIN_K {
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI
        // and that this process may use AMX tiles.
        unsafe { micro::amx::gemm(a, m, za, b, c, fill_c, epilogue) };
        return Ok(());
    }
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI.
        Isa::Avx512Vnni => unsafe { micro::vnni::gemm(a, m, za, b, c, epilogue) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if m >= micro::avx2::WIDE_ROWS => {
            let (colfix, zb) = column_corrections(za, b);
            let rowsums: Option<Vec<i32>> = zb.iter().any(|&z| z != 0).then(|| a.chunks_exact(k).map(row_sum).collect());
            let fix = micro::Corrections { colfix: &colfix, zb: &zb, rowsums: rowsums.as_deref() };
            // The split is made (once per weight operand) only for a product that can use it.
            if let Some(split) = micro::avx2_split::fits(m, b).then(|| b.pair_split()).flatten() {
                let lda = b.k4() * KR;
                let a = padded(a, m, k, lda);
                // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2 on
                // this host; `split` is `b`'s.
                unsafe { micro::avx2_split::gemm(&a, lda, m, b, split, c, &fix, epilogue) }
            } else {
                let (wide, lda) = widened(a, m, b);
                // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2 on this host.
                unsafe { micro::avx2::wide_gemm(&wide, lda, m, b, c, &fix, epilogue) }
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            raw(kernels, a, m, b, c);
            // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2; the
            // function only lets the compiler use AVX2 instructions for safe code.
            unsafe { correct_zero_points_avx2(a, m, za, b, c) };
            epilogue(micro::Finished::of(c, n, 0, m, 0, n));
        }
        _ => {
            raw(kernels, a, m, b, c);
            correct_zero_points(a, m, za, b, c);
            epilogue(micro::Finished::of(c, n, 0, m, 0, n));
        }
    }
    Ok(())
}

/// The raw sums `Σ_k a[m][k]·b[k][n]` on the portable and AVX2 paths.
fn raw(kernels: Kernels, a: &[u8], m: usize, b: &PackedB, c: &mut [i32]) {
    let (k, lda) = (b.k(), b.k4() * KR);
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            let (wide, lda) = widened(a, m, b);
            // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2 on this host.
            unsafe { micro::avx2::raw(&wide, lda, m, b, c) }
        }
        _ => micro::portable::raw(&padded(a, m, k, lda), lda, m, b, c),
    }
}

/// The AVX2 kernels' A: rows widened to i16, zero past K, and their stride.
#[cfg(target_arch = "x86_64")]
fn widened(a: &[u8], m: usize, b: &PackedB) -> (Vec<i16>, usize) {
    let (k, lda) = (b.k(), b.k4() * KR);
    // Widened rows a multiple of 4 KiB apart would share L1 sets (a tile reads 6 at once):
    // one cache line more each then.
    let lda = if (2 * lda).is_multiple_of(4096) { lda + 32 } else { lda };
    // Written once, row then padding (zeroing it all first cost a memset of the whole block).
    let mut wide = Vec::with_capacity(m * lda);
    for row in a.chunks_exact(k).take(m) {
        wide.extend(row.iter().map(|&v| i16::from(v)));
        wide.resize(wide.len() + lda - k, 0);
    }
    (wide, lda)
}

/// Per column, padded with zeros to whole panels: `K·za·zb[n] − za·Σ_k b[k][n]` (wrapping) and
/// `zb[n]`, the column parts of the zero-point corrections on every path.
pub(crate) fn column_corrections(za: u8, b: &PackedB) -> (Vec<i32>, Vec<i32>) {
    let (kza, za) = ((b.k() as i32).wrapping_mul(i32::from(za)), i32::from(za));
    let mut colfix = vec![0i32; b.panels() * crate::NR];
    let mut zb = vec![0i32; b.panels() * crate::NR];
    for (((f, z), &s), &w) in colfix.iter_mut().zip(&mut zb).zip(b.col_sums()).zip(b.zero_points()) {
        *f = kza.wrapping_mul(w).wrapping_sub(za.wrapping_mul(s));
        *z = w;
    }
    (colfix, zb)
}

/// `Σ a` of one row, wrapping (|Σ a| ≤ 2^24 · 255 < 2^32: exact modulo 2^32 like everything else).
pub(crate) fn row_sum(row: &[u8]) -> i32 {
    row.iter().fold(0i32, |s, &v| s.wrapping_add(i32::from(v)))
}

/// Rows of `lda ≥ k` bytes, zero past K (borrowed when no padding is needed).
pub(crate) fn padded(a: &[u8], m: usize, k: usize, lda: usize) -> Cow<'_, [u8]> {
    if lda == k {
        return Cow::Borrowed(a);
    }
    let mut p = vec![0u8; m * lda];
    for (dst, src) in p.chunks_exact_mut(lda).zip(a.chunks_exact(k)) {
        dst[..k].copy_from_slice(src);
    }
    Cow::Owned(p)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn correct_zero_points_avx2(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32]) {
    correct_zero_points(a, m, za, b, c)
}

/// `c −= za·colsum[n] + zb[n]·rowsum[m] − K·za·zb[n]`, wrapping: the same integers on every path
/// (the instances above only let the compiler vectorize it with wider registers).
#[inline(always)]
fn correct_zero_points(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32]) {
    let (k, n) = (b.k(), b.n());
    let (col, zb) = column_corrections(za, b);
    let need_rows = zb.iter().any(|&z| z != 0);
    for (row, a_row) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)).take(m) {
        if need_rows {
            let rowsum = row_sum(a_row);
            for ((c, &col), &z) in row.iter_mut().zip(&col).zip(&zb) {
                *c = c.wrapping_add(col).wrapping_sub(z.wrapping_mul(rowsum));
            }
        } else {
            for (c, &col) in row.iter_mut().zip(&col) {
                *c = c.wrapping_add(col);
            }
        }
    }
}
