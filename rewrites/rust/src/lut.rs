//! Unary and selecting ops on 8-bit codes (LeakyRelu, Sigmoid, Where, Concat) as lookup tables
//! (`qdqc_kernels::codes::lut::apply_lut`): the table holds, for each of the 256 codes, the
//! contract's reference of the unfused group, computed at compile time — so the kernel is the
//! reference by construction wherever that reference is one function of the code.
//!
//! | op | `exact` | `real` |
//! |---|---|---|
//! | LeakyRelu, Where, Concat (copies or `Q(DQ(x))` requantizations) | by construction: each step is one IEEE operation (`alpha·v`, DQ, Q), the same on every conforming runtime, so the table of the float path is the float path | by construction: the table of the exact rational value |
//! | Sigmoid (a library function, like Tanh, Exp, Erf) | refused: each runtime computes it its own way (MLAS's `MlasComputeLogistic` is not libm's), so no table equals "the" float path; the group stays float | refused: the kernel crate has no correctly rounded sigmoid to tabulate, and a table of an f64 libm value is not proven to round like the exact value; the group stays float |
//!
//! The same decision holds for the lookup-table rule's chains (`lookup-table`, target-
//! independent: only IEEE-determined ops enter a chain).

use qdqc_exact::reference::CodeType;
use qdqc_exact::{QParam, Verdict, by_construction};
use std::time::Instant;

/// The table kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Table {
    Sigmoid,
    LeakyRelu { alpha: f32 },
    Where,
    Concat,
}

/// The Rust target's verdict for a table kernel over `inputs` into `out` (the contract decides
/// only which reference the table holds, see the module header).
pub fn prove(table: Table, inputs: &[QParam], out: QParam) -> Verdict {
    let start = Instant::now();
    if let Some(q) = inputs.iter().chain([&out]).find(|q| !matches!(q.code, CodeType::U8 | CodeType::I8)) {
        return Verdict::Unknown { reason: format!("refused: tables are for 8-bit codes, not {}", q.code.name()) };
    }
    if let Some(q) = inputs.iter().chain([&out]).find(|q| !(q.scale.is_finite() && q.scale > 0.0)) {
        return Verdict::Unknown { reason: format!("refused: scale {:e} is not a positive finite f32", q.scale) };
    }
    let (what, definition) = match table {
        Table::Sigmoid => {
            return Verdict::Unknown {
                reason: "refused: Sigmoid is a library function — not one float path under exact (each runtime has its own), and no correctly rounded kernel for real".into(),
            };
        }
        Table::LeakyRelu { alpha } if !alpha.is_finite() => return Verdict::Unknown { reason: format!("refused: alpha {alpha}") },
        Table::LeakyRelu { alpha } => (format!("LeakyRelu alpha {alpha}"), "the contract's reference Q(LeakyRelu(DQ(x))) per code"),
        Table::Where => ("Where".to_string(), "the contract's reference Q(DQ(x)) per code of each selected input"),
        Table::Concat => ("Concat".to_string(), "the contract's reference Q(DQ(x)) per code of each input"),
    };
    let codes = 256 * inputs.len() as u64;
    by_construction("qdqc_kernels::codes::lut::apply_lut", format!("{what} on the Rust kernels: the table is {definition} ({codes} entries)"), codes, start)
}
