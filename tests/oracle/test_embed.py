"""qdqc as a build step (codegen/build, `qdqc-build`): the examples that embed a model through
build.rs are built and run from a clean CARGO_TARGET_DIR, as a user's first build would be.

- `examples/embed-onnx`: the fused model its build script compiled is the model `qdqc compile`
  writes, byte for byte; run by ONNX Runtime with the session config the program prints, under
  ORT_ENABLE_ALL, it gives the original model's ORT_DISABLE_ALL bytes; the build script printed a
  `cargo:warning` per refused group; touching the model re-runs the build script and recompiles
  only the example (the rebuild's `Compiling` lines are counted).

- `examples/embed-rust`: the Rust kernel code its build script generated (one module in OUT_DIR,
  `include!`d) runs and prints the same logits, bit for bit, as the crate `qdqc compile --target
  rust` writes for the same model and contract, run by its harness on the same input; the
  module's text holds no absolute path.

First-build and rebuild times, peak RSS of the build and the binary size are printed (-s).
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from oracle_util import QDQC_BIN

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "examples" / "models" / "cnn_residual_qdq.onnx"


def cargo(args: list[str], target: Path) -> tuple[subprocess.CompletedProcess, float, int]:
    """Runs cargo with its own target folder; (result, wall seconds, peak RSS of the largest
    process of the build in bytes)."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), CARGO_INCREMENTAL="0")
    # GNU time's %M is the largest RSS among cargo and the processes it waited for (rustc).
    stats = target / "time.txt"
    start = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(stats), os.environ.get("CARGO", "cargo"), *args], cwd=REPO, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    return r, took, int(stats.read_text().split()[-1]) * 1024


@pytest.fixture(scope="module")
def clean_target(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("embed-target")


def test_embed_onnx_builds_clean_and_its_model_is_the_compiled_one(clean_target, tmp_path):
    out = tmp_path / "embedded.onnx"
    r, first, peak = cargo(["run", "--locked", "-p", "embed-onnx", "--", str(out)], clean_target)
    assert r.returncode == 0, f"cargo run -p embed-onnx failed:\n{r.stderr[-4000:]}"
    binary = clean_target / "debug" / "embed-onnx"
    print(f"\nembed-onnx: first build + run {first:.1f} s (clean CARGO_TARGET_DIR), peak RSS {peak / 2**20:.0f} MiB, binary {binary.stat().st_size / 2**20:.1f} MiB")
    # One cargo:warning per group the compile refused.
    cli = tmp_path / "cli.onnx"
    report = tmp_path / "cli.json"
    c = subprocess.run([str(QDQC_BIN), "compile", str(SHIPPED), "-o", str(cli), "--report", str(report)], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    import json

    refused = [d for d in json.loads(report.read_text())["decisions"] if not d["fired"]]
    warnings = [l for l in r.stderr.splitlines() if l.startswith("warning: embed-onnx@") and "stays unfused" in l]
    assert len(warnings) == len(refused) > 0, r.stderr[-4000:]
    # The embedded model is the CLI's, byte for byte.
    assert out.read_bytes() == cli.read_bytes()
    # Under the printed config at ORT_ENABLE_ALL it gives the original's ORT_DISABLE_ALL bytes.
    entries = [l.strip().split(" = ", 1) for l in r.stdout.splitlines() if " = " in l]
    assert {k for k, _ in entries} >= {"session.disable_quant_qdq", "optimization.disable_specified_optimizers"}, r.stdout
    fast = ort.SessionOptions()
    fast.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for k, v in entries:
        fast.add_session_config_entry(k, v)
    fast.intra_op_num_threads = 1
    ref = ort.SessionOptions()
    ref.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref.intra_op_num_threads = 1
    a = ort.InferenceSession(str(out), fast, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(SHIPPED), ref, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for _ in range(8):
        x = rng.standard_normal((1, 3, 16, 16), dtype=np.float32)
        assert a.run(None, {"input": x})[0].tobytes() == b.run(None, {"input": x})[0].tobytes()
    # Touching the model re-runs the build script and recompiles the example alone.
    os.utime(SHIPPED)
    r, again, _ = cargo(["build", "--locked", "-p", "embed-onnx"], clean_target)
    assert r.returncode == 0, r.stderr[-4000:]
    compiling = [l.split()[1] for l in r.stderr.splitlines() if l.strip().startswith("Compiling")]
    assert compiling == ["embed-onnx"], f"a touched model rebuilt more than the example: {compiling}"
    print(f"embed-onnx: rebuild after touching the model {again:.1f} s")


def test_embed_rust_runs_the_generated_module_like_the_generated_crate(clean_target, tmp_path):
    r, first, peak = cargo(["run", "--locked", "-p", "embed-rust"], clean_target)
    assert r.returncode == 0, f"cargo run -p embed-rust failed:\n{r.stderr[-4000:]}"
    binary = clean_target / "debug" / "embed-rust"
    print(f"\nembed-rust: build + run {first:.1f} s (after embed-onnx in the same target folder), peak RSS {peak / 2**20:.0f} MiB, binary {binary.stat().st_size / 2**20:.1f} MiB")
    bits = next(l for l in r.stdout.splitlines() if l.startswith("logits f32 bits ")).split()[3:]
    assert "top class" in r.stdout and "median latency" in r.stdout, r.stdout
    module = next(clean_target.glob("debug/build/embed-rust-*/out/cnn_residual_qdq.rs"))
    assert str(REPO) not in module.read_text() and str(clean_target) not in module.read_text(), "an absolute path in the generated module"
    # The crate `qdqc compile --target rust` writes, run by its harness on the same input.
    crate = tmp_path / "crate"
    c = subprocess.run([str(QDQC_BIN), "compile", str(SHIPPED), "--target", "rust", "--contract", "real", "-o", str(crate)], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    env = dict(os.environ, CARGO_TARGET_DIR=str(clean_target), CARGO_INCREMENTAL="0")
    b = subprocess.run([os.environ.get("CARGO", "cargo"), "build", "--offline", "--quiet"], cwd=crate, env=env, capture_output=True, text=True)
    assert b.returncode == 0, b.stderr[-4000:]
    x = (((np.arange(3 * 16 * 16) * 37) % 200).astype(np.float32) / np.float32(100.0) - np.float32(1.0)).reshape(1, 3, 16, 16)
    np.savez(tmp_path / "in.npz", input=x)
    harness = next(p for p in (clean_target / "debug").iterdir() if p.name.startswith("cnn_residual_qdq") and p.is_file() and os.access(p, os.X_OK))
    h = subprocess.run([str(harness), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert h.returncode == 0, h.stderr
    logits = np.load(tmp_path / "out.npz")["logits"].reshape(-1)
    assert [f"{v:08x}" for v in logits.view(np.uint32)] == bits, "the embedded module and the generated crate differ"
