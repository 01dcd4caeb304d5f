//! AveragePool / GlobalAveragePool on codes: every window's output is
//! `qdqc_kernels::codes::pool::mean_exact`, `sat(rne(sx·Σ(x − zx)/(count·sy)) + zy)` of the exact
//! real value, a function of the window's integer sum and its count alone.
//!
//! Obligation (contract §3.12), per class of windows (inputs summed, divisor) of the geometry:
//!
//! | condition | why |
//! |---|---|
//! | x, y 8-bit codes, per tensor; scales positive finite | what `mean_exact` takes |
//! | dilations 1 | the window classes are counted without dilation |
//! | `real`: P1 over every reachable window sum, `mean_exact` against the exact quotient (`rne_quotient`) | independent arithmetic for the definition |
//! | `exact`: P2 (every partial float sum of the window's DQ values exact, `float_sum_is_exact`), then P1 against the float path `Q(fl(Σ DQ(x)) / count)` | without P2 the float sum depends on the runtime's order: the group stays float |

use crate::binary::code;
use qdqc_exact::num::{Dyadic, rne_quotient};
use qdqc_exact::p1::{self, Domain};
use qdqc_exact::reference::{CodeType, quantize};
use qdqc_exact::{Certificate, Contract, Method, Verdict};
use qdqc_kernels::codes::pool::mean_exact;
use qdqc_kernels::codes::{QCode, Quant};
use qdqc_ort::pool::{PoolGeometry, PoolParams, float_sum_is_exact};
use std::cell::Cell;
use std::collections::BTreeSet;

/// The windows a pool averages.
#[derive(Clone, Copy, Debug)]
pub enum Windows<'a> {
    /// GlobalAveragePool over an image of this many elements.
    Image(u64),
    /// AveragePool over a static geometry.
    Geometry(&'a PoolGeometry),
}

/// Proves or refutes the Rust pooling kernel for `p` over `windows` under `contract`.
pub fn prove(p: &PoolParams, windows: Windows, contract: Contract) -> Verdict {
    let classes: BTreeSet<(u64, u64)> = match windows {
        Windows::Image(n) => BTreeSet::from([(n, n)]),
        Windows::Geometry(g) if g.dilations.iter().any(|&d| d != 1) => {
            return Verdict::Unknown { reason: format!("refused: dilations {:?} (the window classes are counted without dilation)", g.dilations) };
        }
        Windows::Geometry(g) => match g.windows() {
            Ok(w) => w.iter().map(|w| (w.inputs.len() as u64, w.divisor)).collect(),
            Err(reason) => return Verdict::Unknown { reason },
        },
    };
    let mean = match mean(p) {
        Ok(m) => m,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let (mut domain, mut micros, mut details) = (0, 0, Vec::new());
    for (n, divisor) in classes {
        match prove_class(p, n, divisor, &mean, contract) {
            Verdict::Exact { proof } => {
                domain += proof.domain;
                micros += proof.micros;
                details.push(proof.detail);
            }
            refuted_or_unknown => return refuted_or_unknown,
        }
    }
    let detail = format!("AveragePool on the Rust kernels ({contract:?}): {}", details.join("; "));
    Verdict::Exact { proof: Certificate { method: Method::P1Exhaustive, domain, micros, detail } }
}

/// The kernel's output for a window sum and count.
pub type Mean = Box<dyn Fn(i64, u64) -> i64>;

/// [`mean_exact`] at the code types of `p`, checked once on a zero sum.
pub fn mean(p: &PoolParams) -> Result<Mean, String> {
    let quant =
        |q: qdqc_exact::QParam| i32::try_from(q.zero_point).map(|z| Quant::new(q.scale, z)).map_err(|_| format!("zero point {} is not a code", q.zero_point));
    let (qx, qy) = (quant(p.x)?, quant(p.y)?);
    macro_rules! typed {
        ($x:ty, $y:ty) => {{
            code::<$x>(p.x.zero_point)?;
            let f = move |sum: i64, count: u64| -> Result<i64, String> {
                let count = usize::try_from(count).map_err(|_| format!("window count {count}"))?;
                mean_exact::<$x, $y>(sum, count, qx, qy).map(|y| i64::from(y.value())).map_err(|e| format!("{e}"))
            };
            f(0, 1)?;
            Ok(Box::new(move |sum, count| f(sum, count).expect("parameters checked on a zero sum")) as Mean)
        }};
    }
    use CodeType::{I8, U8};
    match (p.x.code, p.y.code) {
        (U8, U8) => typed!(u8, u8),
        (U8, I8) => typed!(u8, i8),
        (I8, U8) => typed!(i8, u8),
        (I8, I8) => typed!(i8, i8),
        (x, y) => Err(format!("the Rust kernels take 8-bit codes, not x {}, y {}", x.name(), y.name())),
    }
}

fn prove_class(p: &PoolParams, n: u64, divisor: u64, mean: &Mean, contract: Contract) -> Verdict {
    if contract == Contract::Exact && !float_sum_is_exact(p.x, n) {
        return Verdict::Unknown { reason: format!("P2: the float sum of {n} DQ values may round, so the runtime's order matters") };
    }
    let (lo, hi) = p.x.code.range();
    let Ok(count) = i64::try_from(n) else { return Verdict::Unknown { reason: format!("window of {n} inputs") } };
    let domain = [Domain::new("sum", (count * (lo - p.x.zero_point), count * (hi - p.x.zero_point)), 0)];
    // Set when an exact value leaves i128: the verdict is then unknown, never a refutation.
    let overflow = Cell::new(false);
    let reference = |sum: i64| -> i64 {
        match contract {
            // Under P2 `sum·sx` is the exact float sum, an f32.
            #[allow(clippy::cast_precision_loss)]
            Contract::Exact => quantize(sum as f32 * p.x.scale / divisor as f32, p.y.scale, p.y.zero_point, p.y.code),
            Contract::Real => real(p, sum, divisor).unwrap_or_else(|| {
                overflow.set(true);
                i64::MIN
            }),
        }
    };
    let detail = format!(
        "{} window of {n} / {divisor}: mean_exact against {}, every reachable sum",
        p.x.code.name(),
        if contract == Contract::Real { "the exact quotient" } else { "the float path" }
    );
    let verdict = p1::exhaustive(&domain, &detail, |s| reference(s[0]), |s| mean(s[0], divisor), |_| None);
    if overflow.get() {
        return Verdict::Unknown { reason: format!("{detail}: an exact value exceeds the exact arithmetic's range") };
    }
    verdict
}

/// `sat(rne(sum·sx/(divisor·sy)) + zy)` exactly; `None` beyond i128.
fn real(p: &PoolParams, sum: i64, divisor: u64) -> Option<i64> {
    let num = Dyadic::int(sum).checked_mul(Dyadic::from_f32(p.x.scale)?)?;
    let den = Dyadic::int(i64::try_from(divisor).ok()?).checked_mul(Dyadic::from_f32(p.y.scale)?)?;
    let (lo, hi) = p.y.code.range();
    Some(rne_quotient(num, den)?.saturate(p.y.zero_point, lo, hi))
}
