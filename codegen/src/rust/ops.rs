//! Each lowered node becomes one [`Op`]: the Rust-kernel meaning of the created node (QLinearConv,
//! QGemm, … with correctly rounded requantization) or of the authored node. Parameters that are
//! constants (scales, zero points, weights, attributes) are read here, at generation time; an
//! op, attribute or element type the backend does not support is an error naming the node.

use super::values::{Constant, Elem, Extent, Values};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;

/// Per-tensor quantization parameters: the scale's f32 bits and the zero point.
#[derive(Clone, Copy, Debug)]
pub struct Q {
    pub scale: u32,
    pub zero_point: i32,
}

/// A QLinearAdd/Mul whose operands are a code tensor and a unary table of it: `mul`, the
/// operands' and the output's parameters, whether the source codes are operand A, and the table's
/// code type.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    pub mul: bool,
    pub a: Q,
    pub b: Q,
    pub y: Q,
    pub source_first: bool,
    pub mid: Elem,
}

/// Window geometry of a convolution or a pool.
#[derive(Clone, Debug)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Begins then ends (ONNX order).
    pub pads: Vec<usize>,
    pub ceil_mode: bool,
}

/// A requantizing integer kernel's parameters: weights (a constant), their zero points and
/// scales, the input's and output's parameters, the bias codes.
#[derive(Clone, Debug)]
pub struct Integer {
    pub weights: String,
    pub weight_elem: Elem,
    pub weight_zps: Vec<i64>,
    pub weight_scales: Vec<u32>,
    pub x: Q,
    pub y: Q,
    pub bias: Option<String>,
    /// The bias's own scale(s) (f32 bits): the tenth input qdqc's rules add for this target;
    /// empty for a node as ONNX defines it (bias at `sx·sw`).
    pub bias_scales: Vec<u32>,
    pub channels: usize,
}

/// The A8W8 group's parameters ([`Kind::A8W8`]): `x_scales`/`x_zps` one per row parameter
/// (one: per tensor), weights `[k][n]` (`[n][k]` with `trans_b`).
#[derive(Clone, Debug)]
pub struct A8W8 {
    pub weights: String,
    pub weight_elem: Elem,
    pub weight_zps: Vec<i64>,
    pub weight_scales: Vec<u32>,
    pub x_scales: Vec<u32>,
    pub x_zps: Vec<i64>,
    pub inner: usize,
    pub y: Q,
    pub bias: Option<String>,
    pub bias_scales: Vec<u32>,
    pub k: usize,
    pub n: usize,
    pub trans_b: bool,
    /// No Q: f32 output, the correctly rounded exact value (`y` unused).
    pub float_output: bool,
}

/// A weight-only MatMul's constant operand, packed (`qdqc_kernels::float::weight_only::pack`).
#[derive(Clone, Debug)]
pub struct WeightOnly {
    /// `qdqc_kernels::float::weight_only::CodeType` variant name.
    pub code: &'static str,
    pub k: usize,
    pub n: usize,
    /// Rows of K per parameter block.
    pub block: usize,
    pub codes: Vec<u8>,
    /// `[panel][k / block][64]`, f32 bit patterns.
    pub scales: Vec<u32>,
    pub zero_points: Vec<u32>,
}

/// The `quantize_dynamic` group's constant part ([`Kind::Dynamic`]): weights `[k][n]` and their
/// parameters; the activation's come from DynamicQuantizeLinear at run time.
#[derive(Clone, Debug)]
pub struct Dynamic {
    pub weights: String,
    pub weight_elem: Elem,
    pub weight_zps: Vec<i64>,
    pub weight_scales: Vec<u32>,
    pub k: usize,
    pub n: usize,
    /// `real`: the correctly rounded f32 of `C·sx·sw`; else the graph's `fl(f32(C)·fl(sx·sw))`.
    pub correctly_rounded: bool,
}

#[derive(Clone, Debug)]
pub enum Kind {
    /// QuantizeLinear: f32 → codes, ONNX Runtime's arithmetic.
    Quantize { axis: usize, scales: Vec<u32>, zps: Vec<i64> },
    /// DequantizeLinear: codes → f32.
    Dequantize { axis: usize, scales: Vec<u32>, zps: Vec<i64> },
    /// QuantizeLinear whose scale (and zero point) are computed at run time (a row's parameters
    /// made by the graph's own ops, `--contract exact`), per tensor, per axis or blocked along
    /// the last axis (`block` > 0), ONNX Runtime's arithmetic (`codes::qdq::quantize_by`);
    /// inputs x, scales and the optional zero points.
    QuantizeBy { axis: usize, block: usize },
    /// Cast f32 → u8/i8: truncation, an element out of range a run-time error (`codes::qdq::cast_to_codes`).
    CastToCode,
    /// QLinearConv.
    Conv { int: Integer, groups: usize, window: Window },
    /// QGemm / QLinearMatMul with constant weights: `[m][k] × [k][n]`.
    Gemm { int: Integer, k: usize, n: usize, trans_b: bool },
    /// qdqc's A8W8MatMul: per-row activation parameters (row `m` reads `(m / inner) % T`),
    /// weights per tensor or per column, bias at its own scale (`codegen/kernels/src/a8w8.rs`).
    A8W8(Box<A8W8>),
    /// QLinearMatMul of two code tensors (attention; neither a constant): ONNX MatMul shapes,
    /// i32 sums bounded by K, the certified requantization (`qdqc_kernels::matmul_codes`).
    MatMulCodes { a: Q, b: Q, y: Q },
    /// qdqc's DynamicMatMul: DynamicQuantizeLinear of the f32 activation, the exact i32 GEMM,
    /// the float epilogue (`codegen/kernels/src/dynamic.rs`).
    Dynamic(Box<Dynamic>),
    /// qdqc's RowDynamicMatMul: each row quantized by the graph's own ops (the recipe), the exact
    /// i32 GEMM, the correctly rounded f32 output (`rewrites/src/rules/row_dynamic.rs`).
    RowDynamic(Box<Dynamic>, qdqc_kernels::dynamic::Recipe),
    /// QLinearAdd / QLinearMul.
    Binary { mul: bool, a: Q, b: Q, y: Q },
    /// QLinearAveragePool.
    AveragePool { window: Window, count_include_pad: bool, x: Q, y: Q },
    /// QLinearGlobalAveragePool.
    GlobalAveragePool { x: Q, y: Q },
    /// MaxPool on codes.
    MaxPool { window: Window },
    /// Concat, requantizing each input whose parameters differ from the output's (QLinearConcat).
    Concat { axis: usize, requant: Vec<Option<(Q, Q)>> },
    /// Flatten, Reshape, Squeeze, Unsqueeze: the same elements, another shape.
    Reshape,
    /// A lookup table (`Gather(table, Cast(codes → int32))`, rule `lookup-table`): 256 output
    /// codes indexed by the input code's bit pattern, which is where ONNX's Gather reads an int8
    /// code (a negative index counts from the end).
    Lut { table: Vec<i64> },
    /// A unary chain on codes, `DequantizeLinear(x) → steps → QuantizeLinear(y)`, as a table the
    /// generated `Model::new` fills by running the steps' kernels on the 256 codes (`chains.rs`).
    /// `steps`: `FloatUnary` / `FloatMap` kinds in order; `pair`: a QLinearAdd/Mul of the source
    /// codes with the chain's codes (SiLU's `x · sigmoid(x)`) folded into the same table.
    UnaryTable { x: Q, steps: Vec<Kind>, y: Q, pair: Option<Pair> },
    /// A connected set of table and QLinearAdd/Mul ops that computes one function of its one
    /// input's codes, as one table the generated `Model::new` fills by running the set's kernels
    /// on the 256 codes (`code_sets.rs`).
    CodeTable { steps: Vec<super::code_sets::Step> },
    /// Resize: nearest (codes or f32) or linear (f32), by constant scales or sizes; the
    /// coordinate transform and nearest mode as variant names of the kernel crate's enums.
    Resize { linear: bool, transform: &'static str, nearest: &'static str, scales: Option<Vec<u32>>, sizes: Option<Vec<i64>> },
    /// f32 Add/Sub/Mul/Div/Max/Min with broadcasting: one IEEE operation per element; Pow:
    /// `float::math::pow` (`float::elementwise::Binary` variant name).
    FloatBinary { op: &'static str },
    /// A `FloatBinary` whose second operand is a constant f32 scalar (`bits`), as a step of a
    /// `UnaryTable` chain (`chains.rs`: `x³` in tanh-GELU's `Pow(x, 3)`).
    FloatScalar { op: &'static str, bits: u32 },
    /// f32 Relu / HardSigmoid (`float::elementwise::Map`, as Rust text).
    FloatMap { map: String },
    /// f32 Conv (1–3-D), inputs x, w and an optional bias.
    FloatConv { groups: usize, window: Window },
    /// f32 ConvTranspose (1–3-D, no `output_shape`), inputs x, w and an optional bias.
    FloatConvTranspose { groups: usize, window: Window, output_padding: Vec<usize> },
    /// f32 Gemm, inputs a, b and an optional c.
    FloatGemm { alpha: u32, beta: u32, trans_a: bool, trans_b: bool },
    /// f32 AveragePool / MaxPool.
    FloatPool { max: bool, window: Window, count_include_pad: bool },
    /// f32 GlobalAveragePool.
    FloatGlobalAveragePool,
    /// f32 GlobalMaxPool (a max is exact: ORT's bits whatever the order, NaN aside).
    FloatGlobalMaxPool,
    /// f32 Sigmoid / Tanh / Exp / Log (`float::unary::Function`, variant name): f64 formula, one rounding.
    FloatUnary { function: &'static str },
    /// f32 Softmax along one axis (opset 13).
    Softmax { axis: i64 },
    /// DequantizeLinear → Softmax (last axis) → QuantizeLinear on 8-bit codes, one scale and zero
    /// point each side (`softmax_codes.rs`).
    SoftmaxCodes { x: Q, y: Q },
    /// f32 BatchNormalization (inference): inputs x, scale, B, mean, var.
    BatchNorm { epsilon: u32 },
    /// f32 LayerNormalization over the axes from `axis` on (stash_type 1): inputs x, scale and an
    /// optional B, each the normalized axes' shape; the output Y only.
    LayerNorm { axis: usize, epsilon: u32 },
    /// f32 ReduceSum / ReduceMean / ReduceMax / ReduceMin over constant axes (`float::reduce::Reduce` variant).
    Reduce { reduce: &'static str, axes: Vec<usize> },
    /// f32 MatMul (numpy broadcasting over batch axes), inputs a and b.
    MatMul,
    /// f32 MatMul of an activation by a dequantized constant `k × n` weight of 4- or 8-bit codes
    /// (per tensor, per column, per row or blocked): the codes packed at generation time and
    /// decoded where the GEMV reads them (`float::weight_only`), inputs a and the weight's value.
    WeightOnly(Box<WeightOnly>),
    /// DequantizeLinear whose scales (and zero points) are computed at run time (the gathered
    /// rows' parameters after `gather-before-dequantize`), per axis or blocked (`block` > 0),
    /// inputs codes, scales and the optional zero points.
    DequantizeBy { axis: usize, block: usize },
    /// Gather by int64 indices known at run time from a dequantized rank-2 constant (input 0) that
    /// is stored packed as a weight-only operand (shared with the MatMuls that read it): only the
    /// gathered elements are decoded.
    GatherWeights { axis: usize, weights: Box<WeightOnly> },
    /// Equal of two integer tensors (broadcasting) read only by Casts to f32: 1.0 / 0.0
    /// (`codes::compare::equal_as_f32`); each such Cast is then a copy ([`Kind::Reshape`]).
    EqualAsF32,
    /// `Where(Equal(p, q), a, b)`, inputs p, q, a, b (`codes::compare::select_equal`).
    SelectEqual,
    /// Transpose (codes or f32).
    Transpose { perm: Vec<usize> },
    /// Slice by constant starts, ends, axes and steps (codes or f32).
    Slice { starts: Vec<i64>, ends: Vec<i64>, axes: Vec<i64>, steps: Vec<i64> },
    /// Pad by constant pads (begins then ends; negative crops) in mode constant (the value: the
    /// optional constant input's element as Rust literal text, else zero), edge or reflect; any
    /// element type (`codes::movement::pad`, a copy: ONNX Runtime's values).
    Pad { pads: Vec<i64>, mode: &'static str, value: String },
    /// Expand to a constant shape (codes or f32).
    Expand,
    /// Gather by constant indices (codes or f32).
    Gather { axis: usize, indices: Vec<i64>, indices_shape: Vec<usize> },
    /// Gather by int64 indices known at run time (the second input: token ids into an embedding
    /// table of codes, after `gather-before-dequantize`); an index out of range is a run-time error.
    GatherBy { axis: usize },
}

/// One node of the generated program.
#[derive(Clone, Debug)]
pub struct Op {
    pub node: String,
    pub kind: Kind,
    /// Tensors read at run time (graph inputs, intermediates, constant tensors).
    pub inputs: Vec<String>,
    pub output: String,
    pub elem: Elem,
}

impl Kind {
    /// Whether the op's kernel reads input `i` as a `float::dq::Operand`: a dequantized constant
    /// there is stored as its codes and decoded where it is read, a block, a run or an element at
    /// a time (no float copy of the weight at run time, not even for one call). The float Conv and
    /// ConvTranspose (weights, bias), Gemm (A, B, C), MatMul (both operands), element-wise
    /// arithmetic (both operands), BatchNormalization's four parameters and LayerNormalization's
    /// scale and bias.
    pub fn decodes(&self, i: usize) -> bool {
        match self {
            Kind::FloatConv { .. } | Kind::FloatConvTranspose { .. } => (1..=2).contains(&i),
            Kind::FloatGemm { .. } => i <= 2,
            Kind::MatMul | Kind::FloatBinary { .. } => i <= 1,
            Kind::BatchNorm { .. } => (1..=4).contains(&i),
            Kind::LayerNorm { .. } => (1..=2).contains(&i),
            Kind::WeightOnly(_) => i == 1,
            Kind::GatherWeights { .. } => i == 0,
            _ => false,
        }
    }
}

/// Reads constant inputs and attributes of one node.
pub struct Node<'a, 'm> {
    pub name: &'a str,
    pub op_type: &'a str,
    pub inputs: &'a [String],
    pub outputs: &'a [String],
    pub attrs: &'a [Attribute],
    pub values: &'a Values<'m>,
    /// Element types of the values computed so far and of the graph inputs.
    pub elems: &'a std::collections::BTreeMap<String, Elem>,
}

impl Node<'_, '_> {
    fn input(&self, i: usize) -> Result<&str, String> {
        self.inputs.get(i).map(String::as_str).filter(|s| !s.is_empty()).ok_or_else(|| format!("input {i} missing"))
    }

    fn constant(&self, i: usize) -> Result<Constant, String> {
        let name = self.input(i)?;
        if !self.values.is_constant(name) {
            return Err(format!("input {i} ('{name}') must be a constant for the Rust target"));
        }
        self.values.constant(name)
    }

    /// A constant scale input's elements (f32 bits; an f16 scale widened exactly).
    fn scales(&self, i: usize) -> Result<Vec<u32>, String> {
        let name = self.input(i)?;
        if !self.values.is_constant(name) {
            return Err(format!("input {i} ('{name}') must be a constant for the Rust target"));
        }
        self.values.scale_bits(name)
    }

    fn scale(&self, i: usize) -> Result<u32, String> {
        match self.scales(i)?.as_slice() {
            [s] => Ok(*s),
            _ => Err(format!("input {i}: a per-tensor f32 scale is needed")),
        }
    }

    /// A zero point and the code type it gives (absent: u8 zero).
    fn zero_point(&self, i: usize) -> Result<(i32, Elem), String> {
        if self.inputs.get(i).is_none_or(|s| s.is_empty()) {
            return Ok((0, Elem::U8));
        }
        let c = self.constant(i)?;
        let elem = code_elem(c.dtype).ok_or_else(|| format!("input {i}: zero point of type {} (u8/i8 only)", c.dtype.as_str_name()))?;
        match c.ints.as_slice() {
            [z] => Ok((*z as i32, elem)),
            _ => Err(format!("input {i}: a per-tensor zero point is needed")),
        }
    }

    fn q(&self, scale: usize, zp: usize) -> Result<(Q, Elem), String> {
        let (zero_point, elem) = self.zero_point(zp)?;
        Ok((Q { scale: self.scale(scale)?, zero_point }, elem))
    }

    fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(v)) => Ok(*v),
            Some(_) => Err(format!("attribute {name} is not an int")),
        }
    }

    fn string(&self, name: &str, default: &str) -> Result<String, String> {
        match self.attr(name) {
            None => Ok(default.to_string()),
            Some(AttrValue::Str(v)) => Ok(v.clone()),
            Some(_) => Err(format!("attribute {name} is not a string")),
        }
    }

    fn float(&self, name: &str, default: f32) -> Result<f32, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(_) => Err(format!("attribute {name} is not a float")),
        }
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<usize>>, String> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => {
                v.iter().map(|&x| usize::try_from(x).map_err(|_| format!("attribute {name}: negative entry {x}"))).collect::<Result<_, _>>().map(Some)
            }
            Some(_) => Err(format!("attribute {name} is not a list of ints")),
        }
    }

    /// A list of ints that may be negative (axes, perm).
    fn signed(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(_) => Err(format!("attribute {name} is not a list of ints")),
        }
    }

    /// Refuses attributes the backend does not implement.
    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        match self.attrs.iter().find(|a| !allowed.contains(&a.name.as_str())) {
            Some(a) => Err(format!("attribute {} is not supported by the Rust target", a.name)),
            None => Ok(()),
        }
    }

    fn rank(&self, i: usize) -> Result<usize, String> {
        Ok(self.values.shape(self.input(i)?)?.len())
    }

    fn window(&self, spatial: usize, kernel: Vec<usize>) -> Result<Window, String> {
        match self.attr("auto_pad") {
            None => {}
            Some(AttrValue::Str(s)) if s == "NOTSET" => {}
            Some(_) => return Err("auto_pad other than NOTSET is not supported by the Rust target".into()),
        }
        let w = Window {
            kernel,
            strides: self.ints("strides")?.unwrap_or(vec![1; spatial]),
            dilations: self.ints("dilations")?.unwrap_or(vec![1; spatial]),
            pads: self.ints("pads")?.unwrap_or(vec![0; 2 * spatial]),
            ceil_mode: self.int("ceil_mode", 0)? != 0,
        };
        if w.kernel.len() != spatial || w.strides.len() != spatial || w.dilations.len() != spatial || w.pads.len() != 2 * spatial {
            return Err(format!("window attributes do not match the {spatial} spatial axes"));
        }
        Ok(w)
    }
}

/// qdqc's A8W8MatMul (`rewrites/src/rules/a8w8.rs`): inputs x, sx, zx, w, sw, zw, sy, zy[, b, sb].
fn a8w8(n: &Node) -> Result<A8W8, String> {
    n.only(&["transB", "rows_inner", "float_output"])?;
    let float_output = n.int("float_output", 0)? != 0;
    let x_scales = n.scales(1)?;
    let x_zps = n.constant(2)?.ints;
    let x_zps = if x_zps.len() == 1 { vec![x_zps[0]; x_scales.len()] } else { x_zps };
    if x_zps.len() != x_scales.len() {
        return Err(format!("{} activation scales, {} zero points", x_scales.len(), x_zps.len()));
    }
    let w = n.constant(3)?;
    let weight_elem = code_elem(w.dtype).ok_or("weights must be u8 or i8")?;
    let trans_b = n.int("transB", 0)? != 0;
    let [r, c] = w.dims[..] else { return Err("weights of rank other than 2".into()) };
    let (k, nn) = if trans_b { (c, r) } else { (r, c) };
    // The float output has no y parameters (and no bias).
    let y = if float_output { Q { scale: 1f32.to_bits(), zero_point: 0 } } else { n.q(6, 7)?.0 };
    let bias = n.inputs.get(8).filter(|s| !s.is_empty()).cloned();
    let bias_scales = if bias.is_some() { n.scales(9)? } else { Vec::new() };
    let inner = usize::try_from(n.int("rows_inner", 1)?).ok().filter(|&i| i > 0).ok_or("rows_inner must be positive")?;
    Ok(A8W8 {
        weights: n.input(3)?.to_string(),
        weight_elem,
        weight_zps: n.constant(5)?.ints,
        weight_scales: n.scales(4)?,
        x_scales,
        x_zps,
        inner,
        y,
        bias,
        bias_scales,
        k,
        n: nn,
        trans_b,
        float_output,
    })
}

/// qdqc's DynamicMatMul (`rewrites/src/rules/dynamic.rs`): inputs x (f32), w, sw, zw.
fn dynamic(n: &Node) -> Result<Dynamic, String> {
    n.only(&["correctly_rounded"])?;
    dynamic_weights(n, n.int("correctly_rounded", 0)? != 0)
}

/// qdqc's RowDynamicMatMul (`rewrites/src/rules/row_dynamic.rs`): inputs x (f32), w, sw, zw;
/// the recipe's constants as attributes (f32 bit patterns), the output correctly rounded.
fn row_dynamic(n: &Node) -> Result<(Dynamic, qdqc_kernels::dynamic::Recipe), String> {
    n.only(&["symmetric", "signed", "divisor_bits", "floor_bits", "offset_bits", "clip_lo", "clip_hi"])?;
    let d = dynamic_weights(n, true)?;
    let bits = |name: &str| u32::try_from(n.int(name, -1)?).map_err(|_| format!("attribute {name}: not an f32 bit pattern"));
    let bound = |name: &str| i32::try_from(n.int(name, 0)?).map_err(|_| format!("attribute {name}: out of range"));
    let (signed, divisor) = (n.int("signed", 0)? != 0, bits("divisor_bits")?);
    let recipe = if n.int("symmetric", 0)? != 0 {
        qdqc_kernels::dynamic::Recipe::Symmetric { signed, divisor, floor: bits("floor_bits")? }
    } else {
        qdqc_kernels::dynamic::Recipe::Asymmetric { signed, divisor, offset: bits("offset_bits")?, lo: bound("clip_lo")?, hi: bound("clip_hi")? }
    };
    Ok((d, recipe))
}

/// The constant weights (input 1, `[K, N]` u8/i8) and their scales and zero points (inputs 2, 3:
/// one or one per column) of a dynamic MatMul.
fn dynamic_weights(n: &Node, correctly_rounded: bool) -> Result<Dynamic, String> {
    let w = n.constant(1)?;
    let weight_elem = code_elem(w.dtype).ok_or("weights must be u8 or i8")?;
    let [k, nn] = w.dims[..] else { return Err("weights of rank other than 2".into()) };
    let weight_scales = n.scales(2)?;
    let weight_zps = n.constant(3)?.ints;
    if ![1, nn].contains(&weight_scales.len()) || ![1, nn].contains(&weight_zps.len()) {
        return Err(format!("{} weight scales and {} zero points for {nn} columns", weight_scales.len(), weight_zps.len()));
    }
    Ok(Dynamic { weights: n.input(1)?.to_string(), weight_elem, weight_zps, weight_scales, k, n: nn, correctly_rounded })
}

fn code_elem(dt: DataType) -> Option<Elem> {
    Elem::of(dt).filter(|e| e.is_code())
}

/// The bias scale of a fused QLinearConv / QGemm from qdqc's rules (input 9), if any.
fn bias_scales(n: &Node) -> Result<Vec<u32>, String> {
    if n.inputs.get(9).is_some_and(|s| !s.is_empty()) { Ok(n.constant(9)?.f32_bits) } else { Ok(Vec::new()) }
}

/// The Rust-kernel op of one node, or why the backend does not support it.
pub fn lower(n: &Node) -> Result<Op, String> {
    let output = n.outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?.clone();
    if n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(format!("{} with more than one output is not supported by the Rust target", n.op_type));
    }
    let tensor = |i: usize| n.input(i).map(str::to_string);
    let (kind, inputs, elem) = match n.op_type {
        "QuantizeLinear" if !n.values.is_constant(n.input(1)?) || n.inputs.get(2).is_some_and(|z| !z.is_empty() && !n.values.is_constant(z)) => {
            n.only(&["axis", "block_size", "output_dtype", "saturate"])?;
            if !float_input(n, 0)? || !float_input(n, 1)? {
                return Err("QuantizeLinear of another type than f32 (x and scale) is not supported by the Rust target".into());
            }
            let rank = n.rank(0)?;
            let axis = axis(n.int("axis", 1)?, rank)?;
            let block = usize::try_from(n.int("block_size", 0)?).map_err(|_| "negative block_size")?;
            // ORT's blocked QuantizeLinear is MLAS's only along the last axis (`codes::qdq`).
            if block > 0 && axis + 1 != rank {
                return Err(format!("QuantizeLinear blocked along axis {axis} of a rank-{rank} input (only the last) is not supported by the Rust target"));
            }
            let inputs = n.inputs.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>();
            let declared = match n.int("output_dtype", 0)? {
                0 => None,
                t => Some(DataType::try_from(t as i32).ok().and_then(code_elem).ok_or_else(|| format!("output_dtype {t} (u8/i8 codes only)"))?),
            };
            let elem = match (inputs.len(), declared) {
                (3, d) => {
                    let z = code_input(n, 2)?;
                    if d.is_some_and(|d| d != z) {
                        return Err("output_dtype differs from the zero point's type".into());
                    }
                    z
                }
                (_, d) => d.unwrap_or(Elem::U8),
            };
            (Kind::QuantizeBy { axis, block }, inputs, elem)
        }
        "Cast" if float_input(n, 0)? => {
            n.only(&["to", "saturate"])?;
            let to = n.int("to", 0)?;
            let elem = DataType::try_from(to as i32)
                .ok()
                .and_then(code_elem)
                .ok_or_else(|| format!("Cast of f32 to type {to} is not supported by the Rust target (u8/i8 only)"))?;
            (Kind::CastToCode, vec![tensor(0)?], elem)
        }
        "QuantizeLinear" => {
            n.only(&["axis", "saturate"])?;
            let scales = n.constant(1)?.f32_bits;
            let (zps, elem) = match n.inputs.get(2).filter(|s| !s.is_empty()) {
                Some(_) => {
                    let c = n.constant(2)?;
                    (c.ints, code_elem(c.dtype).ok_or_else(|| format!("zero point of type {} (u8/i8 codes only)", c.dtype.as_str_name()))?)
                }
                None => (vec![0], Elem::U8),
            };
            // The axis only matters per axis (a per-tensor Q/DQ of a rank-1 value keeps axis = 1).
            let axis = match axis(n.int("axis", 1)?, n.rank(0)?) {
                Err(_) if scales.len() == 1 => 0,
                a => a?,
            };
            (Kind::Quantize { axis, scales, zps }, vec![tensor(0)?], elem)
        }
        "DequantizeLinear" if !n.values.is_constant(n.input(1)?) => {
            n.only(&["axis", "block_size"])?;
            code_input(n, 0)?;
            let axis = axis(n.int("axis", 1)?, n.rank(0)?)?;
            let block = usize::try_from(n.int("block_size", 0)?).map_err(|_| "negative block_size")?;
            let inputs = n.inputs.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>();
            if inputs.len() == 3 && elem_of(n, 2)? != elem_of(n, 0)? {
                return Err("zero points of another type than the codes".into());
            }
            (Kind::DequantizeBy { axis, block }, inputs, Elem::F32)
        }
        "DequantizeLinear" => {
            n.only(&["axis"])?;
            let scales = n.constant(1)?.f32_bits;
            let zps = if n.inputs.get(2).is_some_and(|s| !s.is_empty()) { n.constant(2)?.ints } else { vec![0] };
            // The axis only matters per axis (a per-tensor Q/DQ of a rank-1 value keeps axis = 1).
            let axis = match axis(n.int("axis", 1)?, n.rank(0)?) {
                Err(_) if scales.len() == 1 => 0,
                a => a?,
            };
            (Kind::Dequantize { axis, scales, zps }, vec![tensor(0)?], Elem::F32)
        }
        "QLinearConv" => {
            n.only(&["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"])?;
            let (x, _) = n.q(1, 2)?;
            let (y, elem) = n.q(6, 7)?;
            let w = n.constant(3)?;
            let weight_elem = code_elem(w.dtype).ok_or("weights must be u8 or i8")?;
            let channels = w.dims[0];
            let int = Integer {
                weights: tensor(3)?,
                weight_elem,
                weight_zps: n.constant(5)?.ints,
                weight_scales: n.scales(4)?,
                x,
                y,
                bias: n.inputs.get(8).filter(|s| !s.is_empty()).cloned(),
                bias_scales: bias_scales(n)?,
                channels,
            };
            let window = n.window(w.dims.len() - 2, w.dims[2..].to_vec())?;
            let groups = n.int("group", 1)? as usize;
            (Kind::Conv { int, groups, window }, vec![tensor(0)?], elem)
        }
        "QLinearMatMul" if !n.values.is_constant(n.input(3)?) => {
            n.only(&[])?;
            let (a, _) = n.q(1, 2)?;
            let (b, _) = n.q(4, 5)?;
            let (y, elem) = n.q(6, 7)?;
            (Kind::MatMulCodes { a, b, y }, vec![tensor(0)?, tensor(3)?], elem)
        }
        "QGemm" | "QLinearMatMul" => {
            let gemm = n.op_type == "QGemm";
            if gemm {
                n.only(&["transA", "transB", "alpha"])?;
                if n.int("transA", 0)? != 0 || !matches!(n.attr("alpha"), None | Some(AttrValue::Float(1.0))) {
                    return Err("QGemm with transA or alpha ≠ 1 is not supported by the Rust target".into());
                }
            } else {
                n.only(&[])?;
            }
            let (ys, yz) = if gemm { (7, 8) } else { (6, 7) };
            if n.inputs.get(ys).is_none_or(|s| s.is_empty()) {
                return Err("QGemm with a float output is not supported by the Rust target".into());
            }
            let (x, _) = n.q(1, 2)?;
            let (y, elem) = n.q(ys, yz)?;
            let w = n.constant(3)?;
            let weight_elem = code_elem(w.dtype).ok_or("weights must be u8 or i8")?;
            let trans_b = gemm && n.int("transB", 0)? != 0;
            let [r, c] = w.dims[..] else { return Err("weights of rank other than 2 are not supported by the Rust target".into()) };
            let (k, nn) = if trans_b { (c, r) } else { (r, c) };
            let int = Integer {
                weights: tensor(3)?,
                weight_elem,
                weight_zps: n.constant(5)?.ints,
                weight_scales: n.scales(4)?,
                x,
                y,
                bias: if gemm { n.inputs.get(6).filter(|s| !s.is_empty()).cloned() } else { None },
                bias_scales: if gemm { bias_scales(n)? } else { Vec::new() },
                channels: nn,
            };
            (Kind::Gemm { int, k, n: nn, trans_b }, vec![tensor(0)?], elem)
        }
        "A8W8MatMul" => {
            let a = a8w8(n)?;
            let elem = if a.float_output { Elem::F32 } else { n.zero_point(7)?.1 };
            (Kind::A8W8(Box::new(a)), vec![tensor(0)?], elem)
        }
        "DynamicMatMul" => (Kind::Dynamic(Box::new(dynamic(n)?)), vec![tensor(0)?], Elem::F32),
        "RowDynamicMatMul" => {
            let (d, recipe) = row_dynamic(n)?;
            (Kind::RowDynamic(Box::new(d), recipe), vec![tensor(0)?], Elem::F32)
        }
        "QLinearAdd" | "QLinearMul" => {
            n.only(&[])?;
            let (a, _) = n.q(1, 2)?;
            let (b, _) = n.q(4, 5)?;
            let (y, elem) = n.q(6, 7)?;
            (Kind::Binary { mul: n.op_type == "QLinearMul", a, b, y }, vec![tensor(0)?, tensor(3)?], elem)
        }
        "QLinearAveragePool" => {
            n.only(&["auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides", "channels_last", "dilations"])?;
            if n.int("channels_last", 0)? != 0 {
                return Err("channels_last is not supported by the Rust target".into());
            }
            let (x, _) = n.q(1, 2)?;
            let (y, elem) = n.q(3, 4)?;
            let kernel = n.ints("kernel_shape")?.ok_or("kernel_shape missing")?;
            let window = n.window(kernel.len(), kernel)?;
            (Kind::AveragePool { window, count_include_pad: n.int("count_include_pad", 0)? != 0, x, y }, vec![tensor(0)?], elem)
        }
        "QLinearGlobalAveragePool" => {
            n.only(&["channels_last"])?;
            if n.int("channels_last", 0)? != 0 {
                return Err("channels_last is not supported by the Rust target".into());
            }
            let (x, _) = n.q(1, 2)?;
            let (y, elem) = n.q(3, 4)?;
            (Kind::GlobalAveragePool { x, y }, vec![tensor(0)?], elem)
        }
        "MaxPool" if !float_input(n, 0)? => {
            n.only(&["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides", "storage_order"])?;
            let kernel = n.ints("kernel_shape")?.ok_or("kernel_shape missing")?;
            let window = n.window(kernel.len(), kernel)?;
            (Kind::MaxPool { window }, vec![tensor(0)?], code_input(n, 0)?)
        }
        "QLinearConcat" => {
            n.only(&["axis"])?;
            let (y, elem) = n.q(0, 1)?;
            let count = (n.inputs.len() - 2) / 3;
            let mut inputs = Vec::new();
            let mut requant = Vec::new();
            for i in 0..count {
                let (x, xe) = n.q(3 + 3 * i, 4 + 3 * i)?;
                if xe != elem {
                    return Err("QLinearConcat over inputs of another code type than the output is not supported by the Rust target".into());
                }
                inputs.push(tensor(2 + 3 * i)?);
                requant.push((x.scale != y.scale || x.zero_point != y.zero_point).then_some((x, y)));
            }
            let axis = axis(n.int("axis", 0)?, n.rank(2)?)?;
            (Kind::Concat { axis, requant }, inputs, elem)
        }
        "Concat" => {
            n.only(&["axis"])?;
            let elem = elem_of(n, 0)?;
            let inputs: Vec<String> = n.inputs.iter().filter(|s| !s.is_empty()).cloned().collect();
            let axis = axis(n.int("axis", 0)?, n.rank(0)?)?;
            (Kind::Concat { axis, requant: vec![None; inputs.len()] }, inputs, elem)
        }
        "Flatten" | "Reshape" | "Squeeze" | "Unsqueeze" | "Identity" => {
            n.only(&["axis", "allowzero", "axes"])?;
            (Kind::Reshape, vec![tensor(0)?], elem_of(n, 0)?)
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" if float_input(n, 0)? && n.inputs.len() == 2 && float_input(n, 1)? => {
            n.only(&[])?;
            let op = match n.op_type {
                "Add" => "Add",
                "Sub" => "Sub",
                "Mul" => "Mul",
                "Div" => "Div",
                "Pow" => "Pow",
                "Max" => "Max",
                _ => "Min",
            };
            (Kind::FloatBinary { op }, vec![tensor(0)?, tensor(1)?], Elem::F32)
        }
        "Relu" if float_input(n, 0)? => {
            n.only(&[])?;
            (Kind::FloatMap { map: "Map::Relu".into() }, vec![tensor(0)?], Elem::F32)
        }
        "HardSigmoid" if float_input(n, 0)? => {
            n.only(&["alpha", "beta"])?;
            let (alpha, beta) = (n.float("alpha", 0.2)?, n.float("beta", 0.5)?);
            let map = format!("Map::HardSigmoid {{ alpha: f32::from_bits({:#010x}), beta: f32::from_bits({:#010x}) }}", alpha.to_bits(), beta.to_bits());
            (Kind::FloatMap { map }, vec![tensor(0)?], Elem::F32)
        }
        "Conv" if float_input(n, 0)? => {
            n.only(&["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"])?;
            let ws = n.values.shape(n.input(1)?)?;
            let kernel = ws
                .get(2..)
                .unwrap_or_default()
                .iter()
                .map(|e| if let super::values::Extent::Fixed(v) = e { Ok(*v) } else { Err("symbolic kernel".to_string()) })
                .collect::<Result<Vec<_>, _>>()?;
            let window = n.window(kernel.len(), kernel)?;
            let mut inputs = vec![tensor(0)?, tensor(1)?];
            inputs.extend(n.inputs.get(2).filter(|s| !s.is_empty()).cloned());
            (Kind::FloatConv { groups: n.int("group", 1)? as usize, window }, inputs, Elem::F32)
        }
        "ConvTranspose" if float_input(n, 0)? => {
            // `output_shape` would pick pads from the input at run time: refused, as is auto_pad.
            n.only(&["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "output_padding"])?;
            let kernel = fixed_dims(n, 1)?.get(2..).unwrap_or_default().to_vec();
            let window = n.window(kernel.len(), kernel)?;
            let output_padding = n.ints("output_padding")?.unwrap_or(vec![0; window.kernel.len()]);
            if output_padding.len() != window.kernel.len() {
                return Err(format!("output_padding does not match the {} spatial axes", window.kernel.len()));
            }
            let mut inputs = vec![tensor(0)?, tensor(1)?];
            inputs.extend(n.inputs.get(2).filter(|s| !s.is_empty()).cloned());
            (Kind::FloatConvTranspose { groups: n.int("group", 1)? as usize, window, output_padding }, inputs, Elem::F32)
        }
        "Gemm" if float_input(n, 0)? => {
            n.only(&["transA", "transB", "alpha", "beta"])?;
            let mut inputs = vec![tensor(0)?, tensor(1)?];
            inputs.extend(n.inputs.get(2).filter(|s| !s.is_empty()).cloned());
            let kind = Kind::FloatGemm {
                alpha: n.float("alpha", 1.0)?.to_bits(),
                beta: n.float("beta", 1.0)?.to_bits(),
                trans_a: n.int("transA", 0)? != 0,
                trans_b: n.int("transB", 0)? != 0,
            };
            (kind, inputs, Elem::F32)
        }
        "AveragePool" | "MaxPool" if float_input(n, 0)? => {
            n.only(&["auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides", "dilations", "storage_order"])?;
            let kernel = n.ints("kernel_shape")?.ok_or("kernel_shape missing")?;
            let window = n.window(kernel.len(), kernel)?;
            let kind = Kind::FloatPool { max: n.op_type == "MaxPool", window, count_include_pad: n.int("count_include_pad", 0)? != 0 };
            (kind, vec![tensor(0)?], Elem::F32)
        }
        "GlobalAveragePool" if float_input(n, 0)? => (Kind::FloatGlobalAveragePool, vec![tensor(0)?], Elem::F32),
        "GlobalMaxPool" if float_input(n, 0)? => {
            n.only(&[])?;
            (Kind::FloatGlobalMaxPool, vec![tensor(0)?], Elem::F32)
        }
        "Resize" => {
            // cubic_coeff_a, exclude_outside and extrapolation_value only act in modes refused below.
            n.only(&["mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value"])?;
            let mode = n.string("mode", "nearest")?;
            let linear = match mode.as_str() {
                "nearest" => false,
                "linear" if float_input(n, 0)? => true,
                other => return Err(format!("Resize mode {other} on this element type is not supported by the Rust target")),
            };
            let transform = match n.string("coordinate_transformation_mode", "half_pixel")?.as_str() {
                "half_pixel" => "HalfPixel",
                "asymmetric" => "Asymmetric",
                "align_corners" => "AlignCorners",
                "pytorch_half_pixel" => "PytorchHalfPixel",
                other => return Err(format!("Resize coordinate_transformation_mode {other} is not supported by the Rust target")),
            };
            let nearest = match n.string("nearest_mode", "round_prefer_floor")?.as_str() {
                "round_prefer_floor" => "RoundPreferFloor",
                "round_prefer_ceil" => "RoundPreferCeil",
                "floor" => "Floor",
                "ceil" => "Ceil",
                other => return Err(format!("Resize nearest_mode {other} is not supported by the Rust target")),
            };
            let scales = if n.inputs.get(2).is_some_and(|s| !s.is_empty()) { Some(n.constant(2)?.f32_bits).filter(|v| !v.is_empty()) } else { None };
            let sizes = if scales.is_none() { Some(n.constant(3)?.ints) } else { None };
            let elem = elem_of(n, 0)?;
            (Kind::Resize { linear, transform, nearest, scales, sizes }, vec![tensor(0)?], elem)
        }
        "Sigmoid" | "Tanh" | "Exp" | "Log" if float_input(n, 0)? => {
            n.only(&[])?;
            let function = match n.op_type {
                "Sigmoid" => "Sigmoid",
                "Tanh" => "Tanh",
                "Log" => "Log",
                _ => "Exp",
            };
            (Kind::FloatUnary { function }, vec![tensor(0)?], Elem::F32)
        }
        "Erf" if float_input(n, 0)? => {
            n.only(&[])?;
            (Kind::FloatUnary { function: "Erf" }, vec![tensor(0)?], Elem::F32)
        }
        "Gelu" if float_input(n, 0)? => {
            n.only(&["approximate"])?;
            let function = match n.string("approximate", "none")?.as_str() {
                "none" => "Gelu",
                "tanh" => "GeluTanh",
                other => return Err(format!("Gelu approximate = {other:?} (none or tanh)")),
            };
            (Kind::FloatUnary { function }, vec![tensor(0)?], Elem::F32)
        }
        "Sqrt" | "Reciprocal" | "Neg" | "Abs" | "HardSwish" | "Floor" | "Ceil" | "Round" if float_input(n, 0)? => {
            n.only(&[])?;
            (Kind::FloatMap { map: format!("Map::{}", n.op_type) }, vec![tensor(0)?], Elem::F32)
        }
        "LeakyRelu" if float_input(n, 0)? => {
            n.only(&["alpha"])?;
            let map = format!("Map::LeakyRelu {{ alpha: f32::from_bits({:#010x}) }}", n.float("alpha", 0.01)?.to_bits());
            (Kind::FloatMap { map }, vec![tensor(0)?], Elem::F32)
        }
        "Clip" if float_input(n, 0)? => {
            n.only(&[])?;
            let bound = |i: usize, default: f32| -> Result<f32, String> {
                if n.inputs.get(i).is_none_or(|s| s.is_empty()) {
                    return Ok(default);
                }
                match n.constant(i)?.f32_bits.as_slice() {
                    [b] => Ok(f32::from_bits(*b)),
                    _ => Err(format!("Clip bound {i} must be an f32 scalar")),
                }
            };
            let (lo, hi) = (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?);
            let map = format!("Map::Clip {{ min: f32::from_bits({:#010x}), max: f32::from_bits({:#010x}) }}", lo.to_bits(), hi.to_bits());
            (Kind::FloatMap { map }, vec![tensor(0)?], Elem::F32)
        }
        "Softmax" if float_input(n, 0)? => {
            n.only(&["axis"])?;
            (Kind::Softmax { axis: n.int("axis", -1)? }, vec![tensor(0)?], Elem::F32)
        }
        "BatchNormalization" if float_input(n, 0)? => {
            n.only(&["epsilon", "momentum", "training_mode"])?;
            if n.int("training_mode", 0)? != 0 {
                return Err("BatchNormalization in training mode is not supported by the Rust target".into());
            }
            let inputs = (0..5).map(tensor).collect::<Result<Vec<_>, _>>()?;
            (Kind::BatchNorm { epsilon: n.float("epsilon", 1e-5)?.to_bits() }, inputs, Elem::F32)
        }
        "LayerNormalization" if float_input(n, 0)? => {
            n.only(&["axis", "epsilon", "stash_type"])?;
            if n.int("stash_type", 1)? != 1 {
                return Err("LayerNormalization with stash_type other than 1 (f32) is not supported by the Rust target".into());
            }
            let axis = axis(n.int("axis", -1)?, n.rank(0)?)?;
            let inputs = n.inputs.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>();
            if inputs.len() < 2 {
                return Err("LayerNormalization needs its Scale input".into());
            }
            (Kind::LayerNorm { axis, epsilon: n.float("epsilon", 1e-5)?.to_bits() }, inputs, Elem::F32)
        }
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" if float_input(n, 0)? => {
            n.only(&["axes", "keepdims", "noop_with_empty_axes"])?;
            let rank = n.rank(0)?;
            // Axes: the attribute (opset < 18; ReduceSum from 13 takes an input) or input 1.
            let given = match n.signed("axes")? {
                Some(a) => Some(a),
                None if n.inputs.get(1).is_some_and(|s| !s.is_empty()) => Some(n.constant(1)?.ints),
                None => None,
            };
            let axes = match given {
                Some(a) if !a.is_empty() => a.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>, _>>()?,
                _ if n.int("noop_with_empty_axes", 0)? != 0 => Vec::new(),
                _ => (0..rank).collect(),
            };
            let reduce = match n.op_type {
                "ReduceSum" => "Sum",
                "ReduceMean" => "Mean",
                "ReduceMin" => "Min",
                _ => "Max",
            };
            (Kind::Reduce { reduce, axes }, vec![tensor(0)?], Elem::F32)
        }
        "MatMul" if float_input(n, 0)? && float_input(n, 1)? => {
            n.only(&[])?;
            let kind = match weight_only(n)? {
                Some(w) => Kind::WeightOnly(Box::new(w)),
                None => Kind::MatMul,
            };
            (kind, vec![tensor(0)?, tensor(1)?], Elem::F32)
        }
        "Transpose" => {
            n.only(&["perm"])?;
            let rank = n.rank(0)?;
            let perm = match n.signed("perm")? {
                Some(p) => p.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>, _>>()?,
                None => (0..rank).rev().collect(),
            };
            (Kind::Transpose { perm }, vec![tensor(0)?], elem_of(n, 0)?)
        }
        "Slice" => {
            n.only(&[])?;
            let starts = n.constant(1)?.ints;
            let ends = n.constant(2)?.ints;
            let axes = if n.inputs.get(3).is_some_and(|s| !s.is_empty()) { n.constant(3)?.ints } else { (0..starts.len() as i64).collect() };
            let steps = if n.inputs.get(4).is_some_and(|s| !s.is_empty()) { n.constant(4)?.ints } else { vec![1; starts.len()] };
            (Kind::Slice { starts, ends, axes, steps }, vec![tensor(0)?], elem_of(n, 0)?)
        }
        "Pad" => {
            n.only(&["mode"])?;
            if n.inputs.get(3).is_some_and(|s| !s.is_empty()) {
                return Err("Pad with an axes input is not supported by the Rust target".into());
            }
            let elem = elem_of(n, 0)?;
            let pads = n.constant(1)?.ints;
            let mode = match n.string("mode", "constant")?.as_str() {
                "constant" => "Constant",
                "edge" => "Edge",
                "reflect" => "Reflect",
                other => return Err(format!("Pad mode {other} is not supported by the Rust target")),
            };
            let value = match n.inputs.get(2).filter(|s| !s.is_empty()) {
                None => format!("0{}", if elem == Elem::F32 { "f32" } else { elem.rust() }),
                Some(_) => {
                    let c = n.constant(2)?;
                    match (elem, c.f32_bits.as_slice(), c.ints.as_slice()) {
                        (Elem::F32, [b], _) => format!("f32::from_bits({b:#010x})"),
                        (e, [], [v]) if e != Elem::F32 => format!("{v}{}", e.rust()),
                        _ => return Err("Pad's constant_value must be one element of the input's type".into()),
                    }
                }
            };
            (Kind::Pad { pads, mode, value }, vec![tensor(0)?], elem)
        }
        "Expand" => {
            n.only(&[])?;
            n.constant(1)?;
            (Kind::Expand, vec![tensor(0)?], elem_of(n, 0)?)
        }
        // An embedding table that is a dequantized constant (a tied table the MatMul reads as its
        // weight too): the codes are gathered and only the gathered elements decoded.
        "Gather" if !n.values.is_constant(n.input(1)?) && n.values.is_dequantized(n.input(0)?) && n.rank(0)? == 2 => {
            n.only(&["axis"])?;
            if elem_of(n, 1)? != Elem::I64 {
                return Err("Gather indices computed at run time must be int64 for the Rust target".into());
            }
            let axis = axis(n.int("axis", 0)?, 2)?;
            let q = n.values.quantized(n.input(0)?).ok_or("a dequantized table")?;
            let w = packed_weight(q)?.ok_or("a dequantized table whose parameters are not per tensor, per row or column, or blocked along one axis")?;
            (Kind::GatherWeights { axis, weights: Box::new(w) }, vec![tensor(0)?, tensor(1)?], Elem::F32)
        }
        "Gather" if !n.values.is_constant(n.input(1)?) => {
            n.only(&["axis"])?;
            if elem_of(n, 1)? != Elem::I64 {
                return Err("Gather indices computed at run time must be int64 for the Rust target".into());
            }
            let axis = axis(n.int("axis", 0)?, n.rank(0)?)?;
            (Kind::GatherBy { axis }, vec![tensor(0)?, tensor(1)?], elem_of(n, 0)?)
        }
        "Gather" => {
            n.only(&["axis"])?;
            let idx = n.constant(1)?;
            if !matches!(idx.dtype, DataType::Int64 | DataType::Int32) {
                return Err("Gather indices must be int32 or int64".into());
            }
            let axis = axis(n.int("axis", 0)?, n.rank(0)?)?;
            (Kind::Gather { axis, indices: idx.ints, indices_shape: idx.dims }, vec![tensor(0)?], elem_of(n, 0)?)
        }
        other => return Err(format!("operator {other} is not supported by the Rust target")),
    };
    Ok(Op { node: n.name.to_string(), kind, inputs, output, elem })
}

/// Split: one Slice per output along `axis` (sizes from the `split` input or attribute, else
/// equal parts); returns each output's op and shape.
pub fn split(n: &Node) -> Result<Vec<(Op, Vec<usize>)>, String> {
    n.only(&["axis", "split", "num_outputs"])?;
    let shape: Vec<usize> = n
        .values
        .shape(n.input(0)?)?
        .iter()
        .map(
            |e| if let super::values::Extent::Fixed(d) = e { Ok(*d) } else { Err("Split of a symbolic shape is not supported by the Rust target".to_string()) },
        )
        .collect::<Result<_, _>>()?;
    let a = axis(n.int("axis", 0)?, shape.len())?;
    let parts = n.outputs.len();
    let sizes: Vec<usize> = match n.ints("split")? {
        Some(s) => s,
        None if n.inputs.get(1).is_some_and(|s| !s.is_empty()) => n.constant(1)?.ints.iter().map(|&v| v as usize).collect(),
        None => {
            let each = shape[a].div_ceil(parts.max(1));
            (0..parts).map(|k| each.min(shape[a].saturating_sub(k * each))).collect()
        }
    };
    if sizes.len() != parts || sizes.iter().sum::<usize>() != shape[a] {
        return Err(format!("Split sizes {sizes:?} do not cover axis {a} of {shape:?} in {parts} outputs"));
    }
    let elem = elem_of(n, 0)?;
    let mut start = 0;
    let mut ops = Vec::new();
    for (out, size) in n.outputs.iter().zip(sizes) {
        let mut dims = shape.clone();
        dims[a] = size;
        let kind = Kind::Slice { starts: vec![start as i64], ends: vec![(start + size) as i64], axes: vec![a as i64], steps: vec![1] };
        start += size;
        if !out.is_empty() {
            ops.push((Op { node: n.name.to_string(), kind, inputs: vec![n.input(0)?.to_string()], output: out.clone(), elem }, dims));
        }
    }
    Ok(ops)
}

/// An Equal whose every reader is a Cast to f32 (the caller checked): `EqualAsF32` on integers.
pub fn equal_as_f32(n: &Node) -> Result<Op, String> {
    let output = n.outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?.clone();
    n.only(&[])?;
    let (a, b) = (elem_of(n, 0)?, elem_of(n, 1)?);
    if a != b || matches!(a, Elem::F32) {
        return Err(format!("Equal of {} and {} is not supported by the Rust target (integers of one type only)", a.rust(), b.rust()));
    }
    Ok(Op { node: n.name.to_string(), kind: Kind::EqualAsF32, inputs: vec![n.input(0)?.to_string(), n.input(1)?.to_string()], output, elem: Elem::F32 })
}

/// A Where whose condition is `Equal(p, q)` (the caller checked the Equal is read only so).
pub fn select_equal(n: &Node, (p, q): &(String, String)) -> Result<Op, String> {
    let output = n.outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?.clone();
    n.only(&[])?;
    let elem = |name: &str| -> Result<Elem, String> {
        match n.elems.get(name) {
            Some(e) => Ok(*e),
            None => Elem::of(n.values.constant(name)?.dtype).ok_or_else(|| format!("'{name}' of an unsupported type")),
        }
    };
    let (pe, qe, ae, be) = (elem(p)?, elem(q)?, elem_of(n, 1)?, elem_of(n, 2)?);
    if pe != qe || ae != be {
        return Err(format!("Where(Equal({}, {}), {}, {}) mixes element types", pe.rust(), qe.rust(), ae.rust(), be.rust()));
    }
    let inputs = vec![p.clone(), q.clone(), n.input(1)?.to_string(), n.input(2)?.to_string()];
    Ok(Op { node: n.name.to_string(), kind: Kind::SelectEqual, inputs, output, elem: ae })
}

/// A Cast to f32 of an [`equal_as_f32`] output: a copy.
pub fn cast_of_equal(n: &Node) -> Result<Op, String> {
    let output = n.outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?.clone();
    n.only(&["to", "saturate"])?;
    if n.int("to", 0)? != DataType::Float as i64 {
        return Err("a Cast of an Equal to another type than FLOAT is not supported by the Rust target".into());
    }
    Ok(Op { node: n.name.to_string(), kind: Kind::Reshape, inputs: vec![n.input(0)?.to_string()], output, elem: Elem::F32 })
}

/// `Gather(table, Cast(codes))` with the Cast looked through: `codes` is the Cast's input.
pub fn lookup_table(n: &Node, codes: &str) -> Result<Op, String> {
    let output = n.outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?.clone();
    n.only(&["axis"])?;
    if n.int("axis", 0)? != 0 {
        return Err("a lookup table gathers along axis 0".into());
    }
    let table = n.constant(0)?;
    let elem = code_elem(table.dtype).ok_or("a lookup table of u8 or i8 codes")?;
    if table.dims != [256] || table.ints.len() != 256 {
        return Err(format!("a lookup table has 256 entries, not {:?}", table.dims));
    }
    if n.elems.get(codes).is_none_or(|e| !e.is_code()) {
        return Err(format!("the table's indices '{codes}' are not 8-bit codes"));
    }
    Ok(Op { node: n.name.to_string(), kind: Kind::Lut { table: table.ints }, inputs: vec![codes.to_string()], output, elem })
}

/// The element type of input `i` (a graph input, a constant or an earlier node's output).
/// Rows of A up to which the weight-only GEMV (one pass over the codes per row) is used for
/// 8-bit per-tensor/per-column weights, which the blocked float GEMM also reads; 4-bit and
/// blocked weights take it at every M.
const WEIGHT_ONLY_ROWS: usize = 16;

/// MatMul input 1 as a weight-only operand, when it is the DequantizeLinear of a constant rank-2
/// weight of 4- or 8-bit codes whose parameters depend on (row / block, column) only, and the
/// GEMV suits the product (see [`WEIGHT_ONLY_ROWS`]).
fn weight_only(n: &Node) -> Result<Option<WeightOnly>, String> {
    let Some(q) = n.values.quantized(n.input(1)?) else { return Ok(None) };
    let narrow = matches!(q.codes.dtype, DataType::Uint4 | DataType::Int4) || q.blocked.is_some();
    let rows: Option<usize> = match n.values.shape(n.input(0)?) {
        Ok(s) if !s.is_empty() => s[..s.len() - 1].iter().map(|e| if let Extent::Fixed(d) = e { Some(*d) } else { None }).product(),
        _ => None,
    };
    if !narrow && rows.is_none_or(|m| m > WEIGHT_ONLY_ROWS) {
        return Ok(None);
    }
    packed_weight(q)
}

/// A dequantized constant as a packed weight-only operand: rank 2, 4- or 8-bit codes, parameters
/// that depend on (row / block, column) only; else None.
fn packed_weight(q: &super::values::Quantized) -> Result<Option<WeightOnly>, String> {
    use qdqc_kernels::float::weight_only::{pack, pack_params};
    let code = match q.codes.dtype {
        DataType::Uint4 => "U4",
        DataType::Int4 => "I4",
        DataType::Uint8 => "U8",
        DataType::Int8 => "I8",
        _ => return Ok(None),
    };
    let [k, cols] = q.codes.dims[..] else { return Ok(None) };
    if k == 0 || cols == 0 {
        return Err("a weight with an empty dimension".into());
    }
    // The parameters' row block: the block along axis 0, a row (per row), or all of K.
    let block = match q.blocked {
        Some((0, b)) => b,
        _ if q.scales.len() > 1 && q.blocked.is_none() && q.inner == cols && q.scales.len() == k => 1,
        _ => k,
    };
    let blocks = k.div_ceil(block);
    let (mut scales, mut zps) = (Vec::with_capacity(blocks * cols), Vec::with_capacity(blocks * cols));
    for b in 0..blocks {
        for j in 0..cols {
            let at = q.param(b * block * cols + j);
            // Each element of the block must read these parameters (checked, not assumed).
            let last = q.param(((b * block + block - 1).min(k - 1)) * cols + j);
            if last != at {
                return Ok(None);
            }
            scales.push(f32::from_bits(q.scales[at]));
            let z = match q.zero_points.len() {
                0 => 0,
                1 => q.zero_points[0],
                _ => q.zero_points[at],
            };
            zps.push(z as f32);
        }
    }
    let code_type = match code {
        "U4" => qdqc_kernels::float::weight_only::CodeType::U4,
        "I4" => qdqc_kernels::float::weight_only::CodeType::I4,
        "U8" => qdqc_kernels::float::weight_only::CodeType::U8,
        _ => qdqc_kernels::float::weight_only::CodeType::I8,
    };
    let err = |e: qdqc_kernels::float::ShapeError| e.0;
    let codes = pack(code_type, k, cols, &q.codes.ints).map_err(err)?;
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect();
    Ok(Some(WeightOnly {
        code,
        k,
        n: cols,
        block,
        codes,
        scales: bits(pack_params(blocks, cols, &scales).map_err(err)?),
        zero_points: bits(pack_params(blocks, cols, &zps).map_err(err)?),
    }))
}

fn elem_of(n: &Node, i: usize) -> Result<Elem, String> {
    let name = n.input(i)?;
    if let Some(e) = n.elems.get(name) {
        return Ok(*e);
    }
    let dt = n.values.constant(name)?.dtype;
    Elem::of(dt).ok_or_else(|| format!("input {i} of type {} is not supported by the Rust target", dt.as_str_name()))
}

/// The fixed extents of input `i` (a weight's).
fn fixed_dims(n: &Node, i: usize) -> Result<Vec<usize>, String> {
    n.values
        .shape(n.input(i)?)?
        .iter()
        .map(|e| if let super::values::Extent::Fixed(v) = e { Ok(*v) } else { Err(format!("input {i} has a symbolic extent")) })
        .collect()
}

/// Whether input `i` is f32.
fn float_input(n: &Node, i: usize) -> Result<bool, String> {
    Ok(elem_of(n, i)? == Elem::F32)
}

/// The element type of input `i`, which must be codes.
fn code_input(n: &Node, i: usize) -> Result<Elem, String> {
    match elem_of(n, i)? {
        e if e.is_code() => Ok(e),
        e => Err(format!("{} on {} is not supported by the Rust target (only on codes)", n.op_type, e.rust())),
    }
}

/// An ONNX axis (negative from the end) as a position.
fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if (-r..r).contains(&a) { Ok(a.rem_euclid(r.max(1)) as usize) } else { Err(format!("axis {a} out of range for rank {rank}")) }
}
