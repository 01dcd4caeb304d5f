#!/usr/bin/env bash
# Runs every test. Installs what it needs: cargo fetches crates; tests/oracle/setup.sh creates the
# pinned Python venv (onnxruntime, onnx) under target/, which both the Rust differential kernel
# tests (tests/ort_*.rs) and the Python oracle (tests/oracle) use.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=$(bash tests/oracle/setup.sh | tail -n1)
export QDQC_PYTHON="$PY"

cargo build --locked --bins
# ONNX Runtime picks its kernels by CPUID: every differential test runs against this profile.
echo "ONNX Runtime host profile: $(target/debug/qdqc host)"
cargo test --locked --workspace
"$PY" -m pytest -p no:cacheprovider tests/oracle -q
