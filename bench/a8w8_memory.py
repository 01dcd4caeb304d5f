#!/usr/bin/env python3
"""Peak memory of the fused A8W8 group at 256×1024×1024 (issue 13's first acceptance point): the
seed's `per_axis_large` graph (DQ(x int8 [256, 1024]; s_x per row) · DQ(w int8 [1024, 1024]; s_w
per column) → MatMul → Q, `tests/oracle/a8w8_models.py`) compiled with `qdqc compile --target rust
--contract real` (the group fused into one integer GEMM with the exact epilogue), the crate built
with `--release`, against the same graph run by ONNX Runtime 1.31.1 at ORT_DISABLE_ALL and
ORT_ENABLE_ALL (one thread; ORT runs it in float: x_dq, w_dq and y are f32 tensors).

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release --bins
    "$PY" bench/a8w8_memory.py [--runs 5] [--qdqc target/release/qdqc] [--dir target/a8w8-memory]

Each run is a fresh process measured by /usr/bin/time (`%M`): the crate's harness (read the .npz, run once, write
the .npz) and a Python process (import onnxruntime and numpy, read the .npz, create the session,
run once). Prints the median peak RSS of each over `--runs`, and for ORT also its growth over a
baseline process that does everything but create and run the session; the Rust harness has no
interpreter, so its absolute peak is its whole cost. Also prints the count of output codes where
ORT's float path differs from the crate (the crate equals the exact rational value:
tests/oracle/test_rust_a8w8.py).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "oracle"))
from a8w8_models import build  # noqa: E402

ORT_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import onnxruntime as ort
    model, inputs, level, out = sys.argv[1:5]
    x = dict(np.load(inputs))
    if level != "none":
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        np.save(out, s.run(["y_q"], x)[0])
""")


def peak_kib(cmd: list[str], d: Path) -> int:
    """Peak RSS of one child process in KiB, as /usr/bin/time reports it (its own child, forked
    from a small process: a child forked from this interpreter would count the interpreter's
    pages, which wait4's ru_maxrss carries across exec); fails on a non-zero exit."""
    out = d / "peak.txt"
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(out), *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]}: exit {r.returncode}: {r.stderr[-2000:]}")
    return int(out.read_text().split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--qdqc", type=Path, default=REPO / "target" / "release" / "qdqc")
    ap.add_argument("--dir", type=Path, default=REPO / "target" / "a8w8-memory")
    args = ap.parse_args()
    if not args.qdqc.exists():
        sys.exit(f"{args.qdqc}: not built (cargo build --release --bins, or pass --qdqc)")
    d = args.dir
    d.mkdir(parents=True, exist_ok=True)
    model = d / "per_axis_large.onnx"
    onnx.save(build("per_axis_large"), model)
    crate = d / "per_axis_large"
    r = subprocess.run([str(args.qdqc), "compile", str(model), "--target", "rust", "--contract", "real", "-o", str(crate)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    print(r.stderr.strip())
    target = d / "build"
    b = subprocess.run(["cargo", "build", "--release", "--offline", "--quiet"], cwd=crate, env=dict(os.environ, CARGO_TARGET_DIR=str(target)),
                       capture_output=True, text=True)
    if b.returncode != 0:
        sys.exit(b.stderr[-4000:])
    harness = target / "release" / "per_axis_large"
    x = np.random.default_rng(0).integers(-128, 128, size=(256, 1024), dtype=np.int8)
    np.savez(d / "in.npz", x_q=x)
    runs = {
        "rust crate (fused)": [str(harness), str(d / "in.npz"), str(d / "out.npz")],
        "python + ort baseline (no session)": [sys.executable, "-c", ORT_CHILD, str(model), str(d / "in.npz"), "none", str(d / "ort.npy")],
        "ORT_DISABLE_ALL": [sys.executable, "-c", ORT_CHILD, str(model), str(d / "in.npz"), "ORT_DISABLE_ALL", str(d / "ort_disable.npy")],
        "ORT_ENABLE_ALL": [sys.executable, "-c", ORT_CHILD, str(model), str(d / "in.npz"), "ORT_ENABLE_ALL", str(d / "ort_enable.npy")],
    }
    peaks = {name: statistics.median(peak_kib(cmd, d) for _ in range(args.runs)) for name, cmd in runs.items()}
    base = peaks["python + ort baseline (no session)"]
    rust = np.load(d / "out.npz")["y_q"]
    print(f"A8W8 256x1024x1024 (per-row s_x x per-column s_w, int8), median peak RSS over {args.runs} runs:")
    for name, kib in peaks.items():
        extra = f"  (+{(kib - base) / 1024:.1f} MiB over the baseline)" if name.startswith("ORT") else ""
        print(f"  {name:36s} {kib / 1024:8.1f} MiB{extra}")
    for level in ("disable", "enable"):
        ort_y = np.load(d / f"ort_{level}.npy")
        print(f"  ORT_{level.upper()}_ALL output codes differing from the crate's: {int(np.count_nonzero(ort_y != rust))} of {rust.size}")
    print(f"  float tensors ORT holds that the fused group never allocates: x_dq {256 * 1024 * 4 / 2**20:.1f} MiB, "
          f"w_dq {1024 * 1024 * 4 / 2**20:.1f} MiB, y {256 * 1024 * 4 / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
