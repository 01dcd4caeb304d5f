//! The Q/DQ term language of qdqc's e-graphs.
//!
//! Every authored node becomes one e-node whose first child is a [`Op::Tag`] leaf naming it:
//! two identical nodes with different names therefore stay two e-classes (lifting never merges
//! what the author kept apart), and extraction can give back each node's name, attributes and
//! doc string. QuantizeLinear, DequantizeLinear and the float ops of the contract (§2.1) are
//! first-class operators that rules can match; every other op, custom domains included, is
//! `opaque` and carries its op type and attributes in its tag. Multi-output ops are reached
//! through `proj`. Tensor data never lives in an e-node: values outside the region are
//! [`Op::Value`] handles into the region's environment (see [`crate::analysis`]).

use egg::{FromOp, Id, Language};
use std::fmt;

/// Index of a value in the region environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueRef(pub u32);

/// Index of an authored (or synthesized) node in the region environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeTag(pub u32);

macro_rules! float_ops {
    ($($class:ident: [$($op:ident),* $(,)?]),* $(,)?) => {
        /// Float ops of the contract's op classes (docs/contract.md §2.1; default ONNX domain only).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum FloatOp { $($($op,)*)* }

        impl FloatOp {
            pub fn from_name(name: &str) -> Option<FloatOp> {
                match name { $($(stringify!($op) => Some(FloatOp::$op),)*)* _ => None }
            }
            pub fn name(self) -> &'static str {
                match self { $($(FloatOp::$op => stringify!($op),)*)* }
            }
            /// The contract's op class, which decides how a rewrite must prove exactness.
            pub fn class(self) -> OpClass {
                match self { $($(FloatOp::$op => OpClass::$class,)*)* }
            }
        }
    };
}

/// How the contract (docs/contract.md §2.1) treats an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpClass {
    /// One correct rounding per element: deterministic.
    Elementwise,
    /// Moves or selects elements without arithmetic.
    DataMovement,
    /// Selects by order: commutes with Q/DQ for positive scales.
    Monotone,
    /// Sums of products: deterministic only when every partial sum is exact.
    Reduction,
    /// An opaque function fixed by the runtime.
    Library,
}

float_ops! {
    Elementwise: [Add, Sub, Mul, Div, Neg, Abs, Relu, Max, Min, Clip, Where, Sqrt,
                  Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Cast],
    DataMovement: [Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Expand, Tile, Slice, Gather,
                   GatherElements, DepthToSpace, SpaceToDepth, Split, Concat, Resize, Pad, Identity],
    Monotone: [MaxPool, ReduceMax, ReduceMin, ArgMax, ArgMin],
    Reduction: [Conv, ConvTranspose, MatMul, Gemm, AveragePool, GlobalAveragePool, ReduceSum,
                ReduceMean, Einsum],
    Library: [Sigmoid, Tanh, Exp, Log, Erf, Gelu, Softmax, LayerNormalization, Pow, LeakyRelu,
              HardSigmoid, HardSwish],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Leaf: a value defined outside the region (graph input, initializer, outer-scope value or
    /// another region's output).
    Value(ValueRef),
    /// Leaf: the identity of a node; first child of every op node.
    Tag(NodeTag),
    /// Leaf: an output position, first child of `proj`.
    Index(u32),
    /// Leaf: an omitted optional input.
    Absent,
    /// `(proj index tuple)`: one output of a multi-output op.
    Proj,
    /// `(dq tag x scale zero_point)`; the zero point may be `absent`.
    Dequantize,
    /// `(q tag x scale zero_point)`.
    Quantize,
    /// `(Conv tag x w b)`, inputs as authored.
    Float(FloatOp),
    /// `(opaque tag inputs..)`: any other op; its type and attributes live in the tag.
    Opaque,
    /// `(kernel tag inputs..)`: a node qdqc creates (a fused kernel, an op on codes); its type,
    /// domain and attributes live in the tag.
    Kernel,
}

/// One e-node: an operator and its children.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term {
    pub op: Op,
    pub args: Box<[Id]>,
}

impl Op {
    /// Whether this is a node of the graph (as opposed to a leaf or a projection).
    pub fn is_node(self) -> bool {
        matches!(self, Op::Dequantize | Op::Quantize | Op::Float(_) | Op::Opaque | Op::Kernel)
    }
}

impl Term {
    pub fn leaf(op: Op) -> Term {
        Term { op, args: Box::new([]) }
    }

    pub fn new(op: Op, args: Vec<Id>) -> Term {
        Term { op, args: args.into_boxed_slice() }
    }

    /// The tag of an op node (its first child's leaf is looked up by the caller).
    pub fn tag_child(&self) -> Option<Id> {
        if self.op.is_node() { self.args.first().copied() } else { None }
    }
}

impl Language for Term {
    type Discriminant = Op;

    fn discriminant(&self) -> Op {
        self.op
    }

    fn matches(&self, other: &Self) -> bool {
        self.op == other.op && self.args.len() == other.args.len()
    }

    fn children(&self) -> &[Id] {
        &self.args
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.args
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Value(v) => write!(f, "v{}", v.0),
            Op::Tag(t) => write!(f, "t{}", t.0),
            Op::Index(i) => write!(f, "#{i}"),
            Op::Absent => f.write_str("absent"),
            Op::Proj => f.write_str("proj"),
            Op::Dequantize => f.write_str("dq"),
            Op::Quantize => f.write_str("q"),
            Op::Float(op) => f.write_str(op.name()),
            Op::Opaque => f.write_str("opaque"),
            Op::Kernel => f.write_str("kernel"),
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.op.fmt(f)
    }
}

/// Parse error of a pattern operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOp(pub String);

/// Patterns name operators as they print: `dq`, `q`, `proj`, `absent`, `opaque`, float op names,
/// and `#k` for output positions. Handles (`v3`, `t3`) are region-local and never appear in rules.
impl FromOp for Term {
    type Error = UnknownOp;

    fn from_op(op: &str, children: Vec<Id>) -> Result<Self, Self::Error> {
        let parsed = match op {
            "dq" => Op::Dequantize,
            "q" => Op::Quantize,
            "proj" => Op::Proj,
            "absent" => Op::Absent,
            "opaque" => Op::Opaque,
            "kernel" => Op::Kernel,
            _ => match op.strip_prefix('#').and_then(|i| i.parse().ok()) {
                Some(i) => Op::Index(i),
                None => Op::Float(FloatOp::from_name(op).ok_or_else(|| UnknownOp(op.to_string()))?),
            },
        };
        Ok(Term::new(parsed, children))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_the_catalog_ops() {
        let p: egg::Pattern<Term> = "(q ?tq (Conv ?tc (dq ?t1 ?x ?sx ?zx) (dq ?t2 ?w ?sw ?zw)) ?sy ?zy)".parse().unwrap();
        assert_eq!(p.to_string(), "(q ?tq (Conv ?tc (dq ?t1 ?x ?sx ?zx) (dq ?t2 ?w ?sw ?zw)) ?sy ?zy)");
        assert!("(Frobnicate ?x)".parse::<egg::Pattern<Term>>().is_err());
    }

    #[test]
    fn classes_follow_the_spec_table() {
        assert_eq!(FloatOp::from_name("Conv").map(FloatOp::class), Some(OpClass::Reduction));
        assert_eq!(FloatOp::from_name("Transpose").map(FloatOp::class), Some(OpClass::DataMovement));
        assert_eq!(FloatOp::from_name("Softmax").map(FloatOp::class), Some(OpClass::Library));
        assert_eq!(FloatOp::from_name("QLinearConv"), None);
    }
}
