//! What the e-graph knows about each e-class: dtype, shape, quantization parameters (scales as
//! exact f32 bit patterns) and the interval of integer codes. Rewrites read these facts to decide
//! which proof obligation applies; they never re-derive them from the protobuf.

use crate::attr::Attribute;
use crate::onnx::DataType;
use crate::term::{NodeTag, Op, Term, ValueRef};
use egg::{Analysis, DidMerge, EGraph, Id};

/// One dimension: known size or symbolic name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    Known(i64),
    Symbolic(String),
}

/// Inclusive integer interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lo: i64,
    pub hi: i64,
}

impl Interval {
    pub fn intersect(self, other: Interval) -> Interval {
        Interval { lo: self.lo.max(other.lo), hi: self.hi.min(other.hi) }
    }
}

/// Contents of a constant tensor, kept for small tensors (scales, zero points) and as a range
/// for integer tensors of any size (weights, biases).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Constant {
    pub dims: Vec<i64>,
    /// Exact bit patterns of an f32 tensor of at most [`SMALL_CONSTANT`] elements.
    pub f32_bits: Option<Vec<u32>>,
    /// Exact bit patterns of an f16 tensor of at most [`SMALL_CONSTANT`] elements (fp16 scales;
    /// kept apart from `f32_bits` so no f32 rule mistakes them for f32 scales).
    pub f16_bits: Option<Vec<u16>>,
    /// Values of an integer tensor of at most [`SMALL_CONSTANT`] elements.
    pub ints: Option<Vec<i64>>,
    /// Range of an integer tensor's values, whatever its size.
    pub int_range: Option<Interval>,
    /// The packed little-endian payload of an integer tensor of 8 bits or fewer too large for
    /// `ints` (a shared handle, not a copy): weights that a rule packs reads it themselves.
    pub raw_codes: Option<bytes::Bytes>,
}

/// Constants up to this many elements keep their values in the environment: scales, zero
/// points, and the weights that fusion proofs read channel by channel.
pub const SMALL_CONSTANT: usize = 1 << 22;

/// What the model says about one value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValueFacts {
    pub name: String,
    pub dtype: Option<DataType>,
    pub shape: Option<Vec<Dim>>,
    pub constant: Option<Constant>,
    /// Set for constants qdqc creates (an explicit zero point, a lookup table): the little-endian
    /// bytes of a tensor of `dtype` and the dims in `constant`.
    pub created: Option<Vec<u8>>,
}

/// What the region needs to know about one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TagFacts {
    /// Position of the node in its graph's node list; for a node qdqc creates, the position of
    /// the authored node whose place it takes (it keeps the graph's order there).
    pub node: usize,
    /// Whether qdqc created the node (a proven fusion) rather than the author.
    pub created: bool,
    /// Its attributes that are plain values (graph and tensor attributes are left out: authored
    /// nodes are emitted from their protobuf, which keeps them).
    pub attributes: Vec<Attribute>,
    pub op_type: String,
    pub domain: String,
    pub name: String,
    /// Number of inputs as authored: lifting pads an omitted trailing zero point of Q/DQ with
    /// `absent` so rules see one shape; emission trims back to this.
    pub arity: usize,
    /// Values of the node's outputs, in order (`None` for omitted outputs).
    pub outputs: Vec<Option<ValueRef>>,
    /// `axis` and `block_size` attributes, for Q/DQ.
    pub axis: Option<i64>,
    pub block_size: Option<i64>,
    /// `output_dtype` attribute of QuantizeLinear (opset 21+), 0 when absent.
    pub output_dtype: i64,
}

/// The region environment: every value and node a region's e-graph refers to by handle.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub values: Vec<ValueFacts>,
    pub tags: Vec<TagFacts>,
    /// Values of the region read outside it (by another region, a subgraph or as a graph
    /// output): readers a rule cannot see in the e-graph.
    pub escaping: Vec<ValueRef>,
    /// The model's default-domain opset: a node a rule creates must exist in it (blocked
    /// DequantizeLinear needs 21).
    pub opset: i64,
}

impl Env {
    pub fn value(&self, v: ValueRef) -> &ValueFacts {
        &self.values[v.0 as usize]
    }

    pub fn tag(&self, t: NodeTag) -> &TagFacts {
        &self.tags[t.0 as usize]
    }
}

/// Quantization parameters of a Q or DQ with constant scale and zero point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantParams {
    /// Scale bit patterns: one for per-tensor, one per channel or block otherwise.
    pub scale: Vec<u32>,
    pub scale_dims: Vec<i64>,
    /// Zero points, same length as `scale`; zeros when the input is omitted.
    pub zero_point: Vec<i64>,
    pub axis: i64,
    pub block_size: i64,
    /// Type of the integer codes.
    pub code_type: DataType,
}

/// Facts of one e-class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub dtype: Option<DataType>,
    pub shape: Option<Vec<Dim>>,
    pub quant: Option<QuantParams>,
    /// Range of the integer values this e-class can hold.
    pub codes: Option<Interval>,
    /// Facts of each output, for multi-output op e-classes (read by `proj`).
    pub outputs: Vec<Facts>,
    /// Leaf payloads, so conditions can read a child's handle without scanning nodes.
    pub leaf: Option<Op>,
}

impl Facts {
    fn of_value(v: &ValueFacts) -> Facts {
        let range = v.dtype.and_then(crate::tensor::int_range).map(|(lo, hi)| Interval { lo, hi });
        let constant = v.constant.as_ref().and_then(|c| c.int_range);
        Facts {
            dtype: v.dtype,
            shape: v.shape.clone(),
            codes: match (range, constant) {
                (Some(r), Some(c)) => Some(r.intersect(c)),
                (r, c) => r.or(c),
            },
            ..Facts::default()
        }
    }
}

/// The analysis: holds the region environment so `make` can resolve handles.
#[derive(Default)]
pub struct QdqAnalysis {
    pub env: Env,
}

pub type QdqEGraph = EGraph<Term, QdqAnalysis>;

impl QdqAnalysis {
    fn tag_of(egraph: &QdqEGraph, term: &Term) -> Option<NodeTag> {
        match egraph[term.tag_child()?].data.leaf {
            Some(Op::Tag(t)) => Some(t),
            _ => None,
        }
    }

    /// Scale and zero point of a Q/DQ term, when both are constants of the environment.
    fn quant_params(egraph: &QdqEGraph, term: &Term, tag: &TagFacts) -> Option<QuantParams> {
        let env = &egraph.analysis.env;
        let constant = |id: Id| match egraph[id].data.leaf {
            Some(Op::Value(v)) => env.value(v).constant.as_ref().map(|c| (env.value(v), c)),
            _ => None,
        };
        let (scale_value, scale) = constant(*term.args.get(2)?)?;
        let bits = scale.f32_bits.clone()?;
        let (zero_point, code_type) = match term.args.get(3).map(|&z| (z, egraph[z].data.leaf)) {
            Some((_, Some(Op::Absent))) | None => (vec![0; bits.len()], None),
            Some((z, _)) => {
                let (zv, zc) = constant(z)?;
                (zc.ints.clone()?, zv.dtype)
            }
        };
        let code_type = match term.op {
            Op::Dequantize => egraph[*term.args.get(1)?].data.dtype.or(code_type)?,
            _ => code_type.or_else(|| DataType::try_from(tag.output_dtype as i32).ok().filter(|d| *d != DataType::Undefined)).unwrap_or(DataType::Uint8),
        };
        Some(QuantParams {
            scale: bits,
            scale_dims: scale_value.constant.as_ref().map(|c| c.dims.clone()).unwrap_or_default(),
            zero_point,
            axis: tag.axis.unwrap_or(1),
            block_size: tag.block_size.unwrap_or(0),
            code_type,
        })
    }
}

impl Analysis<Term> for QdqAnalysis {
    type Data = Facts;

    fn make(egraph: &mut QdqEGraph, term: &Term, _id: Id) -> Facts {
        let env = &egraph.analysis.env;
        match term.op {
            Op::Value(v) => Facts { leaf: Some(term.op), ..Facts::of_value(env.value(v)) },
            Op::Tag(_) | Op::Index(_) | Op::Absent => Facts { leaf: Some(term.op), ..Facts::default() },
            Op::Proj => {
                let index = match egraph[term.args[0]].data.leaf {
                    Some(Op::Index(i)) => i as usize,
                    _ => return Facts::default(),
                };
                egraph[term.args[1]].data.outputs.get(index).cloned().unwrap_or_default()
            }
            Op::Dequantize | Op::Quantize | Op::Float(_) | Op::Opaque | Op::Kernel => {
                let Some(tag) = Self::tag_of(egraph, term) else { return Facts::default() };
                let tag = env.tag(tag);
                let outputs: Vec<Facts> = tag.outputs.iter().map(|o| o.map(|v| Facts::of_value(env.value(v))).unwrap_or_default()).collect();
                let quant = match term.op {
                    Op::Dequantize | Op::Quantize => Self::quant_params(egraph, term, tag),
                    _ => None,
                };
                let mut facts = if outputs.len() == 1 { outputs[0].clone() } else { Facts { outputs, ..Facts::default() } };
                if term.op == Op::Quantize
                    && let Some(q) = &quant
                {
                    let (lo, hi) = crate::tensor::int_range(q.code_type).unwrap_or((i64::MIN, i64::MAX));
                    facts.dtype = Some(q.code_type);
                    facts.codes = Some(Interval { lo, hi });
                }
                if term.op == Op::Dequantize {
                    // A DQ's shape is its input's, whatever value_info says.
                    // Arity is checked at load: x and scale are always there.
                    facts.shape = facts.shape.or_else(|| egraph[term.args[1]].data.shape.clone());
                    facts.dtype = facts.dtype.or(egraph[term.args[2]].data.dtype);
                }
                facts.quant = quant;
                facts
            }
        }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        // Equal terms satisfy both sets of facts: keep what either knows, intersect ranges.
        let mut changed_a = false;
        let mut changed_b = false;
        macro_rules! join {
            ($field:ident) => {
                match (&a.$field, b.$field) {
                    (None, Some(x)) => {
                        a.$field = Some(x);
                        changed_a = true;
                    }
                    (Some(_), None) => changed_b = true,
                    _ => {}
                }
            };
        }
        let codes = match (a.codes, b.codes) {
            (Some(x), Some(y)) => Some(x.intersect(y)),
            _ => None,
        };
        join!(dtype);
        join!(shape);
        join!(quant);
        join!(leaf);
        if let Some(c) = codes {
            changed_a |= a.codes != Some(c);
            changed_b |= b.codes != Some(c);
            a.codes = Some(c);
        } else {
            join!(codes);
        }
        if a.outputs.is_empty() && !b.outputs.is_empty() {
            a.outputs = b.outputs;
            changed_a = true;
        }
        DidMerge(changed_a, changed_b)
    }
}
