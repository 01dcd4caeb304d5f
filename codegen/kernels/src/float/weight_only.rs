//! Weight-only quantized matrix products: `out = A·DQ(W)` with A f32 `m × k` (activations, never
//! quantized) and W a constant `k × n` of 4- or 8-bit codes, per tensor, per output column, or in
//! blocks of rows along K (ONNX `DequantizeLinear` with `block_size` on axis 0). The codes are
//! decoded where they are read, a row of one panel at a time, into registers: no float copy of W
//! exists at run time.
//!
//! | condition | why |
//! |---|---|
//! | `w[k][j] = fl32(fl32(q[k][j] − zp)·s)` with the (k / block, j) parameters | DequantizeLinear's arithmetic: `q − zp` is an integer of at most 9 bits, exact in f32 (so `f32(q) − f32(zp)` is that integer), the product rounds once |
//! | `out[i][j]`: `s = +0`, then `s = s + A[i][k]·w[k][j]` for k = 0, 1, …, K−1, each product and sum rounded on its own | [`super::gemm`]'s order: the output is the float MatMul's on the dequantized copy bit for bit, on every path (Rust never contracts into an FMA) |
//! | columns in panels of [`PANEL`], the codes of a panel stored row after row (`pack`) | the K loop reads contiguous bytes; columns are independent outputs, so vectorizing across them changes no sum |
//!
//! Layout (`pack`, the generator calls it at compile time): panel p holds columns `64p ..
//! 64p + 63` (the last one padded with code 0, scale 0); for each row k, 64 bytes (8-bit codes) or
//! 32 bytes (4-bit: byte b holds column b in its low nibble, column b + 32 in its high one).
//! Parameters: `[panel][k / block][64]` f32 scales and zero points (a zero point is an integer
//! below 2^8, exact in f32).

use super::{ShapeError, bail, check_len};
use crate::isa::{Isa, Kernels};

/// Columns per panel.
pub const PANEL: usize = 64;

/// The code type of a packed weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeType {
    U4,
    I4,
    U8,
    I8,
}

impl CodeType {
    /// Bytes per row of a panel.
    pub fn row_bytes(self) -> usize {
        match self {
            CodeType::U4 | CodeType::I4 => PANEL / 2,
            CodeType::U8 | CodeType::I8 => PANEL,
        }
    }
}

/// The packed codes of a row-major `k × n` code matrix (`codes[k·n + j]`, the integer values).
pub fn pack(code: CodeType, k: usize, n: usize, codes: &[i64]) -> Result<Vec<u8>, ShapeError> {
    check_len("weight-only codes", codes.len(), &[k, n])?;
    let panels = n.div_ceil(PANEL);
    let rb = code.row_bytes();
    let mut out = vec![0u8; panels * k * rb];
    for p in 0..panels {
        for r in 0..k {
            let row = &mut out[(p * k + r) * rb..][..rb];
            for c in 0..PANEL.min(n - p * PANEL) {
                let q = codes[r * n + p * PANEL + c];
                let byte = match code {
                    CodeType::U4 | CodeType::I4 => (q as u8) & 0x0f,
                    CodeType::U8 | CodeType::I8 => q as u8,
                };
                match code {
                    CodeType::U4 | CodeType::I4 if c >= PANEL / 2 => row[c - PANEL / 2] |= byte << 4,
                    _ => row[c] |= byte,
                }
            }
        }
    }
    Ok(out)
}

/// The packed parameters: `values[b·n + j]` (b the row block, j the column) → `[panel][b][64]`.
pub fn pack_params(blocks: usize, n: usize, values: &[f32]) -> Result<Vec<f32>, ShapeError> {
    check_len("weight-only parameters", values.len(), &[blocks, n])?;
    let panels = n.div_ceil(PANEL);
    let mut out = vec![0f32; panels * blocks * PANEL];
    for p in 0..panels {
        for b in 0..blocks {
            for c in 0..PANEL.min(n - p * PANEL) {
                out[(p * blocks + b) * PANEL + c] = values[b * n + p * PANEL + c];
            }
        }
    }
    Ok(out)
}

/// A packed weight-only operand.
#[derive(Clone, Debug)]
pub struct WeightOnly {
    code: CodeType,
    k: usize,
    n: usize,
    /// Rows per parameter block (`k` for per-column and per-tensor parameters).
    block: usize,
    codes: &'static [u8],
    scales: Vec<f32>,
    zero_points: Vec<f32>,
}

impl WeightOnly {
    /// `codes` as [`pack`] wrote them (borrowed from the program's weights: never copied),
    /// `scales` and `zero_points` as [`pack_params`] wrote them for `k.div_ceil(block)` blocks.
    pub fn new(
        code: CodeType,
        k: usize,
        n: usize,
        block: usize,
        codes: &'static [u8],
        scales: Vec<f32>,
        zero_points: Vec<f32>,
    ) -> Result<WeightOnly, ShapeError> {
        let panels = n.div_ceil(PANEL);
        if block == 0 || k == 0 || n == 0 {
            bail!("weight-only operand: k {k}, n {n}, block {block}");
        }
        let blocks = k.div_ceil(block);
        if codes.len() != panels * k * code.row_bytes() || scales.len() != panels * blocks * PANEL || zero_points.len() != scales.len() {
            bail!("weight-only operand {k} × {n} (blocks of {block}): {} code bytes, {} scales, {} zero points", codes.len(), scales.len(), zero_points.len());
        }
        Ok(WeightOnly { code, k, n, block, codes, scales, zero_points })
    }

    /// ONNX MatMul of `a` (shape `a_shape`, rank ≥ 1, last dim K) by this `k × n` weight:
    /// every row of A (the leading dims flattened) is one GEMV.
    pub fn matmul(&self, kernels: Kernels, a: &[f32], a_shape: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
        check_len("weight-only MatMul A", a.len(), a_shape)?;
        if a_shape.last() != Some(&self.k) {
            bail!("weight-only MatMul: A {a_shape:?} by B [{}, {}]", self.k, self.n);
        }
        let m = a.len() / self.k;
        check_len("weight-only MatMul output", out.len(), &[m, self.n])?;
        for (x, y) in a.chunks_exact(self.k).zip(out.chunks_exact_mut(self.n)) {
            self.gemv(kernels, x, y);
        }
        Ok(())
    }

    /// Element `(r, c)` of `DQ(W)`: `fl32(fl32(q − zp)·s)`, DequantizeLinear's value.
    #[inline]
    pub fn get(&self, r: usize, c: usize) -> f32 {
        let (p, j) = (c / PANEL, c % PANEL);
        let row = &self.codes[(p * self.k + r) * self.code.row_bytes()..];
        let q = match self.code {
            CodeType::U4 | CodeType::I4 => {
                let b = if j < PANEL / 2 { row[j] << 4 } else { row[j - PANEL / 2] & 0xf0 };
                if self.code == CodeType::I4 { f32::from((b as i8) >> 4) } else { f32::from(b >> 4) }
            }
            CodeType::U8 => f32::from(row[j]),
            CodeType::I8 => f32::from(row[j] as i8),
        };
        let at = (p * self.k.div_ceil(self.block) + r / self.block) * PANEL + j;
        (q - self.zero_points[at]) * self.scales[at]
    }

    /// ONNX Gather of `DQ(W)` (`k × n`) along `axis` (0: rows, 1: columns) by `indices`
    /// (negative ones count from the end): only the gathered elements are decoded.
    pub fn gather(&self, axis: usize, indices: &[i64], out: &mut [f32]) -> Result<(), ShapeError> {
        let (k, n) = (self.k, self.n);
        let extent = if axis == 0 { k } else { n };
        let idx = indices
            .iter()
            .map(|&i| {
                let j = if i < 0 { i + extent as i64 } else { i };
                usize::try_from(j).ok().filter(|&j| j < extent).ok_or_else(|| ShapeError(format!("Gather index {i} out of range [-{extent}, {extent})")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        match axis {
            0 => {
                check_len("Gather output", out.len(), &[idx.len(), n])?;
                for (row, &r) in out.chunks_exact_mut(n).zip(&idx) {
                    row.iter_mut().enumerate().for_each(|(c, o)| *o = self.get(r, c));
                }
            }
            1 => {
                check_len("Gather output", out.len(), &[k, idx.len()])?;
                for (r, row) in out.chunks_exact_mut(idx.len().max(1)).enumerate().take(k) {
                    row.iter_mut().zip(&idx).for_each(|(o, &c)| *o = self.get(r, c));
                }
            }
            _ => bail!("Gather axis {axis} of a rank-2 weight"),
        }
        Ok(())
    }

    /// `y = x·DQ(W)` for one row `x` of K elements, on the path of `kernels` (the same bits on
    /// every path).
    pub fn gemv(&self, kernels: Kernels, x: &[f32], y: &mut [f32]) {
        match kernels.isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
            // the function only lets the compiler use AVX-512F/BW instructions for safe code.
            Isa::Avx512Vnni => unsafe { gemv_avx512(self, x, y) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, AVX2 was checked.
            Isa::Avx2 => unsafe { gemv_avx2(self, x, y) },
            _ => gemv_panels(self, x, y),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn gemv_avx512(w: &WeightOnly, x: &[f32], y: &mut [f32]) {
    gemv_panels(w, x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gemv_avx2(w: &WeightOnly, x: &[f32], y: &mut [f32]) {
    gemv_panels(w, x, y)
}

#[inline(always)]
fn gemv_panels(w: &WeightOnly, x: &[f32], y: &mut [f32]) {
    match w.code {
        CodeType::U4 => panels::<4, false>(w, x, y),
        CodeType::I4 => panels::<4, true>(w, x, y),
        CodeType::U8 => panels::<8, false>(w, x, y),
        CodeType::I8 => panels::<8, true>(w, x, y),
    }
}

/// The codes of one panel row as f32 integers (exact).
#[inline(always)]
fn row_codes<const BITS: u32, const SIGNED: bool>(bytes: &[u8], q: &mut [f32; PANEL]) {
    if BITS == 4 {
        let bytes: &[u8; PANEL / 2] = bytes.try_into().expect("a 4-bit panel row");
        let (lo, hi) = q.split_at_mut(PANEL / 2);
        for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(bytes) {
            if SIGNED {
                *l = f32::from(((b << 4) as i8) >> 4);
                *h = f32::from((b as i8) >> 4);
            } else {
                *l = f32::from(b & 0x0f);
                *h = f32::from(b >> 4);
            }
        }
    } else {
        let bytes: &[u8; PANEL] = bytes.try_into().expect("an 8-bit panel row");
        for (v, &b) in q.iter_mut().zip(bytes) {
            *v = if SIGNED { f32::from(b as i8) } else { f32::from(b) };
        }
    }
}

#[inline(always)]
fn panels<const BITS: u32, const SIGNED: bool>(w: &WeightOnly, x: &[f32], y: &mut [f32]) {
    let (k, n, rb) = (w.k, w.n, w.code.row_bytes());
    let blocks = k.div_ceil(w.block);
    for p in 0..n.div_ceil(PANEL) {
        let codes = &w.codes[p * k * rb..][..k * rb];
        let mut acc = [0f32; PANEL];
        for b in 0..blocks {
            let at = (p * blocks + b) * PANEL;
            let s: &[f32; PANEL] = w.scales[at..at + PANEL].try_into().expect("a panel of scales");
            let z: &[f32; PANEL] = w.zero_points[at..at + PANEL].try_into().expect("a panel of zero points");
            for r in b * w.block..((b + 1) * w.block).min(k) {
                let mut q = [0f32; PANEL];
                row_codes::<BITS, SIGNED>(&codes[r * rb..(r + 1) * rb], &mut q);
                let xr = x[r];
                for j in 0..PANEL {
                    // fl32(fl32(q − zp)·s), then one product and one sum, each rounded.
                    let wv = (q[j] - z[j]) * s[j];
                    acc[j] += xr * wv;
                }
            }
        }
        let cols = PANEL.min(n - p * PANEL);
        y[p * PANEL..p * PANEL + cols].copy_from_slice(&acc[..cols]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The float MatMul on the dequantized copy: DequantizeLinear's decode, then
    /// [`super::super::gemm::sgemm`] (the order this kernel must reproduce).
    fn reference(k: usize, n: usize, block: usize, q: &[i64], s: &[f32], z: &[i64], x: &[f32]) -> Vec<u32> {
        let w: Vec<f32> = (0..k * n).map(|i| ((q[i] - z[(i / n / block) * n + i % n]) as f32) * s[(i / n / block) * n + i % n]).collect();
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        super::super::gemm::sgemm(Kernels::new(Isa::Portable).unwrap(), m, n, k, x, &w, &mut out).unwrap();
        out.iter().map(|v| v.to_bits()).collect()
    }

    fn lcg(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *state >> 33
    }

    #[test]
    fn every_path_equals_the_float_matmul_on_the_dequantized_copy() {
        let mut st = 7u64;
        for (code, lo, hi) in [(CodeType::U4, 0i64, 15i64), (CodeType::I4, -8, 7), (CodeType::U8, 0, 255), (CodeType::I8, -128, 127)] {
            for (k, n, block) in [(64usize, 130usize, 32usize), (37, 64, 37), (96, 7, 16), (33, 200, 32)] {
                let blocks = k.div_ceil(block);
                let q: Vec<i64> = (0..k * n).map(|_| lo + (lcg(&mut st) as i64).rem_euclid(hi - lo + 1)).collect();
                let z: Vec<i64> = (0..blocks * n).map(|_| lo + (lcg(&mut st) as i64).rem_euclid(hi - lo + 1)).collect();
                let s: Vec<f32> = (0..blocks * n).map(|_| (1 + lcg(&mut st) % 1000) as f32 * 1.37e-4).collect();
                let x: Vec<f32> = (0..2 * k).map(|_| (lcg(&mut st) % 2001) as f32 * 1e-3 - 1.0).collect();
                let want = reference(k, n, block, &q, &s, &z, &x);
                let packed: &'static [u8] = Box::leak(pack(code, k, n, &q).unwrap().into_boxed_slice());
                let zf: Vec<f32> = z.iter().map(|&v| v as f32).collect();
                let w = WeightOnly::new(code, k, n, block, packed, pack_params(blocks, n, &s).unwrap(), pack_params(blocks, n, &zf).unwrap()).unwrap();
                for kernels in Isa::available().into_iter().map(|i| Kernels::new(i).unwrap()) {
                    let mut out = vec![f32::NAN; 2 * n];
                    w.matmul(kernels, &x, &[2, k], &mut out).unwrap();
                    let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{code:?} k {k} n {n} block {block} on {:?}", kernels.path());
                }
            }
        }
    }

    #[test]
    fn gathered_rows_and_columns_decode_as_dequantize_linear() {
        let mut st = 3u64;
        for code in [CodeType::U4, CodeType::I4, CodeType::U8, CodeType::I8] {
            let (k, n, block) = (64, 70, 32);
            let (lo, span) = match code {
                CodeType::U4 => (0, 16),
                CodeType::I4 => (-8, 16),
                CodeType::U8 => (0, 256),
                CodeType::I8 => (-128, 256),
            };
            let q: Vec<i64> = (0..k * n).map(|_| lo + (lcg(&mut st) % span) as i64).collect();
            let z: Vec<f32> = (0..2 * n).map(|_| (lo + (lcg(&mut st) % span) as i64) as f32).collect();
            let s: Vec<f32> = (0..2 * n).map(|_| (1 + lcg(&mut st) % 999) as f32 * 3.1e-4).collect();
            let packed: &'static [u8] = Box::leak(pack(code, k, n, &q).unwrap().into_boxed_slice());
            let w = WeightOnly::new(code, k, n, block, packed, pack_params(2, n, &s).unwrap(), pack_params(2, n, &z).unwrap()).unwrap();
            let dq = |r: usize, c: usize| ((q[r * n + c] as f32) - z[(r / block) * n + c]) * s[(r / block) * n + c];
            let mut cols = vec![0f32; k * 2];
            w.gather(1, &[69, -70], &mut cols).unwrap();
            for r in 0..k {
                assert_eq!(cols[2 * r].to_bits(), dq(r, 69).to_bits(), "{code:?} row {r}");
                assert_eq!(cols[2 * r + 1].to_bits(), dq(r, 0).to_bits());
            }
            let mut rows = vec![0f32; n];
            w.gather(0, &[37], &mut rows).unwrap();
            assert!((0..n).all(|c| rows[c].to_bits() == dq(37, c).to_bits()), "{code:?}");
            assert!(w.gather(1, &[70], &mut cols[..k]).is_err());
        }
    }

    #[test]
    fn inconsistent_operands_are_refused() {
        let codes: &'static [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
        assert!(WeightOnly::new(CodeType::U8, 2, 64, 2, codes, vec![0.0; 64], vec![0.0; 64]).is_err());
        assert!(WeightOnly::new(CodeType::U4, 2, 64, 2, codes, vec![0.0; 64], vec![0.0; 64]).is_ok());
        assert!(WeightOnly::new(CodeType::U4, 2, 64, 0, codes, vec![0.0; 64], vec![0.0; 64]).is_err());
        assert!(pack(CodeType::U8, 2, 3, &[0; 5]).is_err());
    }
}
