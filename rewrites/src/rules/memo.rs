//! Proofs memoized by their exact parameters. A long model repeats groups with the same scales,
//! zero points and weights (a 45k-node chain of identical blocks proved each one again, ~10 ms
//! apiece); a verdict is a function of those parameters, the target's profiles and the contract only,
//! so it is proven once per compile and reused.
//!
//! | condition | why |
//! |---|---|
//! | the key holds every input of the proof: scales as exact f32 bits, zero points, code types, shapes, bias, broadcast layouts, ISA list, contract | a verdict reused for different parameters would be unsound |
//! | weights enter the key as a 128-bit hash of their codes (two independently seeded SipHash-1-3) next to their exact length | keeping the codes themselves would double the memory of large weights; a collision needs 2^64 distinct weights |
//! | verdicts name nothing of the group (inputs are "x[k]", "a", "b", channels by index) | a reused counterexample must read the same for every group |
//! | one memo per compile (it lives in `RuleOptions`) | counts in the report are this compile's |

use crate::rules::RuleOptions;
use crate::rules::group::decide;
use crate::target::Profile;
use qdqc_exact::Verdict;
use qdqc_ort::binary::{BinaryOp, BinaryParams, Broadcast};
use qdqc_ort::requant::{GemmGroup, GemmKind};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex};

/// Memoized verdicts of one compile, shared by every region's rules.
#[derive(Clone, Default)]
pub struct Memo(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    verdicts: HashMap<Key, (bool, Vec<(Profile, Verdict)>)>,
    counts: MemoCounts,
    seeds: Option<(RandomState, RandomState)>,
}

/// How many proofs were reused (`hits`) and how many were run (`misses`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoCounts {
    pub hits: u64,
    pub misses: u64,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memo({:?})", self.counts())
    }
}

/// Everything a proof reads: the rule, a text of every parameter (exact), the f32 bit patterns
/// of every float in it (so no two NaNs or zeros share a key through their text), and the
/// hashed weight codes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    rule: &'static str,
    params: String,
    bits: Vec<u32>,
    weights: (usize, u64, u64),
}

impl Memo {
    pub fn counts(&self) -> MemoCounts {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).counts
    }

    /// The key of a proof over `params` (Debug text, exact for everything but floats), `floats`
    /// (every f32 in `params`) and `weights` (codes, hashed).
    pub fn key(&self, rule: &'static str, params: &impl std::fmt::Debug, floats: impl IntoIterator<Item = f32>, weights: &[Vec<i64>]) -> Key {
        let (a, b) = {
            let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
            inner.seeds.get_or_insert_with(|| (RandomState::new(), RandomState::new())).clone()
        };
        let (mut ha, mut hb) = (a.build_hasher(), b.build_hasher());
        weights.hash(&mut ha);
        weights.hash(&mut hb);
        Key {
            rule,
            params: format!("{params:?}"),
            bits: floats.into_iter().map(f32::to_bits).collect(),
            weights: (weights.iter().map(Vec::len).sum(), ha.finish(), hb.finish()),
        }
    }

    /// `decide`, proven once per key (with the ISA list and contract of `options`).
    pub fn decide(&self, options: &RuleOptions, key: Key, prove: impl Fn(Profile) -> Verdict) -> (bool, Vec<(Profile, Verdict)>) {
        let mut key = key;
        key.params.push_str(&format!(" under {:?} on {:?}", options.contract, options.target.profiles()));
        if let Some(found) = {
            let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let found = inner.verdicts.get(&key).cloned();
            if found.is_some() {
                inner.counts.hits += 1;
            }
            found
        } {
            return found;
        }
        // Proven outside the lock: other regions' rules may run meanwhile.
        let decided = decide(options, prove);
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        inner.counts.misses += 1;
        inner.verdicts.insert(key, decided.clone());
        decided
    }
}

/// The key of `requant::prove` over `g`. The destructuring names every field: a field added to
/// [`GemmGroup`] fails to compile here until it is in the key.
pub fn gemm_key(memo: &Memo, rule: &'static str, g: &GemmGroup) -> Key {
    let GemmGroup { kind, x, x_codes, w_code, weights, w_scales, w_zero_points, bias, y } = g;
    let alpha = match kind {
        GemmKind::Gemm { alpha } => Some(*alpha),
        GemmKind::Conv { .. } | GemmKind::MatMul => None,
    };
    let floats = [x.scale, y.scale].into_iter().chain(alpha).chain(w_scales.iter().copied());
    let floats = floats.chain(bias.iter().flat_map(|b| b.scales.iter().copied()));
    memo.key(rule, &(kind, x, x_codes, w_code, w_scales, w_zero_points, bias, y), floats, weights)
}

/// The key of `binary::prove` of `op` over `p` on every layout of `layouts`.
pub fn binary_key(memo: &Memo, rule: &'static str, op: BinaryOp, p: &BinaryParams, layouts: &[Broadcast]) -> Key {
    let BinaryParams { a, b, c } = p;
    memo.key(rule, &(op, a, b, c, layouts), [a.scale, b.scale, c.scale], &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdqc_exact::{Contract, Counterexample};
    use qdqc_ort::{Isa, OrtTarget};

    fn options() -> RuleOptions {
        RuleOptions {
            contract: Contract::Exact,
            target: OrtTarget::on(&[Isa::X86Avx2]).unwrap().into(),
            fold_weights: false,
            allow: Default::default(),
            memo: Memo::default(),
        }
    }

    fn refuted(n: i64) -> Verdict {
        Verdict::Unknown { reason: format!("proof {n}") }
    }

    #[test]
    fn one_proof_per_key_and_every_parameter_counts() {
        let (memo, o) = (Memo::default(), options());
        let runs = std::cell::Cell::new(0);
        let prove = |_| {
            runs.set(runs.get() + 1);
            refuted(runs.get())
        };
        let w = vec![vec![1, 2, 3]];
        let first = memo.decide(&o, memo.key("r", &(1, 2), [0.5], &w), prove);
        assert_eq!(memo.decide(&o, memo.key("r", &(1, 2), [0.5], &w), prove), first);
        assert_eq!((runs.get(), memo.counts()), (1, MemoCounts { hits: 1, misses: 1 }));
        // Each differing input is a new proof: text, float bits (-0.0 vs 0.0, NaN payloads),
        // weight codes, the rule, the contract and the ISA list.
        memo.decide(&o, memo.key("r", &(1, 3), [0.5], &w), prove);
        memo.decide(&o, memo.key("r", &(1, 2), [-0.0], &w), prove);
        memo.decide(&o, memo.key("r", &(1, 2), [0.0], &w), prove);
        memo.decide(&o, memo.key("r", &(1, 2), [f32::from_bits(0x7fc0_0001)], &w), prove);
        memo.decide(&o, memo.key("r", &(1, 2), [f32::from_bits(0x7fc0_0002)], &w), prove);
        memo.decide(&o, memo.key("r", &(1, 2), [0.5], &[vec![1, 2, 4]]), prove);
        memo.decide(&o, memo.key("s", &(1, 2), [0.5], &w), prove);
        memo.decide(&RuleOptions { contract: Contract::Real, ..o.clone() }, memo.key("r", &(1, 2), [0.5], &w), prove);
        memo.decide(&RuleOptions { target: OrtTarget::generic().into(), ..o.clone() }, memo.key("r", &(1, 2), [0.5], &w), prove);
        // Ten decisions run, the last one on four profiles: 9 + 4 proofs.
        assert_eq!((runs.get(), memo.counts()), (13, MemoCounts { hits: 1, misses: 10 }));
    }

    #[test]
    fn a_reused_verdict_is_the_proven_one() {
        let (memo, o) = (Memo::default(), options());
        let c = Counterexample { inputs: vec![("a".into(), 1)], unfused: 1, fused: 2, exact: None, differing: 1 };
        let v = Verdict::Unknown { reason: format!("{c}") };
        let a = memo.decide(&o, memo.key("r", &1, [], &[]), |_| v.clone());
        let b = memo.decide(&o, memo.key("r", &1, [], &[]), |_| unreachable!("memoized"));
        assert_eq!(a, b);
    }
}
