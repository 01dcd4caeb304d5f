//! Lemmas on one Q/DQ step (P4, contract §4.1), for the rewrites a runtime's graph optimizer makes
//! around Q/DQ nodes (`qdqc-ort`'s optimizer replay records these verdicts; `qdqc audit` reports
//! them). Each either holds for the concrete parameters, is refuted with an input that changes,
//! or is not shown.

use crate::reference::{CodeType, dequantize, quantize};
use crate::{Certificate, Counterexample, Method, Verdict};
use std::time::Instant;

/// The lemma `Q(DQ(q)) = q` of [`round_trip`].
const ROUND_TRIP: &str = "Q(DQ(q)) = q for a normal scale without overflow";
/// The lemma of [`clip_removal`].
const CLIP_REMOVAL: &str = "Q(clip(x)) = Q(x) when the bounds quantize to the ends of the code range";

fn lemma(name: &str, detail: String) -> Verdict {
    Verdict::Exact { proof: Certificate { method: Method::P4Lemma(name.into()), domain: 0, micros: 0, detail } }
}

fn hex(v: f32) -> String {
    format!("0x{:08x}", v.to_bits())
}

/// `Q(DQ(q)) = q` for every code of `code` with the scale `scale` (contract §3.3): the scale is a
/// finite normal f32 and no code's product `(q − z)·s` overflows, so `fl((q − z)·s)/s` rounds
/// back to `q − z`. Otherwise not shown (a subnormal or zero scale loses codes).
pub fn round_trip(scale: f32, code: CodeType) -> Verdict {
    let (lo, hi) = code.range();
    if scale.is_normal() && ((hi - lo) as f32 * scale.abs()).is_finite() {
        lemma(ROUND_TRIP, format!("scale {} is a normal f32 and no {} code's product overflows", hex(scale), code.name()))
    } else {
        Verdict::Unknown { reason: format!("scale {} is zero, subnormal or not finite, or a {} code's product overflows", hex(scale), code.name()) }
    }
}

/// A value computed ahead of time by the very kernel the graph would run, on the same constant
/// inputs, has the bits the graph computes (`what` says which computation moved).
pub fn same_computation(what: &str) -> Verdict {
    lemma("the same kernel on the same values gives the same bits", what.to_string())
}

/// Removing a `clip(x, min, max)` (or a Relu: `[0, ∞)`) before a Q with per-channel `scales` and
/// `zero_points` (one zero point is used for every channel): `Q(clip(x)) = Q(x)` for every x iff,
/// per channel, the bounds quantize to the ends of the code range (min to qmin and max to qmax
/// with s > 0, the other way round with s < 0). NaN passes through Relu and Clip, so it reaches
/// Q either way. Refuted with the value of the end code a bound misses, when that value
/// quantizes differently clipped and unclipped.
pub fn clip_removal(scales: &[f32], zero_points: &[i64], code: CodeType, (min, max): (f32, f32)) -> Verdict {
    for (c, (s, z)) in scales.iter().zip(zero_points.iter().cycle()).enumerate() {
        if !s.is_finite() || *s == 0.0 {
            return Verdict::Unknown { reason: format!("scale {} is zero or not finite", hex(*s)) };
        }
        let (lo, hi) = code.range();
        let (at_min, at_max) = (quantize(min, *s, *z, code), quantize(max, *s, *z, code));
        let want = if *s > 0.0 { (lo, hi) } else { (hi, lo) };
        if (at_min, at_max) != want {
            let why = format!(
                "with scale {} zero point {z} the bounds [{min:e}, {max:e}] quantize to [{at_min}, {at_max}], not [{}, {}]: values outside them change",
                hex(*s),
                want.0,
                want.1
            );
            return match clip_witness((*s, *z, code), (min, max), at_min == want.0, c, scales.len()) {
                Some(counterexample) => {
                    Verdict::Refuted { counterexample, proof: Certificate { method: Method::P4Lemma(CLIP_REMOVAL.into()), domain: 1, micros: 0, detail: why } }
                }
                None => Verdict::Unknown { reason: why },
            };
        }
    }
    lemma(CLIP_REMOVAL, "the Q's range lies inside the bounds".into())
}

/// An input the Clip/Relu removal changes: the value of the end code the bound misses
/// (`min_ok` says whether the lower bound quantizes as it should), which lies outside
/// `[min, max]`; `None` if that value happens to quantize the same both ways.
fn clip_witness((s, z, code): (f32, i64, CodeType), (min, max): (f32, f32), min_ok: bool, channel: usize, channels: usize) -> Option<Counterexample> {
    let (lo, hi) = code.range();
    let want = if s > 0.0 { (lo, hi) } else { (hi, lo) };
    let x = dequantize(if min_ok { want.1 } else { want.0 }, s, z);
    let clipped = x.max(min).min(max);
    let (unfused, fused) = (quantize(clipped, s, z, code), quantize(x, s, z, code));
    (unfused != fused).then(|| {
        let mut inputs = vec![("x (f32 bits)".to_string(), i64::from(x.to_bits()))];
        if channels > 1 {
            inputs.insert(0, ("channel".to_string(), i64::try_from(channel).expect("a channel index is a slice index, below i64::MAX")));
        }
        // `differing` counts this one input: the float inputs that change are not enumerated.
        Counterexample { inputs, unfused, fused, exact: Some(format!("x = {x:e}, clipped to {clipped:e}")), differing: 1 }
    })
}

/// Merging `Q1 → DQ1 → Q2 → DQ2` (parameters `old`, both of `code`) into one pair with new
/// parameters `new`: refuted on the grid of the first pair (`x = DQ1(c)` for every code `c`, so
/// `Q1(x) = c`), `DQ2(Q2(x))` against `DQnew(Qnew(x))`, at the first code whose values differ;
/// codes are reported as the second pair's and the new pair's, the values in the text. Inputs
/// off that grid are not enumerated, so a grid without a difference proves nothing.
pub fn merged_pairs(code: CodeType, [(s1, z1), (s2, z2)]: [(f32, i64); 2], (s, z): (f32, i64)) -> Verdict {
    let start = Instant::now();
    let (lo, hi) = code.range();
    let differ = |c: i64| {
        let x = dequantize(c, s1, z1);
        let (before, after) = (quantize(x, s2, z2, code), quantize(x, s, z, code));
        let (vb, va) = (dequantize(before, s2, z2), dequantize(after, s, z));
        (vb.to_bits() != va.to_bits()).then_some((x, before, after, vb, va))
    };
    let differing = (lo..=hi).filter(|&c| differ(c).is_some()).count() as u64;
    let Some((x, before, after, vb, va)) = (lo..=hi).find_map(differ) else {
        return Verdict::Unknown { reason: format!("no {} code of the first pair tells the merged pair apart; other inputs are not enumerated", code.name()) };
    };
    let exact = format!("x = {x:e}: the two pairs give {vb:e}, the merged pair {va:e}");
    let counterexample =
        Counterexample { inputs: vec![("x (f32 bits)".to_string(), i64::from(x.to_bits()))], unfused: before, fused: after, exact: Some(exact), differing };
    let domain = u64::try_from(hi - lo + 1).expect("a code range is not empty");
    let detail = "DQ2(Q2(x)) against the merged pair at x = DQ1(c) for every code c of the first pair".to_string();
    Verdict::Refuted { counterexample, proof: Certificate { method: Method::P1Exhaustive, domain, micros: crate::micros(start), detail } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_holds_for_normal_scales_only() {
        assert!(round_trip(0.1, CodeType::U8).is_exact());
        assert!(!round_trip(f32::from_bits(1), CodeType::U8).is_exact(), "a subnormal scale");
        assert!(!round_trip(f32::MAX, CodeType::I16).is_exact(), "a product overflows");
    }

    #[test]
    fn a_relu_before_a_negative_scale_is_refuted_at_the_top_code() {
        let v = clip_removal(&[-0.1], &[0], CodeType::U8, (0.0, f32::INFINITY));
        let cx = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        assert_eq!((cx.unfused, cx.fused), (0, 255), "{cx}");
        assert!(clip_removal(&[0.1], &[0], CodeType::U8, (0.0, f32::INFINITY)).is_exact());
    }

    #[test]
    fn merging_pairs_with_other_parameters_is_refuted_on_the_first_grid() {
        let v = merged_pairs(CodeType::U8, [(0.1, 0), (0.2, 0)], (0.1, 0));
        assert_eq!(v.counterexample().map(|c| (c.unfused, c.fused)), Some((0, 1)), "{v:?}");
    }
}
