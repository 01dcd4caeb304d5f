//! The Rust target's proofs, one family at a time: an accepted instance whose fused kernel (the
//! qdqc-kernels function the generated code calls) equals an exact-rational reference computed
//! here, and a refused one whose counterexample is recomputed on both sides.

use qdqc_exact::num::{Dyadic, rne_quotient};
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{Contract, Method, QParam, Verdict};
use qdqc_kernels::codes::binary::{Binary, BinaryOp as KernelOp, binary_exact};
use qdqc_kernels::codes::pool::{global_average_pool, mean_exact};
use qdqc_kernels::codes::{QCode, Quant};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_kernels::{Kernels, Layout, PackedB, gemm_u8};
use qdqc_ort::binary::{BinaryOp, BinaryParams};
use qdqc_ort::pool::PoolParams;
use qdqc_ort::requant::{Bias, GemmGroup, GemmKind};
use qdqc_target_rust::{binary, gemm, lut, pool};

fn u8p(scale: f32, zero_point: i64) -> QParam {
    QParam::new(scale, zero_point, CodeType::U8)
}

/// `sat(rne(num/den) + z)` of exact dyadic rationals, in the code range of `y`.
fn exact_code(num: Dyadic, den: Dyadic, y: QParam) -> i64 {
    let (lo, hi) = y.code.range();
    rne_quotient(num, den).expect("nonzero divisor").saturate(y.zero_point, lo, hi)
}

fn d(x: f32) -> Dyadic {
    Dyadic::from_f32(x).unwrap()
}

/// A seeded generator (splitmix64), so samples are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn code(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
}

/// MatMul with K = 2 and 3 output channels: x u8 (zx 7), w i8, y u8 — non-power-of-two scales.
fn matmul(x: QParam, y: QParam, w_scales: Vec<f32>) -> GemmGroup {
    let weights = vec![vec![-128, 127], vec![5, -3], vec![0, 1]];
    GemmGroup::new(GemmKind::MatMul, x, CodeType::I8, weights, w_scales, vec![0], y)
}

/// Runs the group on the kernel crate for every pair of x codes: `gemm_u8` on the packed weights
/// (channels as columns), then `requant_exact` per channel, each bias at its own scale
/// (`Ratio::with_bias`, as the generated code does) when `bias_scales` are given.
fn run_kernels(g: &GemmGroup, bias: &[i32], bias_scales: Option<&[f32]>) -> Vec<Vec<i64>> {
    let (k, n) = (g.weights[0].len(), g.channels());
    let b: Vec<i8> = (0..k).flat_map(|kk| g.weights.iter().map(move |w| w[kk] as i8)).collect();
    let zb: Vec<i8> = (0..n).map(|c| g.w_zero_point(c) as i8).collect();
    let packed = PackedB::from_i8(&b, k, n, Layout::KN, &zb).unwrap();
    let a: Vec<u8> = (0..=255u8).flat_map(|x0| (0..=255u8).map(move |x1| [x0, x1])).flatten().collect();
    let m = a.len() / k;
    let mut c = vec![0i32; m * n];
    gemm_u8(Kernels::detect(), &a, m, g.x.zero_point as u8, &packed, &mut c).unwrap();
    let out = Output::new(g.y.zero_point as i32, Code::U8).unwrap();
    (0..n)
        .map(|ch| {
            let ratio = Ratio::new(g.x.scale, g.w_scale(ch), g.y.scale).unwrap();
            let (code, ratio) = match bias_scales {
                Some(sb) => ratio.with_bias(bias[ch], sb[ch]).unwrap(),
                None => (bias[ch], ratio),
            };
            (0..m).map(|row| i64::from(requant_exact(c[row * n + ch], code, &ratio, out))).collect()
        })
        .collect()
}

/// The unfused group in exact rationals for every pair of x codes.
fn exact_gemm(g: &GemmGroup, bias_values: &[Dyadic]) -> Vec<Vec<i64>> {
    (0..g.channels())
        .map(|ch| {
            let (sx, sw) = (d(g.x.scale), d(g.w_scale(ch)));
            (0..=255i64)
                .flat_map(|x0| (0..=255i64).map(move |x1| [x0, x1]))
                .map(|xs| {
                    let acc: i64 = xs.iter().zip(&g.weights[ch]).map(|(&x, &w)| (x - g.x.zero_point) * (w - g.w_zero_point(ch))).sum();
                    let v = Dyadic::int(acc).checked_mul(sx).unwrap().checked_mul(sw).unwrap().checked_add(bias_values[ch]).unwrap();
                    exact_code(v, d(g.y.scale), g.y)
                })
                .collect()
        })
        .collect()
}

#[test]
fn gemm_real_fires_by_construction_and_the_kernels_equal_the_exact_value_on_every_input() {
    let g = matmul(u8p(0.0173, 7), u8p(0.0921, 131), vec![0.011, 0.0037, 0.5]);
    let v = gemm::prove(&g, Contract::Real);
    let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
    assert!(matches!(&proof.method, Method::ByConstruction(f) if f.contains("requant_exact")), "{proof:?}");
    assert!(proof.detail.contains("i32 accumulation"), "{}", proof.detail);
    assert_eq!(run_kernels(&g, &[0, 0, 0], None), exact_gemm(&g, &[Dyadic::ZERO; 3]));
}

#[test]
fn gemm_exact_fires_where_p2_holds_and_equals_the_float_path() {
    // Power-of-two scales: every float intermediate is exact (P2).
    let g = matmul(u8p(0.25, 7), u8p(0.125, 131), vec![0.0078125]);
    let v = gemm::prove(&g, Contract::Exact);
    let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
    assert_eq!(proof.method, Method::P3RequantWindow);
    let fused = run_kernels(&g, &[0, 0, 0], None);
    // The float path (DQ, f32 products summed in order, Q) on every input: exact under P2.
    for (ch, w) in g.weights.iter().enumerate() {
        for (i, xs) in (0..=255i64).flat_map(|x0| (0..=255i64).map(move |x1| [x0, x1])).enumerate() {
            let v: f32 = xs.iter().zip(w).map(|(&x, &w)| dequantize(x, 0.25, 7) * dequantize(w, 0.0078125, 0)).sum();
            assert_eq!(fused[ch][i], quantize(v, 0.125, 131, CodeType::U8), "channel {ch} x {xs:?}");
        }
    }
}

#[test]
fn gemm_exact_refuses_without_p2_and_real_still_fires() {
    let g = matmul(u8p(0.0173, 7), u8p(0.0921, 131), vec![0.011]);
    let v = gemm::prove(&g, Contract::Exact);
    assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("P2")), "{v:?}");
    assert!(gemm::prove(&g, Contract::Real).is_exact());
}

#[test]
fn gemm_refuses_an_accumulator_beyond_i32_and_per_channel_alpha() {
    // 70,000 products of 255·128 reach 2.28e9 > 2^31 − 1.
    let wide = GemmGroup::new(GemmKind::MatMul, u8p(0.5, 0), CodeType::I8, vec![vec![-128; 70_000]], vec![0.5], vec![0], u8p(0.5, 0));
    let v = gemm::prove(&wide, Contract::Real);
    assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("beyond i32")), "{v:?}");
    let scaled = GemmGroup { kind: GemmKind::Gemm { alpha: 0.5 }, ..matmul(u8p(0.25, 7), u8p(0.125, 131), vec![0.0078125]) };
    assert!(matches!(gemm::prove(&scaled, Contract::Real), Verdict::Unknown { reason } if reason.contains("alpha")));
}

#[test]
fn gemm_real_with_biases_off_the_accumulator_scale_fires_and_the_kernels_equal_the_exact_value_on_every_input() {
    let (sx, sws) = (0.0173f32, [0.011f32, 0.0037, 0.5]);
    // quantize_static's bias scale fl32(sx·sw) (off the grid: the product has more than 24 bits),
    // an unrelated scale, and one exactly sx·sw (a product by 1/2 is exact in f32).
    let scales = vec![sx * sws[0], 0.3, sx * sws[2]];
    let codes = [300, -41, 7];
    let g = matmul(u8p(sx, 7), u8p(0.0921, 131), sws.to_vec()).with_bias(Bias {
        codes: codes.iter().map(|&c| i64::from(c)).collect(),
        scales: scales.clone(),
        zero_points: vec![0],
        float: None,
    });
    let v = gemm::prove(&g, Contract::Real);
    let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
    assert!(matches!(&proof.method, Method::ByConstruction(f) if f.contains("requant_exact")), "{proof:?}");
    assert!(proof.detail.contains("2 bias(es) off sx·sw"), "{}", proof.detail);
    let values: Vec<Dyadic> = codes.iter().zip(&scales).map(|(&c, &s)| Dyadic::int(i64::from(c)).checked_mul(d(s)).unwrap()).collect();
    assert_eq!(run_kernels(&g, &codes, Some(&scales)), exact_gemm(&g, &values));
    // The kernels without the offset (the bias code added at sx·sw) differ from the exact value:
    // the check above can fail.
    assert_ne!(run_kernels(&g, &codes, None), exact_gemm(&g, &values));
}

#[test]
fn gemm_exact_with_a_bias_off_the_accumulator_scale_fires_where_p2_holds() {
    // Powers of two: sx·sw = 2^-8, bias at 2^-7; every float step of the unfused group is exact.
    let g = matmul(u8p(0.25, 7), u8p(0.125, 131), vec![2f32.powi(-6)]).with_bias(Bias {
        codes: vec![5, -9, 1],
        scales: vec![2f32.powi(-7)],
        zero_points: vec![0],
        float: None,
    });
    let v = gemm::prove(&g, Contract::Exact);
    let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
    assert_eq!(proof.method, Method::P3RequantWindow);
    let values: Vec<Dyadic> = [5, -9, 1].iter().map(|&c| Dyadic::int(c).checked_mul(d(2f32.powi(-7))).unwrap()).collect();
    assert_eq!(run_kernels(&g, &[5, -9, 1], Some(&[2f32.powi(-7); 3])), exact_gemm(&g, &values));
}

fn add_params(sa: f32, sb: f32, sc: f32) -> BinaryParams {
    BinaryParams { a: u8p(sa, 128), b: u8p(sb, 120), c: u8p(sc, 125) }
}

#[test]
fn binary_real_fires_and_the_table_equals_the_exact_sum_on_every_pair() {
    let p = add_params(0.1, 0.2, 0.3);
    let v = binary::prove(BinaryOp::Add, &p, Contract::Real);
    let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
    assert_eq!((proof.method.clone(), proof.domain), (Method::P1Exhaustive, 65_536));
    let table = Binary::<u8, u8, u8>::new(KernelOp::Add, Quant::new(0.1, 128), Quant::new(0.2, 120), Quant::new(0.3, 125)).unwrap();
    for a in 0..=255i64 {
        for b in 0..=255i64 {
            let v = Dyadic::int(a - 128).checked_mul(d(0.1)).unwrap().checked_add(Dyadic::int(b - 120).checked_mul(d(0.2)).unwrap()).unwrap();
            assert_eq!(i64::from(table.code(a as u8, b as u8)), exact_code(v, d(0.3), p.c), "{a} {b}");
        }
    }
}

#[test]
fn binary_exact_is_refuted_where_the_float_path_rounds_twice() {
    // b's term (2^-30 per step) vanishes in the f32 sum, so an odd a − za over sy = 2 lands on a
    // tie in the float path and ties to even; the exact sum is off the tie by b's sign.
    let (sa, sb, sc) = (1.0, 2f32.powi(-30), 2.0);
    let p = add_params(sa, sb, sc);
    let v = binary::prove(BinaryOp::Add, &p, Contract::Exact);
    let Verdict::Refuted { counterexample: c, .. } = &v else { panic!("{v:?}") };
    let (a, b) = (c.inputs[0].1, c.inputs[1].1);
    let float = quantize(dequantize(a, sa, 128) + dequantize(b, sb, 120), sc, 125, CodeType::U8);
    let kernel: u8 = binary_exact(KernelOp::Add, a as u8, Quant::new(sa, 128), b as u8, Quant::new(sb, 120), Quant::new(sc, 125)).unwrap();
    assert_eq!((c.unfused, c.fused), (float, i64::from(kernel)));
    assert_ne!(c.unfused, c.fused);
    let exact = Dyadic::int(a - 128).checked_add(Dyadic::int(b - 120).checked_mul(d(sb)).unwrap()).unwrap();
    assert_eq!(exact_code(exact, d(sc), p.c), c.fused, "the kernel is the exact value");
    assert!(binary::prove(BinaryOp::Add, &p, Contract::Real).is_exact());
    // Power-of-two scales with short codes: the float path is exact, and so equal on every pair.
    assert!(binary::prove(BinaryOp::Mul, &add_params(0.5, 0.25, 0.125), Contract::Exact).is_exact());
}

#[test]
fn pool_real_fires_and_the_kernel_equals_the_exact_mean_on_sampled_and_boundary_images() {
    let p = PoolParams { x: u8p(0.037, 13), y: u8p(0.0111, 250) };
    let v = pool::prove(&p, pool::Windows::Image(49), Contract::Real);
    assert!(v.is_exact(), "{v:?}");
    let mut rng = Rng(12);
    let mut images: Vec<Vec<u8>> = [0u8, 13, 255].iter().map(|&c| vec![c; 49]).collect();
    images.extend((0..200).map(|_| (0..49).map(|_| rng.code()).collect()));
    for image in images {
        let mut out = [0u8; 1];
        global_average_pool(&image, &[1, 1, 7, 7], Quant::new(0.037, 13), Quant::new(0.0111, 250), &mut out).unwrap();
        let sum: i64 = image.iter().map(|&c| i64::from(c) - 13).sum();
        let want = exact_code(Dyadic::int(sum).checked_mul(d(0.037)).unwrap(), Dyadic::int(49).checked_mul(d(0.0111)).unwrap(), p.y);
        assert_eq!(i64::from(out[0]), want, "{image:?}");
    }
}

#[test]
fn pool_exact_is_refuted_where_the_float_mean_rounds_onto_a_tie_and_refused_without_p2() {
    // sy = fl(2/3) > 2/3: the exact mean of an odd sum over 3 lies just below k + ½, the float
    // path's quotient rounds onto k + ½ and ties to even.
    let p = PoolParams { x: u8p(1.0, 0), y: u8p(2.0 / 3.0, 0) };
    let v = pool::prove(&p, pool::Windows::Image(3), Contract::Exact);
    let Verdict::Refuted { counterexample: c, .. } = &v else { panic!("{v:?}") };
    let sum = c.inputs[0].1;
    assert_eq!(c.unfused, quantize(sum as f32 * 1.0 / 3.0, 2.0 / 3.0, 0, CodeType::U8));
    assert_eq!(c.fused, i64::from(mean_exact::<u8, u8>(sum, 3, Quant::new(1.0, 0), Quant::new(2.0 / 3.0, 0)).unwrap().value()));
    assert_ne!(c.unfused, c.fused);
    assert!(pool::prove(&p, pool::Windows::Image(3), Contract::Real).is_exact());
    // 0.1 has a 24-bit mantissa: a sum of 49 DQ values may round, so the order matters.
    let v = pool::prove(&PoolParams { x: u8p(0.1, 0), y: u8p(0.1, 0) }, pool::Windows::Image(49), Contract::Exact);
    assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("P2")), "{v:?}");
}

#[test]
fn tables_fire_for_ieee_ops_and_refuse_library_functions() {
    let (x, y) = (u8p(0.05, 128), u8p(0.04, 100));
    let v = lut::prove(lut::Table::LeakyRelu { alpha: 0.1 }, &[x], y);
    assert!(matches!(&v, Verdict::Exact { proof } if matches!(proof.method, Method::ByConstruction(_)) && proof.domain == 256), "{v:?}");
    assert!(lut::prove(lut::Table::Concat, &[x, y], y).is_exact());
    let v = lut::prove(lut::Table::Sigmoid, &[x], y);
    assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("library function")), "{v:?}");
    let wide = QParam::new(0.05, 0, CodeType::I32);
    assert!(!lut::prove(lut::Table::Where, &[wide, x], y).is_exact());
}
