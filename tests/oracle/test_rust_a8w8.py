"""Issue 13's first acceptance point: the A8W8 seed's cases (`a8w8_models.py`) compiled with
`qdqc compile --target rust --contract real`, the crate built (debug, `-D warnings`, shared
target/rust-real-build) and run on seeded activation codes; every output code must equal the
exact-rational evaluation of the original graph, `sat(rne((Σ_k (x − zx)(w − zw))·sx·sw/sy
+ b·sb/sy) + zy)` with the f32 scales as exact fractions (0 LSB). The report must show the group
fused (per-tensor: `qlinear-matmul`; per-row × per-column: `a8w8-matmul`; Gemm with bias:
`a8w8-gemm-bias`) and the generated code must call the A8W8 kernel where it says so.

Scales along K (`per_k`: s_x per K; `weight_k`: s_w per K row) are refused with a counterexample,
which is checked here: the row it names (zero points elsewhere) and the row of zero points have
the same accumulator (0) in the column it names, and their exact outputs are its `unfused` and
`fused` codes, which differ — so no epilogue of the accumulator can be right on both. (Weights
blocked along K are refused the same way in rewrites/tests/families.rs; the Rust target cannot
build their float path, a blocked DequantizeLinear, so they are not compiled here.)

ONNX Runtime runs these graphs in float (its QLinearMatMul takes one activation scale): its
differences from the exact value are printed, not asserted. The 256×1024×1024 case is one run;
its time is printed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from a8w8_models import FLOAT, FUSED, build
from oracle_util import QDQC_BIN, REPO, ort_session

BUILD_DIR = REPO / "target" / "rust-real-build"
RULE = {"per_tensor": "qlinear-matmul", "gemm_bias": "a8w8-gemm-bias"}


def work(label: str):
    d = REPO / "target" / "rust-a8w8-tests" / label
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def compile_rust(name: str):
    d = work(name)
    m = build(name)
    onnx.save(m, d / f"{name}.onnx")
    crate, report = d / name, d / "report.json"
    r = subprocess.run([str(QDQC_BIN), "compile", str(d / f"{name}.onnx"), "--target", "rust", "--contract", "real", "-o", str(crate),
                        "--report", str(report)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return m, d, crate, json.loads(report.read_text())


def decision(report: dict, rule: str) -> dict:
    found = [d for d in report["decisions"] if d["rule"] == rule]
    assert len(found) == 1, f"{rule}: {[(d['rule'], d['fired']) for d in report['decisions']]}"
    return found[0]


def params(m: onnx.ModelProto) -> dict:
    """The graph's constants and each DQ's axis, by name."""
    p = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        p[n.name + ".axis"] = next((a.i for a in n.attribute if a.name == "axis"), 1)
        p[n.op_type] = n
    return p


def per_axis(v: np.ndarray, length: int, axis_len: int, inner: int = 1) -> list:
    """A scale or zero point (scalar or vector) as one entry per row/column index."""
    v = np.asarray(v).reshape(-1)
    return [v[0] if v.size == 1 else v[(i // inner) % axis_len] for i in range(length)]


def rne(f: Fraction) -> int:
    q, r = divmod(f.numerator, f.denominator)
    return q + (1 if 2 * r > f.denominator or (2 * r == f.denominator and q % 2) else 0)


def exact_outputs(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The original graph in exact rationals: x (codes, rank 2 or 3) → y codes."""
    p = params(m)
    gemm = "Gemm" in p
    w = p["w_q"].astype(np.int64)
    if gemm:
        w = w.T  # transB
    k, n = w.shape
    rows = x.reshape(-1, k).astype(np.int64)
    mm = rows.shape[0]
    x_axis = p["dq_x.axis"] if np.asarray(p["s_x"]).size > 1 else None
    inner = 1
    if x_axis is not None and x.ndim == 3 and x_axis == 0:
        inner = x.shape[1]
    t_len = np.asarray(p["s_x"]).size
    sx = per_axis(p["s_x"], mm, t_len, inner)
    zx = per_axis(p.get("z_x", np.zeros(1, np.int64)), mm, t_len, inner)
    sw = per_axis(p["s_w"], n, n)
    zw = np.array(per_axis(p.get("z_w", np.zeros(1, np.int64)), n, n), dtype=np.int64)
    # C in float64: every partial sum is an integer below 2^53, so the BLAS product is exact.
    xc = (rows - np.array(zx, dtype=np.int64)[:, None]).astype(np.float64)
    c = (xc @ (w - zw[None, :]).astype(np.float64)).astype(np.int64)
    sy, zy = Fraction(float(p["s_y"])), int(p["z_y"])
    lo, hi = (0, 255) if p["z_y"].dtype == np.uint8 else (-128, 127)
    fx = [Fraction(float(s)) for s in sx]
    fw = [Fraction(float(s)) / sy for s in sw]
    bias = [Fraction(0)] * n
    if gemm:
        sb = per_axis(p["s_b"], n, n)
        bias = [Fraction(int(b)) * Fraction(float(s)) / sy for b, s in zip(p["b_q"], sb)]
    y = np.empty((mm, n), dtype=np.int64)
    for i in range(mm):
        for j in range(n):
            y[i, j] = min(hi, max(lo, rne(int(c[i, j]) * fx[i] * fw[j] + bias[j]) + zy))
    return y.reshape(*x.shape[:-1], n)


def build_crate(crate):
    env = dict(os.environ, CARGO_TARGET_DIR=str(BUILD_DIR), RUSTFLAGS="-D warnings", CARGO_INCREMENTAL="0")
    b = subprocess.run([os.environ.get("CARGO", "cargo"), "build", "--offline", "--quiet"], cwd=crate, env=env, capture_output=True, text=True)
    assert b.returncode == 0, b.stderr[-4000:]


def run_crate(name: str, d, x: np.ndarray) -> np.ndarray:
    np.savez(d / "in.npz", x_q=x)
    h = subprocess.run([str(BUILD_DIR / "debug" / name), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
    assert h.returncode == 0, h.stderr
    return np.load(d / "out.npz")["y_q"]


@pytest.mark.parametrize("name", FUSED)
def test_fused_group_equals_the_exact_rational_evaluation(name):
    start = time.monotonic()
    m, d, crate, report = compile_rust(name)
    rule = RULE.get(name, "a8w8-matmul")
    dec = decision(report, rule)
    assert dec["fired"], dec
    lib = (crate / "src" / "lib.rs").read_text()
    assert ("qdqc_kernels::a8w8::A8W8" in lib) == rule.startswith("a8w8"), f"{name}: the generated code and the decision disagree"
    build_crate(crate)
    built = time.monotonic()
    x_info = m.graph.input[0].type.tensor_type
    shape = [dim.dim_value for dim in x_info.shape.dim]
    dtype = np.uint8 if x_info.elem_type == onnx.TensorProto.UINT8 else np.int8
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    seeds = 1 if name == "per_axis_large" else 3
    ort_diff = 0
    for seed in range(seeds):
        x = np.random.default_rng(seed).integers(lo, hi + 1, size=shape, dtype=dtype)
        ran = time.monotonic()
        got = run_crate(name, d, x)
        run_s = time.monotonic() - ran
        want = exact_outputs(m, x)
        assert got.shape == want.shape and got.dtype == dtype
        diff = int(np.count_nonzero(got.astype(np.int64) != want))
        assert diff == 0, f"{name} seed {seed}: {diff} of {want.size} codes differ from the exact rational evaluation"
        ort = ort_session(m).run(["y_q"], {"x_q": x})[0]
        ort_diff += int(np.count_nonzero(ort.astype(np.int64) != want))
    print(f"{name}: {seeds} seed(s) × {want.size} codes equal the exact rational evaluation (0 LSB); ORT's float path differs on {ort_diff}; "
          f"compile+build {built - start:.1f} s, crate run {run_s:.2f} s, total {time.monotonic() - start:.1f} s")


@pytest.mark.parametrize("name", ["per_k", "weight_k"])
def test_scale_along_k_is_refused_with_a_checked_counterexample(name):
    m, d, crate, report = compile_rust(name)
    dec = decision(report, "a8w8-matmul")
    assert not dec["fired"] and set(dec["verdict"].values()) == {"refuted"}, dec
    assert "qdqc_kernels::a8w8::A8W8" not in (crate / "src" / "lib.rs").read_text()
    p = params(m)
    w = p["w_q"].astype(np.int64)
    k, n = w.shape
    sx = per_axis(p["s_x"], k, k) if name == "per_k" else per_axis(p["s_x"], k, 1)
    sw = per_axis(p["s_w"], k, k) if name == "weight_k" else per_axis(p["s_w"], k, 1)
    sy = Fraction(float(p["s_y"]))
    # One counterexample per profile, the same on each (one verdict holds for all).
    for ce in {json.dumps(c, sort_keys=True): c for c in dec["counterexample"].values()}.values():
        inputs = dict(ce["inputs"])
        col, k1, k2 = inputs["column"], inputs["k1"], inputs["k2"]
        row = np.zeros(k, dtype=np.int64)  # zero points are 0 in these models
        row[k1], row[k2] = inputs["x[k1]"], inputs["x[k2]"]
        assert int(row @ w[:, col]) == 0, f"{ce}: the row's accumulator"
        v = sum(Fraction(int(row[i])) * Fraction(float(sx[i])) * int(w[i, col]) * Fraction(float(sw[i])) for i in range(k))
        assert min(127, max(-128, rne(v / sy))) == ce["unfused"], f"{ce}: the row's exact output"
        assert 0 == ce["fused"], f"{ce}: the zero-point row's exact output"
        assert ce["unfused"] != ce["fused"]
        # The original graph in ORT on a batch holding both rows (its float path, for the record).
        x = np.zeros((m.graph.input[0].type.tensor_type.shape.dim[0].dim_value, k), dtype=np.int8)
        x[0] = row
        y = ort_session(m).run(["y_q"], {"x_q": x})[0]
        print(f"{name}: refuted at column {col}, x[{k1}] = {row[k1]}, x[{k2}] = {row[k2]}: C = 0 for both rows, exact outputs "
              f"{ce['unfused']} vs {ce['fused']}; ORT's float path gives {y[0, col]} vs {y[1, col]}")


def f32_rne(v: Fraction) -> np.float32:
    """The f32 nearest v, ties to even (finite v): float(v) is the correctly rounded double, within
    one f32 step of the answer, so the answer is it or a neighbour."""
    y = np.float32(float(v))
    candidates = [np.nextafter(y, np.float32(-np.inf)), y, np.nextafter(y, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - v), int(np.array(c, np.float32).view(np.uint32)) & 1))


@pytest.mark.parametrize("name", FLOAT)
def test_float_output_is_the_correctly_rounded_exact_value(name):
    """DQ·DQ → MatMul with no Q under `real`: `a8w8-matmul-float` fires, and every f32 output is the
    correctly rounded f32 of Σ_k (x − zx)(w − zw)·sx·sw (one rounding instead of K; ORT's float
    path, which rounds every product and partial sum, is compared for the record)."""
    m, d, crate, report = compile_rust(name)
    dec = decision(report, "a8w8-matmul-float")
    assert dec["fired"], dec
    assert "A8W8::float" in (crate / "src" / "lib.rs").read_text()
    build_crate(crate)
    p = params(m)
    w = p["w_q"].astype(np.int64)
    k, n = w.shape
    rows = m.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    sx, zx = per_axis(p["s_x"], rows, np.asarray(p["s_x"]).size), per_axis(p["z_x"], rows, np.asarray(p["z_x"]).size)
    sw, zw = per_axis(p["s_w"], n, n), np.array(per_axis(p["z_w"], n, n), dtype=np.int64)
    ort_diff = 0
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, size=(rows, k), dtype=np.int8)
        np.savez(d / "in.npz", x_q=x)
        h = subprocess.run([str(BUILD_DIR / "debug" / name), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        got = np.load(d / "out.npz")["y"]
        c = (x.astype(np.int64) - np.array(zx, dtype=np.int64)[:, None]) @ (w - zw[None, :])
        want = np.array([[f32_rne(int(c[i, j]) * Fraction(float(sx[i])) * Fraction(float(sw[j]))) for j in range(n)] for i in range(rows)], np.float32)
        assert got.dtype == np.float32 and got.shape == want.shape
        bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        assert bad == 0, f"{name} seed {seed}: {bad} of {want.size} outputs are not the correctly rounded exact value"
        ort = ort_session(m).run(["y"], {"x_q": x})[0]
        ort_diff += int(np.count_nonzero(ort.view(np.uint32) != want.view(np.uint32)))
    print(f"{name}: 3 seeds × {want.size} f32 outputs are the correctly rounded exact value; ORT's float path differs on {ort_diff}")
