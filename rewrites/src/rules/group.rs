//! What every rule does with a matched group: read its parameters from the e-class facts,
//! decide on every ISA profile, create the fused node and log the decision.

use super::{Decision, Log, Lossy, RuleOptions};
use crate::target::Profile;
use egg::{Id, Subst, Var};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{QParam, Verdict};
use qdqc_lang::analysis::{Constant, Dim, Interval, QdqEGraph, TagFacts, ValueFacts};
use qdqc_lang::attr::Attribute;
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{NodeTag, Op, Term, ValueRef};
use qdqc_ort::Isa;
use std::cell::OnceCell;

/// The e-class bound to `var` (rules only use variables their pattern binds).
pub fn var(subst: &Subst, name: &str) -> Id {
    subst[name.parse::<Var>().expect("a pattern variable")]
}

pub fn tag(eg: &QdqEGraph, id: Id) -> Option<NodeTag> {
    match eg[id].data.leaf {
        Some(Op::Tag(t)) => Some(t),
        _ => None,
    }
}

fn value(eg: &QdqEGraph, id: Id) -> Option<ValueRef> {
    match eg[id].data.leaf {
        Some(Op::Value(v)) => Some(v),
        _ => None,
    }
}

pub fn absent(eg: &QdqEGraph, id: Id) -> bool {
    eg[id].data.leaf == Some(Op::Absent)
}

/// The constant behind a leaf, with its facts.
pub fn constant(eg: &QdqEGraph, id: Id) -> Option<(&ValueFacts, &Constant)> {
    let facts = eg.analysis.env.value(value(eg, id)?);
    Some((facts, facts.constant.as_ref()?))
}

/// Dims and values of the constant integer tensor behind a leaf; `None` when it is not one, or
/// too large for its values to be kept ([`qdqc_lang::analysis::SMALL_CONSTANT`]).
pub fn constant_ints(eg: &QdqEGraph, id: Id) -> Option<(&[i64], &[i64])> {
    let (_, c) = constant(eg, id)?;
    Some((&c.dims, c.ints.as_deref()?))
}

/// Dims and values of the constant integer tensor of at most 8-bit codes behind a leaf, however
/// large: the kept values, or its payload decoded now (packed weights).
pub fn constant_codes(eg: &QdqEGraph, id: Id) -> Option<(&[i64], Vec<i64>)> {
    let (facts, c) = constant(eg, id)?;
    if let Some(ints) = &c.ints {
        return Some((&c.dims, ints.clone()));
    }
    let raw = qdqc_lang::tensor::Payload::Raw(c.raw_codes.clone()?);
    Some((&c.dims, qdqc_lang::tensor::ints(facts.dtype?, &raw)?))
}

/// Dims and values of the constant f32 tensor behind a leaf.
pub fn constant_f32(eg: &QdqEGraph, id: Id) -> Option<(&[i64], Vec<f32>)> {
    let (_, c) = constant(eg, id)?;
    Some((&c.dims, c.f32_bits.as_ref()?.iter().map(|&b| f32::from_bits(b)).collect()))
}

/// Dims and bit patterns of the constant f16 tensor behind a leaf.
pub fn constant_f16(eg: &QdqEGraph, id: Id) -> Option<(&[i64], &[u16])> {
    let (_, c) = constant(eg, id)?;
    Some((&c.dims, c.f16_bits.as_deref()?))
}

/// The name of the value behind a leaf.
pub fn value_name(eg: &QdqEGraph, id: Id) -> Option<&str> {
    Some(&eg.analysis.env.value(value(eg, id)?).name)
}

/// Scales, zero points and the zero point's type, per channel.
pub type Channels = (Vec<f32>, Vec<i64>, Option<DataType>);

/// Per-channel scales and zero points of a (scale, zero point) pair of leaves, and the zero
/// point's type when it has one.
pub fn channels(eg: &QdqEGraph, scale: Id, zp: Id) -> Result<Channels, String> {
    let (sf, sc) = constant(eg, scale).ok_or("the scale is not a constant")?;
    let bits = sc.f32_bits.as_ref().ok_or_else(|| format!("scale '{}' is not a constant f32 tensor", sf.name))?;
    let scales: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    if absent(eg, zp) {
        let zeros = vec![0; scales.len()];
        return Ok((scales, zeros, None));
    }
    let (zf, zc) = constant(eg, zp).ok_or("the zero point is not a constant")?;
    let zps = zc.ints.clone().ok_or_else(|| format!("zero point '{}' is not a constant integer tensor", zf.name))?;
    if zps.len() != scales.len() {
        return Err(format!("{} scales but {} zero points", scales.len(), zps.len()));
    }
    Ok((scales, zps, zf.dtype))
}

/// Per-tensor parameters of the codes `codes` quantized with (`scale`, `zp`). For a Q's output,
/// pass the Q's own e-class as `codes`: its facts carry the type `output_dtype` gives.
pub fn qparam(eg: &QdqEGraph, codes: Option<Id>, scale: Id, zp: Id) -> Result<QParam, String> {
    let (scales, zps, zp_type) = channels(eg, scale, zp)?;
    let ([s], [z]) = (&scales[..], &zps[..]) else { return Err("per-channel parameters where per-tensor are needed".into()) };
    // ORT's fused kernels take a scalar or a one-element vector, nothing of higher rank.
    if constant(eg, scale).is_some_and(|(_, c)| c.dims.len() > 1) {
        return Err("a per-tensor scale of rank above 1".into());
    }
    let dtype = codes.and_then(|c| eg[c].data.dtype).or(zp_type).unwrap_or(DataType::Uint8);
    let code = CodeType::from_dtype(dtype).ok_or_else(|| format!("codes of type {} are not integers", dtype.as_str_name()))?;
    Ok(QParam::new(*s, *z, code))
}

/// Static shape of an e-class, when every dim is known.
pub fn shape(eg: &QdqEGraph, id: Id) -> Option<Vec<i64>> {
    eg[id]
        .data
        .shape
        .as_ref()?
        .iter()
        .map(|d| match d {
            Dim::Known(k) => Some(*k),
            Dim::Symbolic(_) => None,
        })
        .collect()
}

/// Runs `prove` on every profile of the target; a fusion fires only if every verdict is exact.
pub fn decide(options: &RuleOptions, prove: impl Fn(Profile) -> Verdict) -> (bool, Vec<(Profile, Verdict)>) {
    let verdicts: Vec<(Profile, Verdict)> = options.target.profiles().into_iter().map(|p| (p, prove(p))).collect();
    (verdicts.iter().all(|(_, v)| v.is_exact()), verdicts)
}

/// A prover per target: `ort` on each ISA profile of ONNX Runtime, `rust` once for the Rust
/// target (its profiles run the same integers, so one verdict holds for all of them).
pub fn per_target<'a>(ort: impl Fn(Isa) -> Verdict + 'a, rust: impl Fn() -> Verdict + 'a) -> impl Fn(Profile) -> Verdict + 'a {
    let once = OnceCell::new();
    move |p| match p {
        Profile::Ort(isa) => ort(isa),
        Profile::Rust(_) => once.get_or_init(&rust).clone(),
    }
}

/// The group's names for the report, and the output tensor that identifies it.
pub struct Group {
    pub nodes: Vec<String>,
    pub output: String,
    /// The Q node the fused node replaces.
    pub q: NodeTag,
}

impl Group {
    pub fn new(eg: &QdqEGraph, tags: &[Id], q: Id) -> Option<Group> {
        let env = &eg.analysis.env;
        let q = tag(eg, q)?;
        let output = env.tag(q).outputs.first().copied().flatten().map(|v| env.value(v).name.clone())?;
        let mut nodes: Vec<String> = tags.iter().filter_map(|&t| tag(eg, t)).map(|t| env.tag(t).name.clone()).collect();
        nodes.push(env.tag(q).name.clone());
        Some(Group { nodes, output, q })
    }

    pub fn log(&self, log: &Log, rule: &'static str, fused_op: &str, fired: bool, verdicts: Vec<(Profile, Verdict)>) {
        self.log_lossy(log, rule, fused_op, fired, verdicts, None);
    }

    /// Logs a decision of a lossy rewrite, with what it reports for an applied instance.
    pub fn log_lossy(&self, log: &Log, rule: &'static str, fused_op: &str, fired: bool, verdicts: Vec<(Profile, Verdict)>, lossy: Option<Lossy>) {
        log.push(Decision { rule, fused_op: fused_op.to_string(), nodes: self.nodes.clone(), output: self.output.clone(), verdicts, fired, lossy });
    }

    /// Adds the fused node in place of the group's Q: same outputs, a name derived from them.
    pub fn add_kernel(&self, eg: &mut QdqEGraph, op_type: &str, domain: &str, attributes: Vec<Attribute>, inputs: Vec<Id>) -> Id {
        let env = &mut eg.analysis.env;
        let q = env.tag(self.q).clone();
        let t = NodeTag(env.tags.len() as u32);
        env.tags.push(TagFacts {
            node: q.node,
            created: true,
            attributes,
            op_type: op_type.to_string(),
            domain: domain.to_string(),
            name: format!("{}/qdqc_{op_type}", self.output),
            outputs: q.outputs.clone(),
            ..TagFacts::default()
        });
        let tag = eg.add(Term::leaf(Op::Tag(t)));
        let mut args = vec![tag];
        args.extend(inputs);
        eg.add(Term::new(Op::Kernel, args))
    }
}

/// `zp` itself, or a created scalar zero of `code` when the zero point was omitted: fused ops
/// get explicit zero points (ORT's defaults differ from QuantizeLinear's).
pub fn explicit_zero_point(eg: &mut QdqEGraph, zp: Id, code: CodeType, name: &str) -> Id {
    if !absent(eg, zp) {
        return zp;
    }
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    let bytes = if code.bits() <= 8 { vec![0u8] } else { vec![0u8; code.bits() as usize / 8] };
    env.values.push(ValueFacts {
        name: name.to_string(),
        dtype: Some(code.dtype()),
        shape: Some(Vec::new()),
        constant: Some(Constant { dims: Vec::new(), ints: Some(vec![0]), ..Constant::default() }),
        created: Some(bytes),
    });
    eg.add(Term::leaf(Op::Value(v)))
}

/// A created f32 constant of shape `dims` (synthesized scales).
pub fn f32_constant(eg: &mut QdqEGraph, values: &[f32], dims: Vec<i64>, name: &str) -> Id {
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    env.values.push(ValueFacts {
        name: name.to_string(),
        dtype: Some(DataType::Float),
        shape: Some(dims.iter().map(|&d| Dim::Known(d)).collect()),
        constant: Some(Constant { f32_bits: Some(values.iter().map(|x| x.to_bits()).collect()), dims, ..Constant::default() }),
        created: Some(values.iter().flat_map(|x| x.to_le_bytes()).collect()),
    });
    eg.add(Term::leaf(Op::Value(v)))
}

/// A created intermediate node taking the place of `anchor` in the graph's order, with one new
/// output value `output` of `dtype`; returns its e-class.
pub fn add_node(eg: &mut QdqEGraph, anchor: NodeTag, op_type: &str, attributes: Vec<Attribute>, inputs: Vec<Id>, output: &str, dtype: Option<DataType>) -> Id {
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    env.values.push(ValueFacts { name: output.to_string(), dtype, ..ValueFacts::default() });
    let t = NodeTag(env.tags.len() as u32);
    let node = env.tag(anchor).node;
    env.tags.push(TagFacts {
        node,
        created: true,
        attributes,
        op_type: op_type.to_string(),
        name: output.to_string(),
        outputs: vec![Some(v)],
        ..TagFacts::default()
    });
    let tag = eg.add(Term::leaf(Op::Tag(t)));
    let mut args = vec![tag];
    args.extend(inputs);
    eg.add(Term::new(Op::Kernel, args))
}

/// A created integer constant of `code` type (8 or 16 bits) and shape `dims`.
pub fn int_constant(eg: &mut QdqEGraph, values: &[i64], code: CodeType, dims: Vec<i64>, name: &str) -> Id {
    let bytes: Vec<u8> = match code.bits() {
        8 => values.iter().map(|&v| v as u8).collect(),
        16 => values.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
        b => unreachable!("created integer constants are 8 or 16 bits, not {b}"),
    };
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    env.values.push(ValueFacts {
        name: name.to_string(),
        dtype: Some(code.dtype()),
        shape: Some(dims.iter().map(|&d| Dim::Known(d)).collect()),
        constant: Some(Constant {
            dims,
            int_range: values.iter().min().zip(values.iter().max()).map(|(&lo, &hi)| Interval { lo, hi }),
            ints: Some(values.to_vec()),
            ..Constant::default()
        }),
        created: Some(bytes),
    });
    eg.add(Term::leaf(Op::Value(v)))
}

/// A created uint8 constant of shape `dims` (packed weights). Its values stay out of the
/// environment's facts: no rule reads them.
pub fn u8_constant(eg: &mut QdqEGraph, bytes: Vec<u8>, dims: Vec<i64>, name: &str) -> Id {
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    env.values.push(ValueFacts {
        name: name.to_string(),
        dtype: Some(DataType::Uint8),
        shape: Some(dims.iter().map(|&d| Dim::Known(d)).collect()),
        constant: Some(Constant { dims, ..Constant::default() }),
        created: Some(bytes),
    });
    eg.add(Term::leaf(Op::Value(v)))
}
