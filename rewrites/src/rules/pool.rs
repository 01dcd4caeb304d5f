//! `DQ → GlobalAveragePool → Q` and `DQ → AveragePool → Q` into com.microsoft
//! QLinearGlobalAveragePool and QLinearAveragePool (`qdqc_ort::pool`), NCHW.
//!
//! Obligations (contract §5.11):
//! * **qlinear-global-average-pool**: under `exact`, P2 (every partial float sum of the window's
//!   DQ values is exact, so the unfused graph is deterministic whatever order MLAS sums in), then
//!   P1 over every reachable integer accumulator against the kernel's single rounded multiplier;
//!   where P2 fails, a refutation must come from an input whose float sum is exact in any order
//!   (k copies of one code, the rest at the zero point), else unknown. Under `real`, P1 over the
//!   accumulators against the exact quotient. Hazards: the kernel throws for an image of 2^24
//!   elements or more, or a multiplier `sX/(sY·N)` outside [2^-32, 256) (never fused). Broken
//!   twin: `tests/broken` "global_avgpool_float_sum_not_exact".
//! * **qlinear-average-pool**: the same per distinct (window size, divisor) of the geometry, with
//!   the kernel's float path (zero point added before rounding) or its global path (kernel
//!   covers the input, no pads). Hazards: dilations other than 1 (QLinearAveragePool ignores
//!   them and has no such attribute: refused), `auto_pad` SAME_* (not modelled: refused). Broken
//!   twin: "qlinear_average_pool_zero_point_before_rounding".
//!
//! On the Rust target: [`qdqc_target_rust::pool::prove`] — `mean_exact` per window class, P1
//! against the exact quotient (`real`) or, after P2, against the float path (`exact`).
//!
//! Geometry needs the input's static shape from the e-class facts; without it the rule refuses
//! with "input shape is not static" (unknown).

use super::group::{Group, shape, var};
use super::lut::{Fusion, attribute, attributes, kernel_qparam, one_eight_bit_type, rule, zero_point};
use super::{Log, Rewrite, RuleOptions};
use egg::{Id, Subst};
use qdqc_exact::{Contract, Verdict};
use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_ort::Isa;
use qdqc_ort::pool::{self, PoolGeometry, PoolParams};
use qdqc_target_rust::pool as rust_pool;

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let pattern = |op: &str| format!("(q ?tq ({op} ?to (dq ?tx ?x ?sx ?zx)) ?sy ?zy)");
    vec![
        rule("qlinear-global-average-pool", &pattern("GlobalAveragePool"), Pool::Global, options, log),
        rule("qlinear-average-pool", &pattern("AveragePool"), Pool::Average, options, log),
    ]
}

#[derive(Clone, Copy)]
enum Pool {
    Global,
    Average,
}

/// What a pooling group's kernel needs: quantization, and the image size or geometry.
struct PoolGroup {
    params: PoolParams,
    shape: Shape,
    /// AveragePool's attributes, as QLinearAveragePool takes them.
    attributes: Vec<Attribute>,
}

enum Shape {
    Image(u64),
    Geometry(PoolGeometry),
}

/// The input's static NCHW shape: batch, channels and 1 to 3 spatial dimensions.
fn static_input_shape(eg: &QdqEGraph, x: Id) -> Result<Vec<i64>, String> {
    let dims = shape(eg, x).ok_or("input shape is not static")?;
    if !(3..=5).contains(&dims.len()) || dims.iter().any(|&d| d < 0) {
        return Err(format!("input shape {dims:?} is not N×C with 1 to 3 spatial dimensions"));
    }
    Ok(dims)
}

/// An integer-list attribute, or `default` when omitted.
fn ints(attrs: &[Attribute], name: &str, default: Vec<u64>) -> Result<Vec<u64>, String> {
    match attribute(attrs, name) {
        None => Ok(default),
        Some(AttrValue::Ints(v)) => v.iter().map(|&x| u64::try_from(x).map_err(|_| format!("negative {name} {v:?}"))).collect(),
        Some(other) => Err(format!("{name} {other:?} is not a list of integers")),
    }
}

fn flag(attrs: &[Attribute], name: &str) -> Result<bool, String> {
    match attribute(attrs, name) {
        None => Ok(false),
        Some(AttrValue::Int(v)) => Ok(*v != 0),
        Some(other) => Err(format!("{name} {other:?} is not an integer")),
    }
}

/// Explicit pads: `auto_pad` NOTSET takes `pads`, VALID pads nothing; SAME_* is not modelled.
fn explicit_pads(attrs: &[Attribute], rank: usize) -> Result<Vec<u64>, String> {
    match attribute(attrs, "auto_pad") {
        None => ints(attrs, "pads", vec![0; 2 * rank]),
        Some(AttrValue::Str(mode)) if mode == "NOTSET" => ints(attrs, "pads", vec![0; 2 * rank]),
        Some(AttrValue::Str(mode)) if mode == "VALID" => Ok(vec![0; 2 * rank]),
        Some(other) => Err(format!("auto_pad {other:?} is not modelled")),
    }
}

/// AveragePool's geometry over the spatial dimensions of `dims`.
fn geometry(attrs: &[Attribute], dims: &[i64]) -> Result<PoolGeometry, String> {
    let input: Vec<u64> = dims[2..].iter().map(|&d| d as u64).collect();
    let rank = input.len();
    let kernel = ints(attrs, "kernel_shape", Vec::new())?;
    if kernel.len() != rank {
        return Err(format!("kernel_shape {kernel:?} does not match {rank} spatial dimensions"));
    }
    Ok(PoolGeometry {
        input,
        kernel,
        strides: ints(attrs, "strides", vec![1; rank])?,
        pads: explicit_pads(attrs, rank)?,
        dilations: ints(attrs, "dilations", vec![1; rank])?,
        ceil_mode: flag(attrs, "ceil_mode")?,
        count_include_pad: flag(attrs, "count_include_pad")?,
    })
}

/// QLinearAveragePool's attributes: AveragePool's without `dilations` (not in its schema; the
/// proof refuses any other than 1), NCHW.
fn kernel_attributes(attrs: &[Attribute]) -> Vec<Attribute> {
    let mut out: Vec<Attribute> = attrs.iter().filter(|a| a.name != "dilations").cloned().collect();
    out.push(Attribute::int("channels_last", 0));
    out
}

impl Fusion for Pool {
    type Params = PoolGroup;

    fn op_type(&self) -> &'static str {
        match self {
            Pool::Global => "QLinearGlobalAveragePool",
            Pool::Average => "QLinearAveragePool",
        }
    }

    fn tags(&self) -> Vec<String> {
        vec!["?tx".into(), "?to".into()]
    }

    fn read(&self, eg: &QdqEGraph, s: &Subst, q: Id) -> Result<PoolGroup, String> {
        let x = kernel_qparam(eg, var(s, "?x"), var(s, "?sx"), var(s, "?zx"))?;
        let y = kernel_qparam(eg, q, var(s, "?sy"), var(s, "?zy"))?;
        one_eight_bit_type(self.op_type(), &[x, y])?;
        let dims = static_input_shape(eg, var(s, "?x"))?;
        let attrs = attributes(eg, s);
        let shape = match self {
            Pool::Global => Shape::Image(dims[2..].iter().product::<i64>() as u64),
            Pool::Average => Shape::Geometry(geometry(&attrs, &dims)?),
        };
        Ok(PoolGroup { params: PoolParams { x, y }, shape, attributes: kernel_attributes(&attrs) })
    }

    fn same_on_every_isa(&self) -> bool {
        // The float path's out-of-range cast differs between x86 and ARM.
        matches!(self, Pool::Global)
    }

    fn prove(&self, p: &PoolGroup, isa: Isa, contract: Contract) -> Verdict {
        match &p.shape {
            Shape::Image(n) => pool::prove_global_average_pool(&p.params, *n, contract),
            Shape::Geometry(g) => pool::prove_average_pool(&p.params, g, isa, contract),
        }
    }

    fn prove_rust(&self, p: &PoolGroup, contract: Contract) -> Verdict {
        let windows = match &p.shape {
            Shape::Image(n) => rust_pool::Windows::Image(*n),
            Shape::Geometry(g) => rust_pool::Windows::Geometry(g),
        };
        rust_pool::prove(&p.params, windows, contract)
    }

    fn emit(&self, eg: &mut QdqEGraph, s: &Subst, p: &PoolGroup, group: &Group) -> (Vec<Attribute>, Vec<Id>) {
        let zx = zero_point(eg, s, "?zx", p.params.x.code, group, "x");
        let zy = zero_point(eg, s, "?zy", p.params.y.code, group, "y");
        let inputs = vec![var(s, "?x"), var(s, "?sx"), zx, var(s, "?sy"), zy];
        let attributes = match self {
            Pool::Global => vec![Attribute::int("channels_last", 0)],
            Pool::Average => p.attributes.clone(),
        };
        (attributes, inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints_attr(name: &str, v: &[i64]) -> Attribute {
        Attribute { name: name.into(), value: AttrValue::Ints(v.to_vec()) }
    }

    #[test]
    fn geometry_reads_onnx_defaults_and_explicit_attributes() {
        let g = geometry(&[ints_attr("kernel_shape", &[3, 3])], &[1, 2, 5, 6]).unwrap();
        assert_eq!((g.input, g.strides, g.pads, g.dilations), (vec![5, 6], vec![1, 1], vec![0; 4], vec![1, 1]));
        assert!(!g.ceil_mode && !g.count_include_pad);
        let attrs = [ints_attr("kernel_shape", &[2]), ints_attr("pads", &[1, 0]), Attribute::int("count_include_pad", 1)];
        let g = geometry(&attrs, &[1, 1, 7]).unwrap();
        assert_eq!((g.pads, g.count_include_pad), (vec![1, 0], true));
        let valid = [ints_attr("kernel_shape", &[2]), Attribute { name: "auto_pad".into(), value: AttrValue::Str("VALID".into()) }];
        assert_eq!(geometry(&valid, &[1, 1, 7]).unwrap().pads, vec![0, 0]);
    }

    #[test]
    fn unmodelled_geometry_is_refused() {
        let same = [ints_attr("kernel_shape", &[2]), Attribute { name: "auto_pad".into(), value: AttrValue::Str("SAME_UPPER".into()) }];
        assert!(geometry(&same, &[1, 1, 7]).unwrap_err().contains("auto_pad"));
        assert!(geometry(&[ints_attr("kernel_shape", &[2, 2])], &[1, 1, 7]).is_err());
        assert!(geometry(&[ints_attr("kernel_shape", &[2]), ints_attr("pads", &[-1, 0])], &[1, 1, 7]).is_err());
    }

    #[test]
    fn kernel_attributes_drop_dilations_and_set_nchw() {
        let attrs = [ints_attr("kernel_shape", &[2]), ints_attr("dilations", &[1])];
        let names: Vec<String> = kernel_attributes(&attrs).into_iter().map(|a| a.name).collect();
        assert_eq!(names, ["kernel_shape", "channels_last"]);
    }
}
