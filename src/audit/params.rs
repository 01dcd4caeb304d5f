//! Reading a group's quantization parameters and constant codes from the model, with the
//! refusal reason when a prover cannot have them (a non-constant scale, a missing weight).

use qdqc_exact::QParam;
use qdqc_exact::reference::CodeType;
use qdqc_lang::onnx::{DataType, NodeProto};
use qdqc_lang::scope::Scope;
use qdqc_lang::{Model, ir};

/// The largest weight the audit proves: 2^24 codes (a 4096 x 4096 matrix), 256 MiB once widened
/// to i64 and split into channels; a larger one is reported unknown, naming this bound.
pub const AUDIT_CODES: u64 = 1 << 24;

/// One graph of the model, with what its nodes can see.
pub struct Ctx<'m> {
    pub model: &'m Model,
    pub graph: &'m ir::Graph,
    pub scopes: Scope<'m>,
}

/// Per-channel (or per-tensor, with one entry) parameters of a Q or DQ.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelParams {
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    pub code: CodeType,
    /// Quantization axis when there is more than one channel.
    pub axis: Option<i64>,
}

impl<'m> Ctx<'m> {
    pub fn node(&self, pos: usize) -> &'m NodeProto {
        &self.scopes.current().node[pos]
    }

    pub fn name(&self, pos: usize) -> String {
        self.node(pos).label(pos)
    }

    fn input(&self, node: &NodeProto, i: usize) -> Option<String> {
        node.input.get(i).filter(|s| !s.is_empty()).cloned()
    }

    /// Parameters of the Q or DQ at `pos`, per channel.
    pub fn channel_params(&self, pos: usize) -> Result<ChannelParams, String> {
        let node = self.node(pos);
        let name = self.name(pos);
        let scale_name = self.input(node, 1).ok_or_else(|| format!("{name} has no scale"))?;
        let scale = self.scopes.facts(self.model, &scale_name);
        let bits = scale.constant.and_then(|c| c.f32_bits).ok_or_else(|| format!("{name}: scale '{scale_name}' is not a constant f32 tensor"))?;
        let scales: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let (zero_points, zp_type) = match self.input(node, 2) {
            None => (vec![0; scales.len()], None),
            Some(zp_name) => {
                let zp = self.scopes.facts(self.model, &zp_name);
                let values = zp.constant.and_then(|c| c.ints).ok_or_else(|| format!("{name}: zero point '{zp_name}' is not a constant integer tensor"))?;
                (values, zp.dtype)
            }
        };
        if zero_points.len() != scales.len() {
            return Err(format!("{name}: {} scales but {} zero points", scales.len(), zero_points.len()));
        }
        let attr = |a: &str| node.attribute.iter().find(|x| x.name.as_deref() == Some(a)).and_then(|x| x.i);
        let code_dtype = if node.op_type.as_deref() == Some("DequantizeLinear") {
            self.scopes.facts(self.model, &node.input[0]).dtype.or(zp_type)
        } else {
            zp_type.or_else(|| attr("output_dtype").and_then(|d| DataType::try_from(d as i32).ok()).filter(|d| *d != DataType::Undefined))
        };
        let code = code_dtype.and_then(CodeType::from_dtype).unwrap_or(CodeType::U8);
        if attr("block_size").is_some_and(|b| b > 0) {
            return Err(format!("{name}: blocked quantization"));
        }
        let axis = (scales.len() > 1).then(|| attr("axis").unwrap_or(1));
        Ok(ChannelParams { scales, zero_points, code, axis })
    }

    /// Per-tensor parameters of the Q or DQ at `pos`.
    pub fn qparam(&self, pos: usize) -> Result<QParam, String> {
        let p = self.channel_params(pos)?;
        if p.scales.len() != 1 {
            return Err(format!("{}: per-channel parameters where per-tensor are needed", self.name(pos)));
        }
        Ok(QParam::new(p.scales[0], p.zero_points[0], p.code))
    }

    /// Dims and codes of the constant a DQ dequantizes (a weight or bias), of at most
    /// [`AUDIT_CODES`]: stored codes, or a QuantizeLinear of a float32 constant (NNCF's fp32
    /// weights → Q → DQ), whose codes ORT's constant folding computes with the same kernel the
    /// unfused graph runs.
    pub fn constant_codes(&self, dq: usize) -> Result<(Vec<i64>, Vec<i64>), String> {
        let input = &self.node(dq).input[0];
        match self.scopes.int_tensor(self.model, input, AUDIT_CODES) {
            Ok(codes) => Ok(codes),
            Err(why) => self.quantized_constant(input).ok_or_else(|| format!("{}: {why}, nor a QuantizeLinear of a float32 constant", self.name(dq))),
        }
    }

    /// The codes `QuantizeLinear(w, scale, zero point)` gives for a float32 constant `w`, per
    /// tensor or per axis, as ORT's CPU kernel rounds them (`x / s`, half to even, saturated).
    fn quantized_constant(&self, value: &str) -> Option<(Vec<i64>, Vec<i64>)> {
        let q = self.graph.producer(value)?;
        let node = self.node(q);
        if node.op_type.as_deref() != Some("QuantizeLinear") || node.domain.as_deref().is_some_and(|d| !d.is_empty()) {
            return None;
        }
        let (dims, w) = self.scopes.f32_tensor(self.model, node.input.first()?)?;
        let p = self.channel_params(q).ok()?;
        let axis = p.axis.map(|a| if a < 0 { a + dims.len() as i64 } else { a }).map(|a| a as usize);
        let codes = qdqc_exact::reference::quantize_tensor(&w, &dims, axis, &p.scales, &p.zero_points, p.code)?;
        Some((dims, codes))
    }

    /// Dims of the constant a DQ dequantizes, without reading its codes.
    pub fn constant_dims(&self, dq: usize) -> Option<Vec<i64>> {
        self.scopes.initializer_dims(&self.node(dq).input[0])
    }

    /// Static shape of a value, when every dim is known.
    pub fn shape(&self, value: &str) -> Option<Vec<i64>> {
        self.scopes
            .facts(self.model, value)
            .shape?
            .into_iter()
            .map(|d| match d {
                qdqc_lang::analysis::Dim::Known(k) => Some(k),
                qdqc_lang::analysis::Dim::Symbolic(_) => None,
            })
            .collect()
    }

    /// Shape of a value with its symbolic dims as `None`, when the rank is known.
    pub fn dims(&self, value: &str) -> Option<Vec<Option<i64>>> {
        let shape = self.scopes.facts(self.model, value).shape?;
        Some(
            shape
                .into_iter()
                .map(|d| match d {
                    qdqc_lang::analysis::Dim::Known(k) => Some(k),
                    qdqc_lang::analysis::Dim::Symbolic(_) => None,
                })
                .collect(),
        )
    }

    pub fn int_attr(&self, pos: usize, name: &str) -> Option<i64> {
        self.node(pos).attribute.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.i)
    }

    pub fn float_attr(&self, pos: usize, name: &str) -> Option<f32> {
        self.node(pos).attribute.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.f)
    }

    pub fn ints_attr(&self, pos: usize, name: &str) -> Option<Vec<i64>> {
        self.node(pos).attribute.iter().find(|a| a.name.as_deref() == Some(name)).map(|a| a.ints.clone())
    }
}
