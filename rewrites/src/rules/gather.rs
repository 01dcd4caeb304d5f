//! `Gather(DQ(W, s, zp), idx)` with a constant table becomes `DQ'(Gather(W, idx), s', zp')`: an
//! embedding lookup dequantizes the rows it reads instead of the whole float table.
//!
//! Obligation (contract §5.3; P4, the lemma of [`qdqc_exact::movement`]): at every
//! element of the table and for every index value in `[-n, n)`, the rewritten DQ reads the same
//! code and the same scale bits and zero point as the original. The parameters follow the layout:
//! per-tensor ones are kept; per-axis ones on another axis are kept with the axis renumbered
//! (counted from the end past the gather axis, so the rank of `idx` does not matter); blocked
//! ones on another axis are gathered with the same `idx`; per-row ones of a rank-2 table (the
//! gather axis itself) are gathered as `[n, 1]` (or `[1, n]`) and read as one block spanning the
//! other axis (opset 21). Blocked along the gather axis is refused (the gathered rows would need
//! index arithmetic on the blocks). Sub-byte codes are widened to 8 bits, since ONNX Gather has
//! no 4-bit type: DQ reads the same integer, so `f32(q − zp)` is the same. Only f32 scales are
//! read. Hazard (ORT `PrepareForQDQ`): a one-element parameter tensor of rank ≤ 1 is per-tensor
//! whatever `block_size` says, so a gathered blocked parameter needs an output of rank ≥ 2.
//! Broken twin: `tests/broken` "gather_rows_keep_first_row_scale".

use super::group::{Group, absent, add_node, constant, constant_codes, decide, f32_constant, int_constant, shape, tag, var};
use super::{Log, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::movement::{ParamLayout, Params, Rewritten, gather_before_dequantize};
use qdqc_exact::reference::CodeType;
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{Op, Term};

pub const NAME: &str = "gather-before-dequantize";

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let pattern: egg::Pattern<_> = "(Gather ?tg (dq ?td ?w ?s ?z) ?i)".parse().expect("valid pattern");
    vec![Rewrite::new(NAME, pattern, GatherBeforeDq { options: options.clone(), log: log.clone() }).expect("valid rule")]
}

struct GatherBeforeDq {
    options: RuleOptions,
    log: Log,
}

/// What the rewrite emits, decided from the match.
struct Plan {
    /// Gather axis, non-negative.
    axis: usize,
    table_dims: Vec<i64>,
    table_codes: Option<Vec<i64>>,
    original: Params,
    rewritten: Rewritten,
    /// 8-bit type the codes are widened to, for sub-byte tables.
    widened: Option<CodeType>,
    /// The zero point's code type (the table's), when there is one.
    zp_code: Option<CodeType>,
    per_tensor: bool,
}

fn int_attr(attrs: &[Attribute], name: &str) -> Option<i64> {
    attrs.iter().find(|a| a.name == name).and_then(|a| if let AttrValue::Int(i) = a.value { Some(i) } else { None })
}

/// The plan for a match, or why the rewrite does not apply.
fn plan(eg: &QdqEGraph, s: &Subst) -> Result<Plan, String> {
    let env = &eg.analysis.env;
    let (w, sc, zp, idx) = (var(s, "?w"), var(s, "?s"), var(s, "?z"), var(s, "?i"));
    let (wf, wc) = constant(eg, w).ok_or("the table is not a constant initializer")?;
    let dtype = wf.dtype.ok_or("the table has no type")?;
    let code = CodeType::from_dtype(dtype).ok_or_else(|| format!("table codes of type {} are not integers", dtype.as_str_name()))?;
    let dims = wc.dims.clone();
    let rank = dims.len() as i64;
    let gather_tag = tag(eg, var(s, "?tg")).ok_or("Gather without tag")?;
    let dq_tag = tag(eg, var(s, "?td")).ok_or("DQ without tag")?;
    let g = int_attr(&env.tag(gather_tag).attributes, "axis").unwrap_or(0);
    let axis = if g < 0 { g + rank } else { g };
    if !(0..rank).contains(&axis) {
        return Err(format!("Gather axis {g} is out of range for a rank-{rank} table"));
    }
    let axis = axis as usize;
    let (sf, scc) = constant(eg, sc).ok_or("the scale is not a constant")?;
    if sf.dtype != Some(DataType::Float) {
        return Err(format!("scale of type {}: only f32 scales are read bit for bit", sf.dtype.map_or("unknown", |d| d.as_str_name())));
    }
    let scales = scc.f32_bits.clone().ok_or("the scale's values are not known")?;
    let sdims = scc.dims.clone();
    let zero_points = if absent(eg, zp) {
        vec![0; scales.len()]
    } else {
        let (_, zc) = constant(eg, zp).ok_or("the zero point is not a constant")?;
        if zc.dims != sdims {
            return Err(format!("zero point dims {:?} differ from scale dims {sdims:?}", zc.dims));
        }
        let mut z = zc.ints.clone().ok_or("the zero point's values are not known")?;
        // Sub-byte payloads unpack whole bytes: an odd count leaves a padding nibble.
        z.truncate(scales.len());
        z
    };
    let dq = env.tag(dq_tag);
    let layout = ParamLayout::of(&dims, &sdims, dq.axis.unwrap_or(1), dq.block_size.unwrap_or(0))?;
    let original = Params { dims: sdims.clone(), scales, zero_points, layout };
    let widened = match code {
        CodeType::U4 | CodeType::U2 => Some(CodeType::U8),
        CodeType::I4 | CodeType::I2 => Some(CodeType::I8),
        _ => None,
    };
    // Widening needs every code; a table above the facts' size bound is read from its payload.
    let elements = dims.iter().product::<i64>().max(0) as usize;
    let table_codes = if widened.is_some() { constant_codes(eg, w).map(|(_, codes)| codes) } else { wc.ints.clone() }.map(|mut codes| {
        codes.truncate(elements);
        codes
    });
    if widened.is_some() && table_codes.is_none() {
        return Err(format!("{}-bit codes must be widened for Gather, and the table's codes could not be read", code.bits()));
    }
    // Rank of the gathered output, when the rank of the indices is known.
    let out_rank = shape(eg, idx).map(|d| rank - 1 + d.len() as i64);
    let written = |a: usize| if a < axis { a as i64 } else { a as i64 - rank };
    let (pdims, gathered, new_axis, block) = match layout {
        ParamLayout::PerTensor => (sdims.clone(), false, 0, 0),
        ParamLayout::PerAxis { axis: a } if a != axis => (sdims.clone(), false, written(a), 0),
        ParamLayout::PerAxis { .. } => {
            if rank != 2 {
                return Err(format!("per-axis parameters along the gather axis of a rank-{rank} table have no blocked form (rank 2 only)"));
            }
            if env.opset < 21 {
                return Err(format!("per-row parameters become a blocked DequantizeLinear, which needs opset 21; the model imports {}", env.opset));
            }
            let other = 1 - axis;
            let mut pdims = vec![1, 1];
            pdims[axis] = dims[axis];
            (pdims, true, written(other), dims[other])
        }
        ParamLayout::Blocked { axis: a, .. } if a == axis => {
            return Err("blocked parameters along the gather axis: the gathered rows would need index arithmetic on the blocks".into());
        }
        ParamLayout::Blocked { axis: a, block } => (sdims.clone(), true, written(a), block),
    };
    if gathered && out_rank.is_none_or(|r| r < 2) {
        return Err("gathered parameters need an output of known rank ≥ 2 (a one-element parameter of rank ≤ 1 is per-tensor in ORT)".into());
    }
    // The rewritten DQ is in the default domain (the original may be com.microsoft's).
    if !matches!(layout, ParamLayout::PerTensor) && env.opset < 13 {
        return Err(format!("per-axis DequantizeLinear needs opset 13; the model imports {}", env.opset));
    }
    if code.bits() == 16 && env.opset < 21 {
        return Err(format!("16-bit DequantizeLinear needs opset 21; the model imports {}", env.opset));
    }
    let rewritten = Rewritten {
        codes: widened.and(table_codes.clone()),
        dims: pdims,
        scales: original.scales.clone(),
        zero_points: original.zero_points.clone(),
        gathered,
        axis: new_axis,
        block,
    };
    let zp_code = (!absent(eg, zp)).then_some(code);
    Ok(Plan { axis, table_dims: dims, table_codes, original, rewritten, widened, zp_code, per_tensor: layout == ParamLayout::PerTensor })
}

impl Applier<Term, QdqAnalysis> for GatherBeforeDq {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(group) = Group::new(eg, &[var(s, "?td")], var(s, "?tg")) else { return vec![] };
        if self.log.decided(NAME, &group.output) {
            return vec![];
        }
        let lossy_matmuls = self.options.allow.matmulnbits.is_some();
        let planned = plan(eg, s).and_then(|p| match p.widened {
            // The Rust target reads a table its MatMuls share from the packed codes themselves
            // (`float::weight_only`, the Gather decoding only its columns): no float table exists.
            Some(_) if float_table_kept(eg, eclass, s, lossy_matmuls) && matches!(self.options.target, crate::Target::Rust(_)) => Err(
                "sub-byte codes need an 8-bit copy of the whole table for Gather; the Rust target gathers from the packed codes its MatMul readers share (only the gathered columns are decoded): nothing would be saved".to_string(),
            ),
            Some(_) if float_table_kept(eg, eclass, s, lossy_matmuls) => Err(
                "sub-byte codes need an 8-bit copy of the whole table for Gather, and the float table stays materialised for its other readers (a tied lm_head): nothing would be saved (with --allow matmulnbits a MatMul/Gemm reader is fused and no longer counts)".to_string(),
            ),
            _ => Ok(p),
        });
        let verdict = match &planned {
            Ok(p) => gather_before_dequantize(&p.table_dims, p.axis, p.table_codes.as_deref(), &p.original, &p.rewritten),
            Err(reason) => Verdict::Unknown { reason: reason.clone() },
        };
        // Data movement does not depend on the ISA: one verdict for every profile.
        let (fired, verdicts) = decide(&self.options, |_| verdict.clone());
        group.log(&self.log, NAME, "DequantizeLinear(Gather(codes))", fired, verdicts);
        let (true, Ok(p)) = (fired, planned) else { return vec![] };
        let dq = emit(eg, s, &group, &p);
        eg.union(eclass, dq);
        vec![eclass, dq]
    }
}

/// Whether the dequantized table the matched Gather reads has readers besides Gathers: one
/// outside the region, or another node of the e-graph (a MatMul of a tied lm_head). With
/// `lossy_matmuls` (`--allow matmulnbits`) MatMul and Gemm readers do not count: that rule
/// fuses them onto the codes.
fn float_table_kept(eg: &QdqEGraph, eclass: Id, s: &Subst, lossy_matmuls: bool) -> bool {
    use qdqc_lang::term::FloatOp;
    let tg = eg.find(var(s, "?tg"));
    let Some(dq) = eg[eclass]
        .nodes
        .iter()
        .find(|n| n.op == Op::Float(FloatOp::Gather) && n.args.first().map(|&a| eg.find(a)) == Some(tg))
        .and_then(|n| n.args.get(1).copied())
    else {
        return false;
    };
    let env = &eg.analysis.env;
    let escaping = tag(eg, var(s, "?td")).and_then(|t| env.tag(t).outputs.first().copied().flatten()).is_some_and(|v| env.escaping.contains(&v));
    let keeps = |op: &Op| match op {
        Op::Float(FloatOp::Gather) => false,
        Op::Float(FloatOp::MatMul | FloatOp::Gemm) => !lossy_matmuls,
        _ => true,
    };
    escaping || eg[dq].parents().any(|p| keeps(&eg.id_to_node(p).op))
}

/// Adds `DQ'(Gather(codes'), Gather(s')?, Gather(zp')?)` and returns the DQ''s e-class.
fn emit(eg: &mut QdqEGraph, s: &Subst, group: &Group, p: &Plan) -> Id {
    let env = &eg.analysis.env;
    let name = |id: Id| match eg[id].data.leaf {
        Some(Op::Value(v)) => env.value(v).name.clone(),
        _ => String::new(),
    };
    let (w, sc, zp, idx) = (var(s, "?w"), var(s, "?s"), var(s, "?z"), var(s, "?i"));
    let (w_name, s_name, z_name) = (name(w), name(sc), name(zp));
    let out = group.output.clone();
    let gather_attr = vec![Attribute::int("axis", p.axis as i64)];
    let reshaped = p.rewritten.dims != p.original.dims;
    let mut codes_src = w;
    if let (Some(code), Some(codes)) = (p.widened, &p.table_codes) {
        codes_src = int_constant(eg, codes, code, p.table_dims.clone(), &format!("{w_name}/qdqc_{}", code.name()));
    }
    let codes_dtype = p.widened.map(CodeType::dtype).or(eg[w].data.dtype);
    let codes = add_node(eg, group.q, "Gather", gather_attr.clone(), vec![codes_src, idx], &format!("{out}/qdqc_codes"), codes_dtype);
    let mut scale = sc;
    if reshaped {
        let values: Vec<f32> = p.original.scales.iter().map(|&b| f32::from_bits(b)).collect();
        scale = f32_constant(eg, &values, p.rewritten.dims.clone(), &format!("{s_name}/qdqc_rows"));
    }
    let mut zero_point = p.zp_code.map(|_| zp);
    if let Some(code) = p.zp_code
        && (reshaped || p.widened.is_some())
    {
        let code = p.widened.unwrap_or(code);
        let suffix = if reshaped { "rows" } else { code.name() };
        zero_point = Some(int_constant(eg, &p.original.zero_points, code, p.rewritten.dims.clone(), &format!("{z_name}/qdqc_{suffix}")));
    }
    if p.rewritten.gathered {
        scale = add_node(eg, group.q, "Gather", gather_attr.clone(), vec![scale, idx], &format!("{out}/qdqc_scale"), Some(DataType::Float));
        zero_point = zero_point.map(|z| {
            let dtype = eg[z].data.dtype;
            add_node(eg, group.q, "Gather", gather_attr.clone(), vec![z, idx], &format!("{out}/qdqc_zero_point"), dtype)
        });
    }
    let dq_tag = tag(eg, var(s, "?td")).expect("checked by the plan");
    let mut attributes: Vec<Attribute> =
        eg.analysis.env.tag(dq_tag).attributes.iter().filter(|a| a.name != "axis" && a.name != "block_size").cloned().collect();
    if !p.per_tensor {
        attributes.push(Attribute::int("axis", p.rewritten.axis));
    }
    if p.rewritten.block > 0 {
        attributes.push(Attribute::int("block_size", p.rewritten.block));
    }
    let mut inputs = vec![codes, scale];
    inputs.extend(zero_point);
    group.add_kernel(eg, "DequantizeLinear", "", attributes, inputs)
}
