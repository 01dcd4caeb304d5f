//! The A8W8 group with per-row activation parameters: `DQ(x; sx[m], zx[m]) · DQ(w; sw[n], zw[n])`
//! (+ bias) → Q, as one integer GEMM and a per-element epilogue:
//!
//! `y[m][n] = sat(rne((C[m][n]·sx[m]·sw[n] + b[n]·sb[n]) / sy) + zy)`,
//! `C[m][n] = Σ_k (x[m][k] − zx[m])(w[k][n] − zw[n])`.
//!
//! `C` is [`gemm_u8`] with a zero activation zero point (its own per-row sums carry the `zw[n]`
//! correction), minus `zx[m]·D[n]` with `D[n] = Σ_k (w[k][n] − zw[n])`, computed once when the
//! plan is made from the packed weights. All i32 arithmetic wraps, like `gemm_u8`'s: `C` is exact
//! modulo 2^32, hence exact wherever the true sum fits i32 (the compiler bounds it from the
//! weights). The ratio `sx[m]·sw[n]/sy` differs per element, so the epilogue is
//! [`requant_exact`] per element on a [`Ratio`] made on the spot (no `m × n` table: the group
//! exists to not allocate one): the exact rational, the contract's rounding by construction.
//!
//! Activation parameters repeat with the period of their length: row `m` reads
//! `sx[(m / inner) % T]` (a rank-2 `[M, K]` activation has `T = M`; a rank-3 `[B, T, K]` one per
//! token `T`, per batch `B` with `inner = T`).

use crate::gemm::{GemmError, gemm_u8};
use crate::pack::PackedB;
use crate::requant::{CodeOut, Output, Ratio, RequantError, requant_exact};

/// The epilogue's parameters: per activation row, per output column, the output.
#[derive(Clone, Debug)]
pub struct A8W8 {
    /// `sx` per row (period `T`).
    row_scales: Vec<f32>,
    /// `zx` per row, in the u8 domain the GEMM reads (int8 codes + 128).
    row_zero_points: Vec<i32>,
    col_scales: Vec<f32>,
    /// `D[n] = Σ_k (w[k][n] − zw[n])`.
    col_sums: Vec<i32>,
    /// Bias codes (zeros without a bias) and their scales (empty: the bias is at `sx[m]·sw[n]`).
    bias: Vec<i32>,
    bias_scales: Vec<f32>,
    sy: f32,
    /// `None`: the float-output group ([`A8W8::run_f32`]).
    output: Option<Output>,
    /// Consecutive rows per row parameter (1, or the token count of a per-batch parameter).
    inner: usize,
}

impl A8W8 {
    /// Checks every ratio the epilogue will make (each row parameter with each column), so that
    /// [`A8W8::run`] cannot fail on them. `row_zero_points` are in the u8 domain; `bias` is empty
    /// or one code per column, `bias_scales` empty, one, or one per column; `col_scales` one or
    /// one per column.
    #[allow(clippy::too_many_arguments)] // the group's parameters, spelled out
    pub fn new(
        b: &PackedB,
        row_scales: &[f32],
        row_zero_points: &[i32],
        col_scales: &[f32],
        bias: &[i32],
        bias_scales: &[f32],
        sy: f32,
        output: Output,
    ) -> Result<A8W8, RequantError> {
        let n = b.n();
        let shape = |what: String| Err(RequantError::Shape(what));
        if row_scales.is_empty() || row_scales.len() != row_zero_points.len() {
            return shape(format!("{} row scales, {} row zero points", row_scales.len(), row_zero_points.len()));
        }
        if let Some(z) = row_zero_points.iter().find(|z| !(0..=255).contains(*z)) {
            return shape(format!("row zero point {z} (u8 domain)"));
        }
        let per = |len: usize, allowed: &[usize]| allowed.contains(&len);
        if !per(col_scales.len(), &[1, n]) || !per(bias.len(), &[0, n]) || !per(bias_scales.len(), &[0, 1, n]) || (bias.is_empty() && !bias_scales.is_empty()) {
            return shape(format!("{} column scales, {} bias codes, {} bias scales for {n} columns", col_scales.len(), bias.len(), bias_scales.len()));
        }
        let k = i32::try_from(b.k()).map_err(|_| RequantError::Shape(format!("K = {}", b.k())))?;
        // |col_sum| ≤ K·128 and |K·zw| ≤ K·128 with K ≤ 2^24 (PackedB): no overflow.
        let col_sums = b.col_sums().iter().zip(b.zero_points()).map(|(&s, &z)| s - k * z).collect();
        let plan = A8W8 {
            row_scales: row_scales.to_vec(),
            row_zero_points: row_zero_points.to_vec(),
            col_scales: (0..n).map(|c| col_scales[if col_scales.len() == 1 { 0 } else { c }]).collect(),
            col_sums,
            bias: if bias.is_empty() { vec![0; n] } else { bias.to_vec() },
            bias_scales: (0..if bias_scales.is_empty() { 0 } else { n }).map(|c| bias_scales[if bias_scales.len() == 1 { 0 } else { c }]).collect(),
            sy,
            output: Some(output),
            inner: 1,
        };
        for t in 0..plan.row_scales.len() {
            for c in 0..n {
                plan.ratio(t, c)?;
            }
        }
        Ok(plan)
    }

    /// The float-output group `DQ(x)·DQ(w)` (no bias, no Q): [`A8W8::run_f32`] writes the
    /// correctly rounded f32 of `C[m][n]·sx[m]·sw[n]`. Refused for a scale that is not a positive
    /// finite f32.
    pub fn float(b: &PackedB, row_scales: &[f32], row_zero_points: &[i32], col_scales: &[f32]) -> Result<A8W8, RequantError> {
        let plan = A8W8 { output: None, ..A8W8::new(b, row_scales, row_zero_points, col_scales, &[], &[], 1.0, Output::new(0, crate::requant::Code::U8)?)? };
        Ok(plan)
    }

    /// Row `m` reads row parameter `(m / inner) % T` (`[B, T, K]` per batch: `inner = T`).
    pub fn with_inner(self, inner: usize) -> A8W8 {
        A8W8 { inner: inner.max(1), ..self }
    }

    /// Columns N.
    pub fn n(&self) -> usize {
        self.col_scales.len()
    }

    /// `(bias code added to the accumulator, ratio)` of row parameter `t`, column `c`
    /// ([`Ratio::with_bias`]: the bias code where `b·sb = b·sx·sw`, its exact value otherwise).
    fn ratio(&self, t: usize, c: usize) -> Result<(i32, Ratio), RequantError> {
        let ratio = Ratio::new(self.row_scales[t], self.col_scales[c], self.sy)?;
        match self.bias_scales.get(c) {
            Some(&sb) => ratio.with_bias(self.bias[c], sb),
            None => Ok((self.bias[c], ratio)),
        }
    }

    /// `out = ` the group on the row-major `m × K` activation codes `a` (u8 domain): the GEMM
    /// into the caller's `m × n` scratch `c`, then the epilogue per element.
    pub fn run<C: CodeOut>(&self, kernels: crate::Kernels, a: &[u8], m: usize, b: &PackedB, c: &mut [i32], out: &mut [C]) -> Result<(), GemmError> {
        let n = self.n();
        let output = self.output.ok_or_else(|| GemmError::Requant("a float-output plan run for codes".into()))?;
        if b.n() != n || C::CODE != output.code() || out.len() != m * n {
            return Err(GemmError::Requant(format!(
                "{n}-column plan of {:?} codes for {} columns, {} {:?} outputs, m = {m}",
                output.code(),
                b.n(),
                out.len(),
                C::CODE
            )));
        }
        gemm_u8(kernels, a, m, 0, b, c)?;
        let period = self.row_scales.len();
        for (row, (c_row, out_row)) in c.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            let t = (row / self.inner) % period;
            let zx = self.row_zero_points[t];
            for (col, ((&acc, y), &d)) in c_row.iter().zip(out_row.iter_mut()).zip(&self.col_sums).enumerate() {
                let acc = acc.wrapping_sub(zx.wrapping_mul(d));
                let (bias, ratio) = self.ratio(t, col).map_err(|e| GemmError::Requant(e.to_string()))?;
                *y = C::from_code(requant_exact(acc, bias, &ratio, output));
            }
        }
        Ok(())
    }
}

impl A8W8 {
    /// `out[m][n] = ` the correctly rounded f32 (ties to even) of `C[m][n]·sx[m]·sw[n]`: the
    /// float-output group under the `real` contract (one rounding instead of K).
    pub fn run_f32(&self, kernels: crate::Kernels, a: &[u8], m: usize, b: &PackedB, c: &mut [i32], out: &mut [f32]) -> Result<(), GemmError> {
        let n = self.n();
        if self.output.is_some() || b.n() != n || out.len() != m * n {
            return Err(GemmError::Requant(format!(
                "{n}-column float plan (is one: {}) for {} columns, {} outputs, m = {m}",
                self.output.is_none(),
                b.n(),
                out.len()
            )));
        }
        gemm_u8(kernels, a, m, 0, b, c)?;
        let period = self.row_scales.len();
        let cols: Vec<(u64, i32)> = self.col_scales.iter().map(|&s| dyadic(s)).collect();
        for (row, (c_row, out_row)) in c.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            let t = (row / self.inner) % period;
            let (zx, (mx, ex)) = (self.row_zero_points[t], dyadic(self.row_scales[t]));
            for ((&acc, y), (&d, &(mw, ew))) in c_row.iter().zip(out_row.iter_mut()).zip(self.col_sums.iter().zip(&cols)) {
                let acc = acc.wrapping_sub(zx.wrapping_mul(d));
                // |acc| < 2^31, mx·mw < 2^48: the product fits i128 exactly.
                *y = rne_f32(i128::from(acc) * i128::from(mx * mw), ex + ew);
            }
        }
        Ok(())
    }
}

/// `s = m·2^e` with an integer `m < 2^24` for a positive finite f32 (checked by [`A8W8::new`]).
fn dyadic(s: f32) -> (u64, i32) {
    let bits = s.to_bits();
    let (frac, biased) = (u64::from(bits & 0x7f_ffff), ((bits >> 23) & 0xff) as i32);
    if biased == 0 { (frac, -149) } else { (frac | 1 << 23, biased - 150) }
}

/// The f32 nearest `v·2^e` (ties to even), subnormals and overflow to infinity included.
pub fn rne_f32(v: i128, e: i32) -> f32 {
    if v == 0 {
        return 0.0;
    }
    let m = v.unsigned_abs();
    let top = 127 - m.leading_zeros() as i32 + e; // v·2^e in [2^top, 2^(top+1))
    // The unit of the last kept bit: 24 significant bits, never below the subnormal unit 2^-149.
    let unit = (top - 23).max(-149);
    let shift = unit - e;
    let q = if shift <= 0 {
        m << -shift
    } else if shift >= 128 {
        0
    } else {
        let (q, rest) = (m >> shift, m & ((1u128 << shift) - 1));
        let half = 1u128 << (shift - 1);
        if rest > half || (rest == half && q & 1 == 1) { q + 1 } else { q }
    };
    // q ≤ 2^24 and unit ≥ -149: q·2^unit is exact in f64, and an f32 unless it overflows.
    let y = (q as f64 * 2f64.powi(unit)) as f32;
    if v < 0 { -y } else { y }
}
