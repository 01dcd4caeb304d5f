#!/usr/bin/env python3
"""The published MiniLM-L3 encoder on the Rust target against ONNX Runtime, same run (issue 13).

    export QDQC_PYTHON=/work/main/target/venv/bin/python   # or PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release --bin qdqc
    "$QDQC_PYTHON" bench/rust_encoder.py [--contracts real] [--rounds 3] [--qdqc target/release/qdqc] [--json]

The measurement is bench/rust_target.py's, on the transformer set (ENCODERS: `minilm_u8s8_pc`,
quantize_static with u8 activations and s8 per-channel weights, ORT's recommended choice; its
inputs pinned to the real-corpus manifest's [1, 64] feeds): the generated crate built in release,
the harness' median latency (1 thread) and ORT 1.31.1's with ORT_ENABLE_ALL and ORT_DISABLE_ALL,
interleaved per round, the ratios t_ORT / t_Rust (issue 13's targets: ≥ 1.4 vs ENABLE_ALL on an
AVX-512 VNNI host, ≥ 1.1 elsewhere), and peak RSS of a fresh harness process against ORT's RSS
increase for session creation and one run (target ≤ 0.5). Any rust_target.py option passes
through; `--contracts` defaults to `real` here.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rust_target  # noqa: E402

ENCODERS = ("minilm_u8s8_pc",)

if __name__ == "__main__":
    rust_target.REAL_MODELS = ENCODERS
    args = sys.argv[1:]
    if not any(a.startswith("--contracts") for a in args):
        args = ["--contracts", "real", *args]
    if not any(a.startswith("--models") for a in args):
        args = ["--models", ",".join(ENCODERS), *args]
    sys.argv = [sys.argv[0], *args]
    rust_target.main()
