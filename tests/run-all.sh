#!/usr/bin/env bash
# Runs every test. Installs what it needs: cargo fetches crates; tests/oracle/setup.sh creates the
# pinned Python venv (onnxruntime, onnx) under target/, which both the Rust differential kernel
# tests (tests/ort_*.rs) and the Python oracle (tests/oracle) use.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=$(bash tests/oracle/setup.sh | tail -n1)
export QDQC_PYTHON="$PY"

# tests/dot.rs renders the audit's picture with Graphviz's `dot` (Debian's graphviz package).
if ! command -v dot >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q graphviz >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q graphviz >/dev/null; }
    else
        echo "the tests need Graphviz's dot: install the graphviz package (apt-get install graphviz)" >&2
        exit 1
    fi
fi

cargo build --locked --bins
# The Rust target's kernel suite runs every ISA path the host has; a path it lacks must be named
# (codegen/kernels/README.md), as isa.rs detects them (Linux spells the flag avx512_vnni).
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
lacking=()
if ! (has avx512f && has avx512bw && has avx512_vnni); then lacking+=(avx512vnni avx512amx);
elif ! (has amx_tile && has amx_int8); then lacking+=(avx512amx); fi
if ! has avx2; then lacking+=(avx2); fi
export QDQC_KERNELS_SKIP_ISA=$(IFS=,; echo "${lacking[*]}")
echo "Rust kernel paths not on this host (their suites are not run): ${QDQC_KERNELS_SKIP_ISA:-none}"
# ONNX Runtime picks its kernels by CPUID: every differential test runs against this profile.
echo "ONNX Runtime host profile: $(target/debug/qdqc host)"
# The examples' build scripts compile a model with qdqc, which makes every cargo command that
# builds them compile the compiler once more as a build dependency: tests/oracle/test_embed.py
# builds and runs them (from a clean target folder, as the issue asks), and the Python package is
# built by maturin in test_python_package.py; neither has Rust tests of its own.
cargo test --locked --workspace --exclude embed-onnx --exclude embed-rust --exclude qdqc-python
# The corpora are built once before the workers start (each worker would otherwise build them);
# then every test file runs whole on one worker (its module fixtures compile once), files spread
# over the cores: qdqc and the ORT sessions the oracle starts are single-threaded.
"$PY" -c 'import sys; sys.path.insert(0, "tests/oracle"); import oracle_util as u; u.ensure_corpus(); u.ensure_real_corpus()'
"$PY" -m pytest -p no:cacheprovider tests/oracle -q -n auto --dist loadfile --durations=15
