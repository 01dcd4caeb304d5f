#!/usr/bin/env bash
# Builds the release binary and the oracle venv, then prints qdqc compile time next to ONNX
# Runtime session-creation time for every corpus model (bench/compile_vs_ort.py).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --bins
PY=$(bash tests/oracle/setup.sh | tail -n1)
"$PY" bench/compile_vs_ort.py "$@"
