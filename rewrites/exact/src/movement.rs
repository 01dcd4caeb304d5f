//! The data-movement lemma for DequantizeLinear (contract §4.5, §5.3), checked on concrete tensors.
//!
//! DQ is elementwise: output element `i` is `fl(f32(q[i] − zp[p(i)]) · s[p(i)])`, where only the
//! parameter index `p(i)` depends on the layout (per-tensor, per-axis, blocked; ORT's
//! `PrepareForQDQ`). A data-movement op `M` therefore commutes with it, `M(DQ(q)) = DQ'(M(q))`,
//! exactly when DQ' reads, at every moved position, the same code and the same (scale, zero point)
//! bits DQ read at the source position. [`gather_before_dequantize`] checks that condition at every
//! element of the table for every index value, so the rewrite's index arithmetic (axis shifts,
//! parameters gathered alongside, per-row parameters recast as blocks) is proven, not assumed.

use super::reference::dequantize;
use super::{Certificate, Counterexample, Method, Verdict};
use std::time::Instant;

/// Most points [`gather_before_dequantize`] visits (two per table element): a 151 936 × 896
/// embedding (Qwen2.5-0.5B) fits. `cargo bench --bench proof_cost` prints the cost, tens of ns
/// per point.
pub const MAX_POINTS: u64 = 1 << 29;

/// How a DequantizeLinear addresses its scale and zero point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamLayout {
    /// One scale and zero point for every element.
    PerTensor,
    /// One per index along `axis`.
    PerAxis {
        /// The data axis the parameters follow (non-negative).
        axis: usize,
    },
    /// One per `block` consecutive indices along `axis`, and per index on every other axis.
    Blocked {
        /// The data axis split into blocks (non-negative).
        axis: usize,
        /// Indices per block (positive); the last block may be short.
        block: i64,
    },
}

impl ParamLayout {
    /// The layout ORT's `PrepareForQDQ` gives a DQ of `data` dims with parameters of
    /// `param` dims and the `axis` / `block_size` attributes, or why ORT rejects it.
    pub fn of(data: &[i64], param: &[i64], axis: i64, block: i64) -> Result<ParamLayout, String> {
        // A scalar or one-element vector is per-tensor whatever the attributes say.
        if param.len() <= 1 && param.iter().product::<i64>() == 1 {
            return if block == 0 { Ok(ParamLayout::PerTensor) } else { Err("block_size must be 0 for per-tensor parameters".into()) };
        }
        let rank = signed(data.len());
        let a = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&a) {
            return Err(format!("axis {axis} is out of range for rank {rank}"));
        }
        let a = index(a);
        if block == 0 {
            return if param.len() == 1 && param[0] == data[a] {
                Ok(ParamLayout::PerAxis { axis: a })
            } else {
                Err(format!("per-axis parameters of dims {param:?} do not match dim {} of data {data:?}", data[a]))
            };
        }
        let fits = block > 0
            && param.len() == data.len()
            && param.iter().zip(data).enumerate().all(|(i, (&p, &d))| if i == a { p == (d + block - 1) / block } else { p == d });
        if fits {
            Ok(ParamLayout::Blocked { axis: a, block })
        } else {
            Err(format!("blocked parameters of dims {param:?} do not fit data {data:?} with block {block} on axis {a}"))
        }
    }

    /// Flat index, in the parameter tensor of `param` dims, of the parameter of the element at
    /// coordinate `at`; `remap` rewrites the parameter coordinate on one axis first (the gather
    /// of the parameters). No allocation: the checks visit every element of large tables.
    fn param_flat(self, param: &[i64], at: &[i64], remap: Option<(usize, &dyn Fn(i64) -> i64)>) -> usize {
        let coord = |i: usize, c: i64| match remap {
            Some((axis, f)) if axis == i => f(c),
            _ => c,
        };
        match self {
            ParamLayout::PerTensor => 0,
            ParamLayout::PerAxis { axis } => index(coord(0, at[axis])),
            ParamLayout::Blocked { axis, block } => (0..param.len()).fold(0usize, |acc, i| {
                let c = if i == axis { at[i] / block } else { at[i] };
                acc * index(param[i]) + index(coord(i, c))
            }),
        }
    }

    /// Flat index of the parameter of the element at flat index `flat` of a tensor of `data` dims.
    pub fn param_index(self, data: &[i64], param: &[i64], flat: usize) -> usize {
        self.param_flat(param, &unflatten(data, flat), None)
    }
}

/// One DequantizeLinear's parameters, scales as f32 bit patterns.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Dims of the scale and zero-point tensors.
    pub dims: Vec<i64>,
    /// Scales as bits, so equality is of the bits DQ multiplies by (no `-0.0 == 0.0`).
    pub scales: Vec<u32>,
    /// Zero points, one per scale.
    pub zero_points: Vec<i64>,
    /// How an element finds its parameter.
    pub layout: ParamLayout,
}

/// The rewritten form `DQ'(Gather(codes', idx), params')`, its parameters gathered with the same
/// `idx` first when `gathered`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewritten {
    /// Codes gathered in place of the table's, when they are a copy (widened sub-byte codes).
    pub codes: Option<Vec<i64>>,
    /// Dims of the parameter tensors before the gather.
    pub dims: Vec<i64>,
    /// Scales as bits, before the gather.
    pub scales: Vec<u32>,
    /// Zero points, one per scale, before the gather.
    pub zero_points: Vec<i64>,
    /// Whether the parameters are gathered with the same indices as the codes (per-row
    /// parameters of the gathered axis), rather than used as they are.
    pub gathered: bool,
    /// DQ''s `axis` and `block_size` attributes as written.
    pub axis: i64,
    /// DQ''s `block_size` attribute as written (0 when not blocked).
    pub block: i64,
}

/// Checks `Gather(DQ(table), idx, axis) = DQ'(Gather(codes', idx), …)` at every element for every
/// index value in `[-n, n)` (n = the table's dim on `axis`; negative indices included, since both
/// sides gather with the same `idx`). The indices are simulated as one rank-1 tensor; DQ''s
/// axis counts from the end past the gather axis, so its layout reads the same for indices of
/// any rank. `codes` are the table's codes when known (needed to check a copy, and shown in a
/// counterexample).
pub fn gather_before_dequantize(dims: &[i64], axis: usize, codes: Option<&[i64]>, original: &Params, rewritten: &Rewritten) -> Verdict {
    let start = Instant::now();
    let n = dims[axis];
    let idx: Vec<i64> = (-n..n).collect();
    let normal = |i: i64| if i < 0 { i + n } else { i };
    let moved = |d: &[i64]| -> Vec<i64> {
        let mut m = d.to_vec();
        m[axis] = signed(idx.len());
        m
    };
    if rewritten.gathered && rewritten.dims.len() != dims.len() {
        return Verdict::Unknown { reason: "parameters gathered with the table must have its rank".into() };
    }
    let out = moved(dims);
    let gathered = if rewritten.gathered { moved(&rewritten.dims) } else { rewritten.dims.clone() };
    // The indices are simulated with rank 1; DQ''s axis reads the same for any rank only when it
    // lies before the gather axis or counts from the end past it.
    let rank = signed(dims.len());
    let invariant = (0..signed(axis)).contains(&rewritten.axis) || (rewritten.axis < 0 && -rewritten.axis < rank - signed(axis));
    let per_tensor = rewritten.dims.len() <= 1 && rewritten.dims.iter().product::<i64>() == 1;
    if !per_tensor && !invariant {
        return Verdict::Unknown { reason: format!("axis {} of the rewritten DequantizeLinear depends on the rank of the indices", rewritten.axis) };
    }
    let layout = match ParamLayout::of(&out, &gathered, rewritten.axis, rewritten.block) {
        Ok(l) => l,
        Err(e) => return Verdict::Unknown { reason: format!("the rewritten DequantizeLinear would be invalid: {e}") },
    };
    // Dims come from checked shapes (non-negative); a product that does not fit is too big to visit anyway.
    let Ok(total) = usize::try_from(out.iter().product::<i64>()) else {
        return Verdict::Unknown { reason: format!("the {:?} points (every element for every index) are not a countable size", out) };
    };
    if total as u64 > MAX_POINTS {
        return Verdict::Unknown { reason: format!("{total} points (every element for every index) exceed the {MAX_POINTS} the check visits") };
    }
    let mut differing = 0u64;
    let mut best: Option<((i64, i64, usize), Counterexample)> = None;
    let (mut at, mut src_at) = (vec![0i64; out.len()], vec![0i64; out.len()]);
    let row = |j: i64| normal(idx[index(j)]);
    let remap: Option<(usize, &dyn Fn(i64) -> i64)> = rewritten.gathered.then_some((axis, &row));
    for flat in 0..total {
        if flat > 0 {
            advance(&mut at, &out);
        }
        let j = index(at[axis]);
        src_at.copy_from_slice(&at);
        src_at[axis] = normal(idx[j]);
        let src = flatten(dims, &src_at);
        let p = original.layout.param_flat(&original.dims, &src_at, None);
        let q = layout.param_flat(&rewritten.dims, &at, remap);
        let code = codes.map(|c| c[src]);
        let new_code = rewritten.codes.as_ref().map(|c| c[src]).or(code);
        let (s, z) = (original.scales[p], original.zero_points[p]);
        let (s2, z2) = (rewritten.scales[q], rewritten.zero_points[q]);
        if (s, z, code) == (s2, z2, new_code) {
            continue;
        }
        differing += 1;
        let key = (idx[j].abs(), idx[j], flat);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            let shown = code.unwrap_or(z + 1);
            let c = Counterexample {
                inputs: vec![("index".into(), idx[j]), ("element".into(), signed(src))],
                unfused: dequantize(shown, f32::from_bits(s), z).to_bits() as i64,
                fused: dequantize(new_code.unwrap_or(shown), f32::from_bits(s2), z2).to_bits() as i64,
                exact: Some(format!(
                    "code {shown}: scale {} zero point {z} vs code {} scale {} zero point {z2}",
                    f32::from_bits(s),
                    new_code.unwrap_or(shown),
                    f32::from_bits(s2)
                )),
                differing: 0,
            };
            best = Some((key, c));
        }
    }
    let proof = Certificate {
        method: Method::P4Lemma("data movement: DQ is elementwise with its parameters indexed by position".into()),
        domain: total as u64,
        micros: super::micros(start),
        detail: format!("code, scale bits and zero point equal at every element of the table for every index in [{}, {n})", -n),
    };
    match best {
        None => Verdict::Exact { proof },
        Some((_, mut counterexample)) => {
            counterexample.differing = differing;
            Verdict::Refuted { counterexample, proof }
        }
    }
}

/// The next coordinate in row-major order.
fn advance(at: &mut [i64], dims: &[i64]) {
    for (c, &d) in at.iter_mut().zip(dims).rev() {
        *c += 1;
        if *c < d {
            return;
        }
        *c = 0;
    }
}

/// Row-major coordinate of flat index `flat` in a tensor of `dims`.
fn unflatten(dims: &[i64], mut flat: usize) -> Vec<i64> {
    let mut at = vec![0; dims.len()];
    for (c, &d) in at.iter_mut().zip(dims).rev() {
        *c = signed(flat % index(d));
        flat /= index(d);
    }
    at
}

/// Flat row-major index of coordinate `at` in a tensor of `dims`.
fn flatten(dims: &[i64], at: &[i64]) -> usize {
    at.iter().zip(dims).fold(0usize, |acc, (&c, &d)| acc * index(d) + index(c))
}

/// A dim or coordinate as an index. Dims come from checked shapes and coordinates are walked
/// inside them (negative gather indices normalised first), so both are non-negative, and a
/// tensor whose elements are visited has a size that fits `usize`.
fn index(v: i64) -> usize {
    usize::try_from(v).expect("dims and coordinates are non-negative and address a tensor in memory")
}

/// A length or index as an `i64` coordinate: it counts elements of a tensor in memory, far
/// below `i64::MAX`.
fn signed(n: usize) -> i64 {
    i64::try_from(n).expect("a tensor length or index fits i64")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(dims: &[i64], layout: ParamLayout) -> Params {
        let n: i64 = dims.iter().product();
        Params { dims: dims.to_vec(), scales: (0..n).map(|i| (0.5f32 + i as f32).to_bits()).collect(), zero_points: (0..n).map(|i| i % 3).collect(), layout }
    }

    #[test]
    fn layouts_follow_ort() {
        assert_eq!(ParamLayout::of(&[4, 6], &[], 1, 0), Ok(ParamLayout::PerTensor));
        assert_eq!(ParamLayout::of(&[4, 6], &[1], 0, 0), Ok(ParamLayout::PerTensor));
        assert_eq!(ParamLayout::of(&[4, 6], &[4], 0, 0), Ok(ParamLayout::PerAxis { axis: 0 }));
        assert_eq!(ParamLayout::of(&[4, 6], &[6], -1, 0), Ok(ParamLayout::PerAxis { axis: 1 }));
        assert_eq!(ParamLayout::of(&[4, 6], &[4, 2], 1, 4), Ok(ParamLayout::Blocked { axis: 1, block: 4 }));
        assert!(ParamLayout::of(&[4, 6], &[1], 0, 4).is_err());
        assert!(ParamLayout::of(&[4, 6], &[4, 3], 1, 4).is_err());
    }

    #[test]
    fn per_row_parameters_recast_as_blocks_are_proven_and_left_behind_refuted() {
        let original = params(&[4], ParamLayout::PerAxis { axis: 0 });
        let rows = Rewritten {
            codes: None,
            dims: vec![4, 1],
            scales: original.scales.clone(),
            zero_points: original.zero_points.clone(),
            gathered: true,
            axis: -1,
            block: 6,
        };
        assert!(gather_before_dequantize(&[4, 6], 0, None, &original, &rows).is_exact());
        let kept = Rewritten { gathered: false, dims: vec![4], axis: 0, block: 0, ..rows.clone() };
        let v = gather_before_dequantize(&[4, 6], 0, None, &original, &kept);
        assert!(matches!(v, Verdict::Unknown { .. }), "per-axis on the gathered axis is not a valid DQ over the output: {v:?}");
        let first_row = Rewritten { dims: vec![1], ..kept };
        let v = gather_before_dequantize(&[4, 6], 0, None, &original, &first_row);
        let Verdict::Refuted { counterexample, .. } = v else { panic!("{v:?}") };
        assert_eq!(counterexample.inputs, vec![("index".to_string(), -1), ("element".to_string(), 18)]);
    }

    #[test]
    fn an_axis_that_depends_on_the_index_rank_is_unknown() {
        let original = params(&[6], ParamLayout::PerAxis { axis: 1 });
        let positive = Rewritten {
            codes: None,
            dims: vec![6],
            scales: original.scales.clone(),
            zero_points: original.zero_points.clone(),
            gathered: false,
            axis: 1,
            block: 0,
        };
        assert!(matches!(gather_before_dequantize(&[4, 6], 0, None, &original, &positive), Verdict::Unknown { .. }));
        assert!(gather_before_dequantize(&[4, 6], 0, None, &original, &Rewritten { axis: -1, ..positive }).is_exact());
    }
}
