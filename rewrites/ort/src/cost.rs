//! ONNX Runtime 1.31's cost model: what extraction pays for each e-node when the compiled model
//! runs on ORT's CPU kernels (ARCHITECTURE.md, "cost model"), and what the re-sign choice pays
//! for an integer GEMM/conv on int8 activations.

use egg::Id;
use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::cost::CostModel;
use qdqc_lang::term::{FloatOp, Op, Term};

/// Authored nodes cost one each, and so do created kernels, except where ONNX Runtime 1.31's
/// CPU kernel is measured slower than the unfused group it replaces (ARCHITECTURE.md, "cost
/// model"): then the proven fusion stays in the e-graph but extraction keeps the group. A Gather
/// that reads a dequantized constant also pays one per element of that float table: it is what
/// keeps the table materialised for a few rows, and gathering the codes first (rule
/// `gather-before-dequantize`) does not. Its other readers (a tied lm_head) may still need it.
pub struct OrtCost;

/// A lookup table (`Gather(table, Cast(x))`): ORT's Gather copies element by element, measured
/// 15–16x an elementwise op on the same tensor (98.5 µs against 6–7 µs for Relu or
/// QuantizeLinear on `dwsep_net_s8s8_pc_pow2`), so a table pays off only for long chains.
const LOOKUP_GATHER: u64 = 16;

/// A grouped QLinearConv with unequal per-channel weight zero points: ORT 1.31.1 runs it on a
/// generic path measured 5–7x slower than the whole unfused DQ → Conv → Q group
/// (`dwsep_net_u8s8_pc_asym_pow2`: 1096 µs against about 200 µs for the original model).
const GROUPED_CONV_UNEQUAL_ZERO_POINTS: u64 = 64;

impl CostModel for OrtCost {
    fn cost(&self, term: &Term, egraph: &QdqEGraph) -> u64 {
        match term.op {
            Op::Value(_) | Op::Tag(_) | Op::Index(_) | Op::Absent | Op::Proj => 0,
            Op::Float(FloatOp::Gather) => 1 + term.args.get(1).map_or(0, |&data| dequantized_table(egraph, data)),
            Op::Kernel => kernel_cost(term, egraph),
            Op::Dequantize | Op::Quantize | Op::Float(_) | Op::Opaque => 1,
        }
    }
}

fn kernel_cost(term: &Term, egraph: &QdqEGraph) -> u64 {
    let env = &egraph.analysis.env;
    let Some(Op::Tag(t)) = term.args.first().and_then(|&tag| egraph[tag].data.leaf) else { return 1 };
    let facts = env.tag(t);
    let constant = |i: usize| match term.args.get(i).and_then(|&a| egraph[a].data.leaf) {
        Some(Op::Value(v)) => env.value(v).constant.as_ref(),
        _ => None,
    };
    match facts.op_type.as_str() {
        // A lookup table is a rank-1 constant (256 or 65 536 entries); a gathered weight is not.
        "Gather" if constant(1).is_some_and(|c| c.dims.len() == 1) => LOOKUP_GATHER,
        "QLinearConv" => {
            let group = facts.attributes.iter().find(|a| a.name == "group").and_then(|a| match a.value {
                qdqc_lang::attr::AttrValue::Int(g) => Some(g),
                _ => None,
            });
            // Inputs after the tag: x, x_scale, x_zp, w, w_scale, w_zp (argument 6).
            let unequal = constant(6).and_then(|c| c.ints.as_ref()).is_some_and(|z| z.windows(2).any(|p| p[0] != p[1]));
            if group.is_some_and(|g| g > 1) && unequal { GROUPED_CONV_UNEQUAL_ZERO_POINTS } else { 1 }
        }
        _ => 1,
    }
}

/// Elements of the constant whose DequantizeLinear the e-class `id` holds, or 0.
fn dequantized_table(egraph: &QdqEGraph, id: Id) -> u64 {
    let env = &egraph.analysis.env;
    let constant_elements = |data: Id| match egraph[data].data.leaf {
        Some(Op::Value(v)) => env.value(v).constant.as_ref().map(|c| u64::try_from(c.dims.iter().product::<i64>()).unwrap_or(0)),
        _ => None,
    };
    egraph[id].nodes.iter().filter(|n| n.op == Op::Dequantize).find_map(|n| constant_elements(*n.args.get(1)?)).unwrap_or(0)
}

/// Extra cost of an integer GEMM/conv kernel on int8 activations: ORT's x86 s8s8 paths measured
/// 2–3x slower than u8s8 on the corpus (docs/int8-activations.md).
pub const INT8_ACTIVATION_GEMM_PENALTY: usize = 3;
