//! The seam between extraction and a target: what one e-node costs to run there. Extraction
//! (`qdqc_lower::extract`) minimises the shared sum; each target (`qdqc_ort::cost::OrtCost`)
//! prices its own kernels.

use crate::analysis::QdqEGraph;
use crate::term::Term;

/// Cost of executing one e-node on a target. Leaves (values, tags, indices) cost nothing.
pub trait CostModel {
    fn cost(&self, term: &Term, egraph: &QdqEGraph) -> u64;
}
