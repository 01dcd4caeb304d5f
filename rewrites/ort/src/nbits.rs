//! com.microsoft MatMulNBits as ONNX Runtime 1.31.1 packs and runs it (contract §3.9, §3.10): the
//! layout its own DQ→MatMul fusion writes, the check that a packing dequantizes to the authored
//! weights bit for bit, and the arithmetic of each accuracy level, so a lossy fusion's deviation
//! can be measured.
//!
//! Layout, checked byte for byte against ORT's own fusion (tests/oracle/test_matmulnbits.py):
//! B is `[N, blocks, block_size·bits/8]` uint8, within a byte the lower k in the lower bits;
//! scales `[N·blocks]` (row n, block b at `n·blocks + b`); zero points `[N·ceil(blocks·bits/8)]`
//! uint8, packed like B. Signed codes are stored shifted by 2^(bits−1), zero points too; a signed
//! weight without zero point gets none (MatMulNBits' default 2^(bits−1) is the shifted 0), an
//! unsigned one gets explicit zeros (the default would be 2^(bits−1)). Padding past K and past
//! the last block's zero point holds what ORT 1.31.1 writes there (no kernel reads it).

use qdqc_exact::Verdict;
use qdqc_exact::p1::{Domain, exhaustive};
use serde::Serialize;

/// How the authored DequantizeLinear spreads its scales over `W[K, N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    PerTensor,
    /// One scale per column n (DQ axis 1).
    PerChannel,
    /// Blocks of this many rows per column (DQ axis 0, `block_size`).
    Blocked(usize),
}

/// Block size used for per-tensor and per-channel weights: ORT's own default
/// (`session.qdq_matmulnbits_block_size` = 0), so that qdqc packs what ORT would.
pub const EXPANDED_BLOCK: usize = 32;

/// A `DQ(W)` as authored: codes `[K, N]` row-major, scales and zero points in the DQ's shape
/// (`[ceil(K/bs), N]`, `[N]` or one).
#[derive(Clone, Debug)]
pub struct Weight {
    pub k: usize,
    pub n: usize,
    pub bits: u32,
    pub signed: bool,
    pub layout: Layout,
    pub codes: Vec<i64>,
    pub scales: Vec<f32>,
    pub zero_points: Option<Vec<i64>>,
}

impl Weight {
    fn param(&self, k: usize, n: usize) -> usize {
        match self.layout {
            Layout::PerTensor => 0,
            Layout::PerChannel => n,
            Layout::Blocked(bs) => (k / bs) * self.n + n,
        }
    }

    pub fn zero_point(&self, k: usize, n: usize) -> i64 {
        self.zero_points.as_ref().map_or(0, |z| z[self.param(k, n)])
    }

    /// DequantizeLinear: `fl(f32(q − z)·s)`.
    pub fn dequantized(&self, k: usize, n: usize) -> f32 {
        (self.codes[k * self.n + n] - self.zero_point(k, n)) as f32 * self.scales[self.param(k, n)]
    }

    /// The packed block size: the DQ's own, or [`EXPANDED_BLOCK`].
    pub fn block_size(&self) -> usize {
        match self.layout {
            Layout::Blocked(bs) => bs,
            _ => EXPANDED_BLOCK,
        }
    }

    /// The shift ORT applies to signed codes and zero points.
    pub fn shift(&self) -> i64 {
        if self.signed { 1 << (self.bits - 1) } else { 0 }
    }
}

/// The f16 with bit pattern `h`, exactly, as an f32.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((h >> 10) & 0x1f), f32::from(h & 0x3ff));
    sign * match e {
        0 => m * 2f32.powi(-24),
        31 if m == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        _ => (1024.0 + m) * 2f32.powi(e - 25),
    }
}

/// `x` rounded to the nearest f16 (ties to even), as an f32: what a DequantizeLinear with an f16
/// scale stores for the f32 product it computes.
pub fn round_to_f16(x: f32) -> f32 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let a = x.abs();
    // Half of the largest f16's ulp above it rounds to infinity.
    if a >= 65520.0 {
        return f32::INFINITY.copysign(x);
    }
    let exponent = i32::try_from((a.to_bits() >> 23) & 0xff).expect("8 exponent bits") - 127;
    let ulp = 2f32.powi(exponent.max(-14) - 10);
    ((a / ulp).round_ties_even() * ulp).copysign(x)
}

/// MatMulNBits' constant inputs and attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Packed {
    pub k: usize,
    pub n: usize,
    pub bits: u32,
    pub block_size: usize,
    pub blocks: usize,
    pub b: Vec<u8>,
    pub scales: Vec<f32>,
    /// `None`: MatMulNBits' default 2^(bits−1).
    pub zero_points: Option<Vec<u8>>,
}

impl Packed {
    pub fn b_dims(&self) -> Vec<i64> {
        let dim = |d: usize| i64::try_from(d).expect("a weight's dimensions fit i64");
        vec![dim(self.n), dim(self.blocks), dim(self.block_size * self.bits as usize / 8)]
    }

    fn zp_row_bytes(&self) -> usize {
        (self.blocks * self.bits as usize).div_ceil(8)
    }

    fn mask(&self) -> i64 {
        (1 << self.bits) - 1
    }

    /// The stored code MatMulNBits reads at (k, n).
    pub fn code(&self, k: usize, n: usize) -> i64 {
        let per_byte = 8 / self.bits as usize;
        let row = self.blocks * self.block_size * self.bits as usize / 8;
        let i = k % per_byte;
        let byte = self.b[n * row + k / per_byte];
        (byte as i64 >> (i * self.bits as usize)) & self.mask()
    }

    /// The zero point MatMulNBits uses for (k, n): stored, or its default.
    pub fn zero_point(&self, k: usize, n: usize) -> i64 {
        let Some(z) = &self.zero_points else { return 1 << (self.bits - 1) };
        let per_byte = 8 / self.bits as usize;
        let b = k / self.block_size;
        let byte = z[n * self.zp_row_bytes() + b / per_byte];
        (byte as i64 >> ((b % per_byte) * self.bits as usize)) & self.mask()
    }

    pub fn scale(&self, k: usize, n: usize) -> f32 {
        self.scales[n * self.blocks + k / self.block_size]
    }

    /// MatMulNBits' weight: `fl(f32(q − z)·s)`, as `MlasDequantizeBlockwise` computes it.
    pub fn dequantized(&self, k: usize, n: usize) -> f32 {
        (self.code(k, n) - self.zero_point(k, n)) as f32 * self.scale(k, n)
    }
}

/// Packs `w` the way ORT's fusion does.
pub fn pack(w: &Weight) -> Packed {
    pack_shifted(w, w.shift())
}

/// Packs `w` storing each code and zero point plus `shift`. [`pack`] passes the shift ORT
/// applies (2^(bits−1) for signed codes, else 0); any other value is a broken packing, which
/// [`check`] refutes (tests/broken).
// `as u8` then the mask keeps a code's low `bits` (≤ 8) bits, two's complement, as MLAS packs it.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn pack_shifted(w: &Weight, shift: i64) -> Packed {
    let bits = w.bits as usize;
    let bs = w.block_size();
    let blocks = w.k.div_ceil(bs);
    let per_byte = 8 / bits;
    let row = blocks * bs * bits / 8;
    // Padding as ORT 1.31.1 writes it: the shifted zero for signed 2- and 8-bit codes, else 0.
    let pad = if w.signed && bits != 4 { shift } else { 0 };
    let mut b = vec![0u8; w.n * row];
    for n in 0..w.n {
        for k in 0..blocks * bs {
            let v = if k < w.k { w.codes[k * w.n + n] + shift } else { pad };
            b[n * row + k / per_byte] |= ((v as u8) & ((1u16 << bits) - 1) as u8) << ((k % per_byte) * bits);
        }
    }
    let scales = (0..w.n).flat_map(|n| (0..blocks).map(move |blk| w.scales[w.param(blk * bs, n)])).collect();
    let zero_points = match (&w.zero_points, w.signed) {
        (None, true) => None,
        (zps, _) => {
            let zp_row = (blocks * bits).div_ceil(8);
            // Padding of the last zero-point byte: ORT writes the shifted zero for signed 4-bit.
            let zp_pad = if w.signed && bits == 4 { shift } else { 0 };
            let mut z = vec![0u8; w.n * zp_row];
            for n in 0..w.n {
                for blk in 0..zp_row * per_byte {
                    let v = match zps {
                        Some(_) if blk < blocks => w.zero_point(blk * bs, n) + shift,
                        _ if blk < blocks => 0,
                        _ => zp_pad,
                    };
                    z[n * zp_row + blk / per_byte] |= ((v as u8) & ((1u16 << bits) - 1) as u8) << ((blk % per_byte) * bits);
                }
            }
            Some(z)
        }
    };
    Packed { k: w.k, n: w.n, bits: w.bits, block_size: bs, blocks, b, scales, zero_points }
}

/// P1 over every weight position: the weight MatMulNBits dequantizes from `p` has the bits of
/// the authored `DQ(W)` at every (k, n). The fusion changes the arithmetic around the weights
/// (that is what its lossy contract is for), never the weights themselves.
pub fn check(w: &Weight, p: &Packed) -> Verdict {
    let last = |d: usize| i64::try_from(d).expect("a weight's dimensions fit i64") - 1;
    let domains = [Domain::new("k", (0, last(w.k)), 0), Domain::new("n", (0, last(w.n)), 0)];
    let at_usize = |v: i64| usize::try_from(v).expect("domain points are indices 0..k and 0..n");
    exhaustive(
        &domains,
        "the packed weights dequantize to DQ(W) bit for bit at every (k, n)",
        |at| i64::from(w.dequantized(at_usize(at[0]), at_usize(at[1])).to_bits()),
        |at| i64::from(p.dequantized(at_usize(at[0]), at_usize(at[1])).to_bits()),
        |_| None,
    )
}

/// `accuracy_level` of MatMulNBits: what its CPU kernel computes in for f32 activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AccuracyLevel {
    /// f32 (the kernel's default): re-ordered f32 sums.
    #[serde(rename = "acc0")]
    Acc0,
    /// f32, same kernel as acc0 on CPU.
    #[serde(rename = "acc1")]
    Acc1,
    /// int8 activations per block (symmetric, amax/127), int32 block dots, f32 across blocks.
    #[serde(rename = "acc4")]
    Acc4,
}

impl AccuracyLevel {
    pub fn value(self) -> i64 {
        match self {
            AccuracyLevel::Acc0 => 0,
            AccuracyLevel::Acc1 => 1,
            AccuracyLevel::Acc4 => 4,
        }
    }

    pub const ALL: [AccuracyLevel; 3] = [AccuracyLevel::Acc0, AccuracyLevel::Acc1, AccuracyLevel::Acc4];

    /// `acc0`, `acc1` or `acc4`, as `--allow matmulnbits=LEVEL` spells it.
    pub fn name(self) -> &'static str {
        match self {
            AccuracyLevel::Acc0 => "acc0",
            AccuracyLevel::Acc1 => "acc1",
            AccuracyLevel::Acc4 => "acc4",
        }
    }

    pub fn parse(s: &str) -> Option<AccuracyLevel> {
        Self::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// MatMulNBits' output for `rows` rows of `a` (`[rows, K]`) at `level`, as the x86 kernels
/// compute it: f32 block sums at acc0/1; at acc4 each block of A quantized to int8 with scale
/// `amax/127` and `rne(a·(127/amax))` (AVX2/AVX-512 `QuantizeARow_CompInt8`, ties to even), an
/// int32 dot per block, scaled by `scale_a·scale_b` and summed in f32. ARM quantizes with ties
/// away from zero (and KleidiAI per row, asymmetric): the deviation it shows is of the same order
/// but not this model's to the bit; the report states what this model measures.
pub fn matmul(p: &Packed, a: &[f32], rows: usize, level: AccuracyLevel) -> Vec<f32> {
    let mut y = vec![0f32; rows * p.n];
    for r in 0..rows {
        let row = &a[r * p.k..(r + 1) * p.k];
        for blk in 0..p.blocks {
            let ks = blk * p.block_size..((blk + 1) * p.block_size).min(p.k);
            match level {
                AccuracyLevel::Acc0 | AccuracyLevel::Acc1 => {
                    for n in 0..p.n {
                        let part: f32 = ks.clone().map(|k| row[k] * p.dequantized(k, n)).sum();
                        y[r * p.n + n] += part;
                    }
                }
                AccuracyLevel::Acc4 => {
                    let amax = ks.clone().map(|k| row[k].abs()).fold(0f32, f32::max);
                    let scale_a = amax / 127.0;
                    let inverse = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                    // |row[k]·127/amax| ≤ 127: the rounded value converts exactly (a NaN activation,
                    // which this model does not cover, would give 0).
                    #[allow(clippy::cast_possible_truncation)]
                    let qa: Vec<i64> = ks.clone().map(|k| (row[k] * inverse).round_ties_even() as i64).collect();
                    for n in 0..p.n {
                        let dot: i64 = ks.clone().zip(&qa).map(|(k, q)| q * (p.code(k, n) - p.zero_point(k, n))).sum();
                        y[r * p.n + n] += scale_a * p.scales[n * p.blocks + blk] * dot as f32;
                    }
                }
            }
        }
    }
    y
}

/// The deviation of a fused instance from the unfused graph on one set of activations.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deviation {
    /// Where the activations came from.
    pub inputs: String,
    pub rows: usize,
    /// `max |fused − unfused|` over every output element.
    pub max_abs: f64,
    /// `max_abs / max |unfused|`: relative to the output's magnitude, so that outputs near zero
    /// (cancellation) do not make it meaningless.
    pub max_rel: f64,
}

/// Deviation of [`matmul`] from the unfused `A·W` on `a`, where `reference(k, n)` is the weight
/// the unfused graph multiplies by; the unfused product is evaluated exactly (f64 sums of exact
/// f32 products), standing for every summation order ORT's float MatMul may use.
pub fn deviation(p: &Packed, reference: impl Fn(usize, usize) -> f32, a: &[f32], rows: usize, level: AccuracyLevel, inputs: String) -> Deviation {
    let fused = matmul(p, a, rows, level);
    let (mut max_abs, mut max_ref) = (0f64, 0f64);
    // Column by column: memory stays O(K) however large the weight.
    let mut column = vec![0f64; p.k];
    for n in 0..p.n {
        for (k, c) in column.iter_mut().enumerate() {
            *c = reference(k, n) as f64;
        }
        for r in 0..rows {
            let exact: f64 = a[r * p.k..(r + 1) * p.k].iter().zip(&column).map(|(&x, &w)| x as f64 * w).sum();
            max_abs = max_abs.max((fused[r * p.n + n] as f64 - exact).abs());
            max_ref = max_ref.max(exact.abs());
        }
    }
    let max_rel = if max_ref > 0.0 { max_abs / max_ref } else { 0.0 };
    Deviation { inputs, rows, max_abs, max_rel }
}

/// Rows of seeded random activations: [`RANDOM_ROWS`] rows uniform in [−1, 1) (splitmix64,
/// seed [`RANDOM_SEED`]), the distribution the report states.
pub fn random_activations(k: usize) -> Vec<f32> {
    let mut state = RANDOM_SEED;
    (0..RANDOM_ROWS * k)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub const RANDOM_ROWS: usize = 8;
pub const RANDOM_SEED: u64 = 0x5eed_0b17;

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::cast_possible_wrap)] // Test indices are small.
    fn weight(bits: u32, signed: bool, layout: Layout, k: usize, n: usize, zp: bool) -> Weight {
        let (lo, hi) = if signed { (-(1i64 << (bits - 1)), (1 << (bits - 1)) - 1) } else { (0, (1 << bits) - 1) };
        let span = hi - lo + 1;
        let params = match layout {
            Layout::PerTensor => 1,
            Layout::PerChannel => n,
            Layout::Blocked(bs) => k.div_ceil(bs) * n,
        };
        Weight {
            k,
            n,
            bits,
            signed,
            layout,
            codes: (0..k * n).map(|i| lo + (i as i64 * 7 + 3) % span).collect(),
            scales: (0..params).map(|i| 0.01 + i as f32 * 0.001).collect(),
            zero_points: zp.then(|| (0..params).map(|i| lo + (i as i64 * 5) % span).collect()),
        }
    }

    #[test]
    fn every_packing_dequantizes_to_the_authored_weights() {
        for bits in [2, 4, 8] {
            for signed in [false, true] {
                for layout in [Layout::PerTensor, Layout::PerChannel, Layout::Blocked(16), Layout::Blocked(32)] {
                    for zp in [false, true] {
                        for k in [16, 40, 96] {
                            let w = weight(bits, signed, layout, k, 5, zp);
                            let p = pack(&w);
                            assert!(check(&w, &p).is_exact(), "bits {bits} signed {signed} {layout:?} zp {zp} K {k}");
                            assert_eq!(p.b.len(), 5 * p.blocks * p.block_size * bits as usize / 8);
                            assert_eq!(p.zero_points.is_none(), signed && !zp, "only signed weights without zero point omit it");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn signed_4_bit_codes_are_stored_shifted_low_nibble_first() {
        // ORT 1.31.1 stores W[:, 0] = [5, -4] as 13 | 4 << 4 = 77 (tests/oracle/test_matmulnbits.py).
        let w = Weight { k: 2, n: 1, bits: 4, signed: true, layout: Layout::Blocked(16), codes: vec![5, -4], scales: vec![1.0], zero_points: Some(vec![-6]) };
        let p = pack(&w);
        assert_eq!(p.b[0], 77);
        assert_eq!(p.zero_points, Some(vec![2 | 8 << 4]));
    }

    #[test]
    fn f16_rounding_is_to_nearest_even_with_subnormals_and_overflow() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_finite() {
                assert_eq!(round_to_f16(x).to_bits(), x.to_bits(), "{h:#x} is an f16");
            }
        }
        assert_eq!(round_to_f16(1.0 + 2f32.powi(-11)), 1.0, "a tie goes to the even neighbour");
        assert_eq!(round_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(round_to_f16(2f32.powi(-25)), 0.0, "half the smallest subnormal ties to 0");
        assert_eq!(round_to_f16(65519.0), 65504.0);
        assert_eq!(round_to_f16(65520.0), f32::INFINITY);
    }

    #[test]
    fn acc1_is_close_and_acc4_quantizes_activations() {
        let w = weight(4, true, Layout::Blocked(32), 64, 8, true);
        let p = pack(&w);
        let a = random_activations(64);
        let acc1 = deviation(&p, |k, n| w.dequantized(k, n), &a, RANDOM_ROWS, AccuracyLevel::Acc1, "random".into());
        let acc4 = deviation(&p, |k, n| w.dequantized(k, n), &a, RANDOM_ROWS, AccuracyLevel::Acc4, "random".into());
        assert!(acc1.max_rel < 1e-6, "{acc1:?}");
        assert!(acc4.max_rel > 1e-4 && acc4.max_rel < 5e-2, "{acc4:?}");
    }
}
