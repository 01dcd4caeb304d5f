//! A bias off the accumulator's scale (`Ratio::with_bias`): the exact form against an
//! independent check of `rne((acc·sx·sw + b·sb)/sy)`, the certified form against the exact one on
//! every accumulator of each instance's unsaturated window and on every kernel path, with
//! sampled scales, short mantissas full of ties, and ORT quantize_static's own bias scale
//! `fl32(sx·sw)` (off the grid whenever the product has more than 24 bits).

mod common;

use common::{Rng, as_fraction, log_uniform, short};
use qdqc_kernels::requant::{Certified, Code, Form, Output, Plan, Ratio, requant_exact, requantize};
use qdqc_kernels::{Isa, Kernels};

/// Independent check that `q = rne((acc·sx·sw + b·sb)/sy)`: with every scale `n/2^p` and
/// `P = max(px + pw, pb)`, the value is `N/D` for `N = (acc·nx·nw·2^(P−px−pw) + b·nb·2^(P−pb))·2^py`
/// and `D = ny·2^P`; then `2·|N − q·D| ≤ D`, even on equality.
fn is_rne(acc: i64, b: i64, (sx, sw, sb, sy): (f32, f32, f32, f32), q: i128) -> bool {
    let ((nx, px), (nw, pw), (nb, pb), (ny, py)) = (as_fraction(sx), as_fraction(sw), as_fraction(sb), as_fraction(sy));
    let p = (px + pw).max(pb);
    let num = (i128::from(acc) * nx * nw * (1i128 << (p - px - pw)) + i128::from(b) * nb * (1i128 << (p - pb))) << py;
    let den = ny << p;
    let twice = 2 * (num - q * den).abs();
    twice < den || (twice == den && q % 2 == 0)
}

/// Every accumulator whose value lies within the unsaturated range (plus a margin): the
/// certified form (every path) equals the exact one, and the exact one is the rounding of the
/// exact value. Returns (points, fallbacks).
fn sweep(scales: (f32, f32, f32, f32), b: i32, out: Output) -> (u64, u64) {
    let (sx, sw, sb, sy) = scales;
    let (code, ratio) = Ratio::new(sx, sw, sy).unwrap().with_bias(b, sb).unwrap();
    let r = f64::from(sx) * f64::from(sw) / f64::from(sy);
    let off = f64::from(b) * f64::from(sb) / f64::from(sy);
    let lo = ((f64::from(out.code().min() - out.zero_point() - 2) - off) / r).floor() - 64.0;
    let hi = ((f64::from(out.code().max() - out.zero_point() + 2) - off) / r).ceil() + 64.0;
    let accs: Vec<i32> = (lo.max(-1e9) as i32..=hi.min(1e9) as i32).collect();
    let exact: Vec<i32> = accs.iter().map(|&a| requant_exact(a, code, &ratio, out)).collect();
    let plan = Plan { output: out, form: Form::Certified(vec![Certified::new(ratio)]) };
    let mut fallbacks = None;
    for isa in Isa::available() {
        let mut c = vec![0u8; accs.len()];
        let stats = requantize(Kernels::new(isa).unwrap(), &plan, &accs, 1, Some(&[code]), &mut c).unwrap();
        if let Some(i) = (0..accs.len()).find(|&i| i32::from(c[i]) != exact[i]) {
            panic!("{isa}: certified {} ≠ exact {} at acc {}, bias {b}·{sb:e}, scales {sx:e} {sw:e} {sy:e}", c[i], exact[i], accs[i]);
        }
        assert_eq!(*fallbacks.get_or_insert(stats.fallbacks), stats.fallbacks, "{isa}: another fallback count");
    }
    for (&a, &e) in accs.iter().zip(&exact) {
        if e > out.code().min() && e < out.code().max() {
            // The kernel's bias code is 0 off the grid; on it, the code is b itself.
            let acc = i64::from(a) + i64::from(code) - if code == 0 { 0 } else { i64::from(b) };
            assert!(is_rne(acc, i64::from(b), scales, i128::from(e - out.zero_point())), "exact form wrong at acc {a}: {e}, bias {b}·{sb:e}");
        }
    }
    (accs.len() as u64, fallbacks.unwrap_or(0))
}

fn u8_out(zp: i32) -> Output {
    Output::new(zp, Code::U8).unwrap()
}

#[test]
fn the_bias_code_stays_on_the_accumulator_exactly_when_its_scale_is_sx_sw() {
    let r = Ratio::new(0.5, 0.75, 0.1).unwrap();
    // 0.375 = 0.5·0.75: the code adds to the accumulator, the ratio is unchanged.
    assert_eq!(r.with_bias(7, 0.375).unwrap(), (7, r));
    // A zero bias needs no offset whatever its scale.
    assert_eq!(r.with_bias(0, 0.3).unwrap(), (0, r));
    let (code, off) = r.with_bias(7, 0.3).unwrap();
    assert_eq!(code, 0);
    assert_ne!(off, r);
    assert!(r.with_bias(7, 0.0).is_err() && r.with_bias(7, f32::NAN).is_err() && r.with_bias(7, -0.3).is_err());
    // 2^60 between the grids: refused, never approximated.
    assert!(r.with_bias(7, 2f32.powi(-80)).is_err());
}

/// quantize_static's bias scale is `fl32(sx·sw)`: off the grid for most pairs of scales.
#[test]
fn ort_bias_scale_fl32_of_the_product() {
    let mut rng = Rng::new(31);
    let (mut total, mut off_grid) = (0, 0);
    for _ in 0..40 {
        let (sx, sw, sy) = (log_uniform(&mut rng, 0.005, 0.1), log_uniform(&mut rng, 0.0005, 0.05), log_uniform(&mut rng, 0.01, 0.5));
        let sb = sx * sw;
        let b = rng.below(200_001) as i32 - 100_000;
        off_grid += usize::from(Ratio::new(sx, sw, sy).unwrap().with_bias(b, sb).unwrap().0 == 0);
        total += sweep((sx, sw, sb, sy), b, u8_out(rng.below(256) as i32)).0;
    }
    assert!(off_grid > 30 && total > 500_000, "{off_grid} off-grid biases, {total} accumulators");
    eprintln!("fl32(sx·sw) bias scales: {off_grid}/40 off the accumulator's grid, {total} accumulators");
}

/// Short mantissas everywhere: the value lands on exact ties, which the fallback settles.
#[test]
fn ties_with_an_offset_go_through_the_fallback() {
    let mut rng = Rng::new(32);
    let (mut total, mut fallbacks) = (0, 0);
    for i in 0..60 {
        let bits = 2 + (i % 5) as u32;
        let scales = (short(&mut rng, bits, 0.05), short(&mut rng, bits, 0.02), short(&mut rng, bits, 0.003), short(&mut rng, bits, 0.1));
        let b = rng.below(2001) as i32 - 1000;
        let (p, f) = sweep(scales, b, u8_out(128));
        total += p;
        fallbacks += f;
    }
    assert!(total > 50_000 && fallbacks > 500, "{total} points, {fallbacks} fallbacks");
    eprintln!("short mantissas with a bias offset: {total} accumulators, {fallbacks} settled by the fallback");
}

/// Per-column plans mixing on-grid and off-grid biases in one block, on every path.
#[test]
fn per_column_offsets_in_one_block() {
    let (sx, sy) = (0.05f32, 0.2f32);
    // 12 columns: one vector step of 8 on AVX2 and a tail.
    let sws = [0.01f32, 0.02, 0.005, 0.0125].repeat(3);
    let biases = [300, -7, 0, 12_345, 1, -40_000, 77, 5, 0, 3, -3, 999];
    let (codes, ratios): (Vec<i32>, Vec<Ratio>) =
        sws.iter().zip(&biases).map(|(&sw, &b)| Ratio::new(sx, sw, sy).unwrap().with_bias(b, sx * sw * 1.001).unwrap()).unzip();
    let out = u8_out(100);
    let n = sws.len();
    let acc: Vec<i32> = (-40_000..40_000).step_by(7).collect();
    let acc = &acc[..acc.len() / n * n];
    let want: Vec<u8> = (0..acc.len()).map(|i| requant_exact(acc[i], codes[i % n], &ratios[i % n], out) as u8).collect();
    let plan = Plan { output: out, form: Form::Certified(ratios.iter().map(|&r| Certified::new(r)).collect()) };
    let exact = Plan { output: out, form: Form::Exact(ratios.clone()) };
    for isa in Isa::available() {
        for p in [&plan, &exact] {
            let mut got = vec![0u8; acc.len()];
            requantize(Kernels::new(isa).unwrap(), p, acc, n, Some(&codes), &mut got).unwrap();
            assert_eq!(got, want, "{isa}");
        }
    }
    for (i, (&a, &w)) in acc.iter().zip(&want).enumerate() {
        let c = i % n;
        if w > 0 && w < 255 {
            assert!(is_rne(i64::from(a), i64::from(biases[c]), (sx, sws[c], sx * sws[c] * 1.001, sy), i128::from(i32::from(w) - 100)), "column {c}, acc {a}");
        }
    }
}
