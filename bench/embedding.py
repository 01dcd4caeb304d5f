#!/usr/bin/env python3
"""One embedding lookup per run, the shape of a decode step: `Gather(DQ(W), ids)` with ids of
shape [1, 1] over an int8 table the size of SmolLM2-135M's (49 152 x 576), per-row and block-32
parameters, before and after `qdqc compile` (rule gather-before-dequantize).

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release
    "$PY" bench/embedding.py [--rows 49152] [--cols 576] [--runs 20] [--qdqc BIN]

Prints, per layout: the model size before and after (from qdqc's report), the milliseconds per
run of the original under ORT_DISABLE_ALL and under ORT_ENABLE_ALL with the session profile, of
the compiled model under ORT_ENABLE_ALL with the profile (single-threaded, mean over --runs after
one warm-up), and whether the compiled output is byte-identical to the original's (exit 1 if not).
The original dequantizes the whole table every run; the compiled model dequantizes one row.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "oracle"))
import weight_models as wm  # noqa: E402
from test_compile_exact import PROFILE  # noqa: E402


def session(path: Path, level, config: dict) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def per_run_ms(sess: ort.InferenceSession, feed: dict, runs: int):
    out = sess.run(None, feed)
    start = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feed)
    return (time.perf_counter() - start) / runs * 1e3, out[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=49152)
    ap.add_argument("--cols", type=int, default=576)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--qdqc", type=Path, default=Path(os.environ.get("QDQC_BIN", REPO / "target" / "release" / "qdqc")))
    args = ap.parse_args()
    wm.V, wm.H = args.rows, args.cols
    feed = {"ids": np.array([[args.rows // 3]], np.int64)}
    failed = False
    print(f"{'layout':<8} {'bytes before':>13} {'bytes after':>13} {'orig DISABLE':>13} {'orig ENABLE+p':>14} {'qdqc ENABLE+p':>14} {'identical':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("rows", "block"):
            model, _ = wm.embedding(T.INT8, layout, tied=False)
            for vi in (model.graph.input[0], model.graph.output[0]):
                vi.type.tensor_type.shape.dim[0].dim_value = 1
                vi.type.tensor_type.shape.dim[1].dim_value = 1
            src, out, report = Path(tmp) / f"{layout}.onnx", Path(tmp) / f"{layout}.qdqc.onnx", Path(tmp) / f"{layout}.json"
            onnx.save(model, src)
            subprocess.run([str(args.qdqc), "compile", str(src), "-o", str(out), "--report", str(report)], check=True, capture_output=True)
            size = json.loads(report.read_text())["model_size"]
            o_ms, want = per_run_ms(session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, {}), feed, args.runs)
            e_ms, _ = per_run_ms(session(src, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE), feed, args.runs)
            c_ms, got = per_run_ms(session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE), feed, args.runs)
            same = want.tobytes() == got.tobytes()
            failed |= not same
            print(f"{layout:<8} {size['before_bytes']:>13} {size['after_bytes']:>13} {o_ms:>10.3f} ms {e_ms:>11.3f} ms {c_ms:>11.3f} ms {str(same):>10}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
