//! P3: the requantization window.
