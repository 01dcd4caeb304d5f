#!/usr/bin/env python3
"""Peak memory of `qdqc inspect`, `audit` and `compile` on models with large int8 weights in
external data (issue 10, acceptance: each within model size + 512 MB peak RSS, and under
`ulimit -v` of model size + 1 GB each finishes or fails with exit 1/2 and one line: never an abort).

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release --bins
    "$PY" bench/memory.py [--dir target/memory] [--models one,three] [--qdqc target/release/qdqc]

Models (written once, reused when present):
  one    x[1,50000] -> Q -> DQ -> MatMul(DQ(W int8 [50000, 50000], per-column scales)) -> Q -> DQ,
         one 2.5 GB weight in `one.onnx.data`.
  three  three such blocks with 28000 x 28000 weights (2.35 GB in `three.onnx.data`).
The weight codes are seeded pseudo-random int8 in [-127, 127], written a few rows at a time.

Prints one row per (model, command, limit): seconds, peak RSS (`/usr/bin/time -v`), the bound
(model size + 512 MB), exit code and the first stderr line. Not run in CI (minutes and 5 GB of
disk); tests/memory.rs checks the same bound on a 256 MB weight.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T, helper

REPO = Path(__file__).resolve().parent.parent
MB = 1 << 20


def external(name: str, dims: list[int], location: str, offset: int, length: int) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=T.INT8, dims=dims)
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def write_model(path: Path, n: int, blocks: int) -> None:
    """`blocks` chained QDQ MatMuls over n x n int8 weights, all in one external data file."""
    data = path.with_name(path.name + ".data")
    rng = np.random.default_rng(10)
    nodes, inits = [], []
    inits += [helper.make_tensor("s_x", T.FLOAT, [], [0.02]), helper.make_tensor("z_x", T.UINT8, [], [128])]
    prev = "x"
    with open(data, "wb") as f:
        for b in range(blocks):
            offset = f.tell()
            rows = max(1, (64 * MB) // n)
            for r in range(0, n, rows):
                f.write(rng.integers(-127, 128, size=(min(rows, n - r), n), dtype=np.int8).tobytes())
            inits.append(external(f"w{b}", [n, n], data.name, offset, n * n))
            scales = (rng.random(n, dtype=np.float32) * 1e-3 + 1e-4).astype(np.float32)
            inits.append(helper.make_tensor(f"s_w{b}", T.FLOAT, [n], scales))
            inits.append(helper.make_tensor(f"z_w{b}", T.INT8, [n], np.zeros(n, np.int8)))
            inits.append(helper.make_tensor(f"s_y{b}", T.FLOAT, [], [0.05]))
            inits.append(helper.make_tensor(f"z_y{b}", T.UINT8, [], [128]))
            nodes += [
                helper.make_node("QuantizeLinear", [prev, "s_x" if b == 0 else f"s_y{b-1}", "z_x" if b == 0 else f"z_y{b-1}"], [f"q{b}"], name=f"Q{b}"),
                helper.make_node("DequantizeLinear", [f"q{b}", "s_x" if b == 0 else f"s_y{b-1}", "z_x" if b == 0 else f"z_y{b-1}"], [f"dq{b}"], name=f"DQ{b}"),
                helper.make_node("DequantizeLinear", [f"w{b}", f"s_w{b}", f"z_w{b}"], [f"dqw{b}"], name=f"DQ_w{b}", axis=1),
                helper.make_node("MatMul", [f"dq{b}", f"dqw{b}"], [f"m{b}"], name=f"MatMul{b}"),
                helper.make_node("QuantizeLinear", [f"m{b}", f"s_y{b}", f"z_y{b}"], [f"qy{b}"], name=f"Q_y{b}"),
                helper.make_node("DequantizeLinear", [f"qy{b}", f"s_y{b}", f"z_y{b}"], [f"y{b}"], name=f"DQ_y{b}"),
            ]
            prev = f"y{b}"
    g = helper.make_graph(nodes, "memory", [helper.make_tensor_value_info("x", T.FLOAT, [1, n])],
                          [helper.make_tensor_value_info(prev, T.FLOAT, [1, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path.write_bytes(m.SerializeToString())


def model_bytes(path: Path) -> int:
    return path.stat().st_size + path.with_name(path.name + ".data").stat().st_size


def run(cmd: list[str], vlimit: int | None) -> tuple[float, int, int, str]:
    """Seconds, peak RSS bytes, exit code, first stderr line of `cmd` under /usr/bin/time -v."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        shell = f"ulimit -v {vlimit // 1024}; " if vlimit else ""
        full = ["bash", "-c", shell + 'exec /usr/bin/time -v -o "$0" "$@"', tf.name, *cmd]
        t0 = time.perf_counter()
        p = subprocess.run(full, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", tf.read()).group(1)) * 1024
    first = next((l for l in p.stderr.splitlines() if l.strip()), "")
    return secs, rss, p.returncode, first[:110]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=str(REPO / "target" / "memory"))
    ap.add_argument("--models", default="one,three")
    ap.add_argument("--qdqc", default=str(REPO / "target" / "release" / "qdqc"))
    ap.add_argument("--no-limit", action="store_true", help="skip the ulimit -v runs")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    shapes = {"one": (50000, 1), "three": (28000, 3)}
    bad = 0
    print(f"{'model':6} {'command':8} {'limit':>8} {'s':>7} {'peak RSS':>10} {'bound':>10} {'exit':>4}  stderr")
    for name in args.models.split(","):
        path = d / f"{name}.onnx"
        if not path.exists() or not path.with_name(path.name + ".data").exists():
            n, blocks = shapes[name]
            write_model(path, n, blocks)
        size = model_bytes(path)
        bound = size + 512 * MB
        out = d / f"{name}.qdqc.onnx"
        cmds = {
            "inspect": [args.qdqc, "inspect", str(path)],
            "audit": [args.qdqc, "audit", str(path)],
            "compile": [args.qdqc, "compile", str(path), "-o", str(out)],
        }
        for limit in [None] if args.no_limit else [None, size + 1024 * MB]:
            for cmd, argv in cmds.items():
                for f in d.glob(f"{name}.qdqc.onnx*"):
                    f.unlink()
                secs, rss, code, first = run(argv, limit)
                ok = code in (0, 1, 2) and (limit is not None or (rss <= bound and code == 0))
                left = code != 0 and any(d.glob(f"{name}.qdqc.onnx*"))
                ok = ok and not left
                bad += not ok
                lim = f"{limit // MB}M" if limit else "-"
                print(f"{name:6} {cmd:8} {lim:>8} {secs:7.1f} {rss / MB:9.0f}M {bound / MB:9.0f}M {code:4}  "
                      f"{'' if ok else 'FAIL '}{'output left behind ' if left else ''}{first}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
