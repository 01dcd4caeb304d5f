#!/usr/bin/env python3
"""Peak memory of `qdqc.compile` (the Python package) on a model with a 2.5 GB int8 weight in
external data (issue 14: it works without loading the data into Python memory).

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    python3 -m venv target/pyvenv && target/pyvenv/bin/pip install ./python numpy==2.3.5
    "$PY" bench/python_memory.py --python target/pyvenv/bin/python [--dir target/memory]

The model is bench/memory.py's `one` (x[1,50000] → Q → DQ → MatMul(DQ(W int8 [50000, 50000])) → Q
→ DQ), written once and reused. A fresh interpreter imports qdqc and onnx, records its RSS, then
calls `qdqc.compile(path, output=...)` — the model and its output stay files; qdqc reads the weight
memory-mapped, in this same process — and prints its peak RSS (ru_maxrss). For comparison, the same
compile by the `qdqc` binary (`/usr/bin/time -v`), and what `onnx.load` of the model alone would
hold (the external data size). Not run in CI (minutes and 5 GB of disk).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import write_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MB = 1 << 20

PROBE = r"""
import json, resource, sys, time
import onnx, qdqc
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
model, report = qdqc.compile(sys.argv[1], output=sys.argv[2])
took = time.monotonic() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
external = sum(t.ByteSize() for t in model.graph.initializer)
print(json.dumps({"base_kb": base, "peak_kb": peak, "seconds": took, "fused": report["fused"], "proto_bytes_in_python": external}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="an interpreter with the qdqc package installed")
    ap.add_argument("--dir", default=str(REPO / "target" / "memory"))
    ap.add_argument("--qdqc", default=str(REPO / "target" / "release" / "qdqc"))
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "one.onnx"
    if not model.exists():
        write_model(model, 50000, 1)
    size = model.stat().st_size + model.with_name("one.onnx.data").stat().st_size
    # Same file name in two folders: a model records its external data file's name.
    (folder / "py").mkdir(exist_ok=True)
    (folder / "cli").mkdir(exist_ok=True)
    out = folder / "py" / "one.qdqc.onnx"
    r = subprocess.run([args.python, "-c", PROBE, str(model), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return 1
    py = json.loads(r.stdout)
    cli_out = folder / "cli" / "one.qdqc.onnx"
    c = subprocess.run(["/usr/bin/time", "-v", args.qdqc, "compile", str(model), "-o", str(cli_out)], capture_output=True, text=True)
    cli_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", c.stderr).group(1))
    same = out.read_bytes() == cli_out.read_bytes() and Path(str(out) + ".data").read_bytes() == Path(str(cli_out) + ".data").read_bytes()
    print(f"model {size / MB:.0f} MiB (weights in external data); qdqc.compile(path, output=...): {py['seconds']:.1f} s, "
          f"peak RSS {py['peak_kb'] / 1024:.0f} MiB (interpreter with onnx + qdqc imported: {py['base_kb'] / 1024:.0f} MiB); "
          f"the qdqc binary: {cli_kb / 1024:.0f} MiB; returned ModelProto holds {py['proto_bytes_in_python'] / MB:.1f} MiB of initializers "
          f"(external data not loaded); outputs identical to the binary's: {same}")
    for f in (out, Path(str(out) + ".data"), cli_out, Path(str(cli_out) + ".data")):
        f.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
