//! Verdicts per ISA profile as the JSON of `compile --report` and `audit --json` shows them:
//! one map per part, so a reader looks up `verdict[profile]`, `counterexample[profile]`, ….

use qdqc_exact::{Certificate, Counterexample, Verdict};
use qdqc_ort::Isa;
use std::collections::BTreeMap;

/// The four maps a verdict is spread over.
pub(crate) struct Maps<'a> {
    pub verdict: &'a mut BTreeMap<Isa, &'static str>,
    pub proof: &'a mut BTreeMap<Isa, Certificate>,
    pub counterexample: &'a mut BTreeMap<Isa, Counterexample>,
    pub reason: &'a mut BTreeMap<Isa, String>,
}

impl Maps<'_> {
    pub fn insert(&mut self, isa: Isa, v: Verdict) {
        self.verdict.insert(isa, v.word());
        if let Some(proof) = v.proof() {
            self.proof.insert(isa, proof.clone());
        }
        if let Some(counterexample) = v.counterexample() {
            self.counterexample.insert(isa, counterexample.clone());
        }
        if let Some(reason) = v.reason() {
            self.reason.insert(isa, reason.to_string());
        }
    }
}
