//! The Rust backend (`qdqc compile --target rust`, contract §3.12): the lowered form and the
//! authored model become a small crate that links the kernel crate `qdqc-kernels`.
//!
//! | file | what |
//! |---|---|
//! | `Cargo.toml` | package and harness named after the model file ([`crate_name`]), lib `generated`, its own workspace; `qdqc-kernels` by relative path ([`KernelsPath`]), `npyz` and `zip` for the harness |
//! | `src/lib.rs` | `Model::new()`, `Model::run`, `Model::run_with` (workspace reuse, intermediates), `INPUTS`, `OUTPUTS` (`emit.rs`); the ops in parts of 16, each part a function with its operands in a struct of their own; a run of ops that repeats layer after layer (transformer layers, a ResNet stage's blocks) one function `block{B}` looping `for layer in 0..R` over per-layer tables (slots, shapes, node names), its operands one `Layer{B}` struct per layer built by one loop over the blob offsets' tables (`repeat.rs`: the loop is the flat code, hole for hole); every kernel called through a concrete instance of `qdqc_kernels::entry` (the build cost stays linear in the model's size) |
//! | `src/runtime.rs` | tensors, errors, input checks, blob reader, the requantizing wrappers (the same text in every crate) |
//! | `src/main.rs` | the harness: `.npz` in, `.npz` out, `--intermediates`, `--bench N` (median seconds of N `run_with` calls on one workspace; `bench/rust_target.py`) |
//! | `src/weights.bin` | every constant, 64-byte aligned entries, embedded with `include_bytes!` (`blob.rs`; the convolutions' pair-safe rows for the AVX2 path and the weights they replace in two sections after the rest, so that a host maps the pages of one form); above [`EMBED_LIMIT`] (or `--weights file`) `weights.bin` beside the crate instead: a 64-byte header naming this compile, then the same bytes, mapped by `Model::new()` ([`Weights`]) |
//! | `groups.json` | every op writing codes with its parameters, for an independent exact evaluation (`manifest.rs`) |
//!
//! Every created node gets its Rust-kernel meaning: convolutions and GEMMs accumulate exactly in
//! i32 and requantize correctly rounded (`requant_certified`, equal to `requant_exact` on every
//! accumulator); Add/Mul, pools and Concat requantize exactly on codes; QuantizeLinear and
//! DequantizeLinear are ONNX Runtime's arithmetic. Nothing is decided from the protobuf beyond
//! the authored node's op type and attributes and the initializers' elements.
//!
//! | ops (`ops.rs`) | kernel |
//! |---|---|
//! | QLinearConv (1–3-D, groups, depthwise, strides, pads, dilations), QGemm (no transA, alpha 1, code output), QLinearMatMul (constant 2-D weights; 3-D weights of the input's batch: one GEMM per batch, `batched.rs`); f32 or f16 scales (an f16 widened exactly) | `conv::PackedConv` / `gemm_u8`, then `requant::requantize` with the certified form (vectorized rows, the same bits as `requant_certified` per element; a convolution per channel plane, a GEMM per column); i8 activations shifted to u8 (+128 on codes and zero point: the same accumulator) |
//! | QLinearMatMul of two activations (attention's `QKᵀ`, `AV`), batch dims broadcast | `matmul_codes::MatMulCodes` (i32 sums, K checked against the bound its proof used, the certified requantization) |
//! | QLinearAdd, QLinearMul | `codes::binary::Binary` (Add: certified f64 sums, the exact form at ties; Mul: requantized products; an operand fixed along a run of ≥ 256 outputs gets a 256-entry table per call, a broadcast operand of few codes one row per code, an Add's two whole operands of ≥ 4096 elements the node's 64 KiB table of pairs, filled once; every table filled by the run function itself) |
//! | QLinearAveragePool, QLinearGlobalAveragePool, MaxPool on codes | `codes::pool` |
//! | QLinearConcat (inputs requantized through an exact 256-entry table), Concat (codes or f32) | `codes::movement::concat` |
//! | Flatten, Reshape, Squeeze, Unsqueeze, Identity | a copy |
//! | `Gather(table, Cast(codes → int32))` (rule `lookup-table`; the Cast is read through) | `codes::lut::apply_lut` |
//! | `DequantizeLinear → f32 Sigmoid/Tanh/Exp/Relu/HardSigmoid/… → QuantizeLinear` per tensor, and a QLinearAdd/Mul of those codes with the chain's (SiLU) | one 256-entry table per node, filled in `Model::new` by the chain's own kernels (`chains.rs`), then `codes::lut::apply_lut` |
//! | Resize nearest (codes or f32), linear (f32, last two axes), by constant scales or sizes | `codes::movement::resize_nearest`, `float::resize::resize_linear` |
//! | QuantizeLinear, DequantizeLinear (per tensor, per axis); DequantizeLinear of a constant is evaluated here, with ONNX Runtime's arithmetic | `codes::qdq` |
//! | f32 Add, Sub, Mul, Div, Max, Min (broadcasting), Relu, LeakyRelu, Clip (constant bounds), HardSigmoid, HardSwish, Sqrt, Reciprocal, Neg, Abs, Floor, Ceil, Round (half to even); Conv (1–3-D), Gemm, AveragePool, MaxPool, GlobalAveragePool | the kernel crate's `float::` (fixed evaluation orders, the same bits on every ISA): `elementwise::{binary_operands, map}`, `conv`, `gemm`, `pool`; a dequantized constant operand is read as its codes (`float::dq`), decoded where it is read |
//! | f32 ConvTranspose (1–3-D, groups, strides, pads, dilations, output_padding; no `output_shape`, auto_pad NOTSET) — also where it sits between DQ and Q: no integer kernel or proof exists for it, so it stays float under both contracts | `float::conv_transpose::conv_transpose` (a scatter in a fixed order) |
//! | f32 GlobalMaxPool | `float::pool::global_pool` |
//! | `Where(Equal(p, q), a, b)` where the Equal is read only as Where conditions (TensorFlow's `div_no_nan`), any element types | `codes::compare::select_equal` |
//! | Equal of two integer tensors (codes, or int32/int64 such as a graph input of byte ids) whose every reader is a Cast to f32 (a one-hot encoding); the Casts become copies | `codes::compare::equal_as_f32` |
//! | f32 Pow (broadcasting) | `float::elementwise::Binary::Pow` (`float::math::pow`) |
//! | f32 Sigmoid, Tanh, Exp, Erf, Gelu (`none` and `tanh`) | `float::unary::map` (f64 formula, one rounding) |
//! | f32 Softmax (opset 13, one axis) | `float::softmax::softmax` |
//! | `DequantizeLinear → Softmax (last axis) → QuantizeLinear` per tensor on 8-bit codes (the attention softmax of a QDQ transformer), its f32 tensors read by nothing else | one op (`softmax_codes.rs`): `codes::softmax::SoftmaxCodes`, the three kernels' bits, the exponentials from a table row per code that is a slice's maximum, filled on first use |
//! | f32 BatchNormalization (inference) | `float::norm::batch_norm_operands` (ONNX Runtime's order; dequantized parameters decoded per channel) |
//! | f32 LayerNormalization (stash_type 1, output Y) | `float::norm::layer_norm_operands` (ONNX's function body, fixed order; a dequantized scale and bias decoded 64 elements at a time per row) |
//! | f32 ReduceSum, ReduceMean, ReduceMax (constant axes, attribute or input) | `float::reduce::reduce` |
//! | f32 MatMul (batch broadcasting) | `float::gemm::matmul` |
//! | f32 MatMul by the DequantizeLinear of a constant rank-2 weight of 4- or 8-bit codes (per tensor, per column, per row, blocked along K; 8-bit per tensor/column only up to 16 rows of A), and Gather (run-time int64 indices) of such a table (a tied embedding) | `float::weight_only` (codes packed here, decoded in the GEMV, `gemm`'s order; the Gather decodes only what it gathers) |
//! | DequantizeLinear of codes with run-time parameters (the gathered rows' scales, `gather-before-dequantize`), per tensor, per axis or blocked | `float::dq::dequantize_by` |
//! | QuantizeLinear with run-time parameters (a row's scale and zero point made by the graph's own ops: per-token dynamic quantization left unfused under `--contract exact`), per tensor, per axis or blocked along the last axis; Cast f32 → u8/i8 (truncation; NaN or out of range a run-time error: undefined in ONNX Runtime) | `codes::qdq::{quantize_by, cast_to_codes}` (ONNX Runtime's `MlasQuantizeLinear` arithmetic) |
//! | Transpose, Slice (constant starts/ends/axes/steps), Gather (constant indices, or int64 indices computed at run time: token ids into an embedding table of codes), Expand (constant shape), Split (one Slice per output) — codes or f32 | `codes::movement::{transpose, slice, gather, expand}` |
//! | Shape of a fixed shape, and the integer ops behind it (Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Cast, arithmetic, Equal, Where, Range, Expand), ConstantOfShape, f32 Range, integer→f32 Cast of constants | evaluated at generation time (`fold.rs`); the generated code holds the result as a constant |
//!
//! Element types: f32, u8/i8 codes, and int32/int64 tensors that are not codes (graph inputs
//! of ids and what data movement and Equal make of them; `Value::I32`/`Value::I64`, `.npz` int32 /
//! int64 arrays in the harness).
//!
//! Shapes: the authored model's inferred shapes, and where they are unknown (or name a dim no
//! graph input binds) the generator's own (`shapes.rs`), computed from fixed input shapes and the
//! folded constants. Dynamic dims work where the model's shapes carry the input's dim names through
//! (the pow2 models' batch; rivagan_dec's and ocr_det's batch), with the names shape inference
//! loses (after a Resize, where two inputs' names differ) recovered as aliases where the op's
//! definition equates them (`shapes::alias`); Shape subgraphs of a symbolic shape, Split of one and
//! Reshapes whose −1 hides the batch still need fixed input dims (pin them before compiling).
//!
//! Allocation in `run_with`: the workspace slots grow on the first run (or a larger batch) and are
//! reused, and so are the kernels' scratch buffers (convolution tiles, a QLinearConcat's
//! requantized inputs). What still allocates per call is index metadata inside the kernels
//! (shapes, strides, the per-axis index maps of Slice/Pad/Resize: O(rank + dims), not O(elements)),
//! Softmax's per-slice sums and the output tensors; measured on yolov8n (heaptrack, runs 2–21):
//! 559 allocations per run, 41 of them of 1 KiB or more (122 KB, the largest the 43 KB output).
//! `run` makes a fresh workspace each call.
//!
//! Weights: GEMM weights (`PackedB`: Gemm, MatMul, A8W8 and dynamic groups) are packed at compile
//! time by the kernel crate's own packing and borrowed from the blob by `Model::new()`
//! (`PackedB::from_packed`: no copy, a page resident once a kernel reads it); other 8-bit constants
//! (an embedding table, dequantized weights) are borrowed from the blob in ONNX layout, so a Gather
//! pages in only the rows it reads. Convolution weights (`PackedConv`) likewise: packed at compile
//! time by `PackedConv::from_i8`/`from_u8` in the layout of their lowering and borrowed
//! (`PackedConv::from_packed`). Requantization forms and Add/Mul plans are built once in
//! `Model::new()` from the blob. `include_bytes!` costs rustc far less than an array literal but
//! still about 12 times the bytes (256 MiB: 3.2 GB, 37 s): above [`EMBED_LIMIT`] the weights go
//! beside the crate, mapped read-only once per process (`qdqc_kernels::weights`), with the same
//! offsets, so the kernels borrow them in place either way and only the pages they read become
//! resident. The header's length and hash are constants of the generated code: a weights file
//! from another compile is refused at load.

mod batched;
mod blob;
mod chains;
mod code_sets;
mod emit;
mod fold;
mod manifest;
mod ops;
mod repeat;
mod shapes;
mod slots;
mod softmax_codes;
mod values;

use qdqc_lang::Model;
use qdqc_lang::attr::Attribute;
use qdqc_lower::lowered::{Computation, LoweredGraph};
use std::collections::{BTreeMap, BTreeSet};

const RUNTIME: &str = include_str!("template/runtime.rs");
const HARNESS: &str = include_str!("template/main.rs");

/// Where the generated `Cargo.toml` finds the kernel crate: a path relative to the output
/// folder, written as given (the facade computes it from this source tree's location, so no
/// absolute path reaches the generated code).
#[derive(Clone, Debug)]
pub struct KernelsPath(pub String);

/// Where the generated crate keeps its weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weights {
    /// Embedded up to [`EMBED_LIMIT`] bytes, a file beside the crate above.
    #[default]
    Auto,
    /// `src/weights.bin`, embedded by `include_bytes!`.
    Embedded,
    /// `weights.bin` beside the crate (a header naming this compile, then the weights), mapped
    /// by `Model::new()` (`qdqc_kernels::weights`) or `Model::from_weights_file(path)`.
    File,
}

/// The largest weights [`Weights::Auto`] embeds. rustc holds about 12 times the bytes it embeds
/// (measured here: 256 MiB took 3.2 GB and 37 s), so 64 MiB stays near the 1 GB a build may take.
pub const EMBED_LIMIT: usize = 64 << 20;

/// The generated crate: file paths relative to its folder, and their bytes, in writing order.
pub struct Crate {
    pub files: Vec<(String, Vec<u8>)>,
}

/// The generated code as one module file, for a build script to write into `OUT_DIR` and a crate
/// to `include!` (`qdqc-build`'s Rust target): `pub mod NAME { … }` holding the crate's `lib.rs`
/// with `runtime.rs` inlined as its nested `runtime` module, the weights read by
/// `include_bytes!(concat!(env!("OUT_DIR"), "/NAME.weights.bin"))` — no absolute path in the
/// text. Inner attributes and `//!` docs cannot appear in an `include!`d file: `forbid(unsafe_code)`
/// becomes an outer attribute of the module (with `allow(clippy::all)`: generated code), the docs
/// its `///` docs. Returns the module text and
/// the weights' bytes.
pub fn module(generated: &Crate, name: &str) -> Result<(String, Vec<u8>), String> {
    let file = |path: &str| generated.files.iter().find(|(p, _)| p == path).map(|(_, b)| b.as_slice()).ok_or(format!("the generated crate has no {path}"));
    let text = |path: &str| -> Result<String, String> { String::from_utf8(file(path)?.to_vec()).map_err(|_| format!("{path} is not UTF-8")) };
    let (lib, runtime) = (text("src/lib.rs")?, text("src/runtime.rs")?);
    let weights = file("src/weights.bin").or_else(|_| file("weights.bin"))?.to_vec();
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("'{name}' is not a Rust module name (letters, digits, '_')"));
    }
    let inner = |l: &str| l.starts_with("//!") || l.starts_with("#![");
    let docs: Vec<String> = lib.lines().filter(|l| l.starts_with("//!")).map(|l| format!("///{}", &l[3..])).collect();
    let runtime: Vec<&str> = runtime.lines().filter(|l| !inner(l)).collect();
    let mut out = String::new();
    out.push_str(&docs.join("\n"));
    // Generated code: the including crate's clippy configuration is not its own.
    out.push_str("\n#[forbid(unsafe_code)]\n#[allow(clippy::all)]\npub mod ");
    out.push_str(name);
    out.push_str(" {\n");
    let (mut runtime_at, mut blob_at) = (0, 0);
    for line in lib.lines().filter(|l| !inner(l)) {
        if line == "pub mod runtime;" {
            runtime_at += 1;
            out.push_str("pub mod runtime {\n");
            out.push_str(&runtime.join("\n"));
            out.push_str("\n}\n");
        } else if line.contains("include_bytes!(\"weights.bin\")") {
            blob_at += 1;
            out.push_str(&line.replace("include_bytes!(\"weights.bin\")", &format!("include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{name}.weights.bin\"))")));
            out.push('\n');
        } else if line.contains(WEIGHTS_PATH) {
            blob_at += 1;
            out.push_str(&line.replace(WEIGHTS_PATH, &format!("concat!(env!(\"OUT_DIR\"), \"/{name}.weights.bin\")")));
            out.push('\n');
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("}\n");
    // The generator's own text: each is written exactly once (a change there must be seen here).
    if (runtime_at, blob_at) != (1, 1) {
        return Err(format!("lib.rs declares the runtime {runtime_at} and embeds the weights {blob_at} time(s), not once each"));
    }
    Ok((out, weights))
}

/// Generates the crate, or says which node the backend does not support (nothing is written
/// by this function).
pub fn generate(model: &Model, lowered: &LoweredGraph, kernels: &KernelsPath, weights: Weights) -> Result<Crate, String> {
    if let Some(sub) = lowered.subgraphs.first() {
        let owner = model.main_graph().node.get(sub.node);
        let (name, op) = owner.map_or(("?", "?"), |n| (n.name(), n.op_type()));
        return Err(format!("node '{name}' ({op}): subgraphs (attribute {}) are not supported by the Rust target", sub.attr));
    }
    let mut values = values::Values::new(model, &lowered.constants);
    let g = model.main_graph();
    let inits: BTreeSet<&str> = g.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    let mut elems = BTreeMap::new();
    let mut inputs = Vec::new();
    for v in g.input.iter().filter_map(|v| v.name.as_deref()).filter(|n| !inits.contains(n)) {
        let dt = values.input_elem(v).ok_or_else(|| format!("graph input '{v}' has no tensor type"))?;
        let elem = values::Elem::of(dt).ok_or_else(|| format!("graph input '{v}' of type {} is not supported by the Rust target", dt.as_str_name()))?;
        elems.insert(v.to_string(), elem);
        if let Some(dims) = source_shape(model, v) {
            dims.iter().for_each(|d| values.bind(d));
        }
        inputs.push((v.to_string(), elem, values.shape(v).map_err(|e| format!("graph input '{v}': {e}"))?));
    }
    let mut ops = Vec::new();
    // Casts of codes to int32 read only as Gather indices (lookup tables): Cast output → codes.
    let mut indices: BTreeMap<&str, &str> = BTreeMap::new();
    // Equal outputs computed as f32 1.0/0.0 (every reader is a Cast to f32, then a copy).
    let mut compared: BTreeSet<String> = BTreeSet::new();
    // Equal outputs read only as Where conditions: not computed; each Where compares itself.
    let mut conditions: BTreeMap<String, (String, String)> = BTreeMap::new();
    for n in &lowered.nodes {
        let (name, op_type, domain, attrs): (String, String, String, Vec<Attribute>) = match &n.computation {
            Computation::Authored { node } => {
                let p = &g.node[*node];
                if p.op_type() == "ConstantOfShape" {
                    let c = constant_of_shape(&values, p, &n.inputs).map_err(|e| format!("node '{}' (ConstantOfShape): {e}", p.name()))?;
                    values.fold(&n.outputs[0], c);
                    continue;
                }
                let attrs = p
                    .attribute
                    .iter()
                    .map(|a| {
                        let label = if p.name().is_empty() { p.output.first().map_or("", String::as_str) } else { p.name() };
                        Attribute::from_proto(a).ok_or_else(|| format!("node '{label}' ({}): attribute {} of an unsupported kind", p.op_type(), a.name()))
                    })
                    .collect::<Result<_, _>>()?;
                (p.name().to_string(), p.op_type().to_string(), p.domain().to_string(), attrs)
            }
            Computation::Created { op_type, domain, name, attributes, .. } => (name.clone(), op_type.clone(), domain.clone(), attributes.clone()),
        };
        let label = if name.is_empty() { n.outputs.first().cloned().unwrap_or_default() } else { name };
        // qdqc's own ops exist only as created nodes (`rewrites/src/rules/a8w8.rs`).
        let created = matches!(n.computation, Computation::Created { .. });
        let supported = matches!(domain.as_str(), "" | "ai.onnx" | "com.microsoft") || (created && domain == "qdqc");
        if !supported {
            return Err(format!("node '{label}': domain '{domain}' is not supported by the Rust target"));
        }
        if op_type == "DequantizeLinear" && n.inputs.first().is_some_and(|x| values.is_constant(x)) {
            let folded = fold_dequantize(&values, &n.inputs, &attrs).map_err(|e| format!("node '{label}' ({op_type}): {e}"))?;
            values.fold_dequantized(&n.outputs[0], folded);
            continue;
        }
        // Dim names the model's shape inference lost, shown equal to a bound one.
        for out in n.outputs.iter().filter(|o| !o.is_empty()) {
            shapes::alias(&op_type, &n.inputs, out, &mut values);
        }
        // The generator's own shape where the model's is unknown (after a folded Shape subgraph).
        if let Some(out) = n.outputs.first()
            && values.shape(out).is_err()
            && let Some(dims) = shapes::infer(&op_type, &n.inputs, &attrs, &values)
        {
            values.infer(out, dims);
        }
        if let Some(c) = fold::fold(&op_type, &n.inputs, &attrs, &values) {
            values.fold(&n.outputs[0], c);
            continue;
        }
        if op_type == "Cast" && is_table_index(lowered, n, &attrs) {
            indices.insert(&n.outputs[0], &n.inputs[0]);
            continue;
        }
        if op_type == "Equal" && n.inputs.len() == 2 && attrs.is_empty() && read_as_condition(model, lowered, &n.outputs[0]) {
            conditions.insert(n.outputs[0].clone(), (n.inputs[0].clone(), n.inputs[1].clone()));
            continue;
        }
        if batched::applies(&op_type, &n.inputs, &values) {
            let parts = batched::lower(&mut values, &label, &n.inputs, &n.outputs, &attrs, &elems).map_err(|e| format!("node '{label}' ({op_type}): {e}"))?;
            for (op, dims) in parts {
                values.infer(&op.output, dims);
                elems.insert(op.output.clone(), op.elem);
                ops.push(op);
            }
            continue;
        }
        let node = ops::Node { name: &label, op_type: &op_type, inputs: &n.inputs, outputs: &n.outputs, attrs: &attrs, values: &values, elems: &elems };
        if op_type == "Split" {
            let parts = ops::split(&node).map_err(|e| format!("node '{label}' ({op_type}): {e}"))?;
            for (op, dims) in parts {
                values.infer(&op.output, dims);
                elems.insert(op.output.clone(), op.elem);
                ops.push(op);
            }
            continue;
        }
        let op = match n.inputs.get(1).and_then(|i| indices.get(i.as_str())) {
            Some(codes) if op_type == "Gather" => ops::lookup_table(&node, codes),
            _ if op_type == "Equal" && read_by_float_casts(model, lowered, &n.outputs[0]) => {
                let op = ops::equal_as_f32(&node);
                if let Ok(op) = &op {
                    compared.insert(op.output.clone());
                }
                op
            }
            _ if op_type == "Cast" && n.inputs.first().is_some_and(|x| compared.contains(x)) => ops::cast_of_equal(&node),
            _ if op_type == "Where" && n.inputs.first().is_some_and(|c| conditions.contains_key(c)) => ops::select_equal(&node, &conditions[&n.inputs[0]]),
            _ => ops::lower(&node),
        }
        .map_err(|e| format!("node '{label}' ({op_type}): {e}"))?;
        elems.insert(op.output.clone(), op.elem);
        ops.push(op);
    }
    let outputs: Vec<String> = g.output.iter().filter_map(|v| v.name.clone()).collect();
    let keep: BTreeSet<String> = outputs.iter().cloned().collect();
    let ops = chains::tabulate(ops, &|v| chains::scalar(&values, v), &elems, &keep);
    let ops = code_sets::collapse(ops, &values, &elems, &keep);
    let ops = softmax_codes::collapse(ops, &values, &elems, &keep);
    let plan = slots::plan(&ops, &keep);
    let source = model.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let input_elems: Vec<(String, values::Elem)> = inputs.iter().map(|(n, e, _)| (n.clone(), *e)).collect();
    let groups = manifest::groups_json(&ops, &values, &input_elems, &source)?;
    let program = emit::Program { values: &values, ops: &ops, plan: &plan, inputs, outputs, source };
    let (lib, blob) = emit::lib_rs(&program)?;
    let beside = weights == Weights::File || (weights == Weights::Auto && blob.len() > EMBED_LIMIT);
    let (lib, weights) = if beside {
        (weights_beside(&lib, &blob)?, ("weights.bin".into(), qdqc_kernels::weights::file_bytes(&blob)))
    } else {
        (lib, ("src/weights.bin".into(), blob))
    };
    Ok(Crate {
        files: vec![
            ("Cargo.toml".into(), cargo_toml(&crate_name(model), kernels).into_bytes()),
            ("src/lib.rs".into(), lib.into_bytes()),
            ("src/runtime.rs".into(), RUNTIME.as_bytes().to_vec()),
            ("src/main.rs".into(), HARNESS.as_bytes().to_vec()),
            weights,
            ("groups.json".into(), groups),
        ],
    })
}

/// The path of the weights file in a crate that keeps them beside it.
const WEIGHTS_PATH: &str = "concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/weights.bin\")";

/// `lib.rs` with its weights read from the file beside the crate instead of embedded: the
/// embedded blob's static becomes the file's path and `(length, hash)`, and `Model::new()` maps
/// the file (`Model::from_weights_file` takes another path). Each replaced line is the emitter's
/// own text and must appear exactly once.
fn weights_beside(lib: &str, blob: &[u8]) -> Result<String, String> {
    let replacements = [
        ("/// 64-byte alignment for the embedded weights.\n#[repr(C, align(64))]\nstruct Aligned<T: ?Sized>(T);\n\n".to_string(), String::new()),
        (
            "static BLOB: &Aligned<[u8]> = &Aligned(*include_bytes!(\"weights.bin\"));\n".to_string(),
            format!(
                "/// The weights file qdqc wrote beside this crate ({} bytes: too large to embed), mapped by `Model::new()`.\npub const WEIGHTS_FILE: &str = {WEIGHTS_PATH};\n\n/// Length and FNV-1a 64 hash of the weights this code was generated with (the file's header holds them).\nconst WEIGHTS: (usize, u64) = ({}, 0x{:016x});\n",
                blob.len(),
                blob.len(),
                qdqc_kernels::weights::fnv1a(blob)
            ),
        ),
        (
            "    pub fn new() -> Result<Model, Error> {\n        let blob = Blob(&BLOB.0);\n".to_string(),
            "    pub fn new() -> Result<Model, Error> {\n        Model::from_weights_file(std::path::Path::new(WEIGHTS_FILE))\n    }\n\n    /// [`Model::new`] with the weights file at `path`: the `weights.bin` qdqc wrote with this code (its header is checked), mapped once per process.\n    pub fn from_weights_file(path: &std::path::Path) -> Result<Model, Error> {\n        let blob = Blob(qdqc_kernels::weights::open(path, WEIGHTS).map_err(|e| Error::Weights(e.to_string()))?);\n".to_string(),
        ),
    ];
    let mut lib = lib.to_string();
    for (from, to) in &replacements {
        if lib.matches(from.as_str()).count() != 1 {
            return Err(format!("generated lib.rs does not hold exactly one {:?}", from.lines().next().unwrap_or_default()));
        }
        lib = lib.replace(from.as_str(), to);
    }
    Ok(lib)
}

/// The dim names of a graph input's declared shape.
fn source_shape(model: &Model, input: &str) -> Option<Vec<String>> {
    let dims = model.shapes.get(input)?;
    Some(dims.iter().filter_map(|d| if let qdqc_lang::analysis::Dim::Symbolic(s) = d { Some(s.clone()).filter(|s| !s.is_empty()) } else { None }).collect())
}

/// A Cast to int32 whose output only Gather nodes read, as their indices: the lookup-table form,
/// which the Gather reads through (the table is indexed by the code itself).
fn is_table_index(lowered: &LoweredGraph, cast: &qdqc_lower::lowered::LoweredNode, attrs: &[Attribute]) -> bool {
    let to_int32 = attrs.iter().any(|a| a.name == "to" && a.value == qdqc_lang::attr::AttrValue::Int(qdqc_lang::onnx::DataType::Int32 as i64));
    let out = &cast.outputs[0];
    let readers: Vec<_> = lowered.nodes.iter().filter(|m| m.inputs.contains(out)).collect();
    let gathers = readers.iter().all(|m| {
        let op = match &m.computation {
            Computation::Created { op_type, .. } => op_type.as_str(),
            Computation::Authored { .. } => "",
        };
        op == "Gather" && m.inputs.iter().position(|i| i == out) == Some(1) && m.inputs.iter().filter(|i| *i == out).count() == 1
    });
    to_int32 && cast.inputs.len() == 1 && !readers.is_empty() && gathers
}

/// Whether every reader of `value` is a Cast to f32 (and there is one): the Equal that computes
/// it can write f32 directly, and no bool tensor is needed.
fn read_by_float_casts(model: &Model, lowered: &LoweredGraph, value: &str) -> bool {
    let readers: Vec<_> = lowered.nodes.iter().filter(|m| m.inputs.iter().any(|i| i == value)).collect();
    let float = qdqc_lang::onnx::DataType::Float as i64;
    !readers.is_empty()
        && readers.iter().all(|m| match &m.computation {
            Computation::Created { op_type, attributes, .. } => {
                op_type == "Cast" && attributes.iter().any(|a| a.name == "to" && a.value == qdqc_lang::attr::AttrValue::Int(float))
            }
            Computation::Authored { node } => {
                let p = &model.main_graph().node[*node];
                p.op_type() == "Cast" && p.attribute.iter().any(|a| a.name() == "to" && a.i() == float)
            }
        })
}

/// Whether every reader of `value` is a Where reading it as its condition only (and there is one).
fn read_as_condition(model: &Model, lowered: &LoweredGraph, value: &str) -> bool {
    let readers: Vec<_> = lowered.nodes.iter().filter(|m| m.inputs.iter().any(|i| i == value)).collect();
    !readers.is_empty()
        && readers.iter().all(|m| {
            let op = match &m.computation {
                Computation::Created { op_type, .. } => op_type.as_str(),
                Computation::Authored { node } => model.main_graph().node[*node].op_type(),
            };
            op == "Where" && m.inputs.first().is_some_and(|c| c == value) && m.inputs.iter().filter(|i| *i == value).count() == 1
        })
}

/// ConstantOfShape of a constant shape, evaluated here (its `value` is a tensor attribute, which
/// the generic attribute reader does not carry): f32 zeros by default.
fn constant_of_shape(values: &values::Values, p: &qdqc_lang::onnx::NodeProto, inputs: &[String]) -> Result<values::Constant, String> {
    let shape = values.constant(inputs.first().ok_or("no shape input")?)?;
    let dims: Vec<usize> = shape.ints.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative dim {d}"))).collect::<Result<_, _>>()?;
    let n: usize = dims.iter().product();
    let value = match p.attribute.iter().find(|a| a.name() == "value").and_then(|a| a.t.as_ref()) {
        Some(t) => values.attribute_tensor(t)?,
        None => values::Constant { dtype: qdqc_lang::onnx::DataType::Float, dims: vec![1], ints: Vec::new(), f32_bits: vec![0] },
    };
    let (ints, f32_bits) = match (value.ints.as_slice(), value.f32_bits.as_slice()) {
        ([v], []) => (vec![*v; n], Vec::new()),
        ([], [b]) => (Vec::new(), vec![*b; n]),
        _ => return Err("value must hold one element".into()),
    };
    Ok(values::Constant { dtype: value.dtype, dims, ints, f32_bits })
}

/// A weight's or bias's DequantizeLinear, evaluated once here.
fn fold_dequantize(values: &values::Values, inputs: &[String], attrs: &[Attribute]) -> Result<values::Quantized, String> {
    let q = values.constant(&inputs[0])?;
    let scales = values.constant(inputs.get(1).ok_or("no scale")?)?;
    let zps = inputs.get(2).filter(|s| !s.is_empty()).map(|z| values.constant(z)).transpose()?;
    let axis = attrs.iter().find(|a| a.name == "axis").map_or(Ok(1), |a| match a.value {
        qdqc_lang::attr::AttrValue::Int(v) => Ok(v),
        _ => Err("attribute axis is not an int".to_string()),
    })?;
    let block = attrs.iter().find(|a| a.name == "block_size").map_or(Ok(0), |a| match a.value {
        qdqc_lang::attr::AttrValue::Int(v) => Ok(v),
        _ => Err("attribute block_size is not an int".to_string()),
    })?;
    if let Some(a) = attrs.iter().find(|a| a.name != "axis" && a.name != "block_size") {
        return Err(format!("DequantizeLinear attribute {} is not supported by the Rust target", a.name));
    }
    values::Quantized::new(q, &scales, zps.as_ref(), axis, block)
}

/// The package and harness name: the model file's stem in `[a-z0-9_]` (distinct crates sharing a
/// `CARGO_TARGET_DIR` then never overwrite each other's harness).
pub fn crate_name(model: &Model) -> String {
    let stem = model.path.file_stem().map(|s| s.to_string_lossy().to_lowercase()).unwrap_or_default();
    let name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) { name } else { format!("model_{name}") }
}

fn cargo_toml(name: &str, kernels: &KernelsPath) -> String {
    format!(
        r#"# Generated by qdqc (`qdqc compile --target rust`); do not edit.
[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
name = "generated"
path = "src/lib.rs"

[[bin]]
name = "{name}"
path = "src/main.rs"

[dependencies]
qdqc-kernels = {{ path = {:?} }}
npyz = "0.9"
zip = {{ version = "2", default-features = false, features = ["deflate"] }}

# Its own workspace, wherever it is written.
[workspace]
"#,
        kernels.0,
        name = name
    )
}
