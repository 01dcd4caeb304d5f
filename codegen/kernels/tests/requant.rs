//! Requantization: the exact form against an independent check of its defining inequalities, the
//! certified form against the exact one exhaustively over each instance's unsaturated window
//! (sampled scales, short-mantissa scales full of exact ties, constructed near-ties), the fixed
//! form where it is exact and where it is not.

mod common;

use common::{Rng, as_fraction, log_uniform, short};
use qdqc_kernels::requant::{
    Certified, Code, CodeOut, Fixed, Form, Output, Plan, Ratio, Rounding, Stats, fallback_hits, first_disagreement, requant_certified, requant_exact,
    requantize,
};
use qdqc_kernels::{Isa, Kernels};

/// Independent check that `q` is `rne(t·sx·sw/sy)`: `2·|N − q·D| ≤ D`, and even on equality.
/// Scales must keep N and D inside i128 (the sampled ranges do).
fn is_rne(t: i64, sx: f32, sw: f32, sy: f32, q: i128) -> bool {
    let ((nx, px), (nw, pw), (ny, py)) = (as_fraction(sx), as_fraction(sw), as_fraction(sy));
    // x = t·nx·nw·2^py / (ny·2^(px+pw))
    let num = (i128::from(t) * nx * nw) << py;
    let den = ny << (px + pw);
    let twice = 2 * (num - q * den).abs();
    twice < den || (twice == den && q % 2 == 0)
}

fn output(zp: i32, code: Code) -> Output {
    Output::new(zp, code).unwrap()
}

/// `requantize` into codes of the plan's type, the codes as i32, and its statistics.
fn requantized(kern: Kernels, plan: &Plan, acc: &[i32], n: usize, bias: &[i32]) -> (Vec<i32>, Stats) {
    fn run<C: CodeOut + Into<i32>>(kern: Kernels, plan: &Plan, acc: &[i32], n: usize, bias: &[i32]) -> (Vec<i32>, Stats) {
        let mut y = vec![C::from_code(0); acc.len()];
        let stats = requantize(kern, plan, acc, n, Some(bias), &mut y).unwrap();
        (y.iter().map(|&v| v.into()).collect(), stats)
    }
    match plan.output.code() {
        Code::U8 => run::<u8>(kern, plan, acc, n, bias),
        Code::I8 => run::<i8>(kern, plan, acc, n, bias),
    }
}

/// Accumulators whose exact value lies within one step of the unsaturated range, plus a margin.
fn window(sx: f32, sw: f32, sy: f32, out: Output) -> std::ops::RangeInclusive<i32> {
    let r = f64::from(sx) * f64::from(sw) / f64::from(sy);
    let lo = (f64::from(out.code().min() - out.zero_point() - 2) / r).floor() - 64.0;
    let hi = (f64::from(out.code().max() - out.zero_point() + 2) / r).ceil() + 64.0;
    (lo.max(f64::from(i32::MIN)) as i32)..=(hi.min(f64::from(i32::MAX)) as i32)
}

/// Checks the certified (batch, on every kernel path the host has) and exact forms on every
/// accumulator of the window; returns (points, fallbacks).
fn sweep(sx: f32, sw: f32, sy: f32, out: Output, bias: i32) -> (u64, u64) {
    let ratio = Ratio::new(sx, sw, sy).unwrap();
    let plan = Plan { output: out, form: Form::Certified(vec![Certified::new(ratio)]) };
    let accs: Vec<i32> = window(sx, sw, sy, out).map(|t| t - bias).collect();
    let exact: Vec<i32> = accs.iter().map(|&acc| requant_exact(acc, bias, &ratio, out)).collect();
    let mut fallbacks = None;
    for isa in Isa::available() {
        let kern = Kernels::new(isa).unwrap();
        let (codes, stats): (Vec<i32>, _) = match out.code() {
            Code::U8 => {
                let mut c = vec![0u8; accs.len()];
                let s = requantize(kern, &plan, &accs, 1, Some(&[bias]), &mut c).unwrap();
                (c.into_iter().map(i32::from).collect(), s)
            }
            Code::I8 => {
                let mut c = vec![0i8; accs.len()];
                let s = requantize(kern, &plan, &accs, 1, Some(&[bias]), &mut c).unwrap();
                (c.into_iter().map(i32::from).collect(), s)
            }
        };
        if let Some(i) = (0..accs.len()).find(|&i| codes[i] != exact[i]) {
            panic!("{isa}: certified {} ≠ exact {} at acc {} bias {bias}, scales {sx:e} {sw:e} {sy:e} {out:?}", codes[i], exact[i], accs[i]);
        }
        assert_eq!(*fallbacks.get_or_insert(stats.fallbacks), stats.fallbacks, "{isa}: another fallback count");
        // The same accumulators as rows of 29 columns (three vector steps of 8 on AVX2, two
        // halves of 16 on AVX-512, and a tail): the vectorized rows' lanes, not only their tails.
        let wide = accs.len() / 29 * 29;
        let (got, _) = match out.code() {
            Code::U8 => {
                let mut c = vec![0u8; wide];
                let s = requantize(kern, &plan, &accs[..wide], 29, Some(&[bias; 29]), &mut c).unwrap();
                (c.into_iter().map(i32::from).collect::<Vec<_>>(), s)
            }
            Code::I8 => {
                let mut c = vec![0i8; wide];
                let s = requantize(kern, &plan, &accs[..wide], 29, Some(&[bias; 29]), &mut c).unwrap();
                (c.into_iter().map(i32::from).collect(), s)
            }
        };
        if let Some(i) = (0..wide).find(|&i| got[i] != exact[i]) {
            panic!("{isa}, rows of 29: certified {} ≠ exact {} at acc {} bias {bias}, scales {sx:e} {sw:e} {sy:e} {out:?}", got[i], exact[i], accs[i]);
        }
    }
    for (&acc, &e) in accs.iter().zip(&exact) {
        // The unclamped rounding, checked independently where the code is not saturated.
        if e > out.code().min() && e < out.code().max() {
            assert!(is_rne(i64::from(acc) + i64::from(bias), sx, sw, sy, i128::from(e - out.zero_point())), "exact form wrong at acc {acc}: {e}");
        }
    }
    (accs.len() as u64, fallbacks.unwrap_or(0))
}

#[test]
fn certified_equals_exact_on_sampled_scales() {
    let mut rng = Rng::new(11);
    let mut total = 0;
    for i in 0..48 {
        let (sx, sw, sy) = (log_uniform(&mut rng, 0.01, 0.1), log_uniform(&mut rng, 0.004, 0.05), log_uniform(&mut rng, 0.01, 0.4));
        let out = if i % 2 == 0 { output(rng.below(256) as i32, Code::U8) } else { output(rng.below(256) as i32 - 128, Code::I8) };
        let bias = rng.below(20_001) as i32 - 10_000;
        total += sweep(sx, sw, sy, out, bias).0;
    }
    assert!(total > 3_000_000, "only {total} accumulators checked");
    eprintln!("certified = exact on {total} accumulators (48 sampled triples, every path)");
}

/// Short mantissas put exact ties in every window; the fallback settles each of them.
#[test]
fn exact_ties_go_through_the_fallback() {
    let mut rng = Rng::new(12);
    let (mut total, mut fallbacks) = (0, 0);
    for i in 0..40 {
        let bits = 2 + (i % 6) as u32;
        let (sx, sw, sy) = (short(&mut rng, bits, 0.05), short(&mut rng, bits, 0.01), short(&mut rng, bits, 0.1));
        let out = if i % 2 == 0 { output(128, Code::U8) } else { output(-3, Code::I8) };
        let (p, f) = sweep(sx, sw, sy, out, 0);
        total += p;
        fallbacks += f;
    }
    assert!(total > 100_000 && fallbacks > 1000, "{total} points, {fallbacks} fallbacks");
    eprintln!("short mantissas: {total} accumulators, {fallbacks} settled by the fallback");
}

#[test]
fn ties_round_to_even() {
    // 0.5 = sx·sw/sy: t odd is a tie.
    let ratio = Ratio::new(0.5, 1.0, 1.0).unwrap();
    let (u, i) = (output(0, Code::U8), output(0, Code::I8));
    for (t, want) in [(1, 0), (3, 2), (5, 2), (7, 4), (-1, 0), (-3, -2), (-5, -2)] {
        assert_eq!(requant_exact(t, 0, &ratio, i), want, "t = {t}");
        assert_eq!(requant_certified(t, 0, &Certified::new(ratio), i), want, "t = {t}");
    }
    // Saturation on both sides, zero point added before clamping.
    assert_eq!(requant_exact(600, 0, &ratio, u), 255);
    assert_eq!(requant_exact(-600, 0, &ratio, u), 0);
    assert_eq!(requant_exact(i32::MAX, i32::MAX, &ratio, i), 127);
    assert_eq!(requant_exact(i32::MIN, i32::MIN, &ratio, output(100, Code::U8)), 0);
    assert_eq!(requant_exact(-201, 0, &ratio, output(100, Code::U8)), 0);
    // −99.5 → −100 (even) → 0; −98.5 → −98 → 2; −97.5 → −98 → 2.
    assert_eq!(requant_exact(-199, 0, &ratio, output(100, Code::U8)), 0);
    assert_eq!(requant_exact(-197, 0, &ratio, output(100, Code::U8)), 2);
    assert_eq!(requant_exact(-195, 0, &ratio, output(100, Code::U8)), 2);
    // Extreme exponents: huge ratio saturates, tiny ratio rounds to the zero point.
    let huge = Ratio::new(f32::MAX, f32::MAX, f32::from_bits(1)).unwrap();
    assert_eq!(requant_exact(1, 0, &huge, u), 255);
    assert_eq!(requant_exact(-1, 0, &huge, u), 0);
    assert_eq!(requant_certified(-1, 0, &Certified::new(huge), u), 0);
    let tiny = Ratio::new(f32::from_bits(1), f32::from_bits(1), f32::MAX).unwrap();
    assert_eq!(requant_exact(i32::MAX, i32::MAX, &tiny, output(7, Code::U8)), 7);
    assert_eq!(requant_certified(i32::MAX, i32::MAX, &Certified::new(tiny), output(7, Code::U8)), 7);
}

/// `t·sx·sw/sy = k + 1/2 ± 2^-50`: where `t·mx·mw` has more than 53 bits f64 rounds the product
/// to the exact half and gives the even neighbour, which can be wrong; the certified form falls
/// back on every such value and gets them right. Factorizations of `(2k+1)·2^49 ± 1` found offline.
#[test]
fn near_ties_go_through_the_fallback() {
    // (t, sx mantissa, sw mantissa, correct code, f64 wrong): sx = mx·2^-20, sw = mw·2^-30, sy = 1.
    // Below 2^53 (k ≤ 7) f64 is still exact, but inside the band, so the fallback decides anyway.
    let cases: [(i64, u32, u32, i32, bool); 3] =
        [(659_168_649, 1, 11_102_393, 7, false), (334_282_589, 113, 223_547, 7, false), (1_071_849_361, 3, 6_127_493, 17, true)];
    for (t, mx, mw, want, f64_wrong) in cases {
        let (sx, sw) = (mx as f32 * 2f32.powi(-20), mw as f32 * 2f32.powi(-30));
        assert_eq!((sx / 2f32.powi(-20)) as u32, mx, "sx not exact");
        assert_eq!((sw / 2f32.powi(-30)) as u32, mw, "sw not exact");
        let ratio = Ratio::new(sx, sw, 1.0).unwrap();
        let plain_f64 = (t as f64 * (f64::from(sx) * f64::from(sw))).round_ties_even() as i32;
        assert_eq!(plain_f64 != want, f64_wrong, "t = {t}: plain f64 gives {plain_f64}");
        for (sign, out) in [(1, output(0, Code::U8)), (-1, output(0, Code::I8))] {
            // t split into accumulator and bias, both i32.
            let (acc, bias) = ((sign * t / 2) as i32, (sign * t - sign * t / 2) as i32);
            assert!(is_rne(sign * t, sx, sw, 1.0, i128::from(sign as i32 * want)));
            assert_eq!(requant_exact(acc, bias, &ratio, out), sign as i32 * want);
            let before = fallback_hits();
            assert_eq!(requant_certified(acc, bias, &Certified::new(ratio), out), sign as i32 * want);
            assert!(fallback_hits() > before, "no fallback at t = {}", sign * t);
        }
    }
}

/// A multiplier that is the ratio exactly (a power of two times a short mantissa) agrees with the
/// exact form on the whole window, ties included; `HalfUp` then differs exactly on negative ties.
#[test]
fn fixed_point_exact_multiplier() {
    let ratio = Ratio::new(0.75, 0.5, 4.0).unwrap(); // 3/32
    let out = output(10, Code::I8);
    let even = Fixed::from_ratio(&ratio, Rounding::HalfEven).unwrap();
    assert_eq!((even.multiplier() as f64) / 2f64.powi(even.shift() as i32), 3.0 / 32.0);
    assert_eq!(first_disagreement(&even, &ratio, out, -3000..=3000), None);
    let up = Fixed::new(even.multiplier(), even.shift(), Rounding::HalfUp).unwrap();
    // The first unsaturated tie with an even lower neighbour: t = −1424, 3t/32 = −133.5 → −134
    // (even) or −133 (up), plus the zero point 10.
    assert_eq!(first_disagreement(&up, &ratio, out, -3000..=3000), Some((-1424, -123, -124)));
    let away = Fixed::new(even.multiplier(), even.shift(), Rounding::HalfAway).unwrap();
    // The first unsaturated tie whose even neighbour is nearer zero: t = −1456, 3t/32 = −136.5 →
    // −137 (away) or −136 (even), plus 10.
    assert_eq!(first_disagreement(&away, &ratio, out, -3000..=3000), Some((-1456, -127, -126)));
}

/// An approximate multiplier cannot see exact ties: 1/6 has ties at t ≡ 3 (mod 6), and
/// `rne(2^s/6)` sits on one side of them, so half of the ties round the wrong way.
#[test]
fn fixed_point_misrounds_ties_of_an_inexact_ratio() {
    let ratio = Ratio::new(0.5, 1.0, 3.0).unwrap();
    let out = output(0, Code::I8);
    let fixed = Fixed::from_ratio(&ratio, Rounding::HalfEven).unwrap();
    let (t, f, e) = first_disagreement(&fixed, &ratio, out, -760..=760).expect("a misrounded tie");
    assert_eq!(t % 6, 3 * t.signum() % 6, "the disagreement is at a tie, t = {t}");
    assert!(is_rne(i64::from(t), 0.5, 1.0, 3.0, i128::from(e)) && !is_rne(i64::from(t), 0.5, 1.0, 3.0, i128::from(f)));
    // The certified form has no such problem.
    let cert = Certified::new(ratio);
    assert!((-760..=760).all(|t| requant_certified(t, 0, &cert, out) == requant_exact(t, 0, &ratio, out)));
}

#[test]
fn per_column_plans_and_shapes() {
    let ratios: Vec<Ratio> = [0.01f32, 0.02, 0.005].iter().map(|&sw| Ratio::new(0.1, sw, 0.05).unwrap()).collect();
    let out = output(128, Code::U8);
    let acc: Vec<i32> = (0..12).map(|i| i * 997 - 6000).collect();
    let bias = [5, -7, 100];
    let mut y = vec![0u8; 12];
    let plan = Plan { output: out, form: Form::Exact(ratios.clone()) };
    requantize(Kernels::detect(), &plan, &acc, 3, Some(&bias), &mut y).unwrap();
    for (i, &v) in y.iter().enumerate() {
        assert_eq!(i32::from(v), requant_exact(acc[i], bias[i % 3], &ratios[i % 3], out));
    }
    let cert = Plan { output: out, form: Form::Certified(ratios.iter().map(|&r| Certified::new(r)).collect()) };
    let mut z = vec![0u8; 12];
    requantize(Kernels::detect(), &cert, &acc, 3, Some(&bias), &mut z).unwrap();
    assert_eq!(y, z);
    // Wrong code type, wrong column count, wrong bias length.
    assert!(requantize(Kernels::detect(), &plan, &acc, 3, None, &mut [0i8; 12]).is_err());
    assert!(requantize(Kernels::detect(), &plan, &acc, 4, None, &mut y).is_err());
    assert!(requantize(Kernels::detect(), &plan, &acc, 3, Some(&[1, 2]), &mut y).is_err());
    assert!(Output::new(300, Code::U8).is_err() && Output::new(-129, Code::I8).is_err());
    assert!(Ratio::new(0.0, 1.0, 1.0).is_err() && Ratio::new(1.0, f32::NAN, 1.0).is_err() && Ratio::new(1.0, 1.0, -2.0).is_err());
    assert!(Ratio::new(1.0, 1.0, f32::INFINITY).is_err());
}

/// Wide per-column blocks (the vectorized chunks of 64 columns, with a tail) on every path: equal
/// to the exact form element by element, ties (short mantissas) patched wherever they fall.
#[test]
fn wide_blocks_on_every_path() {
    let mut rng = Rng::new(13);
    let (m, n) = (200, 150);
    let ratios: Vec<Ratio> = (0..n).map(|_| Ratio::new(short(&mut rng, 3, 0.05), short(&mut rng, 3, 0.01), short(&mut rng, 3, 0.1)).unwrap()).collect();
    let out = output(100, Code::U8);
    let bias: Vec<i32> = (0..n).map(|_| rng.below(2001) as i32 - 1000).collect();
    // Accumulators around the unsaturated range of each column (|x| up to ~300).
    let acc: Vec<i32> = (0..m * n).map(|_| rng.below(120_001) as i32 - 60_000).collect();
    let plan = Plan { output: out, form: Form::Certified(ratios.iter().map(|&r| Certified::new(r)).collect()) };
    let want: Vec<u8> = (0..m * n).map(|i| requant_exact(acc[i], bias[i % n], &ratios[i % n], out) as u8).collect();
    for isa in Isa::available() {
        let mut y = vec![0u8; m * n];
        let stats = requantize(Kernels::new(isa).unwrap(), &plan, &acc, n, Some(&bias), &mut y).unwrap();
        assert_eq!(y, want, "{isa}");
        assert!(stats.fallbacks > 10, "{isa}: {} fallbacks", stats.fallbacks);
    }
}

/// The vectorized certified form at the ends of its range, on every path: extreme accumulators
/// and biases (|t| up to 2^32), no bias at all, ratios large enough that the ±2^40 clamp matters (and ties of a
/// half-integer ratio among them), tiny ones, bias offsets off the accumulator's scale (ρ ≠ 0),
/// both code types, rows whose length is not a multiple of the 16-lane step; the same fallback
/// count on every path.
#[test]
fn extremes_on_every_path() {
    let mut rng = Rng::new(17);
    let n = 37;
    let specials = [i32::MIN, i32::MIN + 1, -1 << 30, -1, 0, 1, 1 << 30, i32::MAX - 1, i32::MAX];
    for (sx, sw, sy) in [(0.5f32, 257.0f32, 1.0f32), (1.0, 3.0e6, 1.0e-3), (0.5, 0.0625, 0.5), (1.0e-3, 2.0e-4, 7.0)] {
        // No bias, bias codes on the accumulator's scale, biases off it (an offset ρ).
        for bias_kind in ["none", "codes", "offset"] {
            let base = Ratio::new(sx, sw, sy).unwrap();
            let (bias, ratios): (Vec<i32>, Vec<Ratio>) = (0..n)
                .map(|c| {
                    let code = specials[c % specials.len()].wrapping_add(c as i32);
                    match bias_kind {
                        "none" => (0, base),
                        "codes" => (code, base),
                        _ => base.with_bias(code % 1_000_000, 0.75 * sx * sw).unwrap(),
                    }
                })
                .unzip();
            let acc: Vec<i32> = (0..6 * n).map(|i| if i % 3 == 0 { specials[i % specials.len()] } else { rng.below(2001) as i32 - 1000 }).collect();
            let plan_forms: Vec<Certified> = ratios.iter().map(|&r| Certified::new(r)).collect();
            for (zy, code) in [(0, Code::U8), (200, Code::U8), (-3, Code::I8)] {
                let out = output(zy, code);
                let plan = Plan { output: out, form: Form::Certified(plan_forms.clone()) };
                let want: Vec<i32> = (0..acc.len()).map(|i| requant_exact(acc[i], bias[i % n], &ratios[i % n], out)).collect();
                let mut fallbacks = Vec::new();
                for isa in Isa::available() {
                    let kern = Kernels::new(isa).unwrap();
                    let (got, stats) = requantized(kern, &plan, &acc, n, &bias);
                    assert_eq!(got, want, "{isa}: scales {sx} {sw} {sy}, bias {bias_kind}, zy {zy}");
                    fallbacks.push(stats.fallbacks);
                }
                // The same lanes go to the exact fallback on every path (the same f64 operations).
                assert!(fallbacks.windows(2).all(|w| w[0] == w[1]), "fallbacks per path {fallbacks:?}");
            }
        }
    }
}

/// The f32 form with offsets: biases off the accumulator's scale small enough for it (|ρ| < 2,
/// within its 2^8 bound), in every column or beside bias codes on the accumulator's scale in
/// every other column, both code types, accumulators across the unsaturated window and at the
/// i32 ends: every path's codes equal the exact form (each path's vector block has a variant
/// per presence of ρ and of bias codes; `extremes_on_every_path`'s offsets are beyond 2^8, in
/// the f64 form).
#[test]
fn f32_form_with_offsets_on_every_path() {
    let mut rng = Rng::new(23);
    let n = 45;
    let (sx, sw, sy) = (0.0213f32, 0.00391f32, 0.0517f32);
    let base = Ratio::new(sx, sw, sy).unwrap();
    for codes_beside in [false, true] {
        let (bias, ratios): (Vec<i32>, Vec<Ratio>) = (0..n)
            .map(|c| {
                let code = c as i32 * 37 - 811;
                if codes_beside && c % 2 == 1 { (code, base) } else { base.with_bias(code, 0.75 * sx * sw).unwrap() }
            })
            .unzip();
        assert!((0..n).step_by(2).all(|c| bias[c] == 0 && ratios[c] != base), "an offset in every other column at least");
        let plans: Vec<Certified> = ratios.iter().map(|&r| Certified::new(r)).collect();
        let mut acc: Vec<i32> = (0..8 * n).map(|_| rng.below(24_001) as i32 - 12_000).collect();
        acc.extend([i32::MIN, i32::MAX, -1, 0, 1].iter().cycle().take(n));
        for (zy, code) in [(0, Code::U8), (131, Code::U8), (-3, Code::I8)] {
            let out = output(zy, code);
            let plan = Plan { output: out, form: Form::Certified(plans.clone()) };
            let want: Vec<i32> = (0..acc.len()).map(|i| requant_exact(acc[i], bias[i % n], &ratios[i % n], out)).collect();
            for isa in Isa::available() {
                let kern = Kernels::new(isa).unwrap();
                let (got, _) = requantized(kern, &plan, &acc, n, &bias);
                assert_eq!(got, want, "{isa}: bias codes beside the offsets {codes_beside}, zy {zy}");
            }
        }
    }
}
