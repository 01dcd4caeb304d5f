"""Issue 13's run-time scales: a float MatMul model quantized by ONNX Runtime's own
`quantize_dynamic` (DynamicQuantizeLinear → MatMulInteger → Cast → Mul by `Mul(sx, sw)`), compiled
with `qdqc compile --target rust` under `exact` and `real`; rule `dynamic-matmul` must fuse the
group into qdqc's DynamicMatMul (`qdqc_kernels::dynamic`), the crate is built (debug, `-D warnings`,
shared target/rust-real-build) and run on seeded activations:

* `exact`: every output byte-identical to ONNX Runtime 1.31.1 (ORT_DISABLE_ALL) on the quantized
  model, the bias Add included, with MatMulInteger's output fed as the exact integer product
  (`ort_exact_integers`: on an AVX2 host ORT's own MatMulInteger saturates u8×s8 pairs, so the
  graph run as written is no oracle there; every other step is ORT's);
* `real`: every output of the group is the correctly rounded f32 of `C·sx·sw`, where `sx`, `zx` and
  the codes are ORT's own DynamicQuantizeLinear outputs (exposed as graph outputs of a copy),
  `C = Σ_k (x_q − zx)(w − zw)` in Python integers and the scales as exact fractions; the bias Add
  after the group stays a float op, one f32 addition (numpy's).

A group whose i32 accumulator can overflow (K = 66,400 weights at ±127) is refused by the rule
(its reason, "beyond i32", is checked in rewrites/tests/families.rs, `rust_dynamic_matmul_refuses_
an_accumulator_beyond_i32`); the Rust target has no DynamicQuantizeLinear of its own, so the compile
stops with one line naming that node, exit 2, and writes nothing — checked here.
"""
from __future__ import annotations

import json
import subprocess
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import QDQC_BIN, ort_session
from test_rust_a8w8 import BUILD_DIR, build_crate, f32_rne, work

# name: (activation shape, K, N, bias, per-channel weights)
CASES = {
    "dyn_rank3_bias": ([3, 64, 256], 256, 128, True, False),
    "dyn_rank2_pc": ([64, 256], 256, 96, False, True),
}
# The refused case: weights ±1 quantized to ±127, K · 127 · 255 > 2^31 (the accumulator bound fails).
WIDE = ([1, 66400], 66400, 2, False, False)
CONTRACTS = ["exact", "real"]


def quantized(name: str, d) -> onnx.ModelProto:
    """The float model `x·W (+ B)` and ORT's quantize_dynamic of it (weights QInt8); a name not in
    CASES is the WIDE case."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    shape, k, n, bias, per_channel = CASES[name] if name in CASES else WIDE
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((k, n)) * 0.1).astype(np.float32) if name in CASES else np.where(np.arange(k * n).reshape(k, n) % 2 == 0, 1.0, -1.0).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h" if bias else "y"])]
    inits = [numpy_helper.from_array(w, "W")]
    if bias:
        nodes.append(helper.make_node("Add", ["h", "B"], ["y"]))
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B"))
    out_shape = shape[:-1] + [n]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, d / "float.onnx")
    quantize_dynamic(d / "float.onnx", d / f"{name}.onnx", weight_type=QuantType.QInt8, per_channel=per_channel)
    return onnx.load(d / f"{name}.onnx")



def compile_rust(name: str, contract: str):
    label = f"{name}_{contract}"
    d = work(label)
    m = quantized(name, d)
    # The crate (and its binary) is named after the model file.
    onnx.save(m, d / f"{label}.onnx")
    crate, report = d / label, d / "report.json"
    r = subprocess.run([str(QDQC_BIN), "compile", str(d / f"{label}.onnx"), "--target", "rust", "--contract", contract, "-o", str(crate),
                        "--report", str(report)], capture_output=True, text=True, timeout=600)
    return m, d, crate, report, r


def ort_exact_integers(m: onnx.ModelProto, x: np.ndarray, w: np.ndarray, zw: np.ndarray) -> np.ndarray:
    """ORT_DISABLE_ALL's `y` with MatMulInteger's output fed as the exact integer product: every
    other step is ORT's own. ORT's MatMulInteger is exact only where its kernel is (VNNI); on an
    AVX2 host (`host_isa()` x86-avx2) it sums u8×s8 pairs with `vpmaddubsw`, which saturates, so
    the graph run as written is no oracle for the exact i32 sums there."""
    xq, _, zx = ort_dynamic_quantize(m, x)
    k, n = w.shape
    c = (xq.reshape(-1, k).astype(np.int64) - int(zx)) @ (w - zw[None, :])
    assert np.abs(c).max() < 2**31, "the product leaves i32"
    mmi = next(node for node in m.graph.node if node.op_type == "MatMulInteger")
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    copy.graph.node.remove(next(node for node in copy.graph.node if node.op_type == "MatMulInteger"))
    copy.graph.input.append(helper.make_tensor_value_info(mmi.output[0], TensorProto.INT32, None))
    feeds = {"x": x, mmi.output[0]: c.astype(np.int32).reshape(list(xq.shape[:-1]) + [n])}
    return ort_session(copy).run(["y"], feeds)[0]


def ort_dynamic_quantize(m: onnx.ModelProto, x: np.ndarray):
    """ORT's own DynamicQuantizeLinear outputs in the quantized model (exposed as graph outputs)."""
    dql = next(n for n in m.graph.node if n.op_type == "DynamicQuantizeLinear")
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    for o, t in zip(dql.output, [TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8]):
        copy.graph.output.append(helper.make_tensor_value_info(o, t, None))
    return ort_session(copy).run(list(dql.output), {"x": x})


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("name", list(CASES))
def test_quantize_dynamic_group_is_fused_and_exact(name, contract):
    m, d, crate, report, r = compile_rust(name, contract)
    assert r.returncode == 0, r.stderr
    decisions = [x for x in json.loads(report.read_text())["decisions"] if x["rule"].startswith("dynamic-matmul")]
    assert len(decisions) == 1 and decisions[0]["fired"], decisions
    lib = (crate / "src" / "lib.rs").read_text()
    assert "entry::dynamic_matmul_f32" in lib and ("Epilogue::Real" in lib) == (contract == "real"), "the generated code and the contract disagree"
    build_crate(crate)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    mmi = next(n for n in m.graph.node if n.op_type == "MatMulInteger")
    smul = next(n for n in m.graph.node if n.op_type == "Mul" and n.input[0] == next(x for x in m.graph.node if x.op_type == "DynamicQuantizeLinear").output[1])
    w = inits[mmi.input[1]].astype(np.int64)
    zw = inits[mmi.input[3]].astype(np.int64).reshape(-1) if len(mmi.input) > 3 and mmi.input[3] else np.zeros(1, np.int64)
    sw = inits[smul.input[1]].astype(np.float32).reshape(-1)
    k, n = w.shape
    sw = np.broadcast_to(sw, (n,))
    zw = np.broadcast_to(zw, (n,))
    bias = inits.get("B")
    shape = [dim.dim_value for dim in m.graph.input[0].type.tensor_type.shape.dim]
    differs_from_ort = 0
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        x = (rng.standard_normal(shape) * (1 + seed)).astype(np.float32)
        if seed == 2:
            x = np.abs(x)  # min(x) > 0: zx = 0, DynamicQuantizeLinear's clamp of min to 0
        np.savez(d / "in.npz", x=x)
        label = crate.name
        h = subprocess.run([str(BUILD_DIR / "debug" / label), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        got = np.load(d / "out.npz")["y"]
        ort = ort_exact_integers(m, x, w, zw)
        assert got.dtype == np.float32 and got.shape == ort.shape
        if contract == "exact":
            bad = int(np.count_nonzero(got.view(np.uint32) != ort.view(np.uint32)))
            assert bad == 0, f"{name} seed {seed}: {bad} of {ort.size} outputs differ from ONNX Runtime's"
            continue
        xq, sx, zx = ort_dynamic_quantize(m, x)
        c = (xq.reshape(-1, k).astype(np.int64) - int(zx)) @ (w - zw[None, :])
        fx = Fraction(float(sx))
        fsw = [Fraction(float(s)) for s in sw]
        want = np.array([[f32_rne(int(c[i, j]) * fx * fsw[j]) for j in range(n)] for i in range(c.shape[0])], np.float32)
        if bias is not None:
            want = want + bias.astype(np.float32)[None, :]
        want = want.reshape(got.shape)
        bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        assert bad == 0, f"{name} seed {seed}: {bad} of {want.size} outputs are not the correctly rounded exact value"
        differs_from_ort += int(np.count_nonzero(ort.view(np.uint32) != want.view(np.uint32)))
    what = "byte-identical to ORT_DISABLE_ALL on the exact integer product" if contract == "exact" else f"the correctly rounded exact value (ORT's graph differs on {differs_from_ort})"
    print(f"{name} {contract}: 3 seeds × {got.size} f32 outputs {what}")


def test_accumulator_beyond_i32_is_refused_and_not_compiled():
    m, d, crate, report, r = compile_rust("dyn_wide", "real")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "DynamicQuantizeLinear" in lines[0] and "not supported by the Rust target" in lines[0], r.stderr
    assert not crate.exists() and not report.exists(), "no partial output"
    # The model itself is within ORT's reach: its group is the authored one.
    assert [n.op_type for n in m.graph.node][:3] == ["DynamicQuantizeLinear", "Mul", "MatMulInteger"]
