//! QLinearAdd / QLinearMul models per ISA.
