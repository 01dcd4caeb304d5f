#!/usr/bin/env bash
# The house habits CI enforces before the tests: formatting (rustfmt.toml), clippy with every
# warning an error, and rustdoc (broken intra-doc links are errors).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --locked --workspace --exclude embed-onnx --exclude embed-rust --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --exclude embed-onnx --exclude embed-rust --no-deps
