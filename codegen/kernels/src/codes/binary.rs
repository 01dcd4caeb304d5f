//! QLinearAdd / QLinearMul on codes, correctly rounded, with numpy broadcasting:
//!
//! - Add: `y = sat(rne((sa·(a − za) + sb·(b − zb)) / sy) + zy)`
//! - Mul: `y = sat(rne(sa·sb·(a − za)·(b − zb) / sy) + zy)`
//!
//! of the exact real values (f32 scales taken as the dyadic rationals they are), ties to even.
//! [`binary_exact`] is the definition. [`Binary`] computes it without a 64 KiB table per node
//! (until a call of an Add pairs two whole operands of [`PAIR_TABLE`] elements or more: then the
//! node fills its table of pairs once, by the run function below over all 65,536 pairs, and looks
//! every output up from then on — a residual Add costs a lookup per element instead of an f64
//! sum; a Mul's requantized product costs little more than the lookup, so it keeps none): an
//! Add evaluates `A·sa/sy + B·sb/sy` in f64 and certifies each element (the exact form where the
//! f64 value is within its error bound of a tie: `Sum`); a Mul needs no table either: its value is the integer product `A·B` (|A·B| ≤ 65,025) times the
//! one ratio `sa·sb/sy`, which is the requantization of an accumulator, so it runs the certified
//! requantization (`requant::requant_certified`, equal to `requant_exact` by its own proof) per
//! element. Both are `sat(rne(A·B·sa·sb/sy) + zy)` exactly (the clamp to ±2^10 below changes no
//! saturated code); tests/binary.rs checks the Mul form against the definition on every pair.
//!
//! | condition | why |
//! |---|---|
//! | every scale positive finite, zero points codes of their types | refused otherwise ([`CodesError`]) |
//! | Mul without a table: `Ratio::new(sa, sb, sy)` exists (positive finite scales, checked above) | the requantization's exact form is defined for it |
//! | a run with one operand fixed read from a 256-entry table (`apply`, runs of [`TABLE_RUN`] or more) | its entries are made by the same run function, on the same path, over the other operand's every code: the codes the run would compute, element by element |
//! | an Add's two whole operands of [`PAIR_TABLE`] elements or more read from the node's table of pairs | its entries are made by the same run function over all 65,536 pairs (on the path of the call that filled it: every path gives the same bits), once |
//! | Add: the f64 value is used only farther than `4u·(\|A·ra\| + \|B·rb\|)` from every half-integer (`Sum`) | its error bound: off a tie by more than it, the f64 value rounds as the exact one does; otherwise the exact form below |
//! | Add whose f64 evaluation is exact for every pair (`exact_in_f64`: both ratios dyadic, exponents within 20) | the f64 value is the real one: rounded to even, it decides ties too (no exact form per tie) |
//! | Mul: `sa·sb·A·B/sy = (ma·mb·A·B)·2^(ea+eb−ey)/my`, `\|ma·mb·A·B\| < 2^64` | one exact rounding (`rne_clamped`, private) |
//! | Add, exponent gap `g = p − q ≤ 91` between the terms `n1·2^p`, `n2·2^q` (over `my`) | `N = n1·2^g + n2`, `\|N\| < 2^124`, exact |
//! | Add, `g > 91`, both terms nonzero: `n2` replaced by `sign(n2)` at exponent `p − 91` | below |
//!
//! The gap argument: with `X = x·my = n1·2^p + n2·2^q`, `\|n\| < 2^32`. If `\|n1·2^p/my\| ≥ 2^11`
//! the small term (`< 2^(p−59)` in X) cannot move the sum below 2^10: both saturate alike. Else
//! `p ≤ 34`; the rounding boundaries in X are `h·my` (h a half-integer), multiples of 1/2; the
//! distance from `n1·2^p` to a boundary is 0 or at least `min(1/2, 2^p)`, larger than both the
//! small term and its replacement (each `< 2^(p−59)`, `≤ 2^-25`). So off a boundary the rounding
//! is `n1·2^p`'s, and on one the small term only breaks the tie by its sign: the replacement has
//! the same sign.

use super::lookup::map_codes;
use super::rational::{LIMIT, dyadic, rne_clamped};
use super::shape::{broadcast_strides, check_len};
use super::{CodesError, QCode, Quant, broadcast_shape};
use crate::isa::{Isa, Kernels};
use crate::requant::{Certified, Code, Output, Ratio, count_fallbacks, requant_certified, row_uniform};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// The elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// A scale as `m·2^e`.
type Dyadic = (i128, i32);

/// `rne(value/sy)` clamped to ±2^10 for the centred codes `a = a − za`, `b = b − zb`.
fn centred(op: BinaryOp, a: i32, b: i32, (ma, ea): Dyadic, (mb, eb): Dyadic, (my, ey): Dyadic) -> i128 {
    match op {
        BinaryOp::Mul => rne_clamped(ma * mb * i128::from(a) * i128::from(b), ea + eb - ey, my),
        BinaryOp::Add => {
            let (t1, t2) = ((ma * i128::from(a), ea - ey), (mb * i128::from(b), eb - ey));
            // t1 the term with the larger exponent.
            let ((n1, p), (n2, q)) = if t1.1 >= t2.1 { (t1, t2) } else { (t2, t1) };
            if n1 == 0 {
                return rne_clamped(n2, q, my);
            }
            if n2 == 0 {
                return rne_clamped(n1, p, my);
            }
            let (n2, gap) = if p - q > 91 { (n2.signum(), 91) } else { (n2, p - q) };
            rne_clamped((n1 << gap) + n2, p - gap, my)
        }
    }
}

/// The definition: `y` for one pair of codes (see the module header). The codes are typed, so
/// `|a − za|, |b − zb| ≤ 255` and the header's bounds hold.
pub fn binary_exact<A: QCode, B: QCode, Y: QCode>(op: BinaryOp, a: A, qa: Quant, b: B, qb: Quant, qy: Quant) -> Result<Y, CodesError> {
    let (qa, qb, qy) = (qa.check::<A>("input A")?, qb.check::<B>("input B")?, qy.check::<Y>("output")?);
    let r = centred(op, a.value() - qa.zero_point, b.value() - qb.zero_point, dyadic(qa.scale)?, dyadic(qb.scale)?, dyadic(qy.scale)?);
    Ok(Y::saturate((r + i128::from(qy.zero_point)) as i64))
}

/// [`binary_exact`] for one node: `A` and `B` input codes, `Y` output codes.
#[derive(Clone, Debug)]
pub struct Binary<A: QCode, B: QCode, Y: QCode> {
    repr: Repr<Y>,
    /// An Add on every pair of codes, `pairs[a.index()·256 + b.index()]`, filled by the run
    /// function on the node's first call with two full operands of [`PAIR_TABLE`] elements or
    /// more (64 KiB for the node from then on; none for a node never called so, or a Mul).
    pairs: OnceLock<Box<[Y; 1 << 16]>>,
    _inputs: PhantomData<(A, B)>,
}

/// The outputs from which a call whose operands are both whole tensors (no broadcasting) reads
/// the node's table of pairs: its 65,536 entries cost about as much as that many outputs, once.
pub const PAIR_TABLE: usize = 4096;

/// How the codes are computed (module header).
#[derive(Clone, Debug)]
enum Repr<Y> {
    /// `table[a.index()·256 + b.index()]` (a fixed-size array: the index of two codes is in
    /// bounds by its type, no check per element).
    Table(Box<[Y; 1 << 16]>),
    /// A Mul: `(a − za)·(b − zb)` requantized by `sa·sb/sy` to the output's zero point and type.
    Product { za: i32, zb: i32, plan: Certified, out: Output },
    /// An Add: `A·ra + B·rb` in f64 (`ra = fl64(sa/sy)`, `rb = fl64(sb/sy)`), rounded where it
    /// is provably off a tie, the exact [`centred`] where it is not ([`Sum`]).
    Sum(Sum),
}

/// An Add evaluated in f64 and certified per element. With `u = 2^-53`, `ra = (sa/sy)(1 + e1)`,
/// the two products and the sum each rounded once: `|v64 − v| ≤ 4u·(|A·ra| + |B·rb|)` (three
/// roundings and the ratio's, second-order terms inside the factor 4 for |e| ≤ 2^-50). Where
/// `v64` is farther than that bound from every half-integer, `rne(v64) = rne(v)`; the outputs
/// saturate at half-integers too, so the clamp agrees. Elsewhere the exact form decides. Values
/// beyond ±2^20 saturate every code type either way: they are clamped there before rounding
/// (the 1.5·2^52 addition then rounds to nearest even exactly). The Rust target's P1 checks
/// [`Binary::apply`] against the definition on all 65,536 pairs, on every path.
#[derive(Clone, Debug)]
struct Sum {
    za: i32,
    zb: i32,
    zy: i32,
    ra: f64,
    rb: f64,
    exact: (Dyadic, Dyadic, Dyadic),
    /// `v64 = v` for every pair ([`exact_in_f64`]): its rounding is the exact one, ties included,
    /// and the flags are not needed.
    f64_exact: bool,
}

/// Whether every `A·ra + B·rb` (`|A|, |B| ≤ 255`) is computed exactly in f64: `ra = sa/sy` and
/// `rb = sb/sy` exact (`q·2^k`, `q` odd; then `q` is the odd part of `ma` over that of `my`, so
/// `q < 2^24`), each product `A·q·2^k` exact (`|A·q| < 2^32`), and the sum on the grid
/// `2^min(ka, kb)` below `2^(33 + max(ka, kb))`: exact when `|ka − kb| ≤ 20` (33 + 20 ≤ 53
/// bits). Then `rne64(v64) = rne(v)` (the clamp to ±2^20 is exact too, and beyond it every code
/// saturates), so the f64 value decides every pair, ties included (scales in powers of two).
fn exact_in_f64(r: (f64, f64), (a, b, y): (Dyadic, Dyadic, Dyadic)) -> bool {
    // The exponent `k` of `sx/sy` as `q·2^k` with `q` odd, when the ratio of the odd parts is an
    // integer (else the ratio is no dyadic, f64 holds it inexactly).
    let odd = |(m, e): Dyadic| (m >> m.trailing_zeros(), e + m.trailing_zeros() as i32);
    let ratio = |x: Dyadic| {
        let ((mx, ex), (my, ey)) = (odd(x), odd(y));
        (mx % my == 0).then_some((mx / my, ex - ey))
    };
    // `r` holds what the f64 division gave; it is `q·2^k` exactly when q fits 53 bits (q < 2^24).
    // |k| < 300 (f32 exponents): 2^k is a normal f64, built from its bits.
    let same = |f: f64, (q, k): (i128, i32)| f == q as f64 * f64::from_bits(((1023 + k) as u64) << 52);
    match (ratio(a), ratio(b)) {
        (Some(qa), Some(qb)) => same(r.0, qa) && same(r.1, qb) && (qa.1 - qb.1).abs() <= 20,
        _ => false,
    }
}

impl Sum {
    /// `v64` clamped to ±2^20, and whether it is near enough a tie for the exact form to decide.
    #[inline(always)]
    fn value(&self, a: i32, b: i32) -> (f64, bool) {
        self.centred_value(f64::from(a), f64::from(b))
    }

    /// [`Sum::value`] of centred codes already in f64 (the vector passes of `sums` call it).
    #[inline(always)]
    fn centred_value(&self, a: f64, b: f64) -> (f64, bool) {
        const U4: f64 = 2.0 * f64::EPSILON; // 4u, u = 2^-53
        let (x, y) = (a * self.ra, b * self.rb);
        let v = (x + y).clamp(-1_048_576.0, 1_048_576.0);
        let r = rne64(v);
        (r, ((v - r).abs() - 0.5).abs() <= U4 * (x.abs() + y.abs()))
    }

    #[inline(always)]
    fn exact<Y: QCode>(&self, a: i32, b: i32) -> Y {
        let (da, db, dy) = self.exact;
        Y::saturate((centred(BinaryOp::Add, a, b, da, db, dy) + i128::from(self.zy)) as i64)
    }

    #[inline(always)]
    fn code<Y: QCode>(&self, a: i32, b: i32) -> Y {
        match self.value(a, b) {
            (_, true) if !self.f64_exact => self.exact(a, b),
            (r, _) => Y::saturate(r as i64 + i64::from(self.zy)),
        }
    }
}

/// 1.5·2^52: f64's spacing is 1 from 2^52 to 2^53.
const SHIFT: f64 = 6_755_399_441_055_744.0;

/// `v.round_ties_even()` for |v| ≤ 2^20 without the libm call: `v + 1.5·2^52` lies where f64's
/// spacing is 1, so the addition rounds to nearest even and the subtraction is exact.
#[inline(always)]
fn rne64(v: f64) -> f64 {
    (v + SHIFT) - SHIFT
}

/// `r as i32` for an integer `r` with |r| ≤ 2^20, in integer operations that vectorize on every
/// path: `r + 1.5·2^52` is exact and has the exponent of 1.5·2^52, so its bits exceed that
/// constant's by `r` (two's complement in the difference).
#[inline(always)]
fn exact_i32(r: f64) -> i32 {
    (r + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i32
}

impl<A: QCode, B: QCode, Y: QCode> Binary<A, B, Y> {
    /// An Add's table (65,536 exact evaluations), or a Mul's requantization plan.
    pub fn new(op: BinaryOp, qa: Quant, qb: Quant, qy: Quant) -> Result<Self, CodesError> {
        let (qa, qb, qy) = (qa.check::<A>("input A")?, qb.check::<B>("input B")?, qy.check::<Y>("output")?);
        if op == BinaryOp::Mul {
            let code = if Y::MIN < 0 { Code::I8 } else { Code::U8 };
            // Both exist for checked parameters; a refusal would only mean "tabulate instead".
            if let (Ok(ratio), Ok(out)) = (Ratio::new(qa.scale, qb.scale, qy.scale), Output::new(qy.zero_point, code)) {
                let repr = Repr::Product { za: qa.zero_point, zb: qb.zero_point, plan: Certified::new(ratio), out };
                return Ok(Binary { repr, pairs: OnceLock::new(), _inputs: PhantomData });
            }
        }
        let (da, db, dy) = (dyadic(qa.scale)?, dyadic(qb.scale)?, dyadic(qy.scale)?);
        if op == BinaryOp::Add {
            let (sy, zy) = (f64::from(qy.scale), qy.zero_point);
            let (ra, rb) = (f64::from(qa.scale) / sy, f64::from(qb.scale) / sy);
            let f64_exact = exact_in_f64((ra, rb), (da, db, dy));
            let sum = Sum { za: qa.zero_point, zb: qb.zero_point, zy, ra, rb, exact: (da, db, dy), f64_exact };
            return Ok(Binary { repr: Repr::Sum(sum), pairs: OnceLock::new(), _inputs: PhantomData });
        }
        let mut table = Vec::with_capacity(1 << 16);
        for i in 0..256 {
            let a = A::from_index(i).value() - qa.zero_point;
            for j in 0..256 {
                let b = B::from_index(j).value() - qb.zero_point;
                let r = centred(op, a, b, da, db, dy);
                debug_assert!(r.abs() <= LIMIT);
                table.push(Y::saturate((r + i128::from(qy.zero_point)) as i64));
            }
        }
        let table = table.into_boxed_slice().try_into().expect("256 × 256 entries");
        Ok(Binary { repr: Repr::Table(table), pairs: OnceLock::new(), _inputs: PhantomData })
    }

    /// Bytes the node holds (the table, when it has one; the table of pairs once filled).
    pub fn bytes(&self) -> usize {
        let pairs = self.pairs.get().map_or(0, |t| std::mem::size_of_val(&**t));
        pairs
            + match &self.repr {
                Repr::Table(t) => std::mem::size_of_val(&**t),
                Repr::Product { .. } | Repr::Sum(_) => 0,
            }
    }

    /// The code for one pair.
    #[inline]
    pub fn code(&self, a: A, b: B) -> Y {
        match &self.repr {
            Repr::Table(t) => t[(a.index() << 8) | b.index()],
            Repr::Product { za, zb, plan, out } => product(a, b, *za, *zb, plan, *out),
            Repr::Sum(sum) => sum.code(a.value() - sum.za, b.value() - sum.zb),
        }
    }

    /// `out = op(a, b)` with numpy broadcasting; `out` holds `broadcast_shape(a_shape, b_shape)`.
    /// Runs on `kernels`' path; every path gives [`Binary::code`]'s bits: the same IEEE
    /// operations element by element (see `requant::row_uniform` and `Sum`), and a run of at
    /// least [`TABLE_RUN`] outputs along which one operand is fixed reads a table of the op at
    /// that code, filled by the same run function over the other operand's 256 codes (so its
    /// entries are the codes the run would compute); so does every output where B is a broadcast
    /// operand of few distinct codes (`rows_of_few_codes`: one table row per code B holds).
    /// Exact fallbacks are counted per element or, in a tabled run, per table entry.
    pub fn apply(&self, kernels: Kernels, a: &[A], a_shape: &[usize], b: &[B], b_shape: &[usize], out: &mut [Y]) -> Result<(), CodesError> {
        let mut fallbacks = 0;
        let shape = broadcast_shape(a_shape, b_shape)?;
        check_len("binary input A", a.len(), a_shape)?;
        check_len("binary input B", b.len(), b_shape)?;
        check_len("binary output", out.len(), &shape)?;
        // Two whole operands (as many elements as the output: nothing repeats) pair element k
        // with element k.
        if a.len() == out.len() && b.len() == out.len() && out.len() >= PAIR_TABLE && matches!(self.repr, Repr::Sum(_)) {
            let pairs = self.pairs.get_or_init(|| {
                let (every_a, every_b): (Vec<A>, Vec<B>) = (0..1 << 16).map(|k| (A::from_index(k >> 8), B::from_index(k & 255))).unzip();
                let mut t = Box::new([Y::default(); 1 << 16]);
                count_fallbacks(self.run(kernels, &every_a, 1, &every_b, 1, &mut t[..]));
                t
            });
            strided(out, a, 1, b, 1, |a, b| pairs[(a.index() << 8) | b.index()]);
            return Ok(());
        }
        if let Some((slot, rows, filled)) = self.rows_of_few_codes(kernels, a, b, out.len()) {
            // Row `slot[b]` holds the op at B's code b: every output one lookup. Where A runs
            // along the run, the lookups are whole-run table maps (vectorized): the run's row
            // when B is fixed along it; else every row B holds, each output kept from its own.
            let row = |r: usize| -> &[Y; 256] { rows[r << 8..][..256].try_into().expect("a row of 256") };
            let count = rows.len() >> 8;
            let mut other = Vec::new();
            each(a, a_shape, b, b_shape, out, |y, a, la, b, lb| {
                let n = y.len();
                match (la, lb) {
                    (1, 0) => map_codes(kernels, row(usize::from(slot[b[0].index()])), &a[..n], y),
                    (1, 1) if count <= FEW_ROWS => {
                        map_codes(kernels, row(0), &a[..n], y);
                        for r in 1..count {
                            other.resize(n, Y::default());
                            map_codes(kernels, row(r), &a[..n], &mut other[..n]);
                            for ((y, &o), &b) in y.iter_mut().zip(&other[..n]).zip(&b[..n]) {
                                if usize::from(slot[b.index()]) == r {
                                    *y = o;
                                }
                            }
                        }
                    }
                    _ => strided(y, a, la, b, lb, |a, b| rows[usize::from(slot[b.index()]) << 8 | a.index()]),
                }
            })?;
            count_fallbacks(filled);
            return Ok(());
        }
        each(a, a_shape, b, b_shape, out, |y, a, la, b, lb| {
            let n = y.len();
            fallbacks += match (la, lb) {
                (1, 0) if n >= TABLE_RUN => through_table(kernels, |t| self.run(kernels, &every_code::<A>(), 1, &b[..1], 0, t), &a[..n], y),
                (0, 1) if n >= TABLE_RUN => through_table(kernels, |t| self.run(kernels, &a[..1], 0, &every_code::<B>(), 1, t), &b[..n], y),
                _ => self.run(kernels, a, la, b, lb, y),
            };
        })?;
        count_fallbacks(fallbacks);
        Ok(())
    }

    /// A broadcast operand `b` with few distinct codes (an attention mask: one or two), against
    /// `outputs` outputs: one row of the op per code `b` holds (row `slot[b]`, entry `a`), each
    /// filled by a run over A's 256 codes at that code (the codes the runs would compute, as in
    /// [`through_table`]), when they cost at most half the outputs' evaluations; with the
    /// fallbacks of the fill. `None` for a node with a whole table.
    #[allow(clippy::type_complexity)] // the slots, the rows and the fill's fallbacks
    fn rows_of_few_codes(&self, kernels: Kernels, a: &[A], b: &[B], outputs: usize) -> Option<([u8; 256], Vec<Y>, u64)> {
        if matches!(self.repr, Repr::Table(_)) || b.len() > outputs / 4 || a.len() < outputs {
            return None;
        }
        let mut present = [false; 256];
        for &c in b {
            present[c.index()] = true;
        }
        let count = present.iter().filter(|&&p| p).count();
        if count * 256 > outputs / 2 {
            return None;
        }
        let (mut slot, mut rows, mut filled) = ([0u8; 256], vec![Y::default(); count << 8], 0);
        // At most 256 rows: a row number fits a byte.
        for (r, (row, code)) in rows.chunks_exact_mut(256).zip((0..256).filter(|&c| present[c])).enumerate() {
            slot[code] = r as u8;
            filled += self.run(kernels, &every_code::<A>(), 1, &[B::from_index(code)], 0, row);
        }
        Some((slot, rows, filled))
    }

    /// One run of outputs, `y[k]` from `a[k·la]` and `b[k·lb]`, element by element on `kernels`'
    /// path (one dispatch per run, not per element); returns the exact fallbacks.
    fn run(&self, kernels: Kernels, a: &[A], la: usize, b: &[B], lb: usize, y: &mut [Y]) -> u64 {
        match &self.repr {
            Repr::Table(t) => {
                strided(y, a, la, b, lb, |a, b| t[(a.index() << 8) | b.index()]);
                0
            }
            Repr::Product { za, zb, plan, out } => {
                let run = Run { kernels, a, la, b, lb, zeros: (*za, *zb), plan, out: *out };
                match kernels.isa() {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512
                    // F/BW/VNNI; the function only lets the compiler use AVX-512F/BW for safe code.
                    Isa::Avx512Vnni => unsafe { products_avx512(&run, y) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above, AVX2 was checked.
                    Isa::Avx2 => unsafe { products_avx2(&run, y) },
                    _ => products(&run, y),
                }
            }
            Repr::Sum(sum) => {
                let run = SumRun { a, la, b, lb, sum };
                match kernels.isa() {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512
                    // F/BW/VNNI; the function only lets the compiler use AVX-512F/BW for safe code.
                    Isa::Avx512Vnni => unsafe { sums_avx512(&run, y) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above, AVX2 was checked.
                    Isa::Avx2 => unsafe { sums_avx2(&run, y) },
                    _ => sums(&run, y),
                }
            }
        }
    }
}

/// The 256 codes of a type, in index order.
fn every_code<X: QCode>() -> [X; 256] {
    std::array::from_fn(X::from_index)
}

/// `y[k] = table[x[k]]`, the table filled by `fill` (a run of the op over every code of the
/// varying operand, the other fixed); returns `fill`'s fallback count.
fn through_table<X: QCode, Y: QCode>(kernels: Kernels, fill: impl FnOnce(&mut [Y]) -> u64, x: &[X], y: &mut [Y]) -> u64 {
    let mut table = [Y::default(); 256];
    let fallbacks = fill(&mut table);
    map_codes(kernels, &table, x, y);
    fallbacks
}

/// The shortest run with one operand fixed that [`Binary::apply`] maps through a table of the
/// op at the fixed code: filling it costs a run of 256 outputs, each output then a lookup.
pub const TABLE_RUN: usize = 256;

/// The most rows of a broadcast operand's few codes mapped over a whole run each (then one
/// select per output and row); beyond it, one lookup per output.
const FEW_ROWS: usize = 4;

/// One run of an Add's outputs: `y[k]` from `a[k·la]`, `b[k·lb]`.
struct SumRun<'a, A, B> {
    a: &'a [A],
    la: usize,
    b: &'a [B],
    lb: usize,
    sum: &'a Sum,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn sums_avx512<A: QCode, B: QCode, Y: QCode>(run: &SumRun<'_, A, B>, y: &mut [Y]) -> u64 {
    sums(run, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2<A: QCode, B: QCode, Y: QCode>(run: &SumRun<'_, A, B>, y: &mut [Y]) -> u64 {
    sums(run, y)
}

/// An Add's run, per 64 outputs, in passes the compiler vectorizes on the caller's path: the
/// centred codes as f64, the values and their flags ([`Sum::value`]'s operations element by
/// element, the same IEEE steps on every path), the codes; then the exact form where a flag is
/// set. Returns the fallback count. No closures: they would be compiled apart, without the
/// caller's features.
#[inline(always)]
fn sums<A: QCode, B: QCode, Y: QCode>(run: &SumRun<'_, A, B>, y: &mut [Y]) -> u64 {
    const CH: usize = 64;
    let s = run.sum;
    let (za, zb, zy) = (f64::from(s.za), f64::from(s.zb), s.zy);
    let mut fallbacks = 0;
    for (c, y) in y.chunks_mut(CH).enumerate() {
        let n = y.len();
        let (mut x, mut z) = ([0f64; CH], [0f64; CH]);
        let (a, b) = (&run.a[c * CH * run.la..], &run.b[c * CH * run.lb..]);
        match (run.la, run.lb) {
            (1, 1) => {
                for ((x, z), (&a, &b)) in x.iter_mut().zip(z.iter_mut()).zip(a[..n].iter().zip(&b[..n])) {
                    (*x, *z) = (f64::from(a.value()) - za, f64::from(b.value()) - zb);
                }
            }
            (1, 0) => {
                let b = f64::from(b[0].value()) - zb;
                for ((x, z), &a) in x.iter_mut().zip(z.iter_mut()).zip(&a[..n]) {
                    (*x, *z) = (f64::from(a.value()) - za, b);
                }
            }
            (0, 1) => {
                let a = f64::from(a[0].value()) - za;
                for ((x, z), &b) in x.iter_mut().zip(z.iter_mut()).zip(&b[..n]) {
                    (*x, *z) = (a, f64::from(b.value()) - zb);
                }
            }
            (la, lb) => {
                for k in 0..n {
                    (x[k], z[k]) = (f64::from(a[k * la].value()) - za, f64::from(b[k * lb].value()) - zb);
                }
            }
        }
        let (mut near, mut r, mut any) = ([false; CH], [0f64; CH], false);
        for k in 0..n {
            (r[k], near[k]) = s.centred_value(x[k], z[k]);
            // Reduced in registers: a test of `near` once stored (bytes) measured a stall.
            any |= near[k];
        }
        // `r` is an integer within ±2^20 and `zy` a code: the conversion (`exact_i32`, integer
        // operations: `as` would be a saturating conversion, compiled element by element with
        // NaN tests) and the sum are exact, the clamp in i32 is `saturate`'s.
        for (y, &r) in y.iter_mut().zip(&r) {
            *y = Y::saturate(i64::from((exact_i32(r) + zy).clamp(Y::MIN, Y::MAX)));
        }
        // Ties are rare: one test, then the scan (none where the f64 value is exact).
        if !any || s.f64_exact {
            continue;
        }
        for k in (0..n).filter(|&k| near[k]) {
            // The centred codes are small integers: exact in f64 and back.
            y[k] = s.exact(x[k] as i32, z[k] as i32);
            fallbacks += 1;
        }
    }
    fallbacks
}

/// One run of a Mul's outputs: `y[k]` from `a[k·la]`, `b[k·lb]`.
struct Run<'a, A, B> {
    kernels: Kernels,
    a: &'a [A],
    la: usize,
    b: &'a [B],
    lb: usize,
    zeros: (i32, i32),
    plan: &'a Certified,
    out: Output,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn products_avx512<A: QCode, B: QCode, Y: QCode>(run: &Run<'_, A, B>, y: &mut [Y]) -> u64 {
    products(run, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn products_avx2<A: QCode, B: QCode, Y: QCode>(run: &Run<'_, A, B>, y: &mut [Y]) -> u64 {
    products(run, y)
}

/// A Mul's run, per 64 outputs: the centred products as i32, then their certified
/// requantization (`row_uniform`: the operations of `requant_certified` element by element,
/// vectorized where the caller's instance allows; the exact fallback where it decides). Returns
/// the fallback count. No closures: they would be compiled apart, without the caller's features.
#[inline(always)]
fn products<A: QCode, B: QCode, Y: QCode>(run: &Run<'_, A, B>, y: &mut [Y]) -> u64 {
    const CH: usize = 64;
    let (za, zb) = run.zeros;
    let mut fallbacks = 0;
    for (c, y) in y.chunks_mut(CH).enumerate() {
        let mut acc = [0i32; CH];
        let acc = &mut acc[..y.len()];
        let n = acc.len();
        let (a, b) = (&run.a[c * CH * run.la..], &run.b[c * CH * run.lb..]);
        match (run.la, run.lb) {
            (1, 1) => {
                for ((p, &a), &b) in acc.iter_mut().zip(&a[..n]).zip(&b[..n]) {
                    *p = (a.value() - za) * (b.value() - zb);
                }
            }
            (1, 0) => {
                let b = b[0].value() - zb;
                for (p, &a) in acc.iter_mut().zip(&a[..n]) {
                    *p = (a.value() - za) * b;
                }
            }
            (0, 1) => {
                let a = a[0].value() - za;
                for (p, &b) in acc.iter_mut().zip(&b[..n]) {
                    *p = a * (b.value() - zb);
                }
            }
            (la, lb) => {
                for (k, p) in acc.iter_mut().enumerate() {
                    *p = (a[k * la].value() - za) * (b[k * lb].value() - zb);
                }
            }
        }
        // A product of two differences of codes: at most 255².
        fallbacks += row_uniform(run.kernels, acc, 255 * 255, 0, run.plan, run.out, y);
    }
    fallbacks
}

/// `y[k] = f(a[k·la], b[k·lb])`, the strides 0 or 1 spelled out (so the common cases compile to
/// plain loops).
#[inline(always)]
fn strided<A: Copy, B: Copy, Y>(y: &mut [Y], a: &[A], la: usize, b: &[B], lb: usize, f: impl Fn(A, B) -> Y) {
    let n = y.len();
    match (la, lb) {
        (1, 1) => y.iter_mut().zip(&a[..n]).zip(&b[..n]).for_each(|((y, &a), &b)| *y = f(a, b)),
        (1, 0) => y.iter_mut().zip(&a[..n]).for_each(|(y, &a)| *y = f(a, b[0])),
        (0, 1) => y.iter_mut().zip(&b[..n]).for_each(|(y, &b)| *y = f(a[0], b)),
        _ => y.iter_mut().enumerate().for_each(|(k, y)| *y = f(a[k * la], b[k * lb])),
    }
}

/// A Mul's code: the centred product (|A·B| ≤ 65,025, an i32) requantized.
#[inline(always)]
fn product<A: QCode, B: QCode, Y: QCode>(a: A, b: B, za: i32, zb: i32, plan: &Certified, out: Output) -> Y {
    Y::saturate(i64::from(requant_certified((a.value() - za) * (b.value() - zb), 0, plan, out)))
}

/// `row(out_row, a, la, b, lb)` for every run of outputs along the last axis, `out_row[k]`
/// being the pair `a[k·la]`, `b[k·lb]` (a stride 0 on a broadcast axis), over the broadcast shape.
#[inline(always)]
fn each<A: QCode, B: QCode, Y: QCode>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out: &mut [Y],
    mut row: impl FnMut(&mut [Y], &[A], usize, &[B], usize),
) -> Result<(), CodesError> {
    let shape = broadcast_shape(a_shape, b_shape)?;
    check_len("binary input A", a.len(), a_shape)?;
    check_len("binary input B", b.len(), b_shape)?;
    check_len("binary output", out.len(), &shape)?;
    if out.is_empty() {
        return Ok(());
    }
    if a_shape == b_shape {
        row(out, a, 1, b, 1);
        return Ok(());
    }
    // One operand a single element and the other the output's size (so laid out as the output):
    // one run, however many axes.
    if b.len() == 1 && a.len() == out.len() {
        row(out, a, 1, b, 0);
        return Ok(());
    }
    if a.len() == 1 && b.len() == out.len() {
        row(out, a, 0, b, 1);
        return Ok(());
    }
    let (sa, sb) = (broadcast_strides(a_shape, &shape), broadcast_strides(b_shape, &shape));
    let (shape, sa, sb) = coalesce(&shape, &sa, &sb);
    let rank = shape.len();
    let (inner, la, lb) = (shape[rank - 1], sa[rank - 1], sb[rank - 1]);
    // An odometer over every axis but the last; the last is one run.
    let mut idx = vec![0usize; rank - 1];
    for y in out.chunks_exact_mut(inner) {
        let oa: usize = idx.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let ob: usize = idx.iter().zip(&sb).map(|(i, s)| i * s).sum();
        row(y, &a[oa..], la, &b[ob..], lb);
        for ax in (0..rank - 1).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Ok(())
}

/// The broadcast shape with each axis merged into the one before it where both operands step
/// over the pair as over one axis (`stride[i] = stride[i + 1]·dim[i + 1]`, zero strides
/// included): the same elements in the same order, in longer runs along the last axis (a
/// `[C, H, W] × [C, 1, 1]` scaling runs per plane, not per line). Axes of length 1 go first.
fn coalesce(shape: &[usize], sa: &[usize], sb: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut d, mut a, mut b) = (vec![], vec![], vec![]);
    for i in (0..shape.len()).filter(|&i| shape[i] != 1) {
        match (d.last_mut(), a.last_mut(), b.last_mut()) {
            (Some(n), Some(la), Some(lb)) if *la == sa[i] * shape[i] && *lb == sb[i] * shape[i] => {
                *n *= shape[i];
                (*la, *lb) = (sa[i], sb[i]);
            }
            _ => {
                d.push(shape[i]);
                a.push(sa[i]);
                b.push(sb[i]);
            }
        }
    }
    // A shape of ones: one element.
    if d.is_empty() {
        (d, a, b) = (vec![1], vec![0], vec![0]);
    }
    (d, a, b)
}

#[cfg(test)]
mod tests {
    use super::{exact_i32, exact_in_f64};
    use crate::codes::rational::dyadic;

    fn exact(sa: f32, sb: f32, sy: f32) -> bool {
        let d = |s| dyadic(s).unwrap();
        exact_in_f64((f64::from(sa) / f64::from(sy), f64::from(sb) / f64::from(sy)), (d(sa), d(sb), d(sy)))
    }

    #[test]
    fn an_add_is_exact_in_f64_for_dyadic_ratios_within_20_binades() {
        assert!(exact(0.5, 0.25, 1.0));
        assert!(exact(0.02, 0.02, 0.04)); // the same mantissa: ratio 1/2
        assert!(exact(3.0, 5.0, 1.0 / 1024.0)); // odd mantissas over a power of two
        assert!(exact(1.0, 1.0 / 1_048_576.0, 2.0)); // gap 20
        assert!(!exact(1.0, 1.0 / 2_097_152.0, 2.0)); // gap 21
        assert!(!exact(3.0, 1.0, 6.0)); // 1/6
        assert!(!exact(0.1, 0.2, 0.3));
        assert!(!exact(1.0, 1.0, 3.0));
    }

    #[test]
    fn exact_i32_is_the_conversion_of_every_integer_the_clamp_lets_through() {
        // Every integer within ±2^20 (the clamp's range, ends included), negative zero too.
        for i in -(1 << 20)..=(1 << 20) {
            assert_eq!(exact_i32(f64::from(i)), i);
        }
        assert_eq!(exact_i32(-0.0), 0);
    }
}
