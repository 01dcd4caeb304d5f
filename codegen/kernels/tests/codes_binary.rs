//! QLinearAdd / QLinearMul on codes against an independent exact-rational evaluation (i128
//! numerators and denominators, no float arithmetic), exhaustively over all 65,536 code pairs per
//! scale set and type combination; the huge-exponent-gap path against hand-derived results;
//! broadcasting against index arithmetic; `Binary::apply` on every kernel path this host runs
//! against `Binary::code`, pair by pair, on direct runs and on the runs read from a table of one
//! fixed operand.

mod common;

use common::{Rng, as_fraction, rne};
use qdqc_kernels::codes::binary::{Binary, BinaryOp, PAIR_TABLE, TABLE_RUN, binary_exact};
use qdqc_kernels::codes::{QCode, Quant};
use qdqc_kernels::{Isa, Kernels};

/// The exact value `num/den` for centred inputs `a`, `b` (scales within 2^-16..2^8 keep i128 exact).
fn exact_value(op: BinaryOp, a: i128, b: i128, (sa, sb, sy): (f32, f32, f32)) -> (i128, i128) {
    let ((na, pa), (nb, pb), (ny, py)) = (as_fraction(sa), as_fraction(sb), as_fraction(sy));
    match op {
        // (na·a/2^pa + nb·b/2^pb)·2^py/ny over the common power 2^P
        BinaryOp::Add => {
            let p = pa.max(pb);
            ((((na * a) << (p - pa)) + ((nb * b) << (p - pb))) << py, ny << p)
        }
        BinaryOp::Mul => ((na * nb * a * b) << py, ny << (pa + pb)),
    }
}

/// Every pair of codes of `A`×`B` into `Y`, for both ops.
fn exhaustive<A: QCode, B: QCode, Y: QCode>(sa: f32, sb: f32, sy: f32, za: i32, zb: i32, zy: i32) -> usize {
    let (qa, qb, qy) = (Quant::new(sa, za), Quant::new(sb, zb), Quant::new(sy, zy));
    let mut ties = 0;
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        let t = Binary::<A, B, Y>::new(op, qa, qb, qy).unwrap();
        for i in 0..256 {
            for j in 0..256 {
                let (a, b) = (A::from_index(i), B::from_index(j));
                let (ca, cb) = (i128::from(a.value() - za), i128::from(b.value() - zb));
                let (num, den) = exact_value(op, ca, cb, (sa, sb, sy));
                let want = (rne(num, den) + i128::from(zy)).clamp(i128::from(Y::MIN), i128::from(Y::MAX)) as i32;
                let got = t.code(a, b).value();
                assert_eq!(got, want, "{op:?} a={a:?} b={b:?} scales ({sa:e}, {sb:e}, {sy:e}) zps ({za}, {zb}, {zy})");
                assert_eq!(binary_exact::<A, B, Y>(op, a, qa, b, qb, qy).unwrap().value(), want);
                // An exact tie: twice the value is an odd integer.
                if (2 * num) % den == 0 && (2 * num / den) % 2 != 0 {
                    ties += 1;
                }
            }
        }
        every_path_gives_code(&t);
    }
    ties
}

/// The kernel paths this host runs (portable first).
fn paths() -> Vec<Kernels> {
    Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()).collect()
}

/// `apply` over all 65,536 pairs on every path, as one run of equal shapes (strides 1, 1) and
/// as `[256, 1] × [256]` (strides 0, 1), equals `code` pair by pair.
fn every_path_gives_code<A: QCode, B: QCode, Y: QCode>(t: &Binary<A, B, Y>) {
    let a: Vec<A> = (0..1 << 16).map(|k| A::from_index(k >> 8)).collect();
    let b: Vec<B> = (0..1 << 16).map(|k| B::from_index(k & 255)).collect();
    let want: Vec<Y> = a.iter().zip(&b).map(|(&a, &b)| t.code(a, b)).collect();
    let column: Vec<A> = (0..256).map(A::from_index).collect();
    let row: Vec<B> = (0..256).map(B::from_index).collect();
    for k in paths() {
        let mut out = vec![Y::default(); 1 << 16];
        t.apply(k, &a, &[1 << 16], &b, &[1 << 16], &mut out).unwrap();
        assert!(out == want, "{} path, equal shapes", k.path());
        let mut out = vec![Y::default(); 1 << 16];
        t.apply(k, &column, &[256, 1], &row, &[256], &mut out).unwrap();
        assert!(out == want, "{} path, broadcast", k.path());
        tabled_and_short_runs(t, k, &want);
    }
}

/// The runs with one operand fixed, against `want[i·256 + j] = code(a_i, b_j)`: tabled (runs of
/// `TABLE_RUN` and more, a fixed B and a fixed A, a single-element operand against a tensor of
/// several axes whose length is no multiple of 64) and direct (runs of 16, shorter than
/// `TABLE_RUN`), so every pair goes through each on path `k`.
fn tabled_and_short_runs<A: QCode, B: QCode, Y: QCode>(t: &Binary<A, B, Y>, k: Kernels, want: &[Y]) {
    const { assert!(TABLE_RUN <= 256 && TABLE_RUN > 16, "the runs below straddle TABLE_RUN") };
    let column: Vec<A> = (0..256).map(A::from_index).collect();
    let row: Vec<B> = (0..256).map(B::from_index).collect();
    // [256] × [256, 1]: runs of 256, B fixed along each.
    let mut out = vec![Y::default(); 1 << 16];
    t.apply(k, &column, &[256], &row, &[256, 1], &mut out).unwrap();
    let by_b: Vec<Y> = (0..1 << 16).map(|k| want[((k & 255) << 8) | (k >> 8)]).collect();
    assert!(out == by_b, "{} path, B fixed per run", k.path());
    // A single element against 5 × 161 codes (each code three times and more), both orders.
    let n = 5 * 161;
    let many_a: Vec<A> = (0..n).map(|i| A::from_index((i * 7) & 255)).collect();
    let many_b: Vec<B> = (0..n).map(|i| B::from_index((i * 11) & 255)).collect();
    for i in 0..256 {
        let mut out = vec![Y::default(); n];
        t.apply(k, &many_a, &[5, 161], &row[i..=i], &[1], &mut out).unwrap();
        assert!(out.iter().zip(&many_a).all(|(&y, a)| y == want[(a.index() << 8) | i]), "{} path, single B {i}", k.path());
        t.apply(k, &column[i..=i], &[1, 1, 1], &many_b, &[5, 161], &mut out).unwrap();
        assert!(out.iter().zip(&many_b).all(|(&y, b)| y == want[(i << 8) | b.index()]), "{} path, single A {i}", k.path());
    }
    // [256, 16, 1] × [16, 16]: runs of 16 with A fixed, every pair.
    let a16: Vec<A> = (0..256 * 16).map(|k| A::from_index(k >> 4)).collect();
    let mut out = vec![Y::default(); 1 << 16];
    t.apply(k, &a16, &[256, 16, 1], &row, &[16, 16], &mut out).unwrap();
    assert!(out == want, "{} path, short runs", k.path());
}

const SCALE_SETS: [(f32, f32, f32); 11] = [
    (0.5, 0.25, 1.0),                              // quarter steps: exact ties everywhere
    (0.5, 0.25, 1.000_000_1),                      // just above: every former tie rounds down
    (0.5, 0.25, 0.999_999_94),                     // just below: every former tie rounds up
    (0.1, 0.2, 0.3),                               // decimal scales
    (0.02, 0.02, 0.04),                            // sy = 2·sa exactly
    (3.0 / 256.0, 5.0 / 512.0, 3.0 / 128.0),       // short mantissas with a factor 3 in sy
    (0.007_843_138, 0.003_921_569, 0.011_764_706), // 2/255, 1/255, 3/255
    (200.0, 1.6e-5, 0.37),                         // wide exponent gap inside the reference's range
    (1.0 / 64.0, 1.0 / 64.0, 1.0 / 4096.0),        // products on exact grid, mostly saturated
    (1.0, 1.0 / 1_048_576.0, 2.0),                 // Add exact in f64 at the widest gap (2^20): ties at B = 0
    (1.0, 1.0 / 2_097_152.0, 2.0),                 // one gap wider: the certified form decides
];

#[test]
fn exhaustive_u8_u8_u8() {
    let mut ties = 0;
    for &(sa, sb, sy) in &SCALE_SETS {
        ties += exhaustive::<u8, u8, u8>(sa, sb, sy, 128, 3, 120);
        ties += exhaustive::<u8, u8, u8>(sa, sb, sy, 0, 255, 0);
    }
    assert!(ties > 10_000, "the scale sets must exercise exact ties ({ties})");
}

#[test]
fn exhaustive_i8_i8_i8() {
    for &(sa, sb, sy) in &SCALE_SETS {
        exhaustive::<i8, i8, i8>(sa, sb, sy, 0, -5, 1);
        exhaustive::<i8, i8, i8>(sa, sb, sy, -128, 127, -128);
    }
}

#[test]
fn exhaustive_mixed_types() {
    for &(sa, sb, sy) in &SCALE_SETS[..5] {
        exhaustive::<u8, i8, u8>(sa, sb, sy, 17, 0, 200);
        exhaustive::<i8, u8, i8>(sa, sb, sy, 9, 255, -3);
    }
}

#[test]
fn exhaustive_random_scales() {
    let mut rng = Rng::new(12);
    for _ in 0..6 {
        // Scales in 2^-16..2^8 with random mantissas.
        let mut s = || f32::from_bits(((127 - 16 + rng.below(24) as u32) << 23) | (rng.next() as u32 & 0x7f_ffff));
        let (sa, sb, sy) = (s(), s(), s());
        let mut z = |lo: i32| lo + rng.below(256) as i32;
        exhaustive::<u8, u8, u8>(sa, sb, sy, z(0), z(0), z(0));
        exhaustive::<i8, i8, i8>(sa, sb, sy, z(-128), z(-128), z(-128));
    }
}

/// Scale gaps beyond 91 binary orders (the sign-only path), against results derived by hand.
#[test]
fn huge_exponent_gaps() {
    let tiny = 2f32.powi(-120);
    // sa·A = A/2 on the grid of ties; sb·B is far below any rounding step: it breaks ties only.
    for zy in [0, 7, -100] {
        let t = Binary::<i8, i8, i8>::new(BinaryOp::Add, Quant::new(0.5, 0), Quant::new(tiny, 0), Quant::new(1.0, zy)).unwrap();
        let u = Binary::<i8, i8, i8>::new(BinaryOp::Add, Quant::new(tiny, 0), Quant::new(0.5, 0), Quant::new(1.0, zy)).unwrap();
        for a in -128i32..=127 {
            for b in -128i32..=127 {
                let half = a.div_euclid(2);
                let r = if a % 2 == 0 {
                    a / 2
                } else if b > 0 {
                    half + 1
                } else if b < 0 {
                    half
                } else {
                    half + (half & 1) // the exact tie: to even
                };
                let want = (r + zy).clamp(-128, 127);
                assert_eq!(i32::from(t.code(a as i8, b as i8)), want, "a={a} b={b} zy={zy}");
                assert_eq!(i32::from(u.code(b as i8, a as i8)), want, "swapped: a={a} b={b} zy={zy}");
            }
        }
    }
    // A huge term saturates whatever the tiny one does; equal huge scales cancel exactly.
    let big = 2f32.powi(100);
    let t = Binary::<i8, i8, u8>::new(BinaryOp::Add, Quant::new(big, 0), Quant::new(2f32.powi(-30), 0), Quant::new(1.0, 128)).unwrap();
    let s = Binary::<i8, i8, u8>::new(BinaryOp::Add, Quant::new(big, 0), Quant::new(big, 0), Quant::new(1.0, 128)).unwrap();
    for a in -128i32..=127 {
        for b in -128i32..=127 {
            let want = if a > 0 {
                255
            } else if a < 0 {
                0
            } else {
                128
            }; // b·2^-30 rounds to 0
            assert_eq!(i32::from(t.code(a as i8, b as i8)), want, "a={a} b={b}");
            let sum = a + b;
            let want = if sum > 0 {
                255
            } else if sum < 0 {
                0
            } else {
                128
            };
            assert_eq!(i32::from(s.code(a as i8, b as i8)), want, "cancel a={a} b={b}");
        }
    }
    // Mul across the whole exponent range: 2^100 · 2^-110 = 2^-10 exactly.
    let m = Binary::<i8, i8, i8>::new(BinaryOp::Mul, Quant::new(big, 0), Quant::new(2f32.powi(-110), 0), Quant::new(2f32.powi(-10), 0)).unwrap();
    for a in -128i32..=127 {
        for b in -128i32..=127 {
            assert_eq!(i32::from(m.code(a as i8, b as i8)), (a * b).clamp(-128, 127), "a={a} b={b}");
        }
    }
}

#[test]
fn refuses_bad_parameters() {
    let ok = Quant::new(0.5, 0);
    assert!(Binary::<u8, u8, u8>::new(BinaryOp::Add, Quant::new(0.0, 0), ok, ok).is_err());
    assert!(Binary::<u8, u8, u8>::new(BinaryOp::Add, ok, Quant::new(f32::NAN, 0), ok).is_err());
    assert!(Binary::<u8, u8, u8>::new(BinaryOp::Add, ok, ok, Quant::new(-1.0, 0)).is_err());
    assert!(Binary::<u8, u8, u8>::new(BinaryOp::Add, Quant::new(0.5, -1), ok, ok).is_err());
    assert!(Binary::<i8, i8, i8>::new(BinaryOp::Mul, ok, ok, Quant::new(0.5, 128)).is_err());
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        let t = Binary::<u8, u8, u8>::new(op, ok, ok, ok).unwrap();
        let mut out = [0u8; 6];
        for k in paths() {
            assert!(t.apply(k, &[0; 6], &[2, 3], &[0; 2], &[2], &mut out).is_err(), "3 vs 2 does not broadcast");
            assert!(t.apply(k, &[0; 6], &[2, 3], &[0; 3], &[3], &mut out[..5]).is_err(), "output too short");
        }
    }
}

/// Row-major index of the broadcast source for output index `o`.
fn source(o: usize, out_shape: &[usize], shape: &[usize]) -> usize {
    let lead = out_shape.len() - shape.len();
    let (mut rem, mut idx) = (o, 0);
    let mut coords = vec![0; out_shape.len()];
    for ax in (0..out_shape.len()).rev() {
        coords[ax] = rem % out_shape[ax];
        rem /= out_shape[ax];
    }
    for (ax, &d) in shape.iter().enumerate() {
        idx = idx * d + if d == 1 { 0 } else { coords[ax + lead] };
    }
    idx
}

#[test]
fn broadcasting() {
    let mut rng = Rng::new(5);
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        for k in paths() {
            broadcast_cases(&mut rng, op, k);
        }
    }
}

fn broadcast_cases(rng: &mut Rng, op: BinaryOp, k: Kernels) {
    let t = Binary::<u8, i8, u8>::new(op, Quant::new(0.03, 100), Quant::new(0.05, -3), Quant::new(0.07, 90)).unwrap();
    // The last four: axes merged into longer runs (a per-plane operand over planes of 20, 240
    // and, tabled, 320 outputs; ones between merged axes).
    let cases: [(&[usize], &[usize]); 14] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[4]),
        (&[2, 3, 4], &[3, 1]),
        (&[1, 3, 1], &[2, 1, 5]),
        (&[5], &[]),
        (&[], &[]),
        (&[2, 1, 4, 1], &[3, 1, 6]),
        (&[0, 3], &[3]),
        (&[4, 1], &[1]),
        (&[2, 150], &[2, 1]),
        (&[2, 3, 4, 5], &[2, 3, 1, 1]),
        (&[1, 4, 3, 80], &[1, 4, 1, 1]),
        (&[2, 4, 16, 20], &[4, 1, 1]),
        (&[3, 1, 2, 1, 4], &[3, 5, 2, 7, 4]),
    ];
    let cases: Vec<(&[usize], &[usize])> = cases.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
    for (sa, sb) in cases {
        let out_shape: Vec<usize> = qdqc_kernels::codes::broadcast_shape(sa, sb).unwrap();
        let n = qdqc_kernels::codes::numel(&out_shape);
        let a = rng.u8s(qdqc_kernels::codes::numel(sa));
        let b = rng.i8s(qdqc_kernels::codes::numel(sb));
        let mut out = vec![0u8; n];
        t.apply(k, &a, sa, &b, sb, &mut out).unwrap();
        for (o, &y) in out.iter().enumerate() {
            let want = t.code(a[source(o, &out_shape, sa)], b[source(o, &out_shape, sb)]);
            assert_eq!(y, want, "{op:?} {sa:?} with {sb:?} at {o}, {} path", k.path());
        }
    }
}

/// An attention mask added to (and multiplied with) the scores: a broadcast operand B of one,
/// two or a few codes against many outputs reads one table row per code B holds; every output
/// equals `code` on every path, as do cases just past the rows' break-even (B with many codes).
#[test]
fn broadcast_operands_of_few_codes() {
    let mut rng = Rng::new(9);
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        let t = Binary::<u8, u8, u8>::new(op, Quant::new(0.122_419_4, 132), Quant::new(1.0, 0), Quant::new(0.125_103, 150)).unwrap();
        for k in paths() {
            for codes in [&[1u8][..], &[0, 1], &[3, 9, 77], &[0, 7, 200, 255], &[5, 6, 7, 8, 9], &(0..=255).collect::<Vec<u8>>()[..]] {
                let scores = rng.u8s(12 * 64 * 64);
                let mask: Vec<u8> = (0..64).map(|i| codes[(i * 7) % codes.len()]).collect();
                let mut out = vec![0u8; scores.len()];
                t.apply(k, &scores, &[1, 12, 64, 64], &mask, &[1, 1, 1, 64], &mut out).unwrap();
                for (o, &y) in out.iter().enumerate() {
                    assert_eq!(y, t.code(scores[o], mask[o % 64]), "{op:?}, mask codes {}, output {o}, {} path", codes.len(), k.path());
                }
                // The mask along the rows instead: fixed along each run of the last axis.
                t.apply(k, &scores, &[1, 12, 64, 64], &mask, &[1, 1, 64, 1], &mut out).unwrap();
                for (o, &y) in out.iter().enumerate() {
                    assert_eq!(y, t.code(scores[o], mask[o / 64 % 64]), "{op:?}, row mask codes {}, output {o}, {} path", codes.len(), k.path());
                }
            }
        }
    }
}

/// Subnormal scales (mantissas without the hidden bit, exponent −149), against integer ratios.
#[test]
fn subnormal_scales() {
    let sub = |m: u32| f32::from_bits(m); // m·2^-149
    for (ma, mb, my) in [(1u32, 1u32, 1u32), (2, 1, 3), (5, 7, 6), (1000, 3, 4096)] {
        let t = Binary::<i8, i8, i8>::new(BinaryOp::Add, Quant::new(sub(ma), 1), Quant::new(sub(mb), -2), Quant::new(sub(my), 3)).unwrap();
        for a in -128i32..=127 {
            for b in -128i32..=127 {
                let num = i128::from(ma as i32 * (a - 1) + mb as i32 * (b + 2));
                let want = (rne(num, i128::from(my)) + 3).clamp(-128, 127) as i32;
                assert_eq!(i32::from(t.code(a as i8, b as i8)), want, "({ma}, {mb}, {my}) a={a} b={b}");
            }
        }
    }
    // Mul: 2^-75 · 2^-75 / (3·2^-149) = 1/6: ties at products 3, 9, 15, ...
    let s = 2f32.powi(-75);
    let t = Binary::<u8, u8, u8>::new(BinaryOp::Mul, Quant::new(s, 128), Quant::new(s, 128), Quant::new(sub(3), 128)).unwrap();
    for a in 0i32..=255 {
        for b in 0i32..=255 {
            let want = (rne(i128::from((a - 128) * (b - 128)), 6) + 128).clamp(0, 255) as i32;
            assert_eq!(i32::from(t.code(a as u8, b as u8)), want, "a={a} b={b}");
        }
    }
}

/// Neither op holds a table (a Mul's codes are requantized products, an Add's certified f64
/// sums, both checked on every pair above).
#[test]
fn no_op_holds_a_table() {
    let (qa, qb, qy) = (Quant::new(0.1, 3), Quant::new(0.2, 250), Quant::new(0.3, 7));
    assert_eq!(Binary::<u8, u8, u8>::new(BinaryOp::Mul, qa, qb, qy).unwrap().bytes(), 0);
    assert_eq!(Binary::<u8, u8, u8>::new(BinaryOp::Add, qa, qb, qy).unwrap().bytes(), 0);
}

/// Until a call pairs two whole operands of `PAIR_TABLE` elements or more, an Add holds no table;
/// then it holds its table of pairs (a Mul never does), and every output of such calls (a
/// residual Add's [1, 64, 384]) and of smaller ones equals `code`, on every path.
#[test]
fn whole_operands_fill_the_table_of_pairs_once() {
    let mut rng = Rng::new(12);
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        for k in paths() {
            let t = Binary::<u8, i8, u8>::new(op, Quant::new(0.031, 120), Quant::new(0.017, -7), Quant::new(0.043, 128)).unwrap();
            let small = (rng.u8s(PAIR_TABLE - 1), rng.i8s(PAIR_TABLE - 1));
            let mut out = vec![0u8; PAIR_TABLE - 1];
            t.apply(k, &small.0, &[PAIR_TABLE - 1], &small.1, &[PAIR_TABLE - 1], &mut out).unwrap();
            assert!(out.iter().zip(small.0.iter().zip(&small.1)).all(|(&y, (&a, &b))| y == t.code(a, b)), "{op:?} below the table, {} path", k.path());
            assert_eq!(t.bytes(), 0, "{op:?}: no table below PAIR_TABLE outputs");
            let (a, b) = (rng.u8s(64 * 384), rng.i8s(64 * 384));
            let mut out = vec![0u8; a.len()];
            t.apply(k, &a, &[1, 64, 384], &b, &[64, 384], &mut out).unwrap();
            assert_eq!(t.bytes(), if op == BinaryOp::Add { 1 << 16 } else { 0 }, "{op:?}: the table of pairs");
            assert!(out.iter().zip(a.iter().zip(&b)).all(|(&y, (&a, &b))| y == t.code(a, b)), "{op:?} from the table, {} path", k.path());
        }
    }
}

/// sa = sb = sy/2 puts every odd A + B exactly on a half-integer; the f64 sum is exact there
/// (power-of-two ratios), so it rounds every tie to even itself.
#[test]
fn an_adds_ties_on_an_exact_f64_sum() {
    let (qa, qb, qy) = (Quant::new(0.5, 0), Quant::new(0.5, 0), Quant::new(1.0, 0));
    let t = Binary::<i8, i8, i8>::new(BinaryOp::Add, qa, qb, qy).unwrap();
    for k in paths() {
        let (a, b): (Vec<i8>, Vec<i8>) = (-128i32..=127).flat_map(|a| (-128i32..=127).map(move |b| (a as i8, b as i8))).unzip();
        let mut y = vec![0i8; a.len()];
        t.apply(k, &a, &[a.len()], &b, &[b.len()], &mut y).unwrap();
        for ((&a, &b), &y) in a.iter().zip(&b).zip(&y) {
            let s = i32::from(a) + i32::from(b);
            let want = (s.div_euclid(2) + i32::from(s.rem_euclid(2) == 1 && s.div_euclid(2) % 2 != 0)).clamp(-128, 127);
            assert_eq!(i32::from(y), want, "{} path: a={a} b={b}", k.path());
        }
    }
}

/// The Add's exact fallback is taken where the f64 value sits on a tie (and only near one):
/// with sa = 3, sb = 1, sy = 6 the value `(3A + B)/6` is a half-integer when `3A + B ≡ 3 (mod
/// 6)`, and `rb = 1/6` is inexact in f64.
#[test]
fn an_adds_ties_take_the_exact_form() {
    let (qa, qb, qy) = (Quant::new(3.0, 0), Quant::new(1.0, 0), Quant::new(6.0, 0));
    let t = Binary::<i8, i8, i8>::new(BinaryOp::Add, qa, qb, qy).unwrap();
    let before = qdqc_kernels::requant::fallback_hits();
    let (a, b): (Vec<i8>, Vec<i8>) = (-128i32..=127).flat_map(|a| (-128i32..=127).map(move |b| (a as i8, b as i8))).unzip();
    let mut y = vec![0i8; a.len()];
    t.apply(paths()[0], &a, &[a.len()], &b, &[b.len()], &mut y).unwrap();
    for ((&a, &b), &y) in a.iter().zip(&b).zip(&y) {
        let s = 3 * i32::from(a) + i32::from(b);
        let (q, r) = (s.div_euclid(6), s.rem_euclid(6));
        let want = (q + i32::from(r > 3 || (r == 3 && q % 2 != 0))).clamp(-128, 127);
        assert_eq!(i32::from(y), want, "a={a} b={b}");
    }
    // The ties: for the 128 even A the B ≡ 3 (mod 6), 42 of them; for the odd A the B ≡ 0, 43
    // (the counter is global: other tests' calls may add to it, hence "at least").
    assert!(qdqc_kernels::requant::fallback_hits() - before >= 128 * (42 + 43));
}
