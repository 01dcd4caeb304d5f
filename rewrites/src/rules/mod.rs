//! The proof-gated rewrite rules (docs/contract.md §5), as egg rules over [`Term`].
//!
//! Every rule matches a QDQ group and hands its concrete parameters to the exactness engine; it
//! adds the fused form and unions it with the group's output only when the fusion is proven
//! exact, under the chosen contract, on every selected ISA profile. Each decision, fired or
//! refused, is logged with its proofs and counterexamples for the report. The policy every rule
//! follows is in `rewrites/README.md`.

mod a8w8;
pub mod binary;
mod drop;
mod dynamic;
mod fold;
mod gather;
mod gemm;
mod group;
mod lookup;
mod lut;
mod matmul_dynamic;
mod memo;
mod nbits;
mod pool;
mod row_dynamic;
mod u8_weights;

pub use gather::NAME as GATHER_BEFORE_DEQUANTIZE;
pub use memo::{Memo, MemoCounts};

use crate::target::{Profile, Target};
use qdqc_exact::{Certificate, Contract, Verdict};
use qdqc_lang::analysis::QdqAnalysis;
use qdqc_lang::term::Term;
use qdqc_ort::nbits::{AccuracyLevel, Deviation};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

pub type Rewrite = egg::Rewrite<Term, QdqAnalysis>;

/// What the rules are proven against.
#[derive(Clone, Debug)]
pub struct RuleOptions {
    pub contract: Contract,
    /// The target, whose every profile a fusion must be proven on.
    pub target: Target,
    /// `--fold-weights`: dequantize constant weights into float initializers.
    pub fold_weights: bool,
    /// Lossy rewrites the user allowed (contract §2.4); none by default.
    pub allow: Allow,
    /// Verdicts already proven in this compile, by their exact parameters.
    pub memo: Memo,
}

/// The opt-in lossy rewrites (`--allow NAME[=VALUE]`), each off unless named.
#[derive(Clone, Debug, Default)]
pub struct Allow {
    /// `--allow matmulnbits[=acc0|acc1|acc4]`: DQ(W)→MatMul/Gemm into MatMulNBits at this level.
    pub matmulnbits: Option<AccuracyLevel>,
    /// `--allow ort-float-fusions`: the printed session profile leaves ORT's float fusions on (no
    /// rule reads it: it changes the session profile, `src/profile.rs`).
    pub ort_float_fusions: bool,
    /// `--inputs FILE.npz`: activations by tensor name; a lossy instance whose input is among
    /// them also reports its deviation on those values.
    pub inputs: Activations,
}

/// Named f32 activations (their last axis is the one a MatMul reduces).
#[derive(Clone, Default)]
pub struct Activations {
    pub source: String,
    pub arrays: std::sync::Arc<BTreeMap<String, Vec<f32>>>,
    /// What became of each array a rule looked at: `None` when a deviation was measured on it,
    /// else why it could not be (written by the rule that read it, read by the report).
    pub outcome: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Option<String>>>>,
}

impl Activations {
    /// Records that `name` was used, or why not; a use is never overwritten by a refusal.
    pub fn record(&self, name: &str, refused: Option<String>) {
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        let slot = outcome.entry(name.to_string()).or_insert(refused.clone());
        if refused.is_none() {
            *slot = None;
        }
    }
}

impl fmt::Debug for Activations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activations").field("source", &self.source).field("names", &self.arrays.keys().collect::<Vec<_>>()).finish()
    }
}

/// What a lossy rewrite reports for an instance it applied (contract §2.4: listed with its measured
/// deviation).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lossy {
    pub contract: &'static str,
    pub accuracy_level: AccuracyLevel,
    pub bits: u32,
    pub block_size: usize,
    /// The proof that the packed weights dequantize to the authored `DQ(W)` bit for bit: what is
    /// exact about the instance (no per-ISA verdict is given for its lossy product).
    pub weights: Certificate,
    /// On seeded random activations, then on the user's (`--inputs`) when they feed it.
    pub deviation: Vec<Deviation>,
}

/// One decision of a rule on one group.
#[derive(Clone, Debug)]
pub struct Decision {
    pub rule: &'static str,
    /// The fused op it would emit, e.g. `com.microsoft.QLinearAdd`.
    pub fused_op: String,
    /// Names of the authored nodes of the group: DQ inputs, target, Q output.
    pub nodes: Vec<String>,
    /// The quantized tensor the group's Q produces.
    pub output: String,
    pub verdicts: Vec<(Profile, Verdict)>,
    pub fired: bool,
    /// Set for an applied lossy rewrite.
    pub lossy: Option<Lossy>,
}

/// The decisions of one run, shared by the rules' appliers.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Decision>>>);

impl Log {
    pub fn take(&self) -> Vec<Decision> {
        std::mem::take(&mut self.0.lock().expect("no panics while logging"))
    }

    /// Decisions made so far (a progress display's count of proofs).
    pub fn len(&self) -> usize {
        self.0.lock().expect("no panics while logging").len()
    }

    /// Whether no decision was made yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&self, d: Decision) {
        self.0.lock().expect("no panics while logging").push(d);
    }

    /// Whether the group producing `output` was already decided by `rule` (appliers run once per
    /// iteration on every match; a decision is made once).
    fn decided(&self, rule: &str, output: &str) -> bool {
        self.0.lock().expect("no panics while logging").iter().any(|d| d.rule == rule && d.output == output)
    }
}

/// One family of rules: the file that holds them (its row in `rewrites/README.md`), how they are
/// built, and when the options register them.
pub struct Family {
    pub file: &'static str,
    build: fn(&RuleOptions, &Log) -> Vec<Rewrite>,
    enabled: fn(&RuleOptions) -> bool,
}

fn always(_: &RuleOptions) -> bool {
    true
}

/// The catalog as data, in its fixed order. Lossy and opt-in families register only when the
/// options ask (`--fold-weights`, `--allow matmulnbits`; MatMulNBits is ORT's kernel, so only on
/// the ORT target).
#[rustfmt::skip]
pub const FAMILIES: [Family; 12] = [
    Family { file: "binary.rs", build: binary::rules, enabled: always },
    Family { file: "gemm.rs",   build: gemm::rules,   enabled: always },
    Family { file: "drop.rs",   build: drop::rules,   enabled: always },
    Family { file: "gather.rs", build: gather::rules, enabled: always },
    Family { file: "lookup.rs", build: lookup::rules, enabled: always },
    Family { file: "lut.rs",    build: lut::rules,    enabled: always },
    Family { file: "pool.rs",   build: pool::rules,   enabled: always },
    Family { file: "fold.rs",   build: fold::rules,   enabled: |o| o.fold_weights },
    Family { file: "a8w8.rs",   build: a8w8::rules,   enabled: a8w8::enabled },
    Family { file: "dynamic.rs", build: dynamic::rules, enabled: dynamic::enabled },
    Family { file: "row_dynamic.rs", build: row_dynamic::rules, enabled: row_dynamic::enabled },
    Family { file: "nbits.rs",  build: |o, log| nbits::rules(o, o.allow.matmulnbits.unwrap_or(AccuracyLevel::Acc1), log), enabled: |o| o.allow.matmulnbits.is_some() && matches!(o.target, Target::Ort(_)) },
];

impl Family {
    /// The names of this family's rules, built with `options` whether or not they enable it.
    pub fn rule_names(&self, options: &RuleOptions) -> Vec<String> {
        (self.build)(options, &Log::default()).iter().map(|r| r.name.to_string()).collect()
    }
}

/// The catalog, in a fixed order, sharing `log`; lossy rules only when `options.allow` names them.
pub fn catalog(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    FAMILIES.iter().filter(|f| (f.enabled)(options)).flat_map(|f| (f.build)(options, log)).collect()
}
