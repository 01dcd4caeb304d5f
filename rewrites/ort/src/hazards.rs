//! Hazards (contract §7.1): what a runtime would silently reinterpret or break, reported even when qdqc
//! changes nothing. Hazards that depend on fusion look at the groups ONNX Runtime 1.31 fuses
//! ([`crate::optimizer`]) on any modelled ISA profile, and name the profiles when not all.

use crate::Isa;
use crate::optimizer::{Fusion, optimize_graph, walk_graphs};
use qdqc_exact::reference::CodeType;
use qdqc_lang::onnx::{DataType, GraphProto, NodeProto};
use qdqc_lang::scope::{Const, Scope};
use qdqc_lang::tensor::IntView;
use qdqc_lang::{Model, ir, tensor};
use std::collections::BTreeMap;

/// One hazard: its kind, the node it is about (with its subgraph path), and a one-line message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hazard {
    pub kind: &'static str,
    pub node: String,
    pub message: String,
}

/// Every hazard in the main graph and all subgraphs, graph by graph: those of single nodes in node
/// order, then those of fused groups by target.
pub fn hazards(model: &Model) -> Vec<Hazard> {
    let mut out = Vec::new();
    let proto = model.main_graph();
    walk_graphs(model, &model.graph, proto, None, &mut |graph, proto, scope| {
        Level { model, graph, proto, scope }.check(&mut out);
    });
    out
}

/// A kind of bad scale: its name, its test, and what it does.
type ScaleProblem = (&'static str, fn(f32) -> bool, &'static str);

/// One graph, with the constants its scope sees.
struct Level<'a, 'm> {
    model: &'m Model,
    graph: &'a ir::Graph,
    proto: &'m GraphProto,
    scope: &'a Scope<'m>,
}

/// A group fused on some ISA profiles, in as many variants as the profiles differ (code types
/// after QDQS8ToU8 do).
struct Fused {
    variants: Vec<(Fusion, Vec<Isa>)>,
}

impl Fused {
    fn fusion(&self) -> &Fusion {
        &self.variants[0].0
    }

    fn isas(&self) -> Vec<Isa> {
        let mut all: Vec<Isa> = self.variants.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        all.sort();
        all
    }
}

impl<'m> Level<'_, 'm> {
    fn check(&self, out: &mut Vec<Hazard>) {
        for (pos, node) in self.proto.node.iter().enumerate() {
            let mut report = |kind, message: String| out.push(Hazard { kind, node: self.describe(pos), message });
            if matches!(node.op_type.as_deref(), Some("QuantizeLinear" | "DequantizeLinear")) {
                self.scales(node, &mut report);
                self.zero_point_range(node, &mut report);
            }
            self.quantize_input(node, &mut report);
            self.integer_wrap(node, &mut report);
            self.resize_between_qdq(pos, node, &mut report);
        }
        for fused in self.fused_groups().values() {
            let pos = fused.fusion().target;
            let mut report = |kind, message: String| out.push(Hazard { kind, node: self.describe(pos), message });
            self.bias_parameters(fused, &mut report);
            self.weight_zero_points(fused, &mut report);
            self.pair_overflow(fused, &mut report);
            self.softmax_output(fused, &mut report);
            self.pool_dilations(fused, &mut report);
            self.per_channel_activations(fused, &mut report);
        }
    }

    fn describe(&self, pos: usize) -> String {
        ir::describe(&self.proto.node[pos], pos, &self.graph.location)
    }

    fn input(&self, node: &NodeProto, slot: usize) -> Option<String> {
        node.input.get(slot).filter(|s| !s.is_empty()).cloned()
    }

    fn constant(&self, name: &str) -> Option<&Const<'m>> {
        self.scope.constant(name, true)
    }

    fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.constant(name)?.float_values(self.model)
    }

    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.constant(name)?.int_values(self.model)
    }

    /// Dims and codes of a weight: stored codes, or a QuantizeLinear of a float constant (NNCF's
    /// float weights, which ORT's constant folding quantizes with the same kernel).
    fn weight_codes(&self, name: &str) -> Option<(Vec<i64>, Vec<i64>)> {
        if let (Some(w), Some(c)) = (self.ints(name), self.constant(name)) {
            return Some((c.dims.clone(), w));
        }
        let q = &self.proto.node[self.graph.producer(name)?];
        if q.op_type.as_deref() != Some("QuantizeLinear") {
            return None;
        }
        let x = self.input(q, 0)?;
        let (dims, values) = (self.constant(&x)?.dims.clone(), self.floats(&x)?);
        let scales = self.floats(&self.input(q, 1)?)?;
        let zps = match self.input(q, 2) {
            Some(z) => self.ints(&z)?,
            None => vec![0; scales.len()],
        };
        let code = CodeType::from_dtype(self.dtype(name)?)?;
        let axis = q.attribute.iter().find(|a| a.name.as_deref() == Some("axis")).and_then(|a| a.i).unwrap_or(1);
        // A negative axis after normalization is out of range: no codes, as `quantize_tensor` would say.
        let axis = if scales.len() > 1 { Some(usize::try_from(if axis < 0 { axis + i64::try_from(dims.len()).ok()? } else { axis }).ok()?) } else { None };
        let codes = qdqc_exact::reference::quantize_tensor(&values, &dims, axis, &scales, &zps, code)?;
        Some((dims, codes))
    }

    /// The element type of a value: stored, declared, or what the node producing it makes.
    fn dtype(&self, name: &str) -> Option<DataType> {
        let Some(p) = self.graph.producer(name) else { return self.scope.dtype(name) };
        let n = &self.proto.node[p];
        let attr = |a: &str| n.attribute.iter().find(|x| x.name.as_deref() == Some(a)).and_then(|x| x.i);
        match n.op_type.as_deref().unwrap_or("") {
            "QuantizeLinear" => match self.input(n, 2) {
                Some(zp) => self.dtype(&zp),
                None => i32::try_from(attr("output_dtype").filter(|&t| t != 0).unwrap_or(DataType::Uint8 as i64)).ok().and_then(|t| DataType::try_from(t).ok()),
            },
            "Cast" => attr("to").and_then(|t| DataType::try_from(i32::try_from(t).ok()?).ok()),
            _ => self.scope.dtype(name),
        }
    }

    /// Fusions on every ISA profile, merged by target.
    fn fused_groups(&self) -> BTreeMap<usize, Fused> {
        let mut groups: BTreeMap<usize, Fused> = BTreeMap::new();
        for isa in Isa::ALL {
            for fusion in optimize_graph(self.model, self.graph, self.proto, self.scope, isa).fusions {
                let variants = &mut groups.entry(fusion.target).or_insert_with(|| Fused { variants: Vec::new() }).variants;
                match variants.iter_mut().find(|(f, _)| *f == fusion) {
                    Some((_, isas)) => isas.push(isa),
                    None => variants.push((fusion, vec![isa])),
                }
            }
        }
        groups
    }

    // ---- hazards on every Q/DQ --------------------------------------------------------------

    /// Zero, negative, NaN, infinite or subnormal scales.
    fn scales(&self, node: &NodeProto, report: &mut impl FnMut(&'static str, String)) {
        let Some(name) = self.input(node, 1) else { return };
        let Some(values) = self.floats(&name) else { return };
        let problems: [ScaleProblem; 5] = [
            ("NaN", f32::is_nan, "every Q code becomes the lowest code on x86 and DQ yields NaN"),
            ("infinite", f32::is_infinite, "Q maps every finite value to the zero point and DQ yields ±∞ or NaN"),
            ("zero", |s| s == 0.0, "Q divides by zero (codes saturate, 0/0 gives the lowest code) and DQ yields 0"),
            ("negative", |s| s < 0.0, "it reverses the order of codes, which ORT's MaxPool/ArgMax drops and Relu removal assume"),
            ("subnormal", f32::is_subnormal, "DQ products lose precision and FTZ/DAZ (session.set_denormal_as_zero) flushes them to 0"),
        ];
        for (what, test, effect) in problems {
            let bad: Vec<usize> = (0..values.len()).filter(|&i| test(values[i])).collect();
            if let Some(&i) = bad.first() {
                let v = values[i];
                let message = format!(
                    "scale '{name}'[{i}] = 0x{:08x} ({v:e}) is {what} ({} of {} elements): {effect}; use finite positive normal scales",
                    v.to_bits(),
                    bad.len(),
                    values.len()
                );
                report("scale", message);
            }
        }
    }

    /// Zero points outside the range of their own type (possible in `int32_data`).
    fn zero_point_range(&self, node: &NodeProto, report: &mut impl FnMut(&'static str, String)) {
        let Some(name) = self.input(node, 2) else { return };
        let Some(c) = self.constant(&name) else { return };
        let (Some((lo, hi)), Some(values)) = (tensor::int_range(c.dtype), c.int_values(self.model)) else { return };
        if let Some((i, v)) = values.iter().enumerate().find(|&(_, &v)| v < lo || v > hi) {
            let dt = qdqc_lang::canon::dtype_name(c.dtype);
            let message = format!("zero point '{name}'[{i}] = {v} is outside {dt} [{lo}, {hi}]: runtimes wrap or reject it; store it in range");
            report("zero-point-range", message);
        }
    }

    /// A QuantizeLinear of float16 values, or one whose `output_dtype` needs a zero point it lacks.
    fn quantize_input(&self, node: &NodeProto, report: &mut impl FnMut(&'static str, String)) {
        if node.op_type.as_deref() != Some("QuantizeLinear") {
            return;
        }
        if let Some(x) = self.input(node, 0).filter(|x| self.dtype(x) == Some(DataType::Float16)) {
            let message = format!(
                "quantizes float16 '{x}': ORT's CPU kernel up to 1.29 truncates x/scale toward zero instead of rounding half to even (onnxruntime PR #32452); quantize float32 values"
            );
            report("fp16-quantize", message);
        }
        let output_dtype = node.attribute.iter().find(|a| a.name.as_deref() == Some("output_dtype")).and_then(|a| a.i).unwrap_or(0);
        if self.input(node, 2).is_none() && output_dtype != 0 && output_dtype != DataType::Uint8 as i64 {
            let dt = i32::try_from(output_dtype).ok().and_then(|t| DataType::try_from(t).ok()).map(qdqc_lang::canon::dtype_name).unwrap_or("?");
            let message = format!(
                "has no zero point but output_dtype {dt}: when ORT fuses it, SetOptionalZeroPoint (qdq_actions.cc) supplies a uint8 zero point, so the fused kernel writes uint8 codes; add an explicit {dt} zero point"
            );
            report("q-output-dtype", message);
        }
    }

    /// Add/Sub on 8-bit integer tensors whose result is cast: the arithmetic wraps modulo 256
    /// before the widening (the uint8 zero-point bug NNCF hit, nncf issue #4311; contract §7.1).
    fn integer_wrap(&self, node: &NodeProto, report: &mut impl FnMut(&'static str, String)) {
        let op = node.op_type.as_deref().unwrap_or("");
        if !matches!(op, "Add" | "Sub") || node.input.len() != 2 || node.output.is_empty() {
            return;
        }
        let types: Vec<Option<DataType>> = node.input.iter().map(|i| self.dtype(i)).collect();
        let Some(dt) = types[0].filter(|&t| matches!(t, DataType::Uint8 | DataType::Int8) && types[1] == Some(t)) else {
            return;
        };
        let Some(cast) = self.graph.consumers(&node.output[0]).into_iter().find(|&c| self.proto.node[c].op_type.as_deref() == Some("Cast")) else {
            return;
        };
        let sign = if op == "Add" { "+" } else { "−" };
        let message = format!(
            "{op} computes '{}' {sign} '{}' on {} tensors and wraps modulo 256 before {} widens it (a code below its zero point turns into a large positive value); cast both operands to int32 or float first",
            node.input[0],
            node.input[1],
            qdqc_lang::canon::dtype_name(dt),
            ir::describe(&self.proto.node[cast], cast, &self.graph.location)
        );
        report("int8-arith-wrap", message);
    }

    /// A linear or cubic Resize between DQ and Q. ORT 1.31 leaves it in float (checked on the
    /// wheel); earlier releases drop the Q/DQ and resize the codes, truncating.
    fn resize_between_qdq(&self, pos: usize, node: &NodeProto, report: &mut impl FnMut(&'static str, String)) {
        if node.op_type.as_deref() != Some("Resize") {
            return;
        }
        let mode = node.attribute.iter().find(|a| a.name.as_deref() == Some("mode")).and_then(|a| a.s.as_deref()).unwrap_or(b"nearest");
        if mode == b"nearest" {
            return;
        }
        let from_dq =
            self.input(node, 0).and_then(|x| self.graph.producer(&x)).is_some_and(|p| self.proto.node[p].op_type.as_deref() == Some("DequantizeLinear"));
        let to_q = node.output.first().is_some_and(|o| {
            let consumers = self.graph.consumers(o);
            !consumers.is_empty() && consumers.iter().all(|&c| self.proto.node[c].op_type.as_deref() == Some("QuantizeLinear"))
        });
        if from_dq && to_q {
            let message = format!(
                "{} Resize #{pos} between DQ and Q: ONNX Runtime before 1.31 drops the Q/DQ and interpolates the integer codes with truncation instead of rounding (1.31 keeps it in float); keep it out of Q/DQ or use nearest",
                String::from_utf8_lossy(mode)
            );
            report("resize-linear", message);
        }
    }

    // ---- hazards of fused groups ----------------------------------------------------------------

    fn on(&self, isas: &[Isa]) -> String {
        if isas.len() == Isa::ALL.len() {
            return "on every ISA".into();
        }
        let names: Vec<&str> = isas.iter().map(|i| i.name()).collect();
        format!("on {}", names.join(", "))
    }

    /// QLinearConv and QGemm add the int32 bias to the accumulator as is: its DQ scale must be the
    /// accumulator's (`fl(x_scale·w_scale[c])`, QGemm `fl(fl(alpha·a_scale)·b_scale[c])`, contract
    /// §3.4) bit for bit, and its zero point 0. 1.31 refuses a Conv off by more than 1%, not a
    /// Gemm, and accepts a few ulps.
    fn bias_parameters(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        let f = fused.fusion();
        if f.rule != "Conv" && f.rule != "Gemm" {
            return;
        }
        let target = &self.proto.node[f.target];
        let dq_of = |slot: usize| {
            let p = self.graph.producer(&self.input(target, slot)?)?;
            (self.proto.node[p].op_type.as_deref() == Some("DequantizeLinear")).then(|| &self.proto.node[p])
        };
        let (Some(x_dq), Some(w_dq), Some(b_dq)) = (dq_of(0), dq_of(1), dq_of(2)) else { return };
        let scale_of = |dq: &NodeProto| self.input(dq, 1).and_then(|s| self.floats(&s));
        let kernel = if f.rule == "Conv" { "QLinearConv" } else { "QGemm" };
        let (Some(xs), Some(ws), Some(bs)) = (scale_of(x_dq), scale_of(w_dq), scale_of(b_dq)) else {
            let message = format!(
                "{kernel} ignores the bias DQ's scale, and its scales are not all constant, so bias scale = x_scale·w_scale cannot be checked ({})",
                self.on(&fused.isas())
            );
            report("bias-scale", message);
            return;
        };
        let alpha = target.attribute.iter().find(|a| a.name.as_deref() == Some("alpha")).and_then(|a| a.f).unwrap_or(1.0);
        let a = if f.rule == "Gemm" { alpha * xs[0] } else { xs[0] };
        let channels = ws.len().max(bs.len());
        let mismatch = (0..channels).find(|&c| bs[c % bs.len()].to_bits() != (a * ws[c % ws.len()]).to_bits());
        if let Some(c) = mismatch {
            let (b, e) = (bs[c % bs.len()], a * ws[c % ws.len()]);
            let message = format!(
                "bias scale 0x{:08x} ({b:e}) ≠ x_scale·w_scale[{c}] = 0x{:08x} ({e:e}); ORT's {kernel} ignores the bias scale, so the fused bias is off by the ratio {:e} ({}); requantize the bias at exactly fl(x_scale·w_scale)",
                b.to_bits(),
                e.to_bits(),
                b as f64 / e as f64,
                self.on(&fused.isas())
            );
            report("bias-scale", message);
        }
        if let Some(zp) = self.input(b_dq, 2) {
            match self.ints(&zp) {
                Some(v) if v.iter().all(|&z| z == 0) => {}
                Some(v) => {
                    let (i, z) = v.iter().enumerate().find(|&(_, &z)| z != 0).map(|(i, &z)| (i, z)).expect("one is not zero");
                    let message = format!(
                        "bias zero point '{zp}'[{i}] = {z}; ORT's {kernel} adds the int32 bias codes without subtracting it ({}); fold the zero point into the bias",
                        self.on(&fused.isas())
                    );
                    report("bias-zero-point", message);
                }
                None => {
                    let message = format!("bias zero point '{zp}' is not constant; ORT's {kernel} assumes 0 ({})", self.on(&fused.isas()));
                    report("bias-zero-point", message);
                }
            }
        }
    }

    /// QLinearConv of ORT 1.25 enforces one weight zero point for all output channels
    /// (qlinearconv.cc, ComputeOffset): a fused Conv with unequal ones fails at run time. 1.31.1
    /// runs it and honours each channel's zero point (onnxruntime issue #28447; checked on the
    /// wheel by tests/oracle/test_selectors.py), so this is a hazard for older releases.
    fn weight_zero_points(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        if fused.fusion().rule != "Conv" {
            return;
        }
        let target = &self.proto.node[fused.fusion().target];
        let Some(w) = self.input(target, 1).and_then(|w| self.graph.producer(&w)).map(|p| &self.proto.node[p]) else {
            return;
        };
        let Some(zps) = self.input(w, 2).and_then(|z| self.ints(&z)) else { return };
        if let Some((i, &z)) = zps.iter().enumerate().find(|&(_, &z)| z != zps[0]) {
            let message = format!(
                "per-channel weight zero points differ (channel 0: {}, channel {i}: {z}); ORT fuses this Conv ({}) and QLinearConv before the fix of onnxruntime issue #28447 (2026; 1.31.1 has it) ORT_ENFORCEs equal ones, failing at run time; use one weight zero point for older runtimes",
                zps[0],
                self.on(&fused.isas())
            );
            report("weight-zero-points", message);
        }
    }

    /// x86 AVX2 without VNNI multiplies u8 activation codes by s8 weight codes with
    /// `vpmaddubsw`, which adds two adjacent products and saturates the sum to int16. Activation
    /// codes are raw (zero points are corrected afterwards), so a pair of weights (w1, w2)
    /// overflows for some activations iff `255·(max(w1,0) + max(w2,0)) > 32767` or
    /// `255·(min(w1,0) + min(w2,0)) < −32768`.
    ///
    /// Which weights form a pair depends on MLAS's packing: the GEMM paths (QGEMM for MatMul and
    /// Gemm, im2col for Conv) pack B along K, pairing K-neighbours of one output column, and for
    /// Conv K is the weight row flattened as (c, kh, kw); the ConvSym path (s8 weights, zero points
    /// 0) packs K as (kh, kw, c), pairing neighbouring input channels at one kernel position.
    /// Both pairings are checked, for every k (not only even k), so whatever the kernel picks no
    /// overflowing pair is missed.
    fn pair_overflow(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        let on_avx2 = fused.variants.iter().find(|(_, isas)| isas.contains(&Isa::X86Avx2));
        let Some((f, _)) = on_avx2.filter(|(f, _)| matches!(f.rule, "Conv" | "MatMul" | "Gemm")) else { return };
        if f.input_codes.get(1) != Some(&Some(DataType::Int8)) {
            return;
        }
        let target = &self.proto.node[f.target];
        let Some(w_dq) = self.input(target, 1).and_then(|w| self.graph.producer(&w)).map(|p| &self.proto.node[p]) else {
            return;
        };
        let Some(w_name) = self.input(w_dq, 0) else { return };
        // A stored weight is read in place; a float weight quantized at run time (NNCF's W → Q → DQ)
        // by the codes ORT's constant folding computes.
        let (quantized, payload);
        let (dims, w) = match self.constant(&w_name).and_then(|c| Some((c, c.payload(self.model)?))) {
            Some((c, p)) => {
                payload = p;
                (c.dims.clone(), IntView::new(c.dtype, &payload))
            }
            None => {
                let Some((dims, codes)) = self.weight_codes(&w_name) else { return };
                quantized = qdqc_lang::onnx::TensorProto { int64_data: codes, ..Default::default() };
                payload = qdqc_lang::tensor::Payload::Typed(&quantized);
                (dims, IntView::new(qdqc_lang::onnx::DataType::Int64, &payload))
            }
        };
        let Some(w) = w else { return };
        let rows = weight_rows(f.rule, &dims, target);
        let Some((row, k1, k2, sum)) = first_overflow(&w, &rows) else { return };
        let message = format!(
            "s8 weights '{w_name}'[{k1}] = {} and [{k2}] = {} (output channel {row}) reach a pair sum of {sum} with u8 activations, outside int16: x86 AVX2 without VNNI saturates it in vpmaddubsw and the fused kernel's accumulator is wrong; keep weights within [-64, 63] or set session.x64quantprecision=1",
            w.get(k1),
            w.get(k2)
        );
        report("s8-pair-overflow", message);
    }

    /// QLinearSoftmax of ORT 1.25 (contract §3.8) clamps int8 outputs only above 255 and
    /// then casts, so 128..255 wrap. Fixed by onnxruntime PR #29728 (July 2026): 1.31.1 saturates
    /// to 127 (checked on the wheel by tests/oracle/test_selectors.py), older releases wrap.
    fn softmax_output(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        let int8: Vec<Isa> = fused
            .variants
            .iter()
            .filter(|(f, _)| f.fused_op.ends_with("QLinearSoftmax") && f.output_codes.first() == Some(&Some(DataType::Int8)))
            .flat_map(|(_, isas)| isas.iter().copied())
            .collect();
        if !int8.is_empty() {
            let message = format!(
                "ORT fuses this Softmax into QLinearSoftmax with int8 output ({}); before onnxruntime PR #29728 (July 2026; 1.31.1 has it) its kernel clamps only above 255 before the cast, so probabilities that quantize above 127 wrap to negative codes; use a uint8 output Q or a fixed ORT",
                self.on(&int8)
            );
            report("softmax-int8", message);
        }
    }

    /// ORT's selectors do not check that activation parameters are per tensor, but the fused
    /// kernels need them so (checked on the 1.31.1 wheel): the lookup-table kernels (QLinearSigmoid,
    /// QLinearLeakyRelu, QLinearSoftmax) fail at session creation, QLinearAdd, QLinearMul and
    /// QLinearAveragePool fail ORT's type inference, and QLinearGlobalAveragePool, QLinearConv,
    /// QLinearMatMul and MatMulIntegerToFloat fail at their first run. QLinearConcat and
    /// QLinearWhere accept them; the drop rules and (since PR #28714) QGemm do not fuse them.
    /// Weights (input 1 of Conv and MatMul) may be per channel.
    fn per_channel_activations(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        let f = fused.fusion();
        if f.rule.starts_with("drop") || matches!(f.rule, "*DQ" | "Where" | "Gemm" | "DQMatMulToMatMulNBits") {
            return;
        }
        let target = &self.proto.node[f.target];
        let has_weights = matches!(f.rule, "Conv" | "MatMul");
        let activations = f.dq_inputs.iter().copied().filter(|&dq| {
            let out = self.proto.node[dq].output.first();
            !has_weights || target.input.first() == out
        });
        for pos in activations.chain(f.q_outputs.iter().copied()) {
            let n = &self.proto.node[pos];
            for name in [self.input(n, 1), self.input(n, 2)].into_iter().flatten() {
                let Some(c) = self.constant(&name) else { continue };
                if c.element_count() > 1 {
                    let kernel = f.fused_op.trim_start_matches("com.microsoft.");
                    let message = format!(
                        "'{name}' of {} has {} elements: ORT fuses this group into {kernel} ({}), whose kernel takes per-tensor activation parameters, so session creation or the first run fails (onnxruntime 1.31.1); quantize activations per tensor",
                        ir::describe(n, pos, &self.graph.location),
                        c.element_count(),
                        self.on(&fused.isas())
                    );
                    report("per-channel-activation", message);
                    return;
                }
            }
        }
    }

    /// QLinearAveragePool has no dilations: ORT fuses the group anyway, and on 1.31.1 session
    /// creation then fails (INVALID_GRAPH, checked on the wheel).
    fn pool_dilations(&self, fused: &Fused, report: &mut impl FnMut(&'static str, String)) {
        let target = &self.proto.node[fused.fusion().target];
        if target.op_type.as_deref() != Some("AveragePool") {
            return;
        }
        let dilations = target.attribute.iter().find(|a| a.name.as_deref() == Some("dilations")).map(|a| a.ints.clone()).unwrap_or_default();
        if dilations.iter().any(|&d| d != 1) {
            let message = format!(
                "AveragePool with dilations {dilations:?} between DQ and Q: ORT fuses it into QLinearAveragePool, which has no dilations attribute, and session creation fails ({}); run it undilated or outside Q/DQ",
                self.on(&fused.isas())
            );
            report("avgpool-dilations", message);
        }
    }
}

/// Flat weight indices of each output channel's K dimension, in the orders MLAS pairs them
/// (see `pair_overflow`): one arithmetic progression per (channel, pairing), as
/// `(channel, first index, stride, count)`, so a weight of any size costs a few words a row.
fn weight_rows(rule: &str, dims: &[i64], target: &NodeProto) -> Vec<(usize, usize, usize, usize)> {
    let d: Vec<usize> = dims.iter().map(|&x| usize::try_from(x.max(0)).expect("a loaded weight's dimensions fit usize")).collect();
    let trans_b = target.attribute.iter().any(|a| a.name.as_deref() == Some("transB") && a.i == Some(1));
    let mut rows = Vec::new();
    match (rule, &d[..]) {
        ("Conv", [m, rest @ ..]) if !rest.is_empty() => {
            let (c, kernel) = (rest[0], rest[1..].iter().product::<usize>());
            let k = c * kernel;
            for oc in 0..*m {
                rows.push((oc, oc * k, 1, k));
                // ConvSym: input channels at one kernel position.
                for p in 0..kernel {
                    rows.push((oc, oc * k + p, kernel, c));
                }
            }
        }
        // Gemm with transB: B is [N, K].
        ("Gemm", [n, k]) if trans_b => rows.extend((0..*n).map(|col| (col, col * k, 1, *k))),
        // MatMul and Gemm: B is [.., K, N], column by column.
        (_, [.., k, n]) => {
            let batch: usize = d[..d.len() - 2].iter().product();
            for b in 0..batch {
                for col in 0..*n {
                    rows.push((col, b * k * n + col, *n, *k));
                }
            }
        }
        _ => {}
    }
    rows
}

/// The first adjacent pair of a row whose extreme u8 pair sum leaves int16: (row, k1, k2, sum).
/// Codes are read in place; when the weight's range admits no overflowing pair nothing is read.
fn first_overflow(w: &IntView<'_>, rows: &[(usize, usize, usize, usize)]) -> Option<(usize, usize, usize, i64)> {
    let (_, hi) = CodeType::U8.range();
    let (lo_w, hi_w) = w.range()?;
    if hi * 2 * hi_w.max(0) <= i16::MAX as i64 && hi * 2 * lo_w.min(0) >= i16::MIN as i64 {
        return None;
    }
    rows.iter().find_map(|&(row, start, stride, count)| {
        (1..count).map(|j| (start + (j - 1) * stride, start + j * stride)).filter(|&(_, k2)| k2 < w.len()).find_map(|(k1, k2)| {
            let (a, b) = (w.get(k1), w.get(k2));
            let (up, down) = (hi * (a.max(0) + b.max(0)), hi * (a.min(0) + b.min(0)));
            if up > i16::MAX as i64 {
                Some((row, k1, k2, up))
            } else if down < i16::MIN as i64 {
                Some((row, k1, k2, down))
            } else {
                None
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::testing::*;
    use DataType::{Float16, Int8, Int32, Uint8};
    use qdqc_lang::onnx::TensorProto;

    fn kinds(g: G) -> Vec<&'static str> {
        hazards(&g.load().model).into_iter().map(|h| h.kind).collect()
    }

    fn messages(g: G, kind: &str) -> Vec<String> {
        hazards(&g.load().model).into_iter().filter(|h| h.kind == kind).map(|h| h.message).collect()
    }

    /// x → Q/DQ(scale, zp) → y.
    fn pair(scale: TensorProto, zp: TensorProto) -> G {
        G::new(21).init(scale).init(zp).input("x").output("y").qdq("x", "sc", "zp", "y")
    }

    #[test]
    fn bad_scales_are_reported_by_what_is_wrong() {
        for (v, what) in [(0.0, "is zero"), (-0.1, "is negative"), (f32::NAN, "is NaN"), (f32::INFINITY, "is infinite"), (1e-40, "is subnormal")] {
            let m = messages(pair(scalar("sc", v), ints("zp", Uint8, &[], &[0])), "scale");
            assert_eq!(m.len(), 2, "Q and DQ, {what}");
            assert!(m[0].contains(what) && m[0].starts_with("scale 'sc'[0] = 0x"), "{}", m[0]);
        }
        assert!(kinds(pair(scalar("sc", 0.1), ints("zp", Uint8, &[], &[0]))).is_empty());
        let per_channel = messages(pair(f32s("sc", &[3], &[0.1, -0.2, -0.3]), ints("zp", Uint8, &[3], &[0, 0, 0])), "scale");
        assert!(per_channel[0].contains("'sc'[1]") && per_channel[0].contains("(2 of 3 elements)"), "{}", per_channel[0]);
    }

    #[test]
    fn zero_points_outside_their_type_are_reported() {
        let typed = |v: i32| TensorProto { name: Some("zp".into()), data_type: Some(Uint8 as i32), int32_data: vec![v], ..Default::default() };
        let m = messages(pair(scalar("sc", 0.1), typed(300)), "zero-point-range");
        assert_eq!(m.len(), 2);
        assert!(m[0].contains("= 300 is outside u8 [0, 255]"), "{}", m[0]);
        assert!(kinds(pair(scalar("sc", 0.1), typed(200))).is_empty());
    }

    /// x → Q/DQ → Conv(DQ(w, per-channel zp), DQ(b, sb)) → Q/DQ → y with two output channels.
    fn conv(sb: &[f32], w_zp: &[i64], w: &[i64]) -> G {
        G::new(21)
            .params()
            .init(ints("w", Int8, &[2, 2, 1], w))
            .init(f32s("sw", &[2], &[0.01, 0.02]))
            .init(ints("zw", Int8, &[2], w_zp))
            .init(ints("b", Int32, &[2], &[30, -20]))
            .init(f32s("sb", &[2], sb))
            .typed_input("x", DataType::Float, &[1, 2, 5])
            .output("y")
            .qdq("x", "s", "z", "dx")
            .node(attr_i(node("DequantizeLinear", &["w", "sw", "zw"], &["dw"]), "axis", 0))
            .node(attr_i(node("DequantizeLinear", &["b", "sb"], &["db"]), "axis", 0))
            .op("Conv", &["dx", "dw", "db"], &["c"])
            .qdq("c", "s", "z", "y")
    }

    const SB: [f32; 2] = [0.1 * 0.01, 0.1 * 0.02];

    #[test]
    fn a_conv_bias_scale_a_few_ulps_off_is_fused_and_reported() {
        assert!(kinds(conv(&SB, &[0, 0], &[1, 2, 3, 4])).is_empty());
        let off = [SB[0], f32::from_bits(SB[1].to_bits() + 1)];
        let m = messages(conv(&off, &[0, 0], &[1, 2, 3, 4]), "bias-scale");
        assert_eq!(m.len(), 1);
        let expected = format!("≠ x_scale·w_scale[1] = 0x{:08x}", SB[1].to_bits());
        assert!(m[0].starts_with(&format!("bias scale 0x{:08x}", off[1].to_bits())) && m[0].contains(&expected) && m[0].contains("on every ISA"), "{}", m[0]);
    }

    #[test]
    fn unequal_weight_zero_points_of_a_fused_conv_are_reported() {
        let m = messages(conv(&SB, &[0, 1], &[1, 2, 3, 4]), "weight-zero-points");
        assert!(m.len() == 1 && m[0].contains("channel 0: 0, channel 1: 1"), "{m:?}");
    }

    /// a → Q/DQ → Gemm(DQ(w int8 [2, 2]), DQ(b, sb, zb)) → Q/DQ → y.
    fn gemm(sb: f32, zb: i64, w: &[i64]) -> G {
        let g = G::new(21).params().init(ints("w", Int8, &[2, 2], w)).init(scalar("sw", 0.01)).init(ints("b", Int32, &[2], &[1, 2]));
        let g = g.init(scalar("sb", sb)).init(ints("zb", Int32, &[], &[zb])).typed_input("a", DataType::Float, &[1, 2]).output("y");
        g.qdq("a", "s", "z", "da")
            .op("DequantizeLinear", &["w", "sw", "z8"], &["dw"])
            .op("DequantizeLinear", &["b", "sb", "zb"], &["db"])
            .op("Gemm", &["da", "dw", "db"], &["c"])
            .qdq("c", "s", "z", "y")
    }

    #[test]
    fn a_gemm_bias_is_fused_whatever_its_scale_and_zero_point() {
        assert!(kinds(gemm(0.1 * 0.01, 0, &[1, 2, 3, 4])).is_empty());
        let m = messages(gemm(0.002, 0, &[1, 2, 3, 4]), "bias-scale");
        assert!(m.len() == 1 && m[0].contains("QGemm ignores the bias scale"), "{m:?}");
        let m = messages(gemm(0.1 * 0.01, 5, &[1, 2, 3, 4]), "bias-zero-point");
        assert!(m.len() == 1 && m[0].starts_with("bias zero point 'zb'[0] = 5"), "{m:?}");
    }

    #[test]
    fn s8_weight_pairs_that_leave_int16_are_reported_for_avx2() {
        let m = messages(gemm(0.1 * 0.01, 0, &[-128, 5, -128, 6]), "s8-pair-overflow");
        // B is [K, N]: column 0 pairs w[0] = -128 with w[2] = -128: 255·(−256) = −65280.
        assert!(m.len() == 1 && m[0].contains("'w'[0] = -128 and [2] = -128 (output channel 0) reach a pair sum of -65280"), "{m:?}");
        assert!(kinds(gemm(0.1 * 0.01, 0, &[-64, 63, -64, 63])).is_empty(), "255·(−128) fits int16");
        // Conv: the first channel's row is [w0, w1]; 100 + 100 → 51000.
        let m = messages(conv(&SB, &[0, 0], &[100, 100, 1, 1]), "s8-pair-overflow");
        assert!(m.len() == 1 && m[0].contains("[0] = 100 and [1] = 100"), "{m:?}");
    }

    #[test]
    fn s8_pairs_of_float_weights_quantized_at_run_time_are_reported() {
        // NNCF's form: float weights → Q(per channel) → DQ. Codes 1.0/0.01 = 100 twice: 51000.
        let g = G::new(21)
            .params()
            .init(f32s("wf", &[2, 2, 1], &[1.0, 1.0, 0.01, 0.01]))
            .init(f32s("sw", &[2], &[0.01, 0.01]))
            .init(ints("zw", Int8, &[2], &[0, 0]))
            .typed_input("x", DataType::Float, &[1, 2, 5])
            .output("y")
            .qdq("x", "s", "z", "dx")
            .node(attr_i(node("QuantizeLinear", &["wf", "sw", "zw"], &["w"]), "axis", 0))
            .node(attr_i(node("DequantizeLinear", &["w", "sw", "zw"], &["dw"]), "axis", 0))
            .op("Conv", &["dx", "dw"], &["c"])
            .qdq("c", "s", "z", "y");
        let m = messages(g, "s8-pair-overflow");
        assert!(m.len() == 1 && m[0].contains("'w'[0] = 100 and [1] = 100"), "{m:?}");
    }

    #[test]
    fn int8_softmax_outputs_are_reported_where_they_stay_int8() {
        let softmax = |z: &str| G::new(13).params().input("x").output("y").qdq("x", "s", z, "dx").op("Softmax", &["dx"], &["c"]).qdq("c", "s", z, "y");
        let m = messages(softmax("z8"), "softmax-int8");
        // On x86 QDQS8ToU8 makes the pairs uint8 first.
        assert!(m.len() == 1 && m[0].contains("(on arm64-neon)"), "{m:?}");
        assert!(kinds(softmax("z")).is_empty());
    }

    #[test]
    fn linear_resize_between_dq_and_q_is_reported() {
        let resize = |mode: &str| {
            let g = G::new(19).params().init(f32s("scales", &[1], &[2.0])).input("x").output("y").qdq("x", "s", "z", "dx");
            g.node(attr_s(node("Resize", &["dx", "", "scales"], &["c"]), "mode", mode)).qdq("c", "s", "z", "y")
        };
        let m = messages(resize("linear"), "resize-linear");
        assert!(m.len() == 1 && m[0].starts_with("linear Resize #2"), "{m:?}");
        assert!(kinds(resize("nearest")).is_empty());
    }

    #[test]
    fn subtracting_uint8_codes_before_a_cast_is_reported() {
        let g = G::new(21).params().init(ints("zx", Uint8, &[], &[128])).typed_input("codes", Uint8, &[4]).output("y");
        let m = messages(g.clone().op("Sub", &["codes", "zx"], &["d"]).node(attr_i(node("Cast", &["d"], &["y"]), "to", 1)), "int8-arith-wrap");
        assert!(m.len() == 1 && m[0].starts_with("Sub computes 'codes' − 'zx' on u8 tensors"), "{m:?}");
        // Casting first is the fix.
        let g = g.node(attr_i(node("Cast", &["codes"], &["cf"]), "to", 1)).node(attr_i(node("Cast", &["zx"], &["zf"]), "to", 1));
        assert!(kinds(g.op("Sub", &["cf", "zf"], &["y"])).is_empty());
    }

    #[test]
    fn quantize_inputs_and_missing_zero_points_are_reported() {
        let g = G::new(21).params().typed_input("h", Float16, &[4]).typed_output("y", Int8);
        assert_eq!(kinds(g.clone().op("QuantizeLinear", &["h", "s", "z8"], &["y"])), vec!["fp16-quantize"]);
        let m = messages(g.clone().input("x").node(attr_i(node("QuantizeLinear", &["x", "s"], &["y"]), "output_dtype", Int8 as i64)), "q-output-dtype");
        assert!(m.len() == 1 && m[0].contains("output_dtype i8"), "{m:?}");
        assert!(kinds(g.input("x").op("QuantizeLinear", &["x", "s", "z8"], &["y"])).is_empty());
    }

    #[test]
    fn a_dilated_average_pool_between_dq_and_q_is_reported() {
        let pool = |dilations: &[i64]| {
            let n = attr_ints(attr_ints(node("AveragePool", &["dx"], &["c"]), "kernel_shape", &[2]), "dilations", dilations);
            G::new(19).params().input("x").output("y").qdq("x", "s", "z", "dx").node(n).qdq("c", "s", "z", "y")
        };
        assert_eq!(kinds(pool(&[2])), vec!["avgpool-dilations"]);
        assert!(kinds(pool(&[1])).is_empty());
    }

    #[test]
    fn per_channel_activation_parameters_of_a_fused_group_are_reported() {
        let sigmoid = |s: &str, z: &str| {
            G::new(21)
                .params()
                .init(f32s("s2", &[2], &[0.1, 0.2]))
                .init(ints("z2", Uint8, &[2], &[0, 0]))
                .input("x")
                .output("y")
                .qdq("x", s, z, "dx")
                .op("Sigmoid", &["dx"], &["c"])
                .qdq("c", "s", "z", "y")
        };
        let m = messages(sigmoid("s2", "z2"), "per-channel-activation");
        assert!(m.len() == 1 && m[0].contains("'s2'") && m[0].contains("QLinearSigmoid"), "{m:?}");
        assert!(kinds(sigmoid("s", "z")).is_empty());
    }

    #[test]
    fn hazards_in_subgraphs_name_their_location() {
        let body = G::new(21).init(scalar("bad", 0.0)).output("ty").qdq("a", "bad", "z", "ty");
        let other = G::new(21).output("ey").op("Identity", &["a"], &["ey"]);
        let iff = attr_graph(attr_graph(node("If", &["cond"], &["y"]), "then_branch", body.g), "else_branch", other.g);
        let h = hazards(&G::new(21).params().typed_input("cond", DataType::Bool, &[]).input("a").output("y").node(iff).load().model);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].node, "node 'q_ty' (QuantizeLinear) in If 'y'.then_branch");
    }
}
