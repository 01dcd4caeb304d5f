#!/usr/bin/env bash
# Create (or refresh) the Python venv used by the qdqc oracle tests and benchmarks.
#
#   bash tests/oracle/setup.sh        # prints the venv's python path as its last line
#
# The venv lives at ${QDQC_VENV:-<repo>/target/venv}. It is (re)built when missing or when
# requirements.txt changed (a sha256 stamp is kept inside the venv). Idempotent and fast when
# already set up. Set QDQC_BASE_PYTHON to choose the base interpreter (default: python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
REQ="$HERE/requirements.txt"
VENV="${QDQC_VENV:-$REPO/target/venv}"
STAMP="$VENV/.qdqc-requirements.sha256"
BASE_PY="${QDQC_BASE_PYTHON:-python3}"

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
have=""
if [[ -f "$STAMP" ]]; then have="$(cat "$STAMP")"; fi

if [[ ! -x "$VENV/bin/python" || "$want" != "$have" ]]; then
    if ! command -v "$BASE_PY" >/dev/null 2>&1; then
        echo "setup.sh: base interpreter '$BASE_PY' not found (set QDQC_BASE_PYTHON)" >&2
        exit 1
    fi
    if [[ -d "$VENV" ]]; then
        echo "setup.sh: requirements changed or venv incomplete; rebuilding $VENV" >&2
        rm -rf "$VENV"
    else
        echo "setup.sh: creating venv at $VENV" >&2
    fi
    mkdir -p "$(dirname "$VENV")"
    "$BASE_PY" -m venv "$VENV"
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    "$VENV/bin/python" -m pip install --quiet --no-input -r "$REQ" >&2
    # Sanity check: the pinned packages import and report the pinned versions.
    "$VENV/bin/python" - "$REQ" >&2 <<'PY'
import importlib.metadata as md, sys
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if "==" not in line:
        continue
    name, ver = line.split("==", 1)
    got = md.version(name)
    if got != ver:
        sys.exit(f"setup.sh: {name} installed as {got}, expected {ver}")
import numpy, onnx, onnxruntime  # noqa: F401
PY
    echo "$want" > "$STAMP"
fi

echo "$VENV/bin/python"
