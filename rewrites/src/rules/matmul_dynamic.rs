//! The `qlinear-matmul` rule's reading of a group whose B is not a constant (attention's `QKᵀ`
//! and `AV`): `Q(MatMul(DQ(a), DQ(b)))` into ONNX QLinearMatMul over two activations.
//!
//! Obligation (contract §5.10, both operands activations):
//! [`matmul_dynamic::prove`] on every selected ISA. Under `exact`: P2 over the value grids of
//! both reachable code ranges (the float reduction is exact in every order for every A and B),
//! then P3 over every reachable accumulator `K·[pmin, pmax]`; under `real`: P3 against the exact
//! rational. Hazards: x86-avx2 u8×s8 int16 pair saturation, judged from the code ranges; int32
//! wrap. No synthesis: a refused group stays as authored. A symbolic K (attention's sequence
//! length) is decided for every K up to the largest whose accumulators stay in int32
//! ([`matmul_dynamic::prove_every_k`], the same prover the audit uses); the proof names that
//! bound.
//!
//! Conditions, each refusing with its name (`unknown`, never fired):
//!
//! | condition | why |
//! |---|---|
//! | per-tensor A, B and output parameters | the kernel takes one scale and zero point per input here |
//! | [`inner_dimension`]: both ranks ≥ 2, one K (static, or symbolic on both sides) | the accumulator range is K products; ORT's batch broadcasting is the float MatMul's |
//! | a symbolic K: every K up to the int32 bound proven | the model may run any length; beyond the bound ORT's int32 accumulator can wrap, and the proof states the bound |
//! | `matmul_dynamic` conditions: code types, ranges, finite scales | what ORT's kernel accepts |

use super::group::{qparam, var};
use egg::{Id, Subst};
use qdqc_lang::analysis::{Dim, QdqEGraph};
use qdqc_ort::matmul_dynamic::DynamicMatMul;

/// The group's parameters and its static K (`None` when symbolic: `DynamicMatMul::k` is then
/// ignored), or the first condition it fails.
pub fn read(eg: &QdqEGraph, s: &Subst, output: Id) -> Result<(DynamicMatMul, Option<usize>), String> {
    let (a, b) = (var(s, "?x"), var(s, "?w"));
    let pa = qparam(eg, Some(a), var(s, "?sx"), var(s, "?zx")).map_err(|e| format!("A parameters: {e}"))?;
    let pb = qparam(eg, Some(b), var(s, "?sw"), var(s, "?zw")).map_err(|e| format!("B parameters: {e}"))?;
    let y = qparam(eg, Some(output), var(s, "?sy"), var(s, "?zy")).map_err(|e| format!("output parameters: {e}"))?;
    let k = inner_dimension(eg, a, b)?;
    let range = |id: Id, p: qdqc_exact::QParam| eg[id].data.codes.map_or(p.code.range(), |r| (r.lo, r.hi));
    Ok((DynamicMatMul::new(pa, pb, k.unwrap_or(1), y).with_codes(range(a, pa), range(b, pb)), k))
}

/// Condition: A `[…, M, K]` and B `[…, K, N]` both of rank ≥ 2 with one K: static on either side
/// (ONNX makes them equal), or symbolic on both (`None`). Rank-1 operands (which MatMul promotes)
/// are not modelled.
fn inner_dimension(eg: &QdqEGraph, a: Id, b: Id) -> Result<Option<usize>, String> {
    let dims = |id: Id, what: &str| eg[id].data.shape.clone().ok_or(format!("shapes: {what}'s rank is unknown"));
    let (sa, sb) = (dims(a, "A")?, dims(b, "B")?);
    if sa.len() < 2 || sb.len() < 2 {
        return Err(format!("shapes: ranks {} and {}; operands of rank < 2 are not modelled", sa.len(), sb.len()));
    }
    match (&sa[sa.len() - 1], &sb[sb.len() - 2]) {
        (Dim::Known(x), Dim::Known(y)) if x != y => Err(format!("shapes: K of A ({x}) and of B ({y}) differ")),
        (Dim::Known(k), _) | (_, Dim::Known(k)) if *k > 0 => Ok(Some(*k as usize)),
        (Dim::Known(k), _) | (_, Dim::Known(k)) => Err(format!("shapes: K = {k}")),
        _ => Ok(None),
    }
}
