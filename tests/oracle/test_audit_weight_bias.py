"""`qdqc audit` on ORT's WeightBiasQuantization of a float bias (NNCF exports keep Conv/Gemm biases
in float32), against the pinned ONNX Runtime on this machine (`--ort-isa host`). ORT rounds the
bias to int32 codes `rne(fl(b / fl(sx·sw)))` and puts them behind a new DQ:

* a Conv whose Q is per channel stays float (QLinearConv takes one output scale) and adds the
  rounded bias: the audit lists the WeightBiasQuantization group with that Q's output, refutes it
  under both contracts, and its counterexample's input (one nonzero product) makes ORT_DISABLE_ALL
  and ORT_ENABLE_ALL return exactly the predicted codes; with the bias on the `fl(sx·sw)` grid the
  group is exact and ORT agrees on every activation code;
* a Gemm that ORT then fuses into QGemm adds the codes to its accumulator: the fused group is
  decided against the float bias (refuted under both contracts; the `exact` counterexample
  reproduces in ORT), and proven when the bias is on the grid with power-of-two scales.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from oracle_util import describe, ort_session as session, run_qdqc

OFF, ON = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def audit(qdqc, model, tmp_path) -> tuple[dict, str]:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    r = run_qdqc(qdqc, "audit", path, "--json", "--ort-isa", "host")
    assert r.returncode == 0, describe(r)
    report = json.loads(r.stdout)
    assert len(report["profiles"]) == 1, report["profiles"]
    return report, report["profiles"][0]


def conv_model(bias: list[float]) -> onnx.ModelProto:
    """int8 codes [1, 1, 16, 16] → DQ(2^-4, 0) → 1×1 Conv (int8 weights [3], [-5] at 2^-3, float
    bias) → uint8 Q per channel (axis 1, scales 1/4, zero points 128). No selector takes it on any
    profile (int8 in, uint8 out): the Conv stays float after WeightBiasQuantization."""
    inits = [nh.from_array(np.float32(0.0625), "sx"), nh.from_array(np.int8(0), "zx"),
             nh.from_array(np.array([3, -5], np.int8).reshape(2, 1, 1, 1), "w"),
             nh.from_array(np.float32(0.125), "sw"), nh.from_array(np.int8(0), "zw"),
             nh.from_array(np.array(bias, np.float32), "b"),
             nh.from_array(np.full([2], 0.25, np.float32), "sy"), nh.from_array(np.full([2], 128, np.uint8), "zy")]
    nodes = [h.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"], name="dq_x"),
             h.make_node("DequantizeLinear", ["w", "sw", "zw"], ["dw"], name="dq_w"),
             h.make_node("Conv", ["dx", "dw", "b"], ["c"], name="conv"),
             h.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"], name="q_y", axis=1)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.INT8, [1, 1, 16, 16])],
                     [h.make_tensor_value_info("y", T.UINT8, [1, 2, 16, 16])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def every_code() -> dict:
    return {"x": np.arange(-128, 128).astype(np.int8).reshape(1, 1, 16, 16)}


def weight_bias_group(report: dict) -> dict:
    groups = [g for g in report["groups"] if g["rule"] == "WeightBiasQuantization"]
    assert len(groups) == 1, [g["rule"] for g in report["groups"]]
    return groups[0]


def test_a_float_bias_rounded_in_a_float_conv_is_refuted_and_reproduces(qdqc, tmp_path):
    model = conv_model([0.1245, 0.0])  # rounds to 16·2^-7 = 0.125: code 3.498 → 3 becomes 3.5 → 4 at x = 32
    report, isa = audit(qdqc, model, tmp_path)
    group = weight_bias_group(report)
    assert group["outputs"] == ["y"], group
    assert group["verdict"][isa] == "refuted" and group["real"]["verdict"][isa] == "refuted", group
    for cx in (group["counterexample"][isa], group["real"]["counterexample"][isa]):
        inputs = dict(cx["inputs"])
        x = np.full([1, 1, 16, 16], inputs["x[*]"], np.int8)
        x[0, 0, 0, 0] = inputs.get("x[0]", inputs["x[*]"])
        off, on = (session(model, level).run(None, {"x": x})[0] for level in (OFF, ON))
        c = inputs["channel"]
        assert (off[0, c, 0, 0], on[0, c, 0, 0]) == (cx["unfused"], cx["fused"]), (off[0, c, 0, 0], on[0, c, 0, 0], cx)
        assert cx["unfused"] != cx["fused"]


def test_a_float_bias_on_the_product_grid_is_exact_and_ort_agrees(qdqc, tmp_path):
    model = conv_model([37 * 2.0**-7, -3 * 2.0**-7])
    report, isa = audit(qdqc, model, tmp_path)
    group = weight_bias_group(report)
    assert group["outputs"] == ["y"], group
    assert group["verdict"][isa] == "exact" and group["real"]["verdict"][isa] == "exact", group
    off, on = (session(model, level).run(None, every_code())[0] for level in (OFF, ON))
    assert np.array_equal(off, on)


def gemm_model(sx: float, sw: float, sy: float, bias: np.ndarray, weights: np.ndarray) -> onnx.ModelProto:
    """u8 codes [1, K] → DQ(sx, 131) → Gemm(·, DQ(int8 weights [K, N], sw), float bias [N]) → Q(sy, 120)."""
    k, n = weights.shape
    inits = [nh.from_array(np.float32(sx), "sx"), nh.from_array(np.uint8(131), "zx"),
             nh.from_array(weights.astype(np.int8), "w"), nh.from_array(np.float32(sw), "sw"), nh.from_array(np.int8(0), "zw"),
             nh.from_array(bias.astype(np.float32), "b"), nh.from_array(np.float32(sy), "sy"), nh.from_array(np.uint8(120), "zy")]
    nodes = [h.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"], name="dq_x"),
             h.make_node("DequantizeLinear", ["w", "sw", "zw"], ["dw"], name="dq_w"),
             h.make_node("Gemm", ["dx", "dw", "b"], ["g"], name="gemm"),
             h.make_node("QuantizeLinear", ["g", "sy", "zy"], ["y"], name="q_y")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.UINT8, [1, k])], [h.make_tensor_value_info("y", T.UINT8, [1, n])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def fused_gemm_group(report: dict, isa: str) -> dict:
    group = next(g for g in report["groups"] if g["op"] == "Gemm" and g["outputs"])
    assert group["fused_op"] == "com.microsoft.QGemm", group
    assert isa in group["verdict"], group
    return group


def test_a_float_bias_fused_into_qgemm_is_decided_against_the_float_and_reproduces(qdqc, tmp_path):
    rng = np.random.default_rng(11)
    weights = rng.integers(-127, 128, [64, 8])
    model = gemm_model(0.0123, 0.0071, 0.0517, rng.normal(0, 0.5, [8]), weights)
    report, isa = audit(qdqc, model, tmp_path)
    group = fused_gemm_group(report, isa)
    assert group["verdict"][isa] == "refuted" and group["real"]["verdict"][isa] == "refuted", group
    cx = group["counterexample"][isa]
    inputs = dict(cx["inputs"])
    x = np.full([1, 64], inputs["x[*]"], np.uint8)
    for name, code in cx["inputs"]:
        if name.startswith("x[") and name != "x[*]":
            x[0, int(name[2:-1])] = code
    off, on = (session(model, level).run(None, {"x": x})[0] for level in (OFF, ON))
    c = inputs["channel"]
    assert (off[0, c], on[0, c]) == (cx["unfused"], cx["fused"]), (off[0, c], on[0, c], cx)
    # The `real` counterexample's fused code is ORT's too.
    rcx = group["real"]["counterexample"][isa]
    x = np.full([1, 64], dict(rcx["inputs"])["x[*]"], np.uint8)
    for name, code in rcx["inputs"]:
        if name.startswith("x[") and name != "x[*]":
            x[0, int(name[2:-1])] = code
    assert session(model, ON).run(None, {"x": x})[0][0, dict(rcx["inputs"])["channel"]] == rcx["fused"], rcx


def test_a_float_bias_on_the_grid_fused_into_qgemm_is_exact_and_ort_agrees(qdqc, tmp_path):
    rng = np.random.default_rng(12)
    weights = rng.integers(-8, 9, [16, 4])
    model = gemm_model(2.0**-4, 2.0**-3, 2.0**-2, np.array([5, -9, 0, 130]) * 2.0**-7, weights)
    report, isa = audit(qdqc, model, tmp_path)
    group = fused_gemm_group(report, isa)
    assert group["verdict"][isa] == "exact" and group["real"]["verdict"][isa] == "exact", group
    for _ in range(8):
        x = {"x": rng.integers(0, 256, [1, 16], dtype=np.uint8)}
        off, on = (session(model, level).run(None, x)[0] for level in (OFF, ON))
        assert np.array_equal(off, on)
