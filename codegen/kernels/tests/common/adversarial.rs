//! Rows of run-time scales and accumulators built to sit on or next to rounding boundaries, for
//! the dynamic group's epilogues (`tests/dynamic.rs` and `examples/dynamic_rows.rs`).
//!
//! Float output (`C·sx·sw` rounded to f32), row kinds in turn:
//! - random scales over the whole f32 exponent range and accumulators of every magnitude;
//! - exact f32 midpoints: `sx = mx·2^e` with a small odd `mx`, `sw` powers of two, `C = mx'·odd`
//!   so that `C·mx` has exactly 25 significant bits (ties, also at the subnormal and overflow ends);
//! - double rounding: a 24-bit odd `mx`, `sw` powers of two, `C ≡ (2^30 ± 1)·mx⁻¹ (mod 2^31)`
//!   (or `2^29 ± 1` mod 2^30), so that the 54/55-bit product rounds in f64 onto an f32 midpoint
//!   it is not on (what the certificate must catch).
//!
//! Codes output (`sat(rne(C·sx·sw/sy) + zy)`):
//! - random ratios, accumulators around half-integers `round((j + ½)/r) + {−1, 0, 1}`;
//! - exact ties: `sw = 2^a`, `sy = sx·2^(a+k)` (exact), `C = (2j + 1)·2^(k−1)`, `j` across and
//!   just beyond the code range (saturation edges);
//! - huge accumulators (|v| ≥ 2^40 saturates) and `sx = 0`.

use super::Rng;

/// One row of the float epilogue: the row's `sx`, per column `sw` and `C`.
pub struct FloatRow {
    pub sx: f32,
    pub sw: Vec<f32>,
    pub acc: Vec<i32>,
}

/// One row of the codes epilogue.
pub struct CodesRow {
    pub sx: f32,
    pub sw: Vec<f32>,
    pub sy: f32,
    pub acc: Vec<i32>,
}

fn pow2(e: i32) -> f32 {
    // Exact for e in −149..=127 (f64 power of two, then an exact conversion).
    (2f64.powi(e)) as f32
}

fn signed(v: i64, rng: &mut Rng) -> i32 {
    let v = v.clamp(-i64::from(i32::MAX), i64::from(i32::MAX)) as i32;
    if rng.next() & 1 == 0 { v } else { -v }
}

/// `a⁻¹ mod 2^bits` for odd `a` (Newton's iteration).
fn inverse_mod(a: u64, bits: u32) -> u64 {
    let mut x: u64 = 1;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x & ((1u64 << bits) - 1)
}

/// A random f32 scale of any exponent in `lo..=hi` with a random 24-bit significand.
fn any_scale(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    let e = lo + rng.below((hi - lo + 1) as u64) as i32;
    let m = (1u64 << 23) | rng.below(1 << 23);
    (m as f64 * 2f64.powi(e - 23)) as f32
}

/// Row `i` of the float kinds (in turn by `i`).
pub fn float_row(rng: &mut Rng, i: u64, n: usize) -> FloatRow {
    match i % 4 {
        0 => {
            let sx = if rng.below(8) == 0 { pow2(-149 + rng.below(40) as i32) } else { any_scale(rng, -60, 20) };
            let sw = (0..n).map(|_| any_scale(rng, -60, 20)).collect();
            let acc = (0..n).map(|_| signed((rng.next() >> 33) as i64 >> rng.below(31), rng)).collect();
            FloatRow { sx, sw, acc }
        }
        1 => {
            // Exact midpoints: C·mx has 25 significant bits, odd.
            let mx = 1 + 2 * rng.below(128);
            let ex = -40 + rng.below(30) as i32;
            let sx = (mx as f64 * 2f64.powi(ex)) as f32;
            let (mut sw, mut acc) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                let lo = (1u64 << 24).div_ceil(mx);
                let hi = (1u64 << 25) / mx;
                let mut c = lo + rng.below(hi - lo);
                if (c * mx).is_multiple_of(2) {
                    c += 1;
                }
                // The value C·mx·2^(ex+ew) at a chosen binade: normal, subnormal or the top.
                let target = match rng.below(8) {
                    0 => -150 - rng.below(20) as i32, // among the subnormals (25-bit ties round to them)
                    1 => 103,                         // (2^25 − 1)·2^103-like: near the overflow boundary
                    _ => -100 + rng.below(180) as i32,
                };
                let ew = (target - ex).clamp(-149, 127);
                sw.push(pow2(ew));
                acc.push(signed(c as i64, rng));
            }
            FloatRow { sx, sw, acc }
        }
        2 => {
            // Double rounding: a 24-bit odd significand.
            let mx = (1u64 << 23) | rng.below(1 << 23) | 1;
            let ex = -50 + rng.below(40) as i32;
            let sx = (mx as f64 * 2f64.powi(ex - 23)) as f32;
            let (mut sw, mut acc) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                let up = rng.next() & 1 == 0;
                let (bits, half) = if rng.next() & 1 == 0 { (31, 1u64 << 30) } else { (30, 1u64 << 29) };
                let target = if up { half + 1 } else { half - 1 };
                let c = (target.wrapping_mul(inverse_mod(mx, bits))) & ((1u64 << bits) - 1);
                let ew = (-80 + rng.below(100) as i32).clamp(-149, 127);
                sw.push(pow2(ew));
                acc.push(signed(c as i64, rng));
            }
            FloatRow { sx, sw, acc }
        }
        _ => {
            // The overflow midpoint (2^25 − 1)·2^103 = 31·1082401·2^103 and its neighbours, and
            // the smallest subnormals.
            let sx = (1_082_401f64 * 2f64.powi(60)) as f32;
            let (mut sw, mut acc) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for c in 0..n {
                if c % 2 == 0 {
                    sw.push(pow2(43));
                    acc.push(signed(30 + rng.below(3) as i64, rng));
                } else {
                    sw.push(pow2(-149));
                    acc.push(signed(rng.below(1 << 20) as i64, rng));
                }
            }
            FloatRow { sx: if rng.below(16) == 0 { 0.0 } else { sx }, sw, acc }
        }
    }
}

/// Row `i` of the codes kinds; `zy` is the output zero point the row is built around (its code
/// range `lo..=hi`).
pub fn codes_row(rng: &mut Rng, i: u64, n: usize, (zy, lo, hi): (i32, i32, i32)) -> CodesRow {
    let span = i64::from(hi - lo + 4);
    let j = |rng: &mut Rng| i64::from(lo - zy - 2) + rng.below(span as u64) as i64;
    match i % 3 {
        0 => {
            let sx = any_scale(rng, -30, 4);
            let sw: Vec<f32> = (0..n).map(|_| any_scale(rng, -20, 0)).collect();
            let sy = any_scale(rng, -40, 0);
            let acc = sw
                .iter()
                .map(|&w| {
                    let r = f64::from(sx) * f64::from(w) / f64::from(sy);
                    let c = ((j(rng) as f64 + 0.5) / r).round() as i64 + rng.below(3) as i64 - 1;
                    c.clamp(-i64::from(i32::MAX), i64::from(i32::MAX)) as i32
                })
                .collect();
            CodesRow { sx, sw, sy, acc }
        }
        1 => {
            // Exact ties: r = 2^-k.
            let (a, k) = (-(rng.below(12) as i32), 1 + rng.below(20) as i32);
            let mut sx = any_scale(rng, -30, 0);
            let sy = sx * pow2(a + k);
            if sy / pow2(a + k) != sx || !sy.is_normal() {
                sx = pow2(-10);
            }
            let sy = sx * pow2(a + k);
            let acc = (0..n).map(|_| ((2 * j(rng) + 1) << (k - 1)).clamp(-i64::from(i32::MAX), i64::from(i32::MAX)) as i32).collect();
            CodesRow { sx, sw: vec![pow2(a); n], sy, acc }
        }
        _ => {
            let sx = if rng.below(8) == 0 { 0.0 } else { any_scale(rng, -10, 10) };
            let sw: Vec<f32> = (0..n).map(|_| any_scale(rng, -10, 10)).collect();
            let acc = (0..n).map(|_| signed(i64::from(i32::MAX) - rng.below(1 << 20) as i64, rng)).collect();
            CodesRow { sx, sw, sy: any_scale(rng, -40, -20), acc }
        }
    }
}
