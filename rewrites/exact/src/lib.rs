//! The exactness engine (docs/contract.md §4): reference semantics, proof methods and their results.
//!
//! A proof compares a *reference* (what the unfused graph computes under the chosen contract)
//! with a *target* (what a fused kernel computes, from the `qdqc-ort` crate or qdqc's own kernels) for
//! the concrete parameters of one group. It returns a [`Verdict`]: `Exact` with a certificate,
//! `Refuted` with a minimised counterexample, or `Unknown`, which never fires a rewrite.

#![warn(missing_docs)]
#![warn(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

pub mod fold;
pub mod lemma;
pub mod lookup;
pub mod movement;
pub mod num;
pub mod on_codes;
pub mod p1;
pub mod p2;
pub mod p3;
pub mod reference;
pub mod shift;

use reference::CodeType;
use serde::Serialize;
use std::fmt;
use std::time::Instant;

/// The contract a proof is checked against (contract §2.2, §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Contract {
    /// Same bits as the unfused f32 graph.
    Exact,
    /// Same bits as the exact real-number semantics of the unfused graph.
    Real,
}

/// Per-tensor quantization parameters of one Q or DQ, scale as its exact f32.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QParam {
    /// The scale, exactly the f32 the graph stores: proofs reason about these bits, not a rounded copy.
    pub scale: f32,
    /// The code that dequantizes to 0.
    pub zero_point: i64,
    /// The integer type of the codes, which fixes their saturation range.
    pub code: CodeType,
}

impl QParam {
    /// Parameters from their parts.
    pub fn new(scale: f32, zero_point: i64, code: CodeType) -> QParam {
        QParam { scale, zero_point, code }
    }

    /// The P1 domain of this parameter's codes.
    pub fn domain(&self, name: &str) -> p1::Domain {
        p1::Domain::new(name, self.code.range(), self.zero_point)
    }
}

/// How a verdict was reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// P1: every point of a finite code domain was evaluated.
    P1Exhaustive,
    /// P2: every f32 intermediate of the float path is exact.
    P2Representable,
    /// P3: the unsaturated window of the reachable accumulator interval was checked.
    P3RequantWindow,
    /// P4: a universal lemma, proven once and pinned by exhaustive tests.
    P4Lemma(String),
    /// A named fact about the target runtime, covered by a differential test.
    TargetAxiom(String),
}

/// Evidence for a verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Certificate {
    /// How the verdict was reached, which says what `domain` counts.
    pub method: Method,
    /// Points evaluated (input tuples, accumulator values); 0 for lemmas.
    pub domain: u64,
    /// Wall-clock time of the check, microseconds. Never serialized, so that reports and audits
    /// are byte-identical across runs; `qdqc compile --timings` reports the sum.
    #[serde(skip)]
    pub micros: u64,
    /// What was checked, in words.
    pub detail: String,
}

/// A concrete input where the fused form and the reference differ, minimised (inputs closest to
/// the zero point first, then smallest codes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Counterexample {
    /// Named input codes (or accumulator values), in the group's input order.
    pub inputs: Vec<(String, i64)>,
    /// Output code of the unfused reference.
    pub unfused: i64,
    /// Output code of the fused form.
    pub fused: i64,
    /// The exact real value of the reference's pre-rounding quantity, when known (`p/q ≈ d`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// How many points of the domain differ.
    pub differing: u64,
}

/// Microseconds since `start`, saturating: a `u64` of microseconds outlasts any check by
/// half a million years, so saturation never shows in a timing.
pub(crate) fn micros(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inputs: Vec<String> = self.inputs.iter().map(|(n, v)| format!("{n}={v}")).collect();
        write!(f, "{}: unfused {} vs fused {}", inputs.join(" "), self.unfused, self.fused)?;
        if let Some(x) = &self.exact {
            write!(f, " (exact value {x})")?;
        }
        write!(f, "; {} point(s) differ", self.differing)
    }
}

/// The answer of a proof (contract §4.1): only `Exact` lets a rewrite fire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The fused form computes the reference's bits at every point of the domain.
    Exact {
        /// How it was checked.
        proof: Certificate,
    },
    /// Some point differs; the rewrite is refused with the minimised point as its evidence.
    Refuted {
        /// The differing point closest to the zero point.
        counterexample: Counterexample,
        /// What was checked to find it.
        proof: Certificate,
    },
    /// Neither proven nor refuted (a size bound, an overflow, a case the method does not cover):
    /// the rewrite does not fire.
    Unknown {
        /// Why no answer, in words.
        reason: String,
    },
}

impl Verdict {
    /// Whether the rewrite may fire.
    pub fn is_exact(&self) -> bool {
        matches!(self, Verdict::Exact { .. })
    }

    /// `"exact"`, `"refuted"` or `"unknown"`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Exact { .. } => "exact",
            Verdict::Refuted { .. } => "refuted",
            Verdict::Unknown { .. } => "unknown",
        }
    }

    /// The counterexample of a refutation.
    pub fn counterexample(&self) -> Option<&Counterexample> {
        match self {
            Verdict::Refuted { counterexample, .. } => Some(counterexample),
            _ => None,
        }
    }

    /// The certificate of an `Exact` verdict.
    pub fn certificate(&self) -> Option<&Certificate> {
        match self {
            Verdict::Exact { proof } => Some(proof),
            _ => None,
        }
    }

    /// What was checked, for an `Exact` or a `Refuted` verdict.
    pub fn proof(&self) -> Option<&Certificate> {
        match self {
            Verdict::Exact { proof } | Verdict::Refuted { proof, .. } => Some(proof),
            Verdict::Unknown { .. } => None,
        }
    }

    /// Why an `Unknown` verdict has no answer.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Unknown { reason } => Some(reason),
            _ => None,
        }
    }

    /// The verdict in one line of words: the certificate's detail, or the reason.
    pub fn explanation(&self) -> &str {
        match self {
            Verdict::Exact { proof } | Verdict::Refuted { proof, .. } => &proof.detail,
            Verdict::Unknown { reason } => reason,
        }
    }

    /// The same verdict with `note` appended to its detail or reason (`"…; note"`): context a
    /// caller adds, e.g. what another form of the group gave. The answer does not change.
    pub fn annotated(self, note: &str) -> Verdict {
        match self {
            Verdict::Exact { mut proof } => {
                proof.detail = format!("{}; {note}", proof.detail);
                Verdict::Exact { proof }
            }
            Verdict::Refuted { counterexample, mut proof } => {
                proof.detail = format!("{}; {note}", proof.detail);
                Verdict::Refuted { counterexample, proof }
            }
            Verdict::Unknown { reason } => Verdict::Unknown { reason: format!("{reason}; {note}") },
        }
    }
}

/// A certificate is the evidence of an exact verdict. Certificates are made only here and in a
/// target's kernel-model proofs (e.g. `qdqc-ort`'s requantization synthesis, which proves the
/// parameters it returns); this wraps one as the verdict it stands for.
impl From<Certificate> for Verdict {
    fn from(proof: Certificate) -> Verdict {
        Verdict::Exact { proof }
    }
}
