//! `MatMul(A, DQ(W))`, `Gemm(A, DQ(W)[, C])` and `MatMul(A, Cast(DQ(W) → f16, to f32))` into
//! com.microsoft MatMulNBits: weight-only quantized MatMuls run on the packed codes instead of a
//! dequantized float weight.
//!
//! Obligation (contract §5.13): contract `lossy`, registered only
//! under `--allow matmulnbits[=LEVEL]`. MatMulNBits re-orders the sum at every accuracy level and
//! quantizes the activations at acc4, so no exactness is claimed for the product. What is proven
//! is the weight: P1 over every (k, n), the packed B, scales and zero points dequantize to the
//! authored `DQ(W)` bit for bit ([`nbits::check`]). Each applied instance reports its accuracy
//! level and the deviation [`nbits::deviation`] measures with the kernel model on seeded random
//! activations, and on the user's (`--inputs`) when they feed it.
//!
//! Conditions, each a named function refusing with its reason:
//!
//! | condition | why |
//! |---|---|
//! | [`weight`]: constant 2-D `[K, N]` codes of 2, 4 or 8 bits | what MatMulNBits packs; the check reads every code (at most 2^26, P1's limit) |
//! | [`layout`]: per tensor, per column (axis 1), or blocked along K (axis 0, block ≥ 16, a power of two) | the layouts ORT's fusion packs |
//! | [`gemm_form`]: `alpha = 1`, `transA = transB = 0`, `beta = 1` with C of shape `[N]` | MatMulNBits has no alpha, no transposes, a bias of `[N]` |
//! | [`cast_to_f32`]: the Cast widens an f16 DQ (f16 scale) to f32 | the fused node computes in f32 with the f16 scales widened exactly (ORT's own fusion computes in f16 instead); the skipped f16 rounding of each weight is in the deviation |
//!
//! A needs no condition: MatMulNBits shapes its output as MatMul does, 1-D A included (checked in
//! ORT 1.31.1), so body values whose shape nothing declares fuse too.
//!
//! Subgraphs: W, its scale and zero point may be initializers of an enclosing graph (facts walk
//! the scope chain); the packed constants are created in the graph of the MatMul, unless an
//! enclosing graph already holds the same packing, which the body then reads (ORT 1.31.1 runs
//! MatMulNBits with body-local and outer-scope constant inputs alike,
//! tests/oracle/test_matmulnbits.py).
//!
//! Broken twin: `tests/broken` "matmulnbits_signed_codes_unshifted".

use super::group::{Group, absent, constant_codes, constant_f16, constant_f32, constant_ints, f32_constant, shape, tag, u8_constant, value_name, var};
use super::{Log, Lossy, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::{Certificate, Verdict};
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{Op, Term};
use qdqc_ort::nbits::{self, AccuracyLevel, Layout, Packed, Weight};

const FUSED_OP: &str = "com.microsoft.MatMulNBits";

/// The form a rule matches.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    MatMul,
    Gemm,
    GemmBias,
    /// `MatMul(A, Cast(DQ(W) → f16, to f32))`: f16 scales.
    MatMulCast,
}

const RULES: [(&str, &str, Form); 4] = [
    ("matmulnbits-matmul", "(MatMul ?tm ?a (dq ?tw ?w ?s ?z))", Form::MatMul),
    ("matmulnbits-gemm", "(Gemm ?tm ?a (dq ?tw ?w ?s ?z))", Form::Gemm),
    ("matmulnbits-gemm-bias", "(Gemm ?tm ?a (dq ?tw ?w ?s ?z) ?c)", Form::GemmBias),
    ("matmulnbits-matmul-cast", "(MatMul ?tm ?a (Cast ?tc (dq ?tw ?w ?s ?z)))", Form::MatMulCast),
];

pub fn rules(options: &RuleOptions, level: AccuracyLevel, log: &Log) -> Vec<Rewrite> {
    RULES
        .into_iter()
        .map(|(name, pattern, form)| {
            let applier = Fusion { name, form, level, options: options.clone(), log: log.clone() };
            Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")
        })
        .collect()
}

struct Fusion {
    name: &'static str,
    form: Form,
    level: AccuracyLevel,
    options: RuleOptions,
    log: Log,
}

/// Condition: W is a constant `[K, N]` tensor of 2-, 4- or 8-bit codes whose values are kept.
/// Returns (K, N, bits, signed, codes).
fn weight(eg: &QdqEGraph, w: Id) -> Result<(usize, usize, u32, bool, Vec<i64>), String> {
    let (bits, signed) = match eg[w].data.dtype {
        Some(DataType::Uint2) => (2, false),
        Some(DataType::Int2) => (2, true),
        Some(DataType::Uint4) => (4, false),
        Some(DataType::Int4) => (4, true),
        Some(DataType::Uint8) => (8, false),
        Some(DataType::Int8) => (8, true),
        other => return Err(format!("weights: {} codes (MatMulNBits packs 2, 4 or 8 bits)", other.map_or("unknown", |d| d.as_str_name()))),
    };
    let (dims, mut codes) = constant_codes(eg, w).ok_or("weights: not a constant initializer")?;
    let &[k, n] = dims else { return Err(format!("weights: shape {dims:?} is not 2-D [K, N]")) };
    let (k, n) = (k as usize, n as usize);
    if k == 0 || n == 0 {
        return Err(format!("weights: empty shape {dims:?}"));
    }
    // Sub-byte payloads unpack to whole bytes: drop the padding past K·N.
    codes.truncate(k * n);
    Ok((k, n, bits, signed, codes))
}

/// The DQ's layout, scales (as f32) and zero points.
type Parameters = (Layout, Vec<f32>, Option<Vec<i64>>);

/// Condition: the DQ's scales are one, one per column (axis 1), or blocked along K (axis 0,
/// block size ≥ 16 and a power of two), with zero points of the same shape and code type.
fn layout(eg: &QdqEGraph, s: &Subst, k: usize, n: usize, f16: bool) -> Result<Parameters, String> {
    let (scale_dims, scales) = if f16 {
        let (dims, bits) = constant_f16(eg, var(s, "?s")).ok_or("weight scale: not a constant f16 tensor")?;
        (dims, bits.iter().map(|&b| nbits::f16_to_f32(b)).collect())
    } else {
        constant_f32(eg, var(s, "?s")).ok_or("weight scale: not a constant f32 tensor")?
    };
    let dq = tag(eg, var(s, "?tw")).map(|t| eg.analysis.env.tag(t)).ok_or("weight DQ: no tag")?;
    // DequantizeLinear-23's output_dtype may differ from the scale's type; MatMulNBits' A, scales
    // and Y share one type.
    let scale_type = if f16 { DataType::Float16 } else { DataType::Float };
    if dq.output_dtype != 0 && dq.output_dtype != scale_type as i64 {
        return Err(format!("weight DQ: output_dtype {} differs from its scale's type", dq.output_dtype));
    }
    let block = dq.block_size.unwrap_or(0);
    let axis = dq.axis.map(|a| if a < 0 { a + 2 } else { a });
    let layout = if block > 0 {
        let bs = block as usize;
        if axis != Some(0) {
            return Err(format!("weight parameters: blocked along axis {}, not K (axis 0)", axis.unwrap_or(1)));
        }
        if bs < 16 || !bs.is_power_of_two() {
            return Err(format!("weight parameters: block size {bs} is not a power of two ≥ 16"));
        }
        if scale_dims != [k.div_ceil(bs) as i64, n as i64] {
            return Err(format!("weight parameters: blocked scale of shape {scale_dims:?}, expected [{}, {n}]", k.div_ceil(bs)));
        }
        Layout::Blocked(bs)
    } else if scales.len() == 1 {
        Layout::PerTensor
    } else if scales.len() == n && axis.unwrap_or(1) == 1 {
        Layout::PerChannel
    } else {
        return Err(format!(
            "weight parameters: {} scales along axis {} (MatMulNBits needs one, one per column, or blocks along K)",
            scales.len(),
            axis.unwrap_or(1)
        ));
    };
    let z = var(s, "?z");
    if absent(eg, z) {
        return Ok((layout, scales, None));
    }
    let (zp_dims, zps) = constant_ints(eg, z).ok_or("weight zero point: not a constant integer tensor")?;
    if zp_dims != scale_dims {
        return Err(format!("weight zero point: shape {zp_dims:?} differs from the scale's {scale_dims:?}"));
    }
    if eg[z].data.dtype != eg[var(s, "?w")].data.dtype {
        return Err("weight zero point: code type differs from the weights'".into());
    }
    Ok((layout, scales.clone(), Some(zps[..scales.len()].to_vec())))
}

/// Condition (Cast form): the Cast widens the DQ's f16 output to f32. The fused node then
/// computes in f32 with the f16 scales widened exactly; the f16 rounding of each dequantized
/// weight it skips is part of the measured deviation.
fn cast_to_f32(eg: &QdqEGraph, s: &Subst) -> Result<(), String> {
    let to = tag(eg, var(s, "?tc")).and_then(|t| eg.analysis.env.tag(t).attributes.iter().find(|a| a.name == "to").map(|a| a.value.clone()));
    if to != Some(AttrValue::Int(DataType::Float as i64)) {
        return Err(format!("Cast: to {to:?}, not float"));
    }
    match eg[var(s, "?s")].data.dtype {
        Some(DataType::Float16) => Ok(()),
        other => Err(format!("Cast: the DQ's scale is {other:?}, not float16")),
    }
}

/// Condition (Gemm): MatMulNBits has no alpha and no transposes, and adds a bias of `[N]` once.
fn gemm_form(eg: &QdqEGraph, s: &Subst, bias: bool, n: usize) -> Result<(), String> {
    let attributes = tag(eg, var(s, "?tm")).map(|t| eg.analysis.env.tag(t).attributes.clone()).unwrap_or_default();
    let get = |name: &str| attributes.iter().find(|a| a.name == name).map(|a| a.value.clone());
    for (name, default) in [("transA", 0), ("transB", 0)] {
        if let Some(AttrValue::Int(v)) = get(name)
            && v != default
        {
            return Err(format!("Gemm attributes: {name} = {v} (MatMulNBits has no transposes)"));
        }
    }
    if let Some(AttrValue::Float(alpha)) = get("alpha")
        && alpha != 1.0
    {
        return Err(format!("Gemm attributes: alpha = {alpha} ≠ 1"));
    }
    // An omitted C (`Gemm(A, B, "")`) is no bias.
    if !bias || absent(eg, var(s, "?c")) {
        return Ok(());
    }
    if let Some(AttrValue::Float(beta)) = get("beta")
        && beta != 1.0
    {
        return Err(format!("Gemm attributes: beta = {beta} ≠ 1"));
    }
    let c = var(s, "?c");
    match shape(eg, c) {
        Some(dims) if dims == [n as i64] => Ok(()),
        other => Err(format!("Gemm bias: shape {other:?} is not [{n}]")),
    }
}

impl Fusion {
    fn read(&self, eg: &QdqEGraph, s: &Subst) -> Result<Weight, String> {
        let (k, n, bits, signed, codes) = weight(eg, var(s, "?w"))?;
        if self.form == Form::MatMulCast {
            cast_to_f32(eg, s)?;
        }
        let (layout, scales, zero_points) = layout(eg, s, k, n, self.form == Form::MatMulCast)?;
        if matches!(self.form, Form::Gemm | Form::GemmBias) {
            gemm_form(eg, s, self.form == Form::GemmBias, n)?;
        }
        Ok(Weight { k, n, bits, signed, layout, codes, scales, zero_points })
    }

    /// What the report lists for the applied instance: deviation on random activations, and on
    /// the user's when A is among them.
    fn lossy(&self, eg: &QdqEGraph, s: &Subst, w: &Weight, p: &Packed, weights: Certificate) -> Lossy {
        // What the unfused graph multiplies by: DQ(W), rounded to f16 in the Cast form.
        let f16 = self.form == Form::MatMulCast;
        let reference = |k: usize, n: usize| if f16 { nbits::round_to_f16(w.dequantized(k, n)) } else { w.dequantized(k, n) };
        let random = nbits::random_activations(w.k);
        let described = format!("random: {} rows uniform in [-1, 1), splitmix64 seed {:#x}", nbits::RANDOM_ROWS, nbits::RANDOM_SEED);
        let mut deviation = vec![nbits::deviation(p, reference, &random, nbits::RANDOM_ROWS, self.level, described)];
        let inputs = &self.options.allow.inputs;
        if let Some(name) = value_name(eg, var(s, "?a"))
            && let Some(values) = inputs.arrays.get(name)
        {
            if !values.is_empty() && values.len() % w.k == 0 {
                let rows = values.len() / w.k;
                deviation.push(nbits::deviation(p, reference, values, rows, self.level, format!("{}: '{name}'", inputs.source)));
                inputs.record(name, None);
            } else {
                inputs.record(name, Some(format!("{} values are not rows of K = {} (the MatMul's reduced axis)", values.len(), w.k)));
            }
        }
        Lossy { contract: "lossy", accuracy_level: self.level, bits: w.bits, block_size: p.block_size, weights, deviation }
    }

    /// The fused node's inputs: A, B, scales, zero points, g_idx (absent), bias. Created
    /// constants are named after the tensors they pack and the shape they are packed for, so
    /// consumers sharing a weight share its packing.
    fn inputs(&self, eg: &mut QdqEGraph, s: &Subst, w: &Weight, p: &Packed) -> Vec<Id> {
        let name = |eg: &QdqEGraph, v: &str| value_name(eg, var(s, v)).unwrap_or_default().to_string();
        let shape = format!("{}x{}_bs{}", w.k, w.n, p.block_size);
        let b = u8_constant(eg, p.b.clone(), p.b_dims(), &format!("{}/qdqc_nbits_B_{shape}", name(eg, "?w")));
        let scales = f32_constant(eg, &p.scales, vec![p.scales.len() as i64], &format!("{}/qdqc_nbits_scales_{shape}", name(eg, "?s")));
        let mut inputs = vec![var(s, "?a"), b, scales];
        let zp = p.zero_points.as_ref().map(|z| {
            let source = if w.zero_points.is_some() { name(eg, "?z") } else { format!("u{}_zero", w.bits) };
            u8_constant(eg, z.clone(), vec![z.len() as i64], &format!("{source}/qdqc_nbits_zero_points_{shape}"))
        });
        if self.form == Form::GemmBias && !absent(eg, var(s, "?c")) {
            let absent = eg.add(Term::leaf(Op::Absent));
            inputs.extend([zp.unwrap_or(absent), absent, var(s, "?c")]);
        } else {
            inputs.extend(zp);
        }
        inputs
    }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(group) = Group::new(eg, &[var(s, "?tw")], var(s, "?tm")) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let unknown = |reason: String| self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect();
        let w = match self.read(eg, s) {
            Ok(w) => w,
            Err(reason) => {
                group.log(&self.log, self.name, FUSED_OP, false, unknown(reason));
                return vec![];
            }
        };
        let packed = nbits::pack(&w);
        let check = nbits::check(&w, &packed);
        let Some(proof) = check.certificate().cloned() else {
            group.log(&self.log, self.name, FUSED_OP, false, self.options.target.profiles().iter().map(|&i| (i, check.clone())).collect());
            return vec![];
        };
        let lossy = self.lossy(eg, s, &w, &packed, proof);
        group.log_lossy(&self.log, self.name, FUSED_OP, true, Vec::new(), Some(lossy));
        let inputs = self.inputs(eg, s, &w, &packed);
        let attributes = vec![
            Attribute::int("K", w.k as i64),
            Attribute::int("N", w.n as i64),
            Attribute::int("bits", i64::from(w.bits)),
            Attribute::int("block_size", packed.block_size as i64),
            Attribute::int("accuracy_level", self.level.value()),
        ];
        let fused = group.add_kernel(eg, "MatMulNBits", "com.microsoft", attributes, inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}
