//! Helpers shared by the test files: a seeded generator, the per-path kernel lookup and scale samplers.
#![allow(dead_code)] // each test binary uses its own subset

pub mod adversarial;

use qdqc_kernels::conv::ConvParams;
use qdqc_kernels::{Isa, Kernels};

/// Acknowledges, per path name (comma-separated), that this host lacks a path the suite instantiates.
pub const SKIP_ENV: &str = "QDQC_KERNELS_SKIP_ISA";

/// The path's kernels; a path this host lacks fails the test unless `QDQC_KERNELS_SKIP_ISA` names it,
/// in which case the test says so and passes without checking anything.
pub fn kernels(isa: Isa) -> Option<Kernels> {
    match Kernels::new(isa) {
        Ok(k) => Some(k),
        Err(e) => {
            let acknowledged = std::env::var(SKIP_ENV).is_ok_and(|v| v.split(',').any(|n| n.trim() == isa.name()));
            assert!(acknowledged, "{e}; set {SKIP_ENV}={} to run the suite without this path", isa.name());
            eprintln!("{isa}: not on this host, acknowledged by {SKIP_ENV}");
            None
        }
    }
}

/// xorshift64*: deterministic inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn u8s(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    pub fn i8s(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.next() as i8).collect()
    }

    /// A uniform f32 in [lo, hi).
    pub fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// `len` uniform f32 in [lo, hi).
    pub fn f32s(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..len).map(|_| self.f32_in(lo, hi)).collect()
    }

    /// `len` values `c·2^exp` with integer codes c in [−range, range]: products and short sums of
    /// them are exact in f32, so every evaluation order gives the same bits (P2-exact data).
    pub fn pow2s(&mut self, len: usize, range: i64, exp: i32) -> Vec<f32> {
        (0..len).map(|_| (self.below(2 * range as u64 + 1) as i64 - range) as f32 * 2f32.powi(exp)).collect()
    }
}

/// `Σ_k (a[m][k] − za)(b[k][n] − zb[n])` in i64, b row-major `[K][N]`.
pub fn gemm_reference(a: &[u8], m: usize, k: usize, za: i64, b: &[i64], n: usize, zb: &[i64]) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            let z = zb[if zb.len() == 1 { 0 } else { j }];
            c[i * n + j] = (0..k).map(|p| (i64::from(a[i * k + p]) - za) * (b[p * n + j] - z)).sum();
        }
    }
    c
}

/// `s = num / 2^pow` with integers (an f32 is exact in f64; doubling until integral).
pub fn as_fraction(s: f32) -> (i128, u32) {
    let (mut v, mut pow) = (f64::from(s), 0);
    while v.fract() != 0.0 {
        v *= 2.0;
        pow += 1;
    }
    (v as i128, pow)
}

/// Round half to even of `num / den`, `den > 0`, by floor division.
pub fn rne(num: i128, den: i128) -> i128 {
    let q = num.div_euclid(den);
    let r = num - q * den;
    if 2 * r < den || (2 * r == den && q % 2 == 0) { q } else { q + 1 }
}

/// A scale drawn log-uniformly from `[lo, hi]`.
pub fn log_uniform(rng: &mut Rng, lo: f32, hi: f32) -> f32 {
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    (f64::from(lo) * (f64::from(hi) / f64::from(lo)).powf(u)) as f32
}

/// A scale with a `bits`-bit mantissa near `around` (many exact ties between such scales).
pub fn short(rng: &mut Rng, bits: u32, around: f32) -> f32 {
    let m = (1 << (bits - 1)) + rng.below(1 << (bits - 1)) as i32;
    let e = around.log2().floor() as i32 - bits as i32 + 1;
    m as f32 * 2f32.powi(e)
}

/// Direct-definition convolution, i64, NCHW, any rank ≤ 3 (leading axes of extent 1).
pub fn conv_reference(p: &ConvParams, x: &[u8], batch: usize, input: &[usize], zx: i64, w: &[i64], zw: &[i64]) -> Vec<i64> {
    let lift = |v: &[usize], fill: usize| -> [usize; 3] {
        let mut a = [fill; 3];
        a[3 - v.len()..].copy_from_slice(v);
        a
    };
    let output = p.output(input).unwrap();
    let (inp, out, ker) = (lift(input, 1), lift(&output, 1), lift(&p.kernel, 1));
    let (st, dil, pad) = (lift(&p.strides, 1), lift(&p.dilations, 1), lift(&p.pads_begin, 0));
    let (cig, cog) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let (isz, osz, ksz) = (inp.iter().product::<usize>(), out.iter().product::<usize>(), ker.iter().product::<usize>());
    let mut y = vec![0i64; batch * p.out_channels * osz];
    for b in 0..batch {
        for co in 0..p.out_channels {
            let g = co / cog;
            let z = zw[if zw.len() == 1 { 0 } else { co }];
            for o in 0..osz {
                let oc = [o / (out[1] * out[2]), (o / out[2]) % out[1], o % out[2]];
                let mut s = 0i64;
                for ci in 0..cig {
                    for t in 0..ksz {
                        let tc = [t / (ker[1] * ker[2]), (t / ker[2]) % ker[1], t % ker[2]];
                        let pos: Vec<i64> = (0..3).map(|a| (oc[a] * st[a] + tc[a] * dil[a]) as i64 - pad[a] as i64).collect();
                        let inside = (0..3).all(|a| pos[a] >= 0 && (pos[a] as usize) < inp[a]);
                        let xv = if inside {
                            let i = (pos[0] as usize * inp[1] + pos[1] as usize) * inp[2] + pos[2] as usize;
                            i64::from(x[(b * p.in_channels + g * cig + ci) * isz + i])
                        } else {
                            zx
                        };
                        s += (xv - zx) * (w[(co * cig + ci) * ksz + t] - z);
                    }
                }
                y[(b * p.out_channels + co) * osz + o] = s;
            }
        }
    }
    y
}

/// ONNX Conv attributes, spelled out.
#[allow(clippy::too_many_arguments)] // one per Conv attribute
pub fn conv_attrs(cin: usize, cout: usize, groups: usize, kernel: &[usize], strides: &[usize], dilations: &[usize], pb: &[usize], pe: &[usize]) -> ConvParams {
    ConvParams {
        in_channels: cin,
        out_channels: cout,
        groups,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads_begin: pb.to_vec(),
        pads_end: pe.to_vec(),
    }
}

/// ONNX Conv attributes without dilations, the same pads at both ends of each axis.
pub fn conv_params(cin: usize, cout: usize, groups: usize, kernel: &[usize], strides: &[usize], pads: &[usize]) -> ConvParams {
    conv_attrs(cin, cout, groups, kernel, strides, &vec![1; kernel.len()], pads, pads)
}
