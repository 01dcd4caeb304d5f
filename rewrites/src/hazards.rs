//! Hazards (spec §7): what a runtime would silently reinterpret or break, reported even when qdqc changes nothing.
// TEMPORARY (replaced by helper-c's implementation before commit)
pub struct Hazard { pub kind: &'static str, pub node: String, pub message: String }
pub fn hazards(_m: &qdqc_lang::Model) -> Vec<Hazard> { Vec::new() }
