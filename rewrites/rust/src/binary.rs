//! Two-input Add / Mul on codes: `qdqc_kernels::codes::binary::Binary` computes
//! `binary_exact`, `sat(rne((sa(a − za) ± sb(b − zb))/sy) + zy)` (or the product) of the exact
//! real value — an Add from a table of it, a Mul as the requantized product.
//!
//! Obligation (contract §3.12): P1 over all 65,536 code pairs, the kernel that runs
//! ([`Binary::apply`] over the whole grid of pairs, built for the group's parameters and code
//! types, on every kernel path this host runs, which must agree byte for byte) against the engine's reference of the unfused group under the contract (`qdqc_ort::binary::reference`:
//! exact rationals for `real`; DQ, the f32 op and Q, as ONNX Runtime's ORT_DISABLE_ALL computes
//! it, for `exact`).
//!
//! | condition | why |
//! |---|---|
//! | a, b, y 8-bit codes, per tensor | the table is indexed by two code bytes |
//! | scales positive finite, zero points codes of their types | what `Binary::new` takes (refused otherwise) |
//! | every kernel path of the host gives the same 65,536 codes | the generated code picks its path at run time (`QDQC_KERNELS_ISA`); refused otherwise |
//! | `real`: P1 against the exact rational | the check is independent arithmetic (the engine's `Dyadic`) |
//! | `exact`: P1 against the float path | every step of the float path is one IEEE operation, deterministic; where its double rounding differs from the exact value, refuted with the pair closest to the zero points |

use qdqc_exact::p1;
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Contract, Verdict};
use qdqc_kernels::codes::binary::{Binary, BinaryOp as KernelOp};
use qdqc_kernels::codes::{QCode, Quant};
use qdqc_kernels::{Isa, Kernels};
use qdqc_ort::binary::{BinaryOp, BinaryParams, reference};

/// Proves or refutes the Rust kernel for `op` with parameters `p` under `contract`.
pub fn prove(op: BinaryOp, p: &BinaryParams, contract: Contract) -> Verdict {
    let kernel = match kernel(op, p) {
        Ok(k) => k,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let Some(reference) = reference(op, p, contract) else {
        return Verdict::Unknown { reason: "the exact value of a pair exceeds the exact arithmetic's range".into() };
    };
    let name = match op {
        BinaryOp::Add => "Add",
        BinaryOp::Mul => "Mul",
    };
    let against = match contract {
        Contract::Real => "the exact rational",
        Contract::Exact => "the float path (DQ, f32 op, Q)",
    };
    let detail = format!("{name} on the Rust kernels ({contract:?}): the kernel against {against}, every code pair");
    p1::exhaustive(&[p.a.domain("a"), p.b.domain("b")], &detail, |x| reference(x[0], x[1]), |x| kernel(x[0], x[1]), |_| None)
}

/// The kernel's output code for a pair of codes.
pub type Kernel = Box<dyn Fn(i64, i64) -> i64>;

/// [`Binary`] for the parameters and code types of `p`, as the generated code builds it.
pub fn kernel(op: BinaryOp, p: &BinaryParams) -> Result<Kernel, String> {
    let op = match op {
        BinaryOp::Add => KernelOp::Add,
        BinaryOp::Mul => KernelOp::Mul,
    };
    let quant = |q: qdqc_exact::QParam, what: &str| -> Result<Quant, String> {
        let z = i32::try_from(q.zero_point).map_err(|_| format!("{what} zero point {} is not a code", q.zero_point))?;
        Ok(Quant::new(q.scale, z))
    };
    let (qa, qb, qy) = (quant(p.a, "A")?, quant(p.b, "B")?, quant(p.c, "output")?);
    macro_rules! typed {
        ($a:ty, $b:ty, $y:ty) => {{
            let t = Binary::<$a, $b, $y>::new(op, qa, qb, qy).map_err(|e| format!("{e}"))?;
            code::<$a>(p.a.zero_point)?;
            code::<$b>(p.b.zero_point)?;
            let grid = grid(&t)?;
            let f = move |a: i64, b: i64| -> i64 {
                let (a, b) = (code::<$a>(a).expect("a code of the domain"), code::<$b>(b).expect("a code of the domain"));
                i64::from(grid[(a.index() << 8) | b.index()].value())
            };
            Ok(Box::new(f) as Kernel)
        }};
    }
    use CodeType::{I8, U8};
    match (p.a.code, p.b.code, p.c.code) {
        (U8, U8, U8) => typed!(u8, u8, u8),
        (U8, U8, I8) => typed!(u8, u8, i8),
        (U8, I8, U8) => typed!(u8, i8, u8),
        (U8, I8, I8) => typed!(u8, i8, i8),
        (I8, U8, U8) => typed!(i8, u8, u8),
        (I8, U8, I8) => typed!(i8, u8, i8),
        (I8, I8, U8) => typed!(i8, i8, u8),
        (I8, I8, I8) => typed!(i8, i8, i8),
        (a, b, y) => Err(format!("the Rust kernels take 8-bit codes, not a {}, b {}, y {}", a.name(), b.name(), y.name())),
    }
}

/// `Binary::apply` over every pair (`a.index()·256 + b.index()`), on every kernel path of the host.
fn grid<A: QCode, B: QCode, Y: QCode>(t: &Binary<A, B, Y>) -> Result<Vec<Y>, String> {
    let a: Vec<A> = (0..1 << 16).map(|k| A::from_index(k >> 8)).collect();
    let b: Vec<B> = (0..1 << 16).map(|k| B::from_index(k & 255)).collect();
    let mut first: Option<(Isa, Vec<Y>)> = None;
    for isa in Isa::available() {
        let k = Kernels::new(isa).map_err(|e| e.to_string())?;
        let mut out = vec![Y::default(); 1 << 16];
        t.apply(k, &a, &[1 << 16], &b, &[1 << 16], &mut out).map_err(|e| format!("{e}"))?;
        match &first {
            None => first = Some((isa, out)),
            Some((isa0, want)) => {
                if let Some(i) = (0..1 << 16).find(|&i| out[i] != want[i]) {
                    return Err(format!("the {isa} path differs from the {isa0} path at a={:?} b={:?}", a[i], b[i]));
                }
            }
        }
    }
    Ok(first.expect("the portable path always runs").1)
}

/// The code `v` of type `T`, or why it is not one.
pub(crate) fn code<T: QCode>(v: i64) -> Result<T, String> {
    let i = i32::try_from(v).ok().filter(|i| (T::MIN..=T::MAX).contains(i)).ok_or(format!("{v} is not a code of its type"))?;
    Ok(T::saturate(i64::from(i)))
}
