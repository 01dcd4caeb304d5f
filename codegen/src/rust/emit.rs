//! The text of the generated `src/lib.rs`: one `Model` type whose fields hold what `new()` builds
//! once from the weight blob (packed weights, requantization forms, code tables), and whose
//! `run_with` executes the ops in order over the planned workspace slots. Both come in parts of
//! `OPS_PER_PART` ops (a function each, the part's operands in a struct of their own), and every
//! kernel is called through its concrete instance in `qdqc_kernels::entry`: what LLVM optimizes
//! in the generated crate is glue, in functions of bounded size. A run of ops that repeats layer
//! after layer is one loop instead (`repeat.rs`): every op is first emitted flat, then the
//! repeated runs are found on that text and written as a loop over per-layer tables.

use super::blob::{Blob, Section};
use super::ops::{A8W8, Dynamic, Integer, Kind, Op, Q, Window};
use super::repeat::{Arrangement, Home, Segment, block_body, layer_struct, split};
use super::slots::Plan;
use super::values::{Elem, Extent, Values};
use qdqc_kernels::conv::{ConvParams, PackedConv};
use qdqc_kernels::{Layout, PackedB};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// A value as the generated code reaches it.
enum Place {
    Input(usize),
    Slot(Elem, usize),
    Field(String),
}

pub struct Program<'a, 'm> {
    pub values: &'a Values<'m>,
    pub ops: &'a [Op],
    pub plan: &'a Plan,
    /// Graph inputs: name, element type, shape.
    pub inputs: Vec<(String, Elem, Vec<Extent>)>,
    pub outputs: Vec<String>,
    pub source: String,
}

struct Emitter<'a, 'm> {
    p: &'a Program<'a, 'm>,
    blob: Blob,
    /// Field name (`p{part}.{name}`: a field of the part's operand struct), type, initializer.
    fields: Vec<(String, String, String)>,
    /// The part of `run_with` being emitted.
    part: usize,
    /// Constant tensors read at run time, by value name: field name.
    tensors: BTreeMap<String, String>,
    /// Dequantized constants read by kernels that decode codes (`Kind::decodes`), by value name:
    /// the field holding their codes (`float::dq::Dequantized`).
    quantized: BTreeMap<String, String>,
    /// Weight-only operands (`float::weight_only::WeightOnly`, packed codes), by value name: one
    /// field for every op that reads the value (a tied table's Gather and MatMul).
    packed: BTreeMap<String, String>,
    names: Vec<String>,
    /// What the op being emitted reads of `run_with`'s bindings (graph inputs by index, named
    /// dims): its part declares only those, so that no binding is unused.
    reads: RefCell<Reads>,
}

/// The bindings a run of ops reads.
#[derive(Default)]
struct Reads {
    inputs: BTreeSet<usize>,
    dims: bool,
    observe: bool,
}

impl Reads {
    fn merge(mut self, other: Reads) -> Reads {
        self.inputs.extend(other.inputs);
        self.dims |= other.dims;
        self.observe |= other.observe;
        self
    }
}

/// Ops per `run_with` part: each part is its own function, so that the size of what LLVM
/// optimizes at once stays bounded whatever the model's size (its passes are superlinear in a
/// function's size: one flat `run_with` for a thousand ops took minutes to build).
const OPS_PER_PART: usize = 16;

fn q_expr(q: Q) -> String {
    format!("quant({:#010x}, {})", q.scale, q.zero_point)
}

fn f32_list(bits: &[u32]) -> String {
    let v: Vec<String> = bits.iter().map(|b| format!("f32::from_bits({b:#010x})")).collect();
    format!("[{}]", v.join(", "))
}

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    let v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// i64 literals, typed (an empty list still has a type).
fn i64_list(v: &[i64]) -> String {
    let v: Vec<String> = v.iter().map(|x| format!("{x}i64")).collect();
    format!("[{}]", v.join(", "))
}

/// A convolution's attributes.
fn conv_window(in_channels: usize, out_channels: usize, groups: usize, w: &Window) -> ConvParams {
    let rank = w.kernel.len();
    ConvParams {
        in_channels,
        out_channels,
        groups,
        kernel: w.kernel.clone(),
        strides: w.strides.clone(),
        dilations: w.dilations.clone(),
        pads_begin: w.pads[..rank].to_vec(),
        pads_end: w.pads[rank..].to_vec(),
    }
}

/// A `ConvParams` as Rust text.
fn conv_params(p: &ConvParams) -> String {
    format!(
        "ConvParams {{ in_channels: {}, out_channels: {}, groups: {}, kernel: vec!{}, strides: vec!{}, dilations: vec!{}, pads_begin: vec!{}, pads_end: vec!{} }}",
        p.in_channels,
        p.out_channels,
        p.groups,
        list(&p.kernel),
        list(&p.strides),
        list(&p.dilations),
        list(&p.pads_begin),
        list(&p.pads_end)
    )
}

fn str_lit(s: &str) -> String {
    format!("{s:?}")
}

impl Emitter<'_, '_> {
    fn place(&self, name: &str) -> Result<Place, String> {
        if let Some(i) = self.p.inputs.iter().position(|(n, _, _)| n == name) {
            return Ok(Place::Input(i));
        }
        if let Some(&(e, s)) = self.p.plan.slot.get(name) {
            return Ok(Place::Slot(e, s));
        }
        self.tensors.get(name).map(|f| Place::Field(f.clone())).ok_or_else(|| format!("'{name}' is read before it is computed"))
    }

    fn slice(&self, name: &str) -> Result<String, String> {
        Ok(match self.place(name)? {
            Place::Input(i) => {
                self.reads.borrow_mut().inputs.insert(i);
                format!("x{i}")
            }
            Place::Slot(e, s) => format!("&ws.{}[{s}][..]", e.rust()),
            Place::Field(f) => format!("&self.{f}[..]"),
        })
    }

    fn dim(&mut self, e: &Extent) -> String {
        match e {
            Extent::Fixed(n) => n.to_string(),
            Extent::Named(s) => {
                let i = match self.names.iter().position(|n| n == s) {
                    Some(i) => i,
                    None => {
                        self.names.push(s.clone());
                        self.names.len() - 1
                    }
                };
                self.reads.borrow_mut().dims = true;
                format!("d[{i}]")
            }
        }
    }

    fn shape(&mut self, name: &str) -> Result<String, String> {
        let s = self.p.values.shape(name)?;
        let dims: Vec<String> = s.iter().map(|e| self.dim(e)).collect();
        Ok(format!("[{}]", dims.join(", ")))
    }

    fn numel(&mut self, name: &str) -> Result<String, String> {
        let s = self.p.values.shape(name)?;
        let dims: Vec<String> = s.iter().map(|e| self.dim(e)).collect();
        Ok(if dims.is_empty() { "1".into() } else { dims.join(" * ") })
    }

    /// A constant tensor read at run time becomes a field loaded from the blob.
    fn tensor_field(&mut self, name: &str) -> Result<(), String> {
        if self.tensors.contains_key(name) || !self.p.values.is_constant(name) || self.p.inputs.iter().any(|(n, _, _)| n == name) {
            return Ok(());
        }
        let c = self.p.values.constant(name)?;
        let field = format!("p{}.c{}", self.part, self.tensors.len());
        // 8-bit code tables (an embedding's codes, lookup tables) are borrowed from the blob
        // (`load`): no copy, and only the pages a Gather reads become resident.
        let (ty, init) = self.load(&c)?;
        self.fields.push((field.clone(), ty, init));
        self.tensors.insert(name.to_string(), field);
        Ok(())
    }

    /// A dequantized constant read where its codes are decoded: a field holding the codes, scales
    /// and zero points (`float::dq::Dequantized`), never the floats.
    fn quantized_field(&mut self, name: &str) -> Result<(), String> {
        if self.quantized.contains_key(name) {
            return Ok(());
        }
        let q = self.p.values.quantized(name).ok_or_else(|| format!("'{name}' is not a dequantized constant"))?;
        if q.blocked.is_some() {
            return Err(format!("'{name}': a blocked DequantizeLinear is read only as a MatMul's weight by the Rust target"));
        }
        let (_, codes) = self.load(&q.codes)?;
        let variant = match q.codes.dtype {
            qdqc_lang::onnx::DataType::Uint8 => "U8",
            qdqc_lang::onnx::DataType::Int8 => "I8",
            qdqc_lang::onnx::DataType::Int32 => "I32",
            other => return Err(format!("'{name}': DequantizeLinear of {} codes is not supported by the Rust target", other.as_str_name())),
        };
        let field = format!("p{}.q{}", self.part, self.quantized.len());
        let init = format!(
            "float::dq::Dequantized::new(float::dq::Codes::{variant}({codes}.into()), {}.to_vec(), vec!{}, {}).map_err(float_err({}))?",
            self.f32_init(&q.scales),
            i64_list(&q.zero_points),
            q.inner,
            str_lit(name)
        );
        self.fields.push((field.clone(), "float::dq::Dequantized".into(), init));
        self.quantized.insert(name.to_string(), field);
        Ok(())
    }

    /// The packed weight of a weight-only MatMul: its codes borrowed from the blob (never
    /// copied), its parameters loaded.
    fn weight_only_field(&mut self, value: &str, w: &super::ops::WeightOnly, node: &str) -> String {
        if let Some(f) = self.packed.get(value) {
            return f.clone();
        }
        let field = format!("p{}.w{}", self.part, self.packed.len());
        let codes = self.blob.add(&w.codes);
        let init = format!(
            "float::weight_only::WeightOnly::new(float::weight_only::CodeType::{}, {}, {}, {}, blob.u8s({codes}, {}), {}.to_vec(), {}.to_vec()).map_err(float_err({}))?",
            w.code,
            w.k,
            w.n,
            w.block,
            w.codes.len(),
            self.f32_init(&w.scales),
            self.f32_init(&w.zero_points),
            str_lit(node)
        );
        self.fields.push((field.clone(), "float::weight_only::WeightOnly".into(), init));
        self.packed.insert(value.to_string(), field.clone());
        field
    }

    /// A float kernel's operand (`float::dq::Operand`): the codes of a dequantized constant, or
    /// f32 elements.
    fn operand(&self, name: &str) -> Result<String, String> {
        Ok(match self.quantized.get(name) {
            Some(f) => format!("float::dq::Operand::Codes(&self.{f})"),
            None => format!("float::dq::Operand::F32({})", self.slice(name)?),
        })
    }

    /// An optional input as an `Option` of [`Self::operand`].
    fn optional_operand(&self, name: Option<&String>) -> Result<String, String> {
        Ok(match name {
            Some(v) => format!("Some({})", self.operand(v)?),
            None => "None".into(),
        })
    }

    /// The blob entry of a constant and the expression that reads it back.
    fn load(&mut self, c: &super::values::Constant) -> Result<(String, String), String> {
        use qdqc_lang::onnx::DataType;
        let n = c.ints.len().max(c.f32_bits.len());
        Ok(match c.dtype {
            DataType::Float => {
                let bytes: Vec<u8> = c.f32_bits.iter().flat_map(|b| b.to_le_bytes()).collect();
                ("Vec<f32>".into(), format!("blob.f32s({}, {n})", self.blob.add(&bytes)))
            }
            DataType::Uint8 => {
                let bytes: Vec<u8> = c.ints.iter().map(|&v| v as u8).collect();
                ("&'static [u8]".into(), format!("blob.u8s({}, {n})", self.blob.add(&bytes)))
            }
            DataType::Int8 => {
                let bytes: Vec<u8> = c.ints.iter().map(|&v| v as i8 as u8).collect();
                ("&'static [i8]".into(), format!("blob.i8s({}, {n})", self.blob.add(&bytes)))
            }
            DataType::Int32 => {
                let bytes: Vec<u8> = c.ints.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
                ("Vec<i32>".into(), format!("blob.i32s({}, {n})", self.blob.add(&bytes)))
            }
            DataType::Int64 => {
                let bytes: Vec<u8> = c.ints.iter().flat_map(|&v| v.to_le_bytes()).collect();
                ("Vec<i64>".into(), format!("blob.i64s({}, {n})", self.blob.add(&bytes)))
            }
            other => return Err(format!("a constant of type {} is not supported by the Rust target", other.as_str_name())),
        })
    }

    fn window(w: &Window) -> String {
        format!(
            "PoolParams {{ kernel: vec!{}, strides: vec!{}, pads: vec!{}, dilations: vec!{}, ceil_mode: {} }}",
            list(&w.kernel),
            list(&w.strides),
            list(&w.pads),
            list(&w.dilations),
            w.ceil_mode
        )
    }

    /// An optional input's slice as an `Option` expression.
    fn optional_slice(&mut self, name: Option<&String>) -> Result<String, String> {
        Ok(match name {
            Some(v) => format!("Some({})", self.slice(v)?),
            None => "None".into(),
        })
    }

    /// The node's requantization plan; `ctor` is `conv` or `gemm` (the shape its kernel reads).
    fn requant(&mut self, i: usize, op: &Op, int: &Integer, ctor: &str) -> Result<String, String> {
        let bias = match &int.bias {
            Some(b) => {
                let c = self.p.values.constant(b)?;
                if c.dtype != qdqc_lang::onnx::DataType::Int32 || c.ints.len() != int.channels {
                    return Err(format!("bias '{b}' must be {} int32 codes", int.channels));
                }
                self.load(&c)?.1
            }
            None => "Vec::new()".into(),
        };
        let field = format!("p{}.n{i}_rq", self.part);
        let code = if op.elem == Elem::U8 { "Code::U8" } else { "Code::I8" };
        let init = format!(
            "Requant::{ctor}(f32::from_bits({:#010x}), &{}, f32::from_bits({:#010x}), {bias}, &{}, {}, {code}, {}, {})?",
            int.x.scale,
            self.f32_init(&int.weight_scales),
            int.y.scale,
            self.f32_init(&int.bias_scales),
            int.y.zero_point,
            int.channels,
            str_lit(&op.node)
        );
        self.fields.push((field.clone(), "Requant".into(), init));
        Ok(field)
    }

    /// An f32 list for `Model::new`: a literal when short, read from the blob otherwise (per-channel
    /// scale lists as literals cost rustc more than their bytes).
    fn f32_init(&mut self, bits: &[u32]) -> String {
        if bits.len() <= 4 {
            return f32_list(bits);
        }
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        format!("blob.f32s({}, {})", self.blob.add(&bytes), bits.len())
    }

    /// A convolution's weights packed now, by the kernel crate's own `PackedConv::from_i8`/
    /// `from_u8` (the layout of the lowering its attributes select): the blob holds the packed
    /// rows, their sums and the zero points, and `Model::new` borrows them
    /// (`PackedConv::from_packed`), so nothing is packed or copied at load and the weights in
    /// ONNX layout are not in the blob at all; where the AVX2 path splits the rows for
    /// `vpmaddubsw`, the pair-safe rows and their excess too (`PackedConv::with_split`).
    fn packed_conv(&mut self, int: &Integer, params: &ConvParams, err: &str) -> Result<String, String> {
        let w = self.p.values.constant(&int.weights)?;
        let packed = match int.weight_elem {
            Elem::I8 => {
                let (b, z): (Vec<i8>, Vec<i8>) = (w.ints.iter().map(|&v| v as i8).collect(), int.weight_zps.iter().map(|&v| v as i8).collect());
                PackedConv::from_i8(params.clone(), &b, &z)
            }
            Elem::U8 => {
                let (b, z): (Vec<u8>, Vec<u8>) = (w.ints.iter().map(|&v| v as u8).collect(), int.weight_zps.iter().map(|&v| v as u8).collect());
                PackedConv::from_u8(params.clone(), &b, &z)
            }
            other => return Err(format!("convolution weights of type {other:?}")),
        }
        .map_err(|e| format!("weights '{}': {e}", int.weights))?;
        let data: Vec<u8> = packed.data().iter().map(|&v| v as u8).collect();
        let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // The AVX2 path's pair-safe rows in one section, the weights they replace in another (the
        // excess, read at load, with the sums): that path reads the rows in place of a copy per
        // call, and a host maps the pages of one form only.
        let (at, split) = match packed.split_ahead() {
            Some((safe, starts, entries)) => {
                let (rows, weights) = (Section::SplitRows, Section::SplitWeights);
                let safe: Vec<u8> = safe.iter().map(|&v| v as u8).collect();
                let split = format!(
                    ".and_then(|c| c.with_split(blob.i8s({} + {}, {}), &blob.i32s({}, {}), &blob.i32s({}, {})))",
                    rows.name(),
                    self.blob.add_to(rows, &safe),
                    safe.len(),
                    self.blob.add(&i32s(&starts)),
                    starts.len(),
                    self.blob.add(&i32s(&entries)),
                    entries.len(),
                );
                (format!("{} + {}", weights.name(), self.blob.add_to(weights, &data)), split)
            }
            None => (self.blob.add(&data).to_string(), String::new()),
        };
        let sums = match packed.sums() {
            [] => "Vec::new()".to_string(),
            v => format!("blob.i32s({}, {})", self.blob.add(&i32s(v)), v.len()),
        };
        let zps = packed.zero_points();
        Ok(format!(
            "PackedConv::from_packed({}, blob.i8s({at}, {}), {sums}, blob.i32s({}, {})){split}.map_err({err})?",
            conv_params(params),
            data.len(),
            self.blob.add(&i32s(zps)),
            zps.len()
        ))
    }

    /// A GEMM's weight operand packed now, by the kernel crate's own `PackedB::from_i8`/`from_u8`:
    /// the blob holds the packed bytes, column sums and zero points, and `Model::new` borrows them
    /// (`PackedB::from_packed`), so nothing is copied at load and the weights in ONNX layout are
    /// not in the blob at all.
    #[allow(clippy::too_many_arguments)] // the operand's description, spelled out
    fn packed_b(&mut self, weights: &str, elem: Elem, k: usize, n: usize, layout: Layout, zps: &[i64], err: &str) -> Result<String, String> {
        let w = self.p.values.constant(weights)?;
        let packed = match elem {
            Elem::I8 => {
                let (b, z): (Vec<i8>, Vec<i8>) = (w.ints.iter().map(|&v| v as i8).collect(), zps.iter().map(|&v| v as i8).collect());
                PackedB::from_i8(&b, k, n, layout, &z)
            }
            Elem::U8 => {
                let (b, z): (Vec<u8>, Vec<u8>) = (w.ints.iter().map(|&v| v as u8).collect(), zps.iter().map(|&v| v as u8).collect());
                PackedB::from_u8(&b, k, n, layout, &z)
            }
            other => return Err(format!("GEMM weights of type {other:?}")),
        }
        .map_err(|e| format!("weights '{weights}': {e}"))?;
        let data: Vec<u8> = packed.data().iter().map(|&v| v as u8).collect();
        let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (sums, zero_points) = (i32s(packed.col_sums()), i32s(packed.zero_points()));
        Ok(format!(
            "PackedB::from_packed(blob.i8s({}, {}), {k}, {n}, blob.i32s({}, {n}), blob.i32s({}, {n})).map_err({err})?",
            self.blob.add(&data),
            data.len(),
            self.blob.add(&sums),
            self.blob.add(&zero_points)
        ))
    }

    /// qdqc's A8W8MatMul: the packed weights and the epilogue's plan as fields
    /// (`qdqc_kernels::a8w8::A8W8`), then one call on the activation codes (int8 shifted to u8).
    fn a8w8(&mut self, i: usize, op: &Op, a: &A8W8) -> Result<String, String> {
        let node = str_lit(&op.node);
        let x0 = op.inputs[0].as_str();
        let x_elem = match self.place(x0)? {
            Place::Input(k) => self.p.inputs[k].1,
            Place::Slot(e, _) => e,
            Place::Field(_) => return Err("A8W8MatMul of a constant activation".into()),
        };
        let shift = if x_elem == Elem::I8 { 128 } else { 0 };
        let layout = if a.trans_b { Layout::NK } else { Layout::KN };
        let field = format!("p{}.n{i}_a8w8", self.part);
        let err = format!("|e| Error::Kernel(format!(\"{{}}: {{e}}\", {node}))");
        let packed = self.packed_b(&a.weights, a.weight_elem, a.k, a.n, layout, &a.weight_zps, &err)?;
        let bias = match &a.bias {
            Some(name) => {
                let c = self.p.values.constant(name)?;
                if c.dtype != qdqc_lang::onnx::DataType::Int32 || ![1, a.n].contains(&c.ints.len()) {
                    return Err(format!("bias '{name}' must be {} int32 codes", a.n));
                }
                let codes: Vec<i64> = (0..a.n).map(|j| c.ints[if c.ints.len() == 1 { 0 } else { j }]).collect();
                let bytes: Vec<u8> = codes.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
                format!("blob.i32s({}, {})", self.blob.add(&bytes), a.n)
            }
            None => "Vec::new()".into(),
        };
        let zx: Vec<i64> = a.x_zps.iter().map(|z| z + shift).collect();
        let zx_bytes: Vec<u8> = zx.iter().flat_map(|&z| (z as i32).to_le_bytes()).collect();
        let code = if op.elem == Elem::U8 { "Code::U8" } else { "Code::I8" };
        let init = format!(
            "{{ let b = {packed}; let plan = qdqc_kernels::a8w8::A8W8::new(&b, &{}, &blob.i32s({}, {}), &{}, &{bias}, &{}, f32::from_bits({:#010x}), qdqc_kernels::requant::Output::new({}, {code}).map_err({err})?).map_err({err})?.with_inner({}); (b, plan) }}",
            self.f32_init(&a.x_scales),
            self.blob.add(&zx_bytes),
            zx.len(),
            self.f32_init(&a.weight_scales),
            self.f32_init(&a.bias_scales),
            a.y.scale,
            a.y.zero_point,
            a.inner
        );
        let init = if a.float_output {
            format!(
                "{{ let b = {packed}; let plan = qdqc_kernels::a8w8::A8W8::float(&b, &{}, &blob.i32s({}, {}), &{}).map_err({err})?.with_inner({}); (b, plan) }}",
                self.f32_init(&a.x_scales),
                self.blob.add(&zx_bytes),
                zx.len(),
                self.f32_init(&a.weight_scales),
                a.inner
            )
        } else {
            init
        };
        // One field: the plan is made from the packed weights' column sums.
        self.fields.push((field.clone(), "(PackedB, qdqc_kernels::a8w8::A8W8)".into(), init));
        let xt = x_elem.rust();
        let run = if a.float_output { "run_f32" } else { "run" };
        Ok(format!(
            "{{ let s = &mut ws.scratch; s.acc.resize(y.len(), 0); let a = <{xt} as AsU8>::as_u8({}, &mut s.codes); self.{field}.1.{run}(self.k, a, ({}) / {}, &self.{field}.0, &mut s.acc, &mut y).map_err({err})?; }}",
            self.slice(x0)?,
            self.numel(x0)?,
            a.k
        ))
    }

    /// qdqc's DynamicMatMul (`Granularity::Tensor`, ORT's DynamicQuantizeLinear) or
    /// RowDynamicMatMul (`Granularity::RowBy`: each row's parameters by the graph's recipe, the
    /// output correctly rounded): one `DynamicMatMul` plan over weights packed at compile time,
    /// the activations quantized into the workspace's scratch each run.
    fn dynamic(&mut self, i: usize, op: &Op, d: &Dynamic, recipe: Option<qdqc_kernels::dynamic::Recipe>) -> Result<String, String> {
        let node = str_lit(&op.node);
        let x0 = op.inputs[0].as_str();
        let (what, suffix) = if recipe.is_some() { ("RowDynamicMatMul", "row_dynamic") } else { ("DynamicMatMul", "dynamic") };
        if let Place::Field(_) = self.place(x0)? {
            return Err(format!("{what} of a constant activation"));
        }
        let field = format!("p{}.n{i}_{suffix}", self.part);
        let err = format!("|e| Error::Kernel(format!(\"{{}}: {{e}}\", {node}))");
        let packed = self.packed_b(&d.weights, d.weight_elem, d.k, d.n, Layout::KN, &d.weight_zps, &err)?;
        // Recipe's Debug form is its struct literal.
        let granularity = recipe.map_or("Tensor".to_string(), |r| format!("RowBy(qdqc_kernels::dynamic::Recipe::{r:?})"));
        let epilogue = if d.correctly_rounded { "Real" } else { "Graph" };
        let init = format!(
            "{{ let b = {packed}; let plan = qdqc_kernels::dynamic::DynamicMatMul::new(&b, &{}, qdqc_kernels::dynamic::Granularity::{granularity}, qdqc_kernels::dynamic::Epilogue::{epilogue}).map_err({err})?; (b, plan) }}",
            self.f32_init(&d.weight_scales)
        );
        self.fields.push((field.clone(), "(PackedB, qdqc_kernels::dynamic::DynamicMatMul)".into(), init));
        let x = self.slice(x0)?;
        Ok(format!(
            "{{ let x = {x}; let s = &mut ws.scratch; s.codes.resize(x.len(), 0); s.acc.resize(y.len(), 0); entry::dynamic_matmul_f32(&self.{field}.1, self.k, x, ({}) / {}, &self.{field}.0, &mut s.codes, &mut s.acc, &mut y).map_err({err})?; }}",
            self.numel(x0)?,
            d.k
        ))
    }

    /// One op: field initializers (pushed) and the statement block.
    fn op(&mut self, i: usize, op: &Op) -> Result<String, String> {
        for (k, x) in op.inputs.iter().enumerate() {
            // The weight-only MatMul's weight is its own packed field (`weight_only_field`).
            if (k == 1 && matches!(op.kind, Kind::WeightOnly(_))) || (k == 0 && matches!(op.kind, Kind::GatherWeights { .. })) {
                continue;
            }
            let dequantized = self.p.values.is_dequantized(x);
            if dequantized && op.kind.decodes(k) {
                self.quantized_field(x)?;
            } else {
                self.tensor_field(x)?;
            }
        }
        let node = str_lit(&op.node);
        let (yt, x0) = (op.elem.rust(), op.inputs.first().map(String::as_str).unwrap_or(""));
        let xt = |e: &Self, name: &str| -> Result<&'static str, String> {
            Ok(match e.place(name)? {
                Place::Input(k) => e.p.inputs[k].1.rust(),
                Place::Slot(el, _) => el.rust(),
                Place::Field(_) => {
                    let c = e.p.values.constant(name)?;
                    super::values::Elem::of(c.dtype).ok_or("constant type")?.rust()
                }
            })
        };
        let body = match &op.kind {
            Kind::Quantize { axis, scales, zps } => format!(
                "entry::quantize_linear_{yt}({}, &{}, {axis}, &{}, &{}, &mut y).map_err(codes_err({node}))?;",
                self.slice(x0)?,
                self.shape(x0)?,
                f32_list(scales),
                list(zps)
            ),
            Kind::Dequantize { axis, scales, zps } => format!(
                "entry::dequantize_linear_{}({}, &{}, {axis}, &{}, &{}, &mut y).map_err(codes_err({node}))?;",
                xt(self, x0)?,
                self.slice(x0)?,
                self.shape(x0)?,
                f32_list(scales),
                list(zps)
            ),
            Kind::Conv { int, groups, window } => {
                let shape = self.p.values.shape(x0)?;
                let in_channels = match shape.get(1) {
                    Some(Extent::Fixed(c)) => *c,
                    _ => return Err("QLinearConv needs a fixed channel count".into()),
                };
                let params = conv_window(in_channels, int.channels, *groups, window);
                let field = format!("p{}.n{i}_conv", self.part);
                let err = format!("|e| Error::Kernel(format!(\"{{}}: {{e}}\", {node}))");
                let packed = self.packed_conv(int, &params, &err)?;
                self.fields.push((field.clone(), "PackedConv".into(), packed));
                let rq = self.requant(i, op, int, "conv")?;
                format!(
                    "qlinear_conv::<{}, {yt}>(self.k, &self.{field}, &self.{rq}, {}, &{}, {}, &mut y, &mut ws.scratch, {node})?;",
                    xt(self, x0)?,
                    self.slice(x0)?,
                    self.shape(x0)?,
                    int.x.zero_point
                )
            }
            Kind::Gemm { int, k, n, trans_b } => {
                let layout = if *trans_b { Layout::NK } else { Layout::KN };
                let field = format!("p{}.n{i}_b", self.part);
                let err = format!("|e| Error::Kernel(format!(\"{{}}: {{e}}\", {node}))");
                let packed = self.packed_b(&int.weights, int.weight_elem, *k, *n, layout, &int.weight_zps, &err)?;
                self.fields.push((field.clone(), "PackedB".into(), packed));
                let rq = self.requant(i, op, int, "gemm")?;
                format!(
                    "qlinear_gemm::<{}, {yt}>(self.k, &self.{field}, &self.{rq}, {}, ({}) / {k}, {}, &mut y, &mut ws.scratch, {node})?;",
                    xt(self, x0)?,
                    self.slice(x0)?,
                    self.numel(x0)?,
                    int.x.zero_point
                )
            }
            Kind::A8W8(a) => self.a8w8(i, op, a)?,
            Kind::Dynamic(d) => self.dynamic(i, op, d, None)?,
            Kind::RowDynamic(d, recipe) => self.dynamic(i, op, d, Some(*recipe))?,
            Kind::Binary { mul, a, b, y } => {
                let (at, bt) = (xt(self, &op.inputs[0])?, xt(self, &op.inputs[1])?);
                let field = format!("p{}.n{i}_binary", self.part);
                let bop = binary_op(*mul);
                self.fields.push((
                    field.clone(),
                    format!("Binary<{at}, {bt}, {yt}>"),
                    format!("entry::binary_new_{at}_{bt}_{yt}({bop}, {}, {}, {}).map_err(codes_err({node}))?", q_expr(*a), q_expr(*b), q_expr(*y)),
                ));
                format!(
                    "entry::binary_{at}_{bt}_{yt}(&self.{field}, self.k, {}, &{}, {}, &{}, &mut y).map_err(codes_err({node}))?;",
                    self.slice(&op.inputs[0])?,
                    self.shape(&op.inputs[0])?,
                    self.slice(&op.inputs[1])?,
                    self.shape(&op.inputs[1])?
                )
            }
            Kind::MatMulCodes { a, b, y } => {
                let (at, bt) = (xt(self, &op.inputs[0])?, xt(self, &op.inputs[1])?);
                let code = |t: &str| if t == "u8" { "Code::U8" } else { "Code::I8" };
                let field = format!("p{}.n{i}_matmul", self.part);
                let err = format!("|e| Error::Kernel(format!(\"{{}}: {{e}}\", {node}))");
                self.fields.push((
                    field.clone(),
                    "qdqc_kernels::matmul_codes::MatMulCodes".into(),
                    format!(
                        "qdqc_kernels::matmul_codes::MatMulCodes::new(f32::from_bits({:#010x}), {}, {}, f32::from_bits({:#010x}), {}, {}, f32::from_bits({:#010x}), {}, {}).map_err({err})?",
                        a.scale,
                        a.zero_point,
                        code(at),
                        b.scale,
                        b.zero_point,
                        code(bt),
                        y.scale,
                        y.zero_point,
                        code(yt)
                    ),
                ));
                format!(
                    "entry::matmul_codes_{at}_{bt}_{yt}(&self.{field}, self.k, {}, &{}, {}, &{}, &mut y).map_err({err})?;",
                    self.slice(&op.inputs[0])?,
                    self.shape(&op.inputs[0])?,
                    self.slice(&op.inputs[1])?,
                    self.shape(&op.inputs[1])?
                )
            }
            Kind::AveragePool { window, count_include_pad, x, y } => {
                let field = format!("p{}.n{i}_pool", self.part);
                self.fields.push((field.clone(), "PoolParams".into(), Self::window(window)));
                format!(
                    "entry::average_pool_{}_{yt}({}, &{}, &self.{field}, {count_include_pad}, {}, {}, &mut y).map_err(codes_err({node}))?;",
                    xt(self, x0)?,
                    self.slice(x0)?,
                    self.shape(x0)?,
                    q_expr(*x),
                    q_expr(*y)
                )
            }
            Kind::GlobalAveragePool { x, y } => format!(
                "entry::global_average_pool_{}_{yt}({}, &{}, {}, {}, &mut y).map_err(codes_err({node}))?;",
                xt(self, x0)?,
                self.slice(x0)?,
                self.shape(x0)?,
                q_expr(*x),
                q_expr(*y)
            ),
            Kind::MaxPool { window } => {
                let field = format!("p{}.n{i}_pool", self.part);
                self.fields.push((field.clone(), "PoolParams".into(), Self::window(window)));
                format!("entry::max_pool_{yt}({}, &{}, &self.{field}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?, self.shape(x0)?)
            }
            Kind::Concat { axis, requant } => {
                let (mut pre, mut post) = (String::new(), String::new());
                let mut parts = Vec::new();
                for (j, (x, rq)) in op.inputs.iter().zip(requant).enumerate() {
                    let (slice, shape) = (self.slice(x)?, self.shape(x)?);
                    match rq {
                        None => parts.push(format!("({slice}, &{shape}[..])")),
                        Some((qx, qy)) => {
                            let field = format!("p{}.n{i}_t{j}", self.part);
                            let xty = xt(self, x)?;
                            self.fields.push((
                                field.clone(),
                                format!("[{yt}; 256]"),
                                format!("entry::requant_table_{xty}_{yt}({}, {}).map_err(codes_err({node}))?", q_expr(*qx), q_expr(*qy)),
                            ));
                            // The requantized input in the workspace's buffer for position j, given back after.
                            writeln!(pre, "        let r{j} = ws.scratch.mapped_{yt}.mapped({j}, {slice}, &self.{field});").unwrap();
                            writeln!(post, "        ws.scratch.mapped_{yt}.give_back({j}, r{j});").unwrap();
                            parts.push(format!("(&r{j}[..], &{shape}[..])"));
                        }
                    }
                }
                let post = if post.is_empty() { post } else { format!("\n{}", post.trim_end()) };
                format!("{pre}        entry::concat_{yt}(&[{}], {axis}, &mut y).map_err(codes_err({node}))?;{post}", parts.join(", "))
            }
            Kind::Reshape => format!("y.copy_from_slice({});", self.slice(x0)?),
            Kind::UnaryTable { x, steps, y, pair } => {
                let field = format!("p{}.n{i}_table", self.part);
                let xt = xt(self, x0)?;
                self.fields.push((field.clone(), format!("[{yt}; 256]"), unary_table(xt, yt, *x, steps, *y, pair.as_ref(), &node)?));
                format!("entry::apply_lut_{xt}_{yt}(self.k, &self.{field}, {}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?)
            }
            Kind::FloatScalar { .. } => return Err("a unary table's step outside a table".into()),
            Kind::CodeTable { steps } => {
                let field = format!("p{}.n{i}_table", self.part);
                let xt = xt(self, x0)?;
                self.fields.push((field.clone(), format!("[{yt}; 256]"), code_table(xt, steps)?));
                format!("entry::apply_lut_{xt}_{yt}(self.k, &self.{field}, {}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?)
            }
            Kind::Lut { table } => {
                let field = format!("p{}.n{i}_table", self.part);
                self.fields.push((field.clone(), format!("[{yt}; 256]"), list(table)));
                format!("entry::apply_lut_{}_{yt}(self.k, &self.{field}, {}, &mut y).map_err(codes_err({node}))?;", xt(self, x0)?, self.slice(x0)?)
            }
            Kind::Resize { linear: false, transform, nearest, scales, sizes } => {
                let target = match (scales, sizes) {
                    (Some(s), _) => format!("codes::movement::ResizeTarget::Scales(&{})", f32_list(s)),
                    (None, Some(z)) => format!("codes::movement::ResizeTarget::Sizes(&{})", list(z)),
                    (None, None) => return Err("Resize needs scales or sizes".into()),
                };
                format!(
                    "entry::resize_nearest_{yt}({}, &{}, {target}, codes::movement::CoordinateTransform::{transform}, codes::movement::NearestMode::{nearest}, &mut y).map_err(codes_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?
                )
            }
            Kind::Resize { linear: true, transform, scales, .. } => {
                let scales = match scales {
                    Some(s) => f32_list(s),
                    None => {
                        // Sizes: ONNX Runtime's scales are output/input in f32.
                        let (i, o) = (self.p.values.shape(x0)?, self.p.values.shape(&op.output)?);
                        let v: Vec<String> = i.iter().zip(&o).map(|(a, b)| format!("({} as f32 / {} as f32)", self.dim(b), self.dim(a))).collect();
                        format!("[{}]", v.join(", "))
                    }
                };
                format!(
                    "float::resize::resize_linear({}, &{}, &{}, &{scales}, float::resize::Coordinates::{transform}, &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?,
                    self.shape(&op.output)?
                )
            }
            Kind::FloatBinary { op: f } => {
                format!(
                    "float::elementwise::binary_operands(float::elementwise::Binary::{f}, {}, &{}, {}, &{}, &mut y).map_err(float_err({node}))?;",
                    self.operand(&op.inputs[0])?,
                    self.shape(&op.inputs[0])?,
                    self.operand(&op.inputs[1])?,
                    self.shape(&op.inputs[1])?
                )
            }
            Kind::FloatMap { map } => format!("float::elementwise::map(float::elementwise::{map}, {}, &mut y).map_err(float_err({node}))?;", self.slice(x0)?),
            Kind::FloatConv { groups, window } => {
                let bias = self.optional_operand(op.inputs.get(2))?;
                let (xs, ws) = (self.p.values.shape(x0)?, self.p.values.shape(&op.inputs[1])?);
                let (Some(Extent::Fixed(cin)), Some(Extent::Fixed(cout))) = (xs.get(1), ws.first()) else {
                    return Err("Conv needs fixed channel counts".into());
                };
                let field = format!("p{}.n{i}_params", self.part);
                self.fields.push((field.clone(), "ConvParams".into(), conv_params(&conv_window(*cin, *cout, *groups, window))));
                let spatial: Vec<String> = xs[2..].iter().map(|e| self.dim(e)).collect();
                let batch = self.dim(&xs[0]);
                format!(
                    "float::conv::conv_operands(self.k, &self.{field}, {}, {batch}, &[{}], {}, {bias}, &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    spatial.join(", "),
                    self.operand(&op.inputs[1])?
                )
            }
            Kind::FloatConvTranspose { groups, window, output_padding } => {
                let bias = self.optional_operand(op.inputs.get(2))?;
                let (xs, ws) = (self.p.values.shape(x0)?, self.p.values.shape(&op.inputs[1])?);
                let (Some(Extent::Fixed(cin)), Some(Extent::Fixed(per_group))) = (xs.get(1), ws.get(1)) else {
                    return Err("ConvTranspose needs fixed channel counts".into());
                };
                let rank = window.kernel.len();
                let params = format!(
                    "float::conv_transpose::ConvTransposeParams {{ in_channels: {cin}, out_channels: {}, groups: {groups}, kernel: vec!{}, strides: vec!{}, dilations: vec!{}, pads_begin: vec!{}, pads_end: vec!{}, output_padding: vec!{} }}",
                    per_group * groups,
                    list(&window.kernel),
                    list(&window.strides),
                    list(&window.dilations),
                    list(&window.pads[..rank]),
                    list(&window.pads[rank..]),
                    list(output_padding)
                );
                let field = format!("p{}.n{i}_params", self.part);
                self.fields.push((field.clone(), "float::conv_transpose::ConvTransposeParams".into(), params));
                let spatial: Vec<String> = xs[2..].iter().map(|e| self.dim(e)).collect();
                let batch = self.dim(&xs[0]);
                format!(
                    "float::conv_transpose::conv_transpose_operands(&self.{field}, {}, {batch}, &[{}], {}, {bias}, &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    spatial.join(", "),
                    self.operand(&op.inputs[1])?
                )
            }
            Kind::FloatGemm { alpha, beta, trans_a, trans_b } => {
                let c = match op.inputs.get(2) {
                    Some(c) => format!("Some(({}, &{}[..]))", self.operand(c)?, self.shape(c)?),
                    None => "None".into(),
                };
                let (a, b) = (self.p.values.shape(x0)?, self.p.values.shape(&op.inputs[1])?);
                if a.len() != 2 || b.len() != 2 {
                    return Err("Gemm operands of rank other than 2".into());
                }
                let (a0, a1, b0, b1) = (self.dim(&a[0]), self.dim(&a[1]), self.dim(&b[0]), self.dim(&b[1]));
                format!(
                    "float::gemm::gemm_operands(self.k, &float::gemm::GemmParams {{ alpha: f32::from_bits({alpha:#010x}), beta: f32::from_bits({beta:#010x}), trans_a: {trans_a}, trans_b: {trans_b} }}, {}, [{a0}, {a1}], {}, [{b0}, {b1}], {c}, &mut y).map_err(float_err({node}))?;",
                    self.operand(x0)?,
                    self.operand(&op.inputs[1])?
                )
            }
            Kind::FloatPool { max, window, count_include_pad } => {
                let rank = window.kernel.len();
                let field = format!("p{}.n{i}_fpool", self.part);
                let params = format!(
                    "float::pool::PoolParams {{ kernel: vec!{}, strides: vec!{}, dilations: vec!{}, pads_begin: vec!{}, pads_end: vec!{}, ceil_mode: {}, count_include_pad: {count_include_pad} }}",
                    list(&window.kernel),
                    list(&window.strides),
                    list(&window.dilations),
                    list(&window.pads[..rank]),
                    list(&window.pads[rank..]),
                    window.ceil_mode
                );
                self.fields.push((field.clone(), "float::pool::PoolParams".into(), params));
                let xs = self.p.values.shape(x0)?;
                let planes: Vec<String> = xs[..2].iter().map(|e| self.dim(e)).collect();
                let spatial: Vec<String> = xs[2..].iter().map(|e| self.dim(e)).collect();
                let kind = if *max { "Max" } else { "Average" };
                format!(
                    "float::pool::pool(float::pool::PoolKind::{kind}, &self.{field}, {}, {}, &[{}], &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    planes.join(" * "),
                    spatial.join(", ")
                )
            }
            Kind::FloatGlobalAveragePool | Kind::FloatGlobalMaxPool => {
                let kind = if matches!(op.kind, Kind::FloatGlobalMaxPool) { "Max" } else { "Average" };
                let xs = self.p.values.shape(x0)?;
                let planes: Vec<String> = xs[..2].iter().map(|e| self.dim(e)).collect();
                let plane: Vec<String> = xs[2..].iter().map(|e| self.dim(e)).collect();
                format!(
                    "float::pool::global_pool(float::pool::PoolKind::{kind}, {}, {}, {}, &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    planes.join(" * "),
                    plane.join(" * ")
                )
            }
            Kind::FloatUnary { function } => {
                format!("float::unary::map(self.k, float::unary::Function::{function}, {}, &mut y).map_err(float_err({node}))?;", self.slice(x0)?)
            }
            Kind::SoftmaxCodes { x, y } => {
                let xt = xt(self, x0)?;
                let field = format!("p{}.n{i}_softmax", self.part);
                self.fields.push((
                    field.clone(),
                    format!("qdqc_kernels::codes::softmax::SoftmaxCodes<{xt}>"),
                    format!(
                        "entry::softmax_codes_new_{xt}(f32::from_bits({:#010x}), {}, f32::from_bits({:#010x}), {}).map_err(codes_err({node}))?",
                        x.scale, x.zero_point, y.scale, y.zero_point
                    ),
                ));
                format!("entry::softmax_codes_{xt}_{yt}(&self.{field}, self.k, {}, &{}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?, self.shape(x0)?)
            }
            Kind::Softmax { axis } => {
                format!("float::softmax::softmax(self.k, {}, &{}, {axis}, &mut y).map_err(float_err({node}))?;", self.slice(x0)?, self.shape(x0)?)
            }
            Kind::LayerNorm { axis, epsilon } => {
                let xs = self.p.values.shape(x0)?;
                let product = |this: &mut Self, dims: &[Extent]| {
                    let d: Vec<String> = dims.iter().map(|e| this.dim(e)).collect();
                    if d.is_empty() { "1".to_string() } else { d.join(" * ") }
                };
                let (rows, size) = (product(self, &xs[..*axis]), product(self, &xs[*axis..]));
                let bias = self.optional_operand(op.inputs.get(2))?;
                format!(
                    "float::norm::layer_norm_operands(self.k, {}, {rows}, {size}, {}, {bias}, f32::from_bits({epsilon:#010x}), &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    self.operand(&op.inputs[1])?
                )
            }
            Kind::BatchNorm { epsilon } => {
                let xs = self.p.values.shape(x0)?;
                if xs.len() < 2 {
                    return Err("BatchNormalization input of rank < 2".into());
                }
                let batch = self.dim(&xs[0]);
                let channels = self.dim(&xs[1]);
                let spatial: Vec<String> = xs[2..].iter().map(|e| self.dim(e)).collect();
                let spatial = if spatial.is_empty() { "1".to_string() } else { spatial.join(" * ") };
                let params = op.inputs[1..5].iter().map(|p| self.operand(p)).collect::<Result<Vec<_>, _>>()?;
                format!(
                    "float::norm::batch_norm_operands(self.k, {}, {batch}, {channels}, {spatial}, [{}], f32::from_bits({epsilon:#010x}), &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    params.join(", ")
                )
            }
            Kind::Reduce { reduce, axes } => format!(
                "float::reduce::reduce(float::reduce::Reduce::{reduce}, {}, &{}, &{}, &mut y).map_err(float_err({node}))?;",
                self.slice(x0)?,
                self.shape(x0)?,
                list(axes)
            ),
            Kind::WeightOnly(w) => {
                let field = self.weight_only_field(&op.inputs[1], w, &op.node);
                format!("self.{field}.matmul(self.k, {}, &{}, &mut y).map_err(float_err({node}))?;", self.slice(x0)?, self.shape(x0)?)
            }
            Kind::GatherWeights { axis, weights } => {
                let field = self.weight_only_field(x0, weights, &op.node);
                let x1 = op.inputs[1].as_str();
                format!("self.{field}.gather({axis}, {}, &mut y).map_err(float_err({node}))?;", self.slice(x1)?)
            }
            Kind::QuantizeBy { axis, block } => {
                let zp = self.optional_slice(op.inputs.get(2))?;
                format!(
                    "entry::quantize_by_{yt}({}, &{}, {}, &{}, {zp}, {axis}, {block}, &mut y).map_err(codes_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?,
                    self.slice(&op.inputs[1])?,
                    self.shape(&op.inputs[1])?
                )
            }
            Kind::CastToCode => format!("entry::cast_to_{yt}({}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?),
            Kind::DequantizeBy { axis, block } => {
                let zp = self.optional_slice(op.inputs.get(2))?;
                format!(
                    "float::dq::dequantize_by({}, &{}, {}, &{}, {zp}, {axis}, {block}, &mut y).map_err(float_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?,
                    self.slice(&op.inputs[1])?,
                    self.shape(&op.inputs[1])?
                )
            }
            Kind::MatMul => format!(
                "float::gemm::matmul_operands(self.k, {}, &{}, {}, &{}, &mut y).map_err(float_err({node}))?;",
                self.operand(x0)?,
                self.shape(x0)?,
                self.operand(&op.inputs[1])?,
                self.shape(&op.inputs[1])?
            ),
            Kind::EqualAsF32 => format!(
                "codes::compare::equal_as_f32({}, &{}, {}, &{}, &mut y).map_err(codes_err({node}))?;",
                self.slice(&op.inputs[0])?,
                self.shape(&op.inputs[0])?,
                self.slice(&op.inputs[1])?,
                self.shape(&op.inputs[1])?
            ),
            Kind::SelectEqual => {
                let operands = op.inputs.iter().map(|x| Ok(format!("({}, &{}[..])", self.slice(x)?, self.shape(x)?))).collect::<Result<Vec<_>, String>>()?;
                format!("codes::compare::select_equal({}, &mut y).map_err(codes_err({node}))?;", operands.join(", "))
            }
            Kind::Transpose { perm } => {
                format!("entry::transpose_{yt}({}, &{}, &{}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?, self.shape(x0)?, list(perm))
            }
            Kind::Slice { starts, ends, axes, steps } => format!(
                "entry::slice_{yt}({}, &{}, &{}, &{}, &{}, &{}, &mut y).map_err(codes_err({node}))?;",
                self.slice(x0)?,
                self.shape(x0)?,
                i64_list(starts),
                i64_list(ends),
                i64_list(axes),
                i64_list(steps)
            ),
            Kind::Pad { pads, mode, value } => {
                let mode = if *mode == "Constant" { format!("Constant({value})") } else { mode.to_string() };
                format!(
                    "entry::pad_{yt}({}, &{}, &{}, codes::movement::PadMode::{mode}, &mut y).map_err(codes_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?,
                    i64_list(pads)
                )
            }
            Kind::Expand => {
                format!("entry::expand_{yt}({}, &{}, &{}, &mut y).map_err(codes_err({node}))?;", self.slice(x0)?, self.shape(x0)?, self.shape(&op.output)?)
            }
            Kind::GatherBy { axis } => {
                let x1 = op.inputs[1].as_str();
                format!(
                    "entry::gather_{yt}({}, &{}, {axis}, {}, &{}, &mut y).map_err(codes_err({node}))?;",
                    self.slice(x0)?,
                    self.shape(x0)?,
                    self.slice(x1)?,
                    self.shape(x1)?
                )
            }
            Kind::Gather { axis, indices, indices_shape } => format!(
                "entry::gather_{yt}({}, &{}, {axis}, &{}, &{}, &mut y).map_err(codes_err({node}))?;",
                self.slice(x0)?,
                self.shape(x0)?,
                i64_list(indices),
                list(indices_shape)
            ),
        };
        let (e, s) = self.p.plan.slot[&op.output];
        let n = self.numel(&op.output)?;
        let mut out = String::new();
        writeln!(out, "        // {} ({})", op.node, op.output).unwrap();
        writeln!(out, "        let mut y = slot(&mut ws.{}[{s}], {n});", e.rust()).unwrap();
        let body = if body.starts_with("        ") { body } else { format!("        {body}") };
        writeln!(out, "{body}").unwrap();
        if op.elem.is_code() {
            self.reads.borrow_mut().observe = true;
            writeln!(out, "        observe_{}(observe, {}, &{}, &y);", op.elem.rust(), str_lit(&op.output), self.shape(&op.output)?).unwrap();
        }
        writeln!(out, "        ws.{}[{s}] = y;", e.rust()).unwrap();
        Ok(out)
    }
}

/// `src/lib.rs` and the blob.
pub fn lib_rs(p: &Program) -> Result<(String, Vec<u8>), String> {
    let mut e = Emitter {
        p,
        blob: Blob::default(),
        fields: Vec::new(),
        tensors: BTreeMap::new(),
        quantized: BTreeMap::new(),
        packed: BTreeMap::new(),
        names: Vec::new(),
        reads: RefCell::default(),
        part: 0,
    };
    // First pass: every op's flat text, its fields named `p{op}.{name}` (their owner op), and
    // what it reads; then the blocks that repeat and the parts between them (`repeat.rs`).
    let mut texts = Vec::new();
    let mut op_reads = Vec::new();
    for (i, op) in p.ops.iter().enumerate() {
        e.part = i;
        texts.push(e.op(i, op).map_err(|m| format!("node '{}': {m}", op.node))?);
        op_reads.push(e.reads.take());
    }
    let layout = Arrangement::new(&texts, &e.fields, OPS_PER_PART);
    let mut op_reads = op_reads.into_iter().map(Some).collect::<Vec<_>>();
    let mut take_reads = |ops: std::ops::Range<usize>| ops.fold(Reads::default(), |r, i| r.merge(op_reads[i].take().unwrap_or_default()));
    let mut segments: Vec<(String, Reads)> = Vec::new();
    for s in &layout.segments {
        match s {
            Segment::Flat(ops) => {
                let text: String = ops.clone().map(|i| layout.flat(&texts[i], &e.fields)).collect();
                segments.push((text, take_reads(ops.clone())));
            }
            Segment::Block(b) => {
                let bl = &layout.blocks[*b];
                let ops = bl.start..bl.start + bl.len * bl.layers;
                segments.push((block_body(&layout, *b, &texts, &e.fields)?, take_reads(ops)));
            }
        }
    }
    let mut decl = Vec::new();
    for (name, elem, shape) in &p.inputs {
        let dims: Vec<String> = shape
            .iter()
            .map(|d| match d {
                Extent::Fixed(n) => format!("Dim::Fixed({n})"),
                Extent::Named(s) => {
                    e.dim(d);
                    format!("Dim::Named({s:?})")
                }
            })
            .collect();
        decl.push(format!("    ({name:?}, DType::{}, &[{}]),", elem.variant(), dims.join(", ")));
    }
    e.reads.take();
    let mut outs = Vec::new();
    for o in &p.outputs {
        let Place::Slot(el, s) = e.place(o)? else { return Err(format!("graph output '{o}' is not computed by a node")) };
        outs.push(format!("            Value::{}(Tensor {{ shape: {}.to_vec(), data: ws.{}[{s}].clone() }}),", el.variant(), e.shape(o)?, el.rust()));
    }
    let mut src = String::new();
    let w = &mut src;
    writeln!(w, "//! Generated by qdqc (`qdqc compile --target rust`) from {}; do not edit.", p.source).unwrap();
    writeln!(w, "//! `Model::new()` builds the kernels' operands once from `weights.bin`; `Model::run` checks the").unwrap();
    writeln!(w, "//! inputs and runs the ops in order over a workspace of reusable buffers.").unwrap();
    writeln!(w, "#![forbid(unsafe_code)]\n").unwrap();
    writeln!(w, "/// Support code shared by every generated crate.\npub mod runtime;\n").unwrap();
    writeln!(w, "pub use runtime::{{DType, Dim, Error, Tensor, Value}};").unwrap();
    writeln!(w, "#[allow(unused_imports)]\nuse qdqc_kernels::codes::{{self, QCode, binary::{{Binary, BinaryOp}}, pool::PoolParams}};").unwrap();
    writeln!(w, "#[allow(unused_imports)]\nuse qdqc_kernels::{{Kernels, Layout, PackedB, conv::{{ConvParams, PackedConv}}, entry, float, requant::Code}};")
        .unwrap();
    writeln!(w, "#[allow(unused_imports)]\nuse runtime::*;\n").unwrap();
    writeln!(w, "/// 64-byte alignment for the embedded weights.\n#[repr(C, align(64))]\nstruct Aligned<T: ?Sized>(T);\n").unwrap();
    writeln!(w, "static BLOB: &Aligned<[u8]> = &Aligned(*include_bytes!(\"weights.bin\"));\n").unwrap();
    // Known once every op has added its constants: the start of the blob's second section.
    w.push_str(SECTIONS_AT);
    writeln!(w, "/// The graph inputs: name, element type, shape.\npub const INPUTS: &[(&str, DType, &[Dim])] = &[\n{}\n];\n", decl.join("\n")).unwrap();
    let out_names: Vec<String> = p.outputs.iter().map(|o| format!("{o:?}")).collect();
    writeln!(w, "/// The graph outputs, in the order `run` returns them.\npub const OUTPUTS: &[&str] = &[{}];\n", out_names.join(", ")).unwrap();
    let names: Vec<String> = e.names.iter().map(|n| format!("{n:?}")).collect();
    writeln!(w, "/// Named dimensions, bound by the inputs at run time.\nconst NAMES: &[&str] = &[{}];\n", names.join(", ")).unwrap();
    // The operands by part, each part's in a struct of its own built by a function of its own
    // (one `Model::new` initializing every field took LLVM minutes, like one flat `run_with`);
    // a block's per-layer operands in `Layer{B}`, built by one loop, and those every layer shares
    // in `Shared{B}`.
    let mut parts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut shared: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (f, home) in layout.home.iter().enumerate() {
        match home {
            Home::Part(k) => parts.entry(*k).or_default().push(f),
            Home::Shared(b) => shared.entry(*b).or_default().push(f),
            Home::Layer { .. } => {}
        }
    }
    // The Model's fields and their constructors, in program order.
    let mut members: Vec<(String, String, String)> = Vec::new();
    let mut structs = String::new();
    let mut part = 0;
    let plain = |field: String, holder: &str, doc: &str, list: &[usize], members: &mut Vec<(String, String, String)>, structs: &mut String| {
        members.push((field, holder.to_string(), format!("{holder}::new(&blob, k)?")));
        writeln!(structs, "/// {doc}\nstruct {holder} {{").unwrap();
        for &f in list {
            writeln!(structs, "    {}: {},", split(&e.fields[f].0).1, e.fields[f].1).unwrap();
        }
        writeln!(structs, "}}\n").unwrap();
        writeln!(
            structs,
            "impl {holder} {{\n    #[inline(never)]\n    fn new(blob: &Blob, k: Kernels) -> Result<{holder}, Error> {{\n        let _ = (blob, k);\n        Ok({holder} {{"
        )
        .unwrap();
        for &f in list {
            writeln!(structs, "            {}: {},", split(&e.fields[f].0).1, e.fields[f].2).unwrap();
        }
        writeln!(structs, "        }})\n    }}\n}}\n").unwrap();
    };
    for s in &layout.segments {
        match s {
            Segment::Flat(_) => {
                if let Some(list) = parts.get(&part) {
                    plain(format!("p{part}"), &format!("Part{part}"), &format!("The operands of `run_with`'s part {part}."), list, &mut members, &mut structs);
                }
                part += 1;
            }
            Segment::Block(b) => {
                if !layout.blocks[*b].fields.is_empty() {
                    members.push((format!("b{b}"), format!("Vec<Layer{b}>"), format!("Layer{b}::build(&blob, k)?")));
                    structs.push_str(&layer_struct(&layout, *b, &e.fields)?);
                }
                if let Some(list) = shared.get(b) {
                    plain(format!("s{b}"), &format!("Shared{b}"), &format!("The operands every layer of block {b} reads."), list, &mut members, &mut structs);
                }
            }
        }
    }
    writeln!(w, "/// The model: kernel path and every operand built once.\npub struct Model {{\n    k: Kernels,").unwrap();
    for (f, t, _) in &members {
        writeln!(w, "    {f}: {t},").unwrap();
    }
    writeln!(w, "}}\n").unwrap();
    w.push_str(&structs);
    let count = |el: Elem| p.plan.counts.get(&el).copied().unwrap_or(0);
    // f32, u8 and i8 slots always (the runtime's wrappers take them); integer ones where used.
    let slot_elems: Vec<Elem> =
        [Elem::F32, Elem::U8, Elem::I8, Elem::I32, Elem::I64].into_iter().filter(|&el| el.is_code() || el == Elem::F32 || count(el) > 0).collect();
    let ws_fields: String = slot_elems.iter().map(|el| format!("    {0}: Vec<Vec<{0}>>,\n", el.rust())).collect();
    let ws_init: Vec<String> = slot_elems.iter().map(|&el| format!("{}: vec![Vec::new(); {}]", el.rust(), count(el))).collect();
    let ws_bytes: Vec<String> = slot_elems
        .iter()
        .filter(|el| !matches!(el, Elem::F32 | Elem::U8 | Elem::I8))
        .map(|el| format!(" + self.{0}.iter().map(|v| std::mem::size_of::<{0}>() * v.capacity()).sum::<usize>()", el.rust()))
        .collect();
    writeln!(
        w,
        "/// Buffers of one run: a slot per element type reused along the program (static liveness\n/// plan); they grow on the first run (or a larger batch) and are reused after.\npub struct Workspace {{\n{ws_fields}    scratch: Scratch,\n}}\n"
    )
    .unwrap();
    writeln!(
        w,
        "impl Default for Workspace {{\n    fn default() -> Self {{\n        Workspace {{ {}, scratch: Scratch::default() }}\n    }}\n}}\n",
        ws_init.join(", ")
    )
    .unwrap();
    writeln!(
        w,
        "impl Workspace {{\n    /// Bytes the workspace holds (its buffers' capacities).\n    pub fn bytes(&self) -> usize {{\n        let f: usize = self.f32.iter().map(|v| 4 * v.capacity()).sum();\n        let u: usize = self.u8.iter().map(|v| v.capacity()).sum::<usize>() + self.scratch.codes.capacity() + self.scratch.mapped_u8.bytes() + self.scratch.mapped_i8.bytes() + self.i8.iter().map(|v| v.capacity()).sum::<usize>();\n        f + u + 4 * self.scratch.acc.capacity(){}\n    }}\n}}\n",
        ws_bytes.concat()
    )
    .unwrap();
    writeln!(w, "impl Model {{").unwrap();
    writeln!(w, "    /// The kernel path `new()` chose.\n    pub fn kernels(&self) -> Kernels {{\n        self.k\n    }}\n").unwrap();
    writeln!(w, "    /// Builds every operand; the kernel path is `QDQC_KERNELS_ISA` or the host's best (every path gives the same bits).").unwrap();
    writeln!(w, "    pub fn new() -> Result<Model, Error> {{").unwrap();
    writeln!(w, "        let blob = Blob(&BLOB.0);").unwrap();
    writeln!(w, "        let _ = &blob;").unwrap();
    writeln!(w, "        qdqc_kernels::weights::check_layout({}).map_err(Error::Weights)?;", qdqc_kernels::weights::PACKED_LAYOUT).unwrap();
    writeln!(w, "        let k = Kernels::from_env().map_err(|e| Error::Kernel(e.to_string()))?;").unwrap();
    writeln!(w, "        Ok(Model {{\n            k,").unwrap();
    for (f, _, init) in &members {
        writeln!(w, "            {f}: {init},").unwrap();
    }
    writeln!(w, "        }})\n    }}\n").unwrap();
    writeln!(w, "    /// Runs the model on `inputs` (in `INPUTS` order); the outputs come in `OUTPUTS` order.").unwrap();
    writeln!(
        w,
        "    pub fn run(&self, inputs: &[Value]) -> Result<Vec<Value>, Error> {{\n        self.run_with(&mut Workspace::default(), inputs, None)\n    }}\n"
    )
    .unwrap();
    writeln!(w, "    /// [`Model::run`] over a caller's workspace (no allocation once it has grown); `observe` sees every quantized intermediate.").unwrap();
    writeln!(
        w,
        "    pub fn run_with(&self, ws: &mut Workspace, inputs: &[Value], mut observe: Option<&mut dyn FnMut(&str, Value)>) -> Result<Vec<Value>, Error> {{"
    )
    .unwrap();
    let dims = e.reads.take().dims || segments.iter().any(|(_, r)| r.dims);
    let binding = if dims { "let d" } else { "let _" };
    writeln!(w, "        {binding} = bind(inputs, INPUTS, NAMES)?;").unwrap();
    // A flat part is `part{K}`, a block `block{B}`.
    let mut names = Vec::new();
    let mut part = 0;
    for s in &layout.segments {
        names.push(match s {
            Segment::Flat(ops) => {
                part += 1;
                (format!("part{}", part - 1), format!("Ops {} to {} of `run_with`.", ops.start, ops.end - 1))
            }
            Segment::Block(b) => {
                let bl = &layout.blocks[*b];
                let doc = format!(
                    "Ops {} to {} of `run_with`: {} layers of {} ops, one loop over the layers' tables.",
                    bl.start,
                    bl.start + bl.len * bl.layers - 1,
                    bl.layers,
                    bl.len
                );
                (format!("block{b}"), doc)
            }
        });
    }
    for ((name, _), (_, r)) in names.iter().zip(&segments) {
        let mut args = vec!["ws"];
        if r.dims {
            args.push("&d");
        }
        if !r.inputs.is_empty() {
            args.push("inputs");
        }
        if r.observe {
            args.push("&mut observe");
        }
        writeln!(w, "        self.{name}({})?;", args.join(", ")).unwrap();
    }
    writeln!(w, "        let _ = observe.as_mut();").unwrap();
    writeln!(w, "        Ok(vec![\n{}\n        ])\n    }}", outs.join("\n")).unwrap();
    for ((name, doc), (text, r)) in names.iter().zip(&segments) {
        let mut params = vec!["&self".to_string(), "ws: &mut Workspace".into()];
        if r.dims {
            params.push("d: &[usize]".into());
        }
        if !r.inputs.is_empty() {
            params.push("inputs: &[Value]".into());
        }
        if r.observe {
            params.push("observe: &mut Option<&mut dyn FnMut(&str, Value)>".into());
        }
        writeln!(w, "\n    /// {doc}\n    #[inline(never)]\n    fn {name}({}) -> Result<(), Error> {{", params.join(", ")).unwrap();
        for &i in &r.inputs {
            writeln!(w, "        let x{i} = {}_input(&inputs[{i}]);", p.inputs[i].1.rust()).unwrap();
        }
        w.push_str(text);
        writeln!(w, "        Ok(())\n    }}").unwrap();
    }
    writeln!(w, "}}").unwrap();
    let (blob, sections) = std::mem::take(&mut e.blob).finish();
    let consts: String = sections
        .iter()
        .map(|(name, at)| {
            format!("/// Where the blob's section of the convolutions' `{name}` starts (one form per kernel path, apart).\nconst {name}: usize = {at};\n\n")
        })
        .collect();
    Ok((src.replacen(SECTIONS_AT, &consts, 1), blob))
}

/// The place of the blob sections' constants in `lib.rs` until the blob is complete.
const SECTIONS_AT: &str = "\u{0}SECTIONS\u{0}";

/// The kernel crate's `BinaryOp` of a QLinearMul (`mul`) or QLinearAdd.
fn binary_op(mul: bool) -> &'static str {
    if mul { "BinaryOp::Mul" } else { "BinaryOp::Add" }
}

/// The `Model::new` expression of a `Kind::UnaryTable`'s table: `x`'s codes (of type `xt`)
/// through the chain into `yt` codes.
fn unary_table(xt: &str, yt: &str, x: Q, steps: &[Kind], y: Q, pair: Option<&super::ops::Pair>, node: &str) -> Result<String, String> {
    let calls: Vec<String> = steps.iter().map(|s| step_call(s, node)).collect::<Result<_, _>>()?;
    let mid = pair.map_or(yt.to_string(), |p| p.mid.rust().to_string());
    let mut init = format!(
        "unary_table::<{xt}, {mid}>(quant({:#010x}, {}), quant({:#010x}, {}), |v: &mut [f32], t: &mut [f32]| -> Result<(), Error> {{ {} Ok(()) }}, {node})?",
        x.scale,
        x.zero_point,
        y.scale,
        y.zero_point,
        calls.join(" ")
    );
    if let Some(p) = pair {
        let bop = binary_op(p.mul);
        init = format!("pair_table::<{xt}, {mid}, {yt}>(&{init}, {bop}, {}, {}, {}, {}, {node})?", q_expr(p.a), q_expr(p.b), q_expr(p.y), p.source_first);
    }
    Ok(init)
}

/// The `Model::new` expression of a `Kind::CodeTable`'s table (`code_sets.rs`): `v0` the 256
/// source codes of type `xt`, `v{j + 1}` step `j`'s codes, each by the kernel the unfused op
/// calls; the last step's codes are the table.
fn code_table(xt: &str, steps: &[super::code_sets::Step]) -> Result<String, String> {
    use super::code_sets::Arg;
    let mut types = vec![xt];
    let mut text = format!("{{ let v0: [{xt}; 256] = source_codes(); ");
    for (j, s) in steps.iter().enumerate() {
        let (node, yt) = (str_lit(&s.node), s.elem.rust());
        let operand = |a: &Arg| -> (String, &str, &str) {
            match a {
                Arg::Source => ("&v0[..]".to_string(), "&[256]", types[0]),
                Arg::Step(k) => (format!("&v{}[..]", k + 1), "&[256]", types[k + 1]),
                Arg::Code(c, e) => (format!("&[{c}{}][..]", e.rust()), "&[]", e.rust()),
            }
        };
        let (input, a_shape, it) = operand(&s.args[0]);
        let value = match &s.kind {
            Kind::UnaryTable { x, steps, y, pair } => format!("through(k, &{}, {input}, {node})?", unary_table(it, yt, *x, steps, *y, pair.as_ref(), &node)?),
            Kind::Lut { table } => format!("through::<{it}, {yt}>(k, &{}, {input}, {node})?", list(table)),
            Kind::Binary { mul, a, b, y } => {
                let (bi, bs, bt) = operand(&s.args[1]);
                let bop = binary_op(*mul);
                format!("binary_codes::<{it}, {bt}, {yt}>(k, {bop}, {}, {}, {}, {input}, {a_shape}, {bi}, {bs}, {node})?", q_expr(*a), q_expr(*b), q_expr(*y))
            }
            other => return Err(format!("a code table step that is not a table or a QLinearAdd/Mul: {other:?}")),
        };
        write!(text, "let v{}: [{yt}; 256] = {value}; ", j + 1).unwrap();
        types.push(yt);
    }
    write!(text, "v{} }}", steps.len()).unwrap();
    Ok(text)
}

/// One step of a `Kind::UnaryTable` chain as generated code: the step's kernel from `v` into `t`,
/// then `t` back into `v` (256 values).
fn step_call(step: &Kind, node: &str) -> Result<String, String> {
    let call = match step {
        Kind::FloatUnary { function } => format!("float::unary::map(k, float::unary::Function::{function}, v, t)"),
        Kind::FloatMap { map } => format!("float::elementwise::map(float::elementwise::{map}, v, t)"),
        // As the unfused op calls it, the constant of one element broadcast.
        Kind::FloatScalar { op, bits } => format!(
            "float::elementwise::binary_operands(float::elementwise::Binary::{op}, float::dq::Operand::F32(v), &[256], float::dq::Operand::F32(&[f32::from_bits({bits:#010x})]), &[], t)"
        ),
        _ => return Err("a unary table step that is not an element-wise f32 map".into()),
    };
    Ok(format!("{call}.map_err(float_err({node}))?; v.copy_from_slice(t);"))
}

/// A `Kind::UnaryTable` step as `groups.json` names it.
pub fn step_name(step: &Kind) -> String {
    match step {
        Kind::FloatUnary { function } => (*function).to_string(),
        Kind::FloatMap { map } => map.clone(),
        Kind::FloatScalar { op, bits } => format!("{op} {}", f32::from_bits(*bits)),
        other => format!("{other:?}"),
    }
}
