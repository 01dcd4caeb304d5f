//! The rewrite catalog of the exactness spec (§5), as egg rules over [`Term`].
//!
//! The policy every rule follows is written in `rewrites/README.md`. The catalog is empty until the
//! exactness engine exists: a rule may only enter together with the proof that gates it and its
//! broken twin in `tests/broken/`. Until then `qdqc compile` lifts and extracts unchanged.

use qdqc_lang::analysis::QdqAnalysis;
use qdqc_lang::term::Term;

pub type Rewrite = egg::Rewrite<Term, QdqAnalysis>;

/// The rules `qdqc compile` runs on every region, in a fixed order.
pub fn catalog() -> Vec<Rewrite> {
    Vec::new()
}
