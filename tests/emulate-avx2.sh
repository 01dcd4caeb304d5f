#!/usr/bin/env bash
# Runs the host-aware differential tests on an emulated x86 CPU with AVX2 + FMA and no AVX-512 /
# VNNI (AMD Zen 3's kind), where ONNX Runtime runs its x86-avx2 kernels: u8×s8 GEMMs pair products
# in vpmaddubsw with int16 saturation. On-demand check, not part of tests/run-all.sh (it takes
# tens of minutes under TCG).
#
#   bash tests/emulate-avx2.sh                          # the default subset below
#   bash tests/emulate-avx2.sh tests/oracle/test_audit.py -k seed   # these pytest arguments instead
#   QDQC_EMULATE_RUST="ort_requant" bash tests/emulate-avx2.sh ''   # one Rust file, no oracle (QDQC_EMULATE_RUST= : none)
#
# QDQC_EMULATE_PROFILE=debug runs the debug qdqc instead (no release build).
#
# Needs qemu-x86_64 (Debian: `apt-get install qemu-user`; TCG emulates AVX2 since QEMU 7.2) on an
# x86-64 machine. The test binaries and the venv's python (ONNX Runtime) run under
# `qemu-x86_64 -cpu $QDQC_EMULATED_CPU`; qdqc too (the release build: the debug one's proofs take
# many minutes per corpus model under TCG), through a wrapper given as QDQC_BIN, so `qdqc host`
# and every `--ort-isa host` see the emulated CPU. The script fails unless that CPU is x86-avx2
# for qdqc. Each step's wall time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

# Haswell without the features TCG cannot emulate (it warns about them otherwise). EPYC-Milan
# (Zen 3) works too, with warnings.
CPU="${QDQC_EMULATED_CPU:-Haswell-noTSX,-pcid,-tsc-deadline,-x2apic,-invpcid}"
RUST_TESTS="${QDQC_EMULATE_RUST-ort_requant ort_matmul_dynamic ort_elementwise rules}"
if [[ $# -eq 0 ]]; then
    set -- tests/oracle/test_audit.py tests/oracle/test_compile_pow2.py tests/oracle/test_compile_x86.py \
        tests/oracle/test_compile_real.py tests/oracle/test_selectors.py -k "not test_replay"
fi

if [[ "$(uname -m)" != x86_64 ]]; then
    echo "emulate-avx2.sh: needs an x86-64 machine (this is $(uname -m))" >&2
    exit 1
fi
if ! command -v qemu-x86_64 >/dev/null; then
    echo "emulate-avx2.sh: qemu-x86_64 not found: install qemu-user (apt-get install qemu-user)" >&2
    exit 1
fi

# The qdqc the oracle runs: release unless QDQC_EMULATE_PROFILE=debug.
PROFILE="${QDQC_EMULATE_PROFILE:-release}"
PY=$(bash tests/oracle/setup.sh | tail -n1)
if [[ $PROFILE == release ]]; then cargo build --locked --release --bins; else cargo build --locked --bins; fi
WRAP=$(mktemp -d)
trap 'rm -rf "$WRAP"' EXIT
for tool in python qdqc; do
    target="$PY"
    [[ $tool == qdqc ]] && target="$REPO/target/$PROFILE/qdqc"
    printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$CPU" "$target" >"$WRAP/$tool"
    chmod +x "$WRAP/$tool"
done
# TCG warns on stderr about CPUID bits it cannot set; the wrappers pass everything through, so
# the CPU string above avoids them.
host=$("$WRAP/qdqc" host)
if [[ "$host" != x86-avx2 ]]; then
    echo "emulate-avx2.sh: qdqc under qemu -cpu $CPU reports '$host', not x86-avx2" >&2
    exit 1
fi
echo "emulated CPU: $CPU -> ONNX Runtime host profile $host"

export QDQC_PYTHON="$WRAP/python" QDQC_BIN="$WRAP/qdqc" QDQC_TIMEOUT=3600
status=0
step() {
    local name=$1
    shift
    local start=$SECONDS
    if "$@"; then
        echo "== $name: passed in $((SECONDS - start)) s"
    else
        echo "== $name: FAILED in $((SECONDS - start)) s"
        status=1
    fi
}

for t in $RUST_TESTS; do
    exe=$(cargo test --locked --no-run --test "$t" 2>&1 | sed -n "s|.*Executable tests/$t.rs (\(.*\))|\1|p")
    [[ -n "$exe" ]] || { echo "emulate-avx2.sh: no test binary for tests/$t.rs" >&2; exit 1; }
    step "cargo test --test $t (emulated)" env CARGO_MANIFEST_DIR="$REPO" qemu-x86_64 -cpu "$CPU" "$exe" --test-threads 2
done
if [[ $# -gt 0 && -n "$1" ]]; then
    step "pytest $* (emulated)" "$WRAP/python" -m pytest -p no:cacheprovider -q "$@"
fi
exit $status
