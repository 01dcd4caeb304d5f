//! Hazards (spec §7): what a runtime would silently reinterpret or break, reported even when qdqc changes nothing.
