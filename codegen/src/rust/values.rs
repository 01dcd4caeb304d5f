//! What the generator knows of every value: element type, shape (from the authored model's
//! inferred shapes, `Model::shapes`) and, for constants, the elements (authored initializers and
//! the constants created nodes need).

use qdqc_lang::Model;
use qdqc_lang::analysis::Dim;
use qdqc_lang::onnx::{DataType, TensorProto, type_proto};
use qdqc_lower::lowered::LoweredConstant;
use std::collections::BTreeMap;

/// Element types the generated code handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Elem {
    F32,
    U8,
    I8,
    /// Integer tensors that are not codes (graph inputs of token or byte ids, and what is computed
    /// from them: reshaped, expanded, compared).
    I32,
    I64,
}

impl Elem {
    pub fn of(dt: DataType) -> Option<Elem> {
        match dt {
            DataType::Float => Some(Elem::F32),
            DataType::Uint8 => Some(Elem::U8),
            DataType::Int8 => Some(Elem::I8),
            DataType::Int32 => Some(Elem::I32),
            DataType::Int64 => Some(Elem::I64),
            _ => None,
        }
    }

    /// The Rust element type.
    pub fn rust(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::U8 => "u8",
            Elem::I8 => "i8",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
        }
    }

    /// The runtime's `DType` variant.
    pub fn variant(self) -> &'static str {
        match self {
            Elem::F32 => "F32",
            Elem::U8 => "U8",
            Elem::I8 => "I8",
            Elem::I32 => "I32",
            Elem::I64 => "I64",
        }
    }

    /// Quantized codes (u8, i8): what the integer kernels read and `--intermediates` writes.
    pub fn is_code(self) -> bool {
        matches!(self, Elem::U8 | Elem::I8)
    }
}

/// A dimension: fixed, or named (bound by an input at run time).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Extent {
    Fixed(usize),
    Named(String),
}

/// A constant's elements, widened for the generator's own checks and for the blob.
#[derive(Clone, Debug)]
pub struct Constant {
    pub dtype: DataType,
    pub dims: Vec<usize>,
    /// Integer elements (integer types).
    pub ints: Vec<i64>,
    /// f32 bit patterns (float tensors).
    pub f32_bits: Vec<u32>,
}

/// The value table of the main graph.
pub struct Values<'m> {
    model: &'m Model,
    initializers: BTreeMap<&'m str, &'m TensorProto>,
    created: BTreeMap<&'m str, &'m LoweredConstant>,
    /// DequantizeLinear of constants and shape subgraphs, evaluated at generation time.
    folded: BTreeMap<String, Constant>,
    /// The folded values that are a DequantizeLinear of constant codes, with those codes: the
    /// generated code stores the codes and the float kernels decode them where they read them;
    /// any other op reading one would need a float copy (`groups.json` lists those).
    dequantized: BTreeMap<String, Quantized>,
    /// Fixed output shapes the generator computed (`shapes.rs`) where the model's are unknown.
    inferred: BTreeMap<String, Vec<usize>>,
    /// Dim names the graph inputs bind at run time; any other name is an unknown dim.
    bound: std::collections::BTreeSet<String>,
    /// Names the model's shape inference gave dims it lost track of, shown equal to a bound name
    /// (`shapes::alias`): a batch through a Resize, a Reshape's −1.
    aliases: BTreeMap<String, String>,
}

impl<'m> Values<'m> {
    pub fn new(model: &'m Model, created: &'m [LoweredConstant]) -> Values<'m> {
        let g = model.main_graph();
        let inputs: Vec<&str> = g.input.iter().filter_map(|v| v.name.as_deref()).collect();
        // An initializer a graph input overrides is not a constant.
        let initializers = g.initializer.iter().filter_map(|t| t.name.as_deref().map(|n| (n, t))).filter(|(n, _)| !inputs.contains(n)).collect();
        Values {
            model,
            initializers,
            created: created.iter().map(|c| (c.name.as_str(), c)).collect(),
            folded: BTreeMap::new(),
            dequantized: Default::default(),
            inferred: BTreeMap::new(),
            bound: Default::default(),
            aliases: BTreeMap::new(),
        }
    }

    pub fn is_constant(&self, name: &str) -> bool {
        self.initializers.contains_key(name) || self.created.contains_key(name) || self.folded.contains_key(name)
    }

    /// Where a constant comes from: an authored `initializer`, a constant a `created` node needs,
    /// or a value `folded` at generation time (`groups.json` references only initializers).
    pub fn origin(&self, name: &str) -> &'static str {
        if self.folded.contains_key(name) {
            "folded"
        } else if self.created.contains_key(name) {
            "created"
        } else {
            "initializer"
        }
    }

    /// Records a value computed at generation time.
    pub fn fold(&mut self, name: &str, c: Constant) {
        self.folded.insert(name.to_string(), c);
    }

    /// Records the DequantizeLinear of constant codes: its codes, and its value computed at
    /// generation time (for the generator's own checks and `groups.json`).
    pub fn fold_dequantized(&mut self, name: &str, q: Quantized) {
        self.fold(name, q.decode());
        self.dequantized.insert(name.to_string(), q);
    }

    /// Whether `name` is a DequantizeLinear of constant codes.
    pub fn is_dequantized(&self, name: &str) -> bool {
        self.dequantized.contains_key(name)
    }

    /// The codes `name` dequantizes, when it is a DequantizeLinear of constant codes.
    pub fn quantized(&self, name: &str) -> Option<&Quantized> {
        self.dequantized.get(name)
    }

    /// Records a dim name a graph input binds.
    pub fn bind(&mut self, name: &str) {
        self.bound.insert(name.to_string());
    }

    /// The bound name a dim name stands for: itself when a graph input binds it, else its alias.
    pub fn resolve(&self, name: &str) -> Option<&str> {
        if self.bound.contains(name) {
            return Some(self.bound.get(name)?.as_str());
        }
        self.aliases.get(name).map(String::as_str).filter(|t| self.bound.contains(*t))
    }

    /// Records that the unbound dim name `name` equals the bound name `to`.
    pub fn alias(&mut self, name: &str, to: &str) {
        if !self.bound.contains(name) && self.bound.contains(to) {
            self.aliases.insert(name.to_string(), to.to_string());
        }
    }

    /// The shape the model declares (or its inference gives) for a value, as it stands.
    pub fn declared(&self, name: &str) -> Option<&[Dim]> {
        self.model.shapes.get(name).map(Vec::as_slice)
    }

    /// Records a value's fixed shape, used where the model's shapes leave a dim unknown or named.
    pub fn infer(&mut self, name: &str, dims: Vec<usize>) {
        self.inferred.insert(name.to_string(), dims);
    }

    /// The elements of a constant, or why it cannot be read.
    pub fn constant(&self, name: &str) -> Result<Constant, String> {
        if let Some(c) = self.folded.get(name) {
            return Ok(c.clone());
        }
        if let Some(c) = self.created.get(name) {
            let dims = dims_of(&c.dims)?;
            let payload = qdqc_lang::tensor::Payload::Raw(c.bytes.clone().into());
            return read(c.dtype, dims, &payload, name);
        }
        let t = self.initializers.get(name).ok_or_else(|| format!("'{name}' is not a constant"))?;
        let dtype = qdqc_lang::tensor::data_type(t)?;
        let payload = self.model.payload(t)?;
        read(dtype, dims_of(&t.dims)?, &payload, name)
    }

    /// A quantization scale's elements as f32 bit patterns: f32, or f16 widened exactly (the
    /// QLinear* ops take f16 scales; a scale only enters the exact requantization as a rational).
    /// Only for scales: an f16 tensor elsewhere is f16 data, which the backend refuses.
    pub fn scale_bits(&self, name: &str) -> Result<Vec<u32>, String> {
        let f16 = match (self.initializers.get(name), self.created.get(name)) {
            (Some(t), _) if qdqc_lang::tensor::data_type(t)? == DataType::Float16 => qdqc_lang::tensor::f16_bits(DataType::Float16, &self.model.payload(t)?),
            (None, Some(c)) if c.dtype == DataType::Float16 => {
                qdqc_lang::tensor::f16_bits(DataType::Float16, &qdqc_lang::tensor::Payload::Raw(c.bytes.clone().into()))
            }
            _ => return Ok(self.constant(name)?.f32_bits),
        };
        Ok(f16.ok_or_else(|| format!("scale '{name}': unreadable f16 elements"))?.into_iter().map(|h| f16_to_f32(h).to_bits()).collect())
    }

    /// The elements of a tensor attribute (ConstantOfShape's `value`).
    pub fn attribute_tensor(&self, t: &TensorProto) -> Result<Constant, String> {
        let dtype = qdqc_lang::tensor::data_type(t)?;
        read(dtype, dims_of(&t.dims)?, &self.model.payload(t)?, t.name.as_deref().unwrap_or("value"))
    }

    /// The shape of a value, from the inferred shapes or a constant's dims.
    pub fn shape(&self, name: &str) -> Result<Vec<Extent>, String> {
        if let Some(c) = self.folded.get(name) {
            return Ok(c.dims.iter().map(|&d| Extent::Fixed(d)).collect());
        }
        if let Some(c) = self.created.get(name) {
            return Ok(dims_of(&c.dims)?.into_iter().map(Extent::Fixed).collect());
        }
        let declared = self.model.shapes.get(name).map(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Known(n) if *n >= 0 => Ok(Extent::Fixed(*n as usize)),
                    Dim::Symbolic(s) if self.resolve(s).is_some() => Ok(Extent::Named(self.resolve(s).unwrap_or_default().to_string())),
                    _ => Err(format!("'{name}' has a dimension computed from an unknown one ({dims:?})")),
                })
                .collect::<Result<Vec<_>, _>>()
        });
        // The generator's fixed shape is recorded only where the declared one is unknown or named.
        match (declared, self.inferred.get(name)) {
            (_, Some(d)) => Ok(d.iter().map(|&v| Extent::Fixed(v)).collect()),
            (Some(Ok(d)), None) => Ok(d),
            (Some(Err(e)), None) => Err(e),
            (None, None) => Err(format!("the shape of '{name}' is not known statically")),
        }
    }

    /// The declared element type of a graph input.
    pub fn input_elem(&self, name: &str) -> Option<DataType> {
        let v = self.model.main_graph().input.iter().find(|v| v.name.as_deref() == Some(name))?;
        match &v.r#type.as_ref()?.value {
            Some(type_proto::Value::TensorType(t)) => DataType::try_from(t.elem_type?).ok(),
            _ => None,
        }
    }
}

/// The f16 with bit pattern `h`, exactly, as an f32 (every f16 is one).
fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((h >> 10) & 0x1f), f32::from(h & 0x3ff));
    sign * match e {
        0 => m * 2f32.powi(-24),
        31 if m == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        _ => (1024.0 + m) * 2f32.powi(e - 25),
    }
}

fn dims_of(dims: &[i64]) -> Result<Vec<usize>, String> {
    dims.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}"))).collect()
}

fn read(dtype: DataType, dims: Vec<usize>, payload: &qdqc_lang::tensor::Payload<'_>, name: &str) -> Result<Constant, String> {
    let (ints, f32_bits) = match dtype {
        DataType::Float => (Vec::new(), qdqc_lang::tensor::f32_bits(dtype, payload).unwrap_or_default()),
        DataType::Uint8 | DataType::Int8 | DataType::Int32 | DataType::Int64 => (qdqc_lang::tensor::ints(dtype, payload).unwrap_or_default(), Vec::new()),
        // 4-bit codes (two per byte, element 0 in the low nibble): an odd count pads one nibble.
        DataType::Uint4 | DataType::Int4 => {
            let mut ints = qdqc_lang::tensor::ints(dtype, payload).unwrap_or_default();
            ints.truncate(dims.iter().product());
            (ints, Vec::new())
        }
        other => return Err(format!("constant '{name}' of type {} is not supported by the Rust target", other.as_str_name())),
    };
    let n: usize = dims.iter().product();
    if ints.len().max(f32_bits.len()) != n {
        return Err(format!("constant '{name}' holds {} elements for dims {dims:?}", ints.len().max(f32_bits.len())));
    }
    Ok(Constant { dtype, dims, ints, f32_bits })
}

/// A DequantizeLinear of constant codes as the generated code stores it: the codes, per-tensor
/// or per-channel scales and zero points, and the channel's step (`inner`: the product of the dims
/// after the axis) — `qdqc_kernels::float::dq::Dequantized` decodes element i with channel
/// `(i / inner) mod channels`, as [`Quantized::decode`] does here. Blocked parameters
/// (`block_size`, opset 21) index element i by [`Quantized::param`]; only the weight-only MatMul
/// (`qdqc_kernels::float::weight_only`) reads those.
#[derive(Clone, Debug)]
pub struct Quantized {
    pub codes: Constant,
    /// f32 bit patterns, one (per tensor) or one per channel (or per block).
    pub scales: Vec<u32>,
    /// None (0), one, or one per channel.
    pub zero_points: Vec<i64>,
    pub inner: usize,
    /// Blocked parameters: the axis and the block size along it.
    pub blocked: Option<(usize, usize)>,
}

impl Quantized {
    /// DequantizeLinear's operands: codes, scales, zero points (optional), along `axis` (negative
    /// from the end), in blocks of `block_size` along it when that is positive.
    pub fn new(q: Constant, scales: &Constant, zps: Option<&Constant>, axis: i64, block_size: i64) -> Result<Quantized, String> {
        let rank = q.dims.len() as i64;
        let len = scales.f32_bits.len();
        if len == 0 || !q.f32_bits.is_empty() {
            return Err("DequantizeLinear of a constant needs integer codes and f32 scales".into());
        }
        if block_size > 0 {
            let a = if axis < 0 { axis + rank } else { axis };
            let b = block_size as usize;
            if !(0..rank).contains(&a) {
                return Err(format!("DequantizeLinear: axis {axis} of {:?}", q.dims));
            }
            let a = a as usize;
            let mut want = q.dims.clone();
            want[a] = q.dims[a].div_ceil(b);
            if scales.dims != want {
                return Err(format!("DequantizeLinear: blocked scales {:?} for codes {:?} (block {b} along axis {a})", scales.dims, q.dims));
            }
            let zero_points = zps.map(|z| z.ints.clone()).unwrap_or_default();
            if ![0, len].contains(&zero_points.len()) {
                return Err(format!("DequantizeLinear: {} zero points for {len} blocked scales", zero_points.len()));
            }
            let inner = q.dims[a + 1..].iter().product();
            return Ok(Quantized { codes: q, scales: scales.f32_bits.clone(), zero_points, inner, blocked: Some((a, b)) });
        }
        let inner: usize = if len == 1 {
            q.ints.len().max(1)
        } else {
            let a = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&a) || q.dims[a as usize] != len {
                return Err(format!("DequantizeLinear: {len} scales along axis {axis} of {:?}", q.dims));
            }
            q.dims[a as usize + 1..].iter().product()
        };
        let zero_points = zps.map(|z| z.ints.clone()).unwrap_or_default();
        if ![0, 1, len].contains(&zero_points.len()) {
            return Err(format!("DequantizeLinear: {} zero points for {len} scales", zero_points.len()));
        }
        Ok(Quantized { codes: q, scales: scales.f32_bits.clone(), zero_points, inner, blocked: None })
    }

    /// The parameter index of element `i`: per tensor 0; per axis `(i / inner) mod channels`;
    /// blocked, the element's index with its coordinate along the axis divided by the block.
    pub fn param(&self, i: usize) -> usize {
        let len = self.scales.len();
        match self.blocked {
            _ if len == 1 => 0,
            None => (i / self.inner) % len,
            Some((axis, block)) => {
                let d = self.codes.dims[axis];
                let (outer, along, r) = (i / (d * self.inner), (i / self.inner) % d, i % self.inner);
                (outer * d.div_ceil(block) + along / block) * self.inner + r
            }
        }
    }

    /// The dequantized elements, as ONNX Runtime computes them: `fl32(fl32(q − zp)·s)`.
    pub fn decode(&self) -> Constant {
        let zp = |c: usize| self.zero_points.get(if self.zero_points.len() == 1 { 0 } else { c }).copied().unwrap_or(0);
        let f32_bits = self
            .codes
            .ints
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let c = self.param(i);
                ((v - zp(c)) as f32 * f32::from_bits(self.scales[c])).to_bits()
            })
            .collect();
        Constant { dtype: DataType::Float, dims: self.codes.dims.clone(), ints: Vec::new(), f32_bits }
    }
}
