#!/usr/bin/env bash
# Runs every test: the Rust workspace (unit, snapshot, bad-input, round-trip tests), then the
# Python oracle (ONNX Runtime differential tests on the generated corpus). Installs what it needs:
# cargo fetches crates; tests/oracle/setup.sh creates the pinned venv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked --bins
cargo test --locked --workspace

PY=$(bash tests/oracle/setup.sh | tail -n1)
"$PY" -m pytest -p no:cacheprovider tests/oracle -q
