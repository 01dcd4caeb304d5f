//! The broken corpus: deliberately unsound rewrite rules, each a concrete instance the checker
//! must refute with a counterexample (snapshot-tested), next to its sound twin, which the same
//! checker must prove. If the checker ever accepts a broken rule, it can no longer say no.

mod activations;
mod codes;
mod gemm;
mod kernels;
mod nbits;
mod pairs;
mod quantize;
mod weights;

use qdqc_exact::Verdict;

/// One deliberately unsound rule and its sound twin, as checks of concrete instances.
pub struct Broken {
    pub name: &'static str,
    /// What the rule claims and why it is wrong.
    pub claim: &'static str,
    pub broken: fn() -> Verdict,
    /// The corrected rule; `None` where no sound variant exists.
    pub twin: Option<fn() -> Verdict>,
}

fn corpus() -> Vec<Broken> {
    [quantize::rules(), pairs::rules(), codes::rules(), activations::rules(), gemm::rules(), kernels::rules(), weights::rules(), nbits::rules()].into_iter().flatten().collect()
}

/// Shows a counterexample's outputs, compared as f32 bit patterns, as the floats they are.
pub fn as_f32(mut v: Verdict) -> Verdict {
    if let Verdict::Refuted { counterexample: c, .. } = &mut v {
        let f = |b: i64| f32::from_bits(b as u32);
        c.exact = Some(format!("outputs as f32: unfused {:?} vs fused {:?}", f(c.unfused), f(c.fused)));
    }
    v
}

fn summary(v: &Verdict) -> String {
    match v {
        Verdict::Exact { proof } => format!("exact ({:?}, {} points: {})", proof.method, proof.domain, proof.detail),
        Verdict::Refuted { counterexample, proof } => {
            format!("refuted ({:?}, {} points)\ncounterexample: {counterexample}", proof.method, proof.domain)
        }
        Verdict::Unknown { reason } => format!("unknown: {reason}"),
    }
}

#[test]
fn every_broken_rule_is_refuted_and_every_twin_proven() {
    let corpus = corpus();
    assert!(corpus.len() >= 12, "the corpus keeps at least 12 broken rules");
    for rule in corpus {
        let broken = (rule.broken)();
        assert!(matches!(broken, Verdict::Refuted { .. }), "{}: the checker accepted a broken rule: {broken:?}", rule.name);
        let mut text = format!("claim: {}\nbroken: {}\n", rule.claim, summary(&broken));
        if let Some(twin) = rule.twin {
            let sound = twin();
            assert!(sound.is_exact(), "{}: the sound twin was not proven: {sound:?}", rule.name);
            text.push_str(&format!("twin: {}\n", summary(&sound)));
        }
        insta::assert_snapshot!(rule.name, text);
    }
}
