"""`qdqc audit` on ORT's rewrites outside the selectors and on groups without static shapes,
against the pinned ONNX Runtime on this machine (`--ort-isa host`):

* a Clip in front of an int8 QuantizeLinear that ORT's ClipQuantFusion removes although it clips
  (its bound is within FLT_EPSILON of the Q's range): the audit refutes it, and its input makes
  ORT_ENABLE_ALL and ORT_DISABLE_ALL return exactly the predicted codes;
* a Relu in front of a uint8 Q with a negative scale (ReluQuantFusion checks only the zero point):
  the same;
* QLinearSoftmax over a symbolic axis: refuted at a concrete length, and that length's row
  reproduces in ORT.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from oracle_util import compile_with_report, describe, ort_session as session, run_qdqc


def audit(qdqc, path, *args) -> dict:
    r = run_qdqc(qdqc, "audit", path, "--json", "--ort-isa", "host", *args)
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout)


def host(report) -> str:
    assert len(report["profiles"]) == 1, report["profiles"]
    return report["profiles"][0]


def activation_before_q(act: onnx.NodeProto, scale: float, zp, inits=()) -> onnx.ModelProto:
    """x (float) → Neg → act → Q(scale, zp) → codes (the Neg gives the activation an input edge,
    which ORT's node removal needs)."""
    nodes = [h.make_node("Neg", ["x"], ["nx"], name="neg"), act, h.make_node("QuantizeLinear", ["r", "s", "z"], ["y"], name="q_y")]
    params = [nh.from_array(np.float32(scale), "s"), nh.from_array(zp, "z"), *inits]
    out_type = T.INT8 if zp.dtype == np.int8 else T.UINT8
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", out_type, [4])], params)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def assert_reproduces(qdqc, tmp_path, model, rule):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next((g for g in report["groups"] if g["rule"] == rule), None)
    assert group is not None, [g["rule"] for g in report["groups"]]
    assert group["verdict"][isa] == "refuted" and group["real"]["verdict"][isa] == "refuted", group
    cx = group["counterexample"][isa]
    bits = dict(cx["inputs"])["x (f32 bits)"]
    x = -np.full(4, struct.unpack("<f", struct.pack("<I", bits))[0], np.float32)
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": x})[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})[0]
    assert set(off.tolist()) == {cx["unfused"]} and set(on.tolist()) == {cx["fused"]}, (off, on, cx)
    assert cx["unfused"] != cx["fused"]


def test_an_int8_clip_within_flt_epsilon_is_removed_by_ort_and_refuted(qdqc, tmp_path):
    bounds = [nh.from_array(np.float32(0.0), "lo"), nh.from_array(np.float32(2e-7), "hi")]
    clip = h.make_node("Clip", ["nx", "lo", "hi"], ["r"], name="clip")
    assert_reproduces(qdqc, tmp_path, activation_before_q(clip, 1e-9, np.int8(-128), bounds), "ClipQuantRewrite")


def test_a_relu_before_a_negative_scale_is_removed_by_ort_and_refuted(qdqc, tmp_path):
    relu = h.make_node("Relu", ["nx"], ["r"], name="relu")
    assert_reproduces(qdqc, tmp_path, activation_before_q(relu, -0.1, np.uint8(0)), "ReluQuantRewrite")


def test_an_exact_int8_clip_removal_is_exact(qdqc, tmp_path):
    # Q covers [0, 255·0.02]; Clip(0, 6) lies outside it, so Q saturates first: exact.
    bounds = [nh.from_array(np.float32(0.0), "lo"), nh.from_array(np.float32(6.0), "hi")]
    clip = h.make_node("Clip", ["nx", "lo", "hi"], ["r"], name="clip")
    model = activation_before_q(clip, 0.02, np.int8(-128), bounds)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    group = next(g for g in report["groups"] if g["rule"] == "ClipQuantRewrite")
    assert group["verdict"][host(report)] == "exact", group
    x = np.array([-1.0, 3.0, 5.1, 7.5], np.float32)
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": x})[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})[0]
    assert np.array_equal(off, on)


def softmax_model(sx, zx, sy, zy, axis_dim) -> onnx.ModelProto:
    nodes = [
        h.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"], name="dq_x"),
        h.make_node("Softmax", ["dx"], ["p"], name="softmax", axis=-1),
        h.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"], name="q_y"),
    ]
    inits = [nh.from_array(np.float32(sx), "sx"), nh.from_array(np.uint8(zx), "zx"), nh.from_array(np.float32(sy), "sy"), nh.from_array(np.uint8(zy), "zy")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.UINT8, ["batch", axis_dim])], [h.make_tensor_value_info("y", T.UINT8, ["batch", axis_dim])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=9)


def test_softmax_over_a_symbolic_axis_is_refuted_at_a_length_that_reproduces(qdqc, tmp_path):
    path = tmp_path / "softmax.onnx"
    onnx.save(softmax_model(0.5, 0, 0.006, 0, "sequence"), path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next(g for g in report["groups"] if g["op"] == "Softmax")
    assert group["verdict"][isa] == "refuted", group
    detail = group["proof"][isa]["detail"]
    length = int(detail.split("refuted at length ")[1].split(":")[0])
    cx = group["counterexample"][isa]
    inputs = dict(cx["inputs"])
    row = [inputs["x[0]"]] + [inputs.get("x[1]", inputs.get(f"x[1..{length}]"))] * (length - 1)
    row = np.array([row], np.uint8)
    fixed = softmax_model(0.5, 0, 0.006, 0, length)
    off = session(fixed, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": row})[0]
    on = session(fixed, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": row})[0]
    position = 0  # the counterexample names y[0] or y[1]; both hold in the row pattern
    assert "y[" in cx["exact"], cx
    position = int(cx["exact"].split("y[")[1].split("]")[0])
    assert (off[0, position], on[0, position]) == (cx["unfused"], cx["fused"]), (off, on, cx)


def int8_add_model(shape) -> onnx.ModelProto:
    """int8 codes a, b → DQ → Add → Q → int8 codes: an Add of an int8-activation model where no
    Q→DQ pair lets QDQS8ToU8 make it uint8 (here graph inputs; in a model, Qs that also feed a
    graph output or a second DQ), which ORT fuses into an int8 QLinearAdd."""
    # The parameters of an int8 hardswish `x + 3` Add in a quantized OCR classifier.
    params = {"a": (0.056834128, -21), "b": (0.011764706, -128), "c": (0.023529412, -128)}
    inits = [x for n, (s, z) in params.items() for x in (nh.from_array(np.float32(s), f"s_{n}"), nh.from_array(np.int8(z), f"z_{n}"))]
    nodes = [
        h.make_node("DequantizeLinear", ["a", "s_a", "z_a"], ["da"], name="dq_a"),
        h.make_node("DequantizeLinear", ["b", "s_b", "z_b"], ["db"], name="dq_b"),
        h.make_node("Add", ["da", "db"], ["sum"], name="residual_add"),
        h.make_node("QuantizeLinear", ["sum", "s_c", "z_c"], ["c"], name="q_c"),
    ]
    ins = [h.make_tensor_value_info(n, T.INT8, shape) for n in "ab"]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("c", T.INT8, shape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def test_an_int8_residual_add_is_fused_by_ort_and_refuted(qdqc, tmp_path):
    shape = [1, 4, 8, 8]
    model = int8_add_model(shape)
    path = tmp_path / "add.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next(g for g in report["groups"] if g["op"] == "Add")
    assert group["fused_op"] == "com.microsoft.QLinearAdd" and group["codes"][isa]["q_c"] == "i8", group
    assert group["verdict"][isa] == "refuted", group
    cx = group["counterexample"][isa]
    a, b = (v for _, v in cx["inputs"])
    feed = {"a": np.full(shape, a, np.int8), "b": np.full(shape, b, np.int8)}
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feed)[0]
    assert set(off.ravel().tolist()) == {cx["unfused"]} and set(on.ravel().tolist()) == {cx["fused"]}, (off.ravel()[:4], on.ravel()[:4], cx)


def test_merging_two_qdq_pairs_with_different_parameters_is_refuted(qdqc, tmp_path):
    # x → Q/DQ(0.1, 0) → Q/DQ(0.2, 0) → y: DoubleQDQPairsRemover keeps one pair with the
    # intersected range's parameters (here the first pair's), which rounds once instead of twice.
    inits = [nh.from_array(np.float32(0.1), "s1"), nh.from_array(np.float32(0.2), "s2"), nh.from_array(np.uint8(0), "z")]
    nodes = [
        h.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"], name="q1"),
        h.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"], name="dq1"),
        h.make_node("QuantizeLinear", ["d1", "s2", "z"], ["q2"], name="q2"),
        h.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"], name="dq2"),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", T.FLOAT, [4])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "double.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next(g for g in report["groups"] if g["rule"] == "DoubleQDQPairsRemover")
    assert group["verdict"][isa] == "refuted", group
    cx = group["counterexample"][isa]
    x = np.full(4, struct.unpack("<f", struct.pack("<I", dict(cx["inputs"])["x (f32 bits)"]))[0], np.float32)
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": x})[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})[0]
    assert set(off.tolist()) == {np.float32(0.2) * cx["unfused"]}, (off, cx)
    assert not np.array_equal(off, on), (off, on, cx)


def test_global_average_pool_over_a_symbolic_image_is_refuted_at_a_size_that_reproduces(qdqc, tmp_path):
    inits = [nh.from_array(np.float32(0.0625), "sx"), nh.from_array(np.uint8(128), "zx"), nh.from_array(np.float32(0.075), "sy"), nh.from_array(np.uint8(128), "zy")]
    nodes = [
        h.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"], name="dq_x"),
        h.make_node("GlobalAveragePool", ["dx"], ["p"], name="gap"),
        h.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"], name="q_y"),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.UINT8, [1, 1, "height", "width"])], [h.make_tensor_value_info("y", T.UINT8, [1, 1, 1, 1])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "gap.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next(g for g in report["groups"] if g["op"] == "GlobalAveragePool")
    assert group["verdict"][isa] == "refuted", group
    n = int(group["proof"][isa]["detail"].split("refuted at ")[1].split(" ")[0])
    inputs = dict(group["counterexample"][isa]["inputs"])
    rest = inputs.get(f"x[1..{n}]", inputs.get("x[1]"))
    image = np.array([inputs["x[0]"]] + [rest] * (n - 1), np.uint8).reshape(1, 1, n, 1)
    cx = group["counterexample"][isa]
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": image})[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": image})[0]
    assert (int(off.ravel()[0]), int(on.ravel()[0])) == (cx["unfused"], cx["fused"]), (off, on, cx)


def attention_av_model() -> onnx.ModelProto:
    """probs [1, seq, seq] · V [1, seq, 4] with a symbolic sequence: K is the sequence length."""
    s = np.float32(2.0**-5)
    inits = [nh.from_array(s, "sa"), nh.from_array(np.uint8(122), "za"), nh.from_array(s, "sb"), nh.from_array(np.uint8(122), "zb"),
             nh.from_array(np.float32(2.0**-3), "sy"), nh.from_array(np.uint8(136), "zy")]
    nodes = [
        h.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"], name="dq_a"),
        h.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"], name="dq_b"),
        h.make_node("MatMul", ["da", "db"], ["m"], name="av"),
        h.make_node("QuantizeLinear", ["m", "sy", "zy"], ["y"], name="q_y"),
    ]
    ins = [h.make_tensor_value_info("a", T.UINT8, [1, "seq", "seq"]), h.make_tensor_value_info("b", T.UINT8, [1, "seq", 4])]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("y", T.UINT8, [1, "seq", 4])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def test_a_matmul_over_a_symbolic_k_is_decided_with_its_bound_and_holds_in_ort(qdqc, tmp_path):
    model = attention_av_model()
    path = tmp_path / "av.onnx"
    onnx.save(model, path)
    report = audit(qdqc, path)
    isa = host(report)
    group = next(g for g in report["groups"] if g["op"] == "MatMul")
    # exact: the float sum is exact only up to K = 2^24/(133·133) = 948; the search stops at 512.
    reason = group["reason"][isa]
    assert reason.startswith("K is symbolic: every K ≤ 512 is exact; at K = 1024: P2"), reason
    # real: every K whose accumulators stay in int32.
    assert group["real"]["verdict"][isa] == "exact", group["real"]
    assert group["real"]["proof"][isa]["detail"].startswith(f"every K ≤ {(2**31 - 1) // (133 * 133)}"), group["real"]
    rng = np.random.default_rng(5)
    for k in (1, 37, 512):
        feed = {"a": rng.integers(0, 256, [1, k, k], dtype=np.uint8), "b": rng.integers(0, 256, [1, k, 4], dtype=np.uint8)}
        off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
        on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feed)[0]
        assert np.array_equal(off, on), k
    # The qlinear-matmul rule reaches the same prover: under `real` it fires on the symbolic K.
    out, rep, _ = compile_with_report(qdqc, path, tmp_path, "--contract", "real", "--ort-isa", isa)
    d = next(d for d in rep["decisions"] if d["rule"] == "qlinear-matmul")
    assert d["fired"] and d["verdict"][isa] == "exact", d
    assert "QLinearMatMul" in {n.op_type for n in onnx.load(out).graph.node}


def fp32_weight_conv(sx, sw, sy) -> onnx.ModelProto:
    """NNCF's export: float32 weights quantized at run time, `W → Q → DQ → Conv`, which ORT's
    constant folding turns into int8 codes before fusing QLinearConv."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array(rng.normal(0, 0.3, [4, 2, 3, 3]).astype(np.float32), "wf"),
             nh.from_array(np.float32(sx), "sx"), nh.from_array(np.uint8(131), "zx"),
             nh.from_array(np.full([4], sw, np.float32), "sw"), nh.from_array(np.zeros([4], np.int8), "zw"),
             nh.from_array(np.float32(sy), "sy"), nh.from_array(np.uint8(120), "zy")]
    nodes = [h.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"], name="dq_x"),
             h.make_node("QuantizeLinear", ["wf", "sw", "zw"], ["qw"], name="q_w", axis=0),
             h.make_node("DequantizeLinear", ["qw", "sw", "zw"], ["dw"], name="dq_w", axis=0),
             h.make_node("Conv", ["dx", "dw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"], name="q_y")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.UINT8, [1, 2, 8, 8])], [h.make_tensor_value_info("y", T.UINT8, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


# On x86-avx2 ORT's u8×s8 kernels pair products in vpmaddubsw, which saturates at int16: with
# codes up to ±127 (weight scale 2^-7) two taps of 255·127 overflow, so the fused conv is refuted
# there; with codes within ±40 (scale 2^-5) no pair can, and it is exact on every profile.
# (scales of x, w, y; verdicts `exact`, `real` on a profile that does not saturate; on x86-avx2)
FP32_CONVS = [
    ((2.0**-5, 2.0**-7, 2.0**-2), ("exact", "exact"), ("refuted", "refuted")),
    ((2.0**-5, 2.0**-5, 2.0**-2), ("exact", "exact"), ("exact", "exact")),
    ((0.0371, 0.0123, 0.0917), ("unknown", "exact"), ("refuted", "refuted")),
]


def conv_counterexample_reproduces(model, cx):
    """Place the counterexample's 2×3×3 window around output (4, 4) of channel `channel`; every
    other input is the zero point, so only that window matters there."""
    taps = dict(cx["inputs"])
    x = np.full([1, 2, 8, 8], taps["x[*]"], np.uint8)
    for name, v in cx["inputs"]:
        if name.startswith("x[") and name != "x[*]":
            c, r = divmod(int(name[2:-1]), 9)
            x[0, c, 3 + r // 3, 3 + r % 3] = v
    ch = taps["channel"]
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": x})[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})[0]
    assert (off[0, ch, 4, 4], on[0, ch, 4, 4]) == (cx["unfused"], cx["fused"]), (off[0, ch, 4, 4], on[0, ch, 4, 4], cx)
    assert cx["unfused"] != cx["fused"]


def test_a_conv_on_fp32_weights_quantized_at_run_time_is_decided(qdqc, tmp_path):
    rng = np.random.default_rng(9)
    for scales, elsewhere, on_avx2 in FP32_CONVS:
        model = fp32_weight_conv(*scales)
        path = tmp_path / "conv.onnx"
        onnx.save(model, path)
        report = audit(qdqc, path)
        isa = host(report)
        want = on_avx2 if isa == "x86-avx2" else elsewhere
        group = next(g for g in report["groups"] if g["op"] == "Conv")
        assert (group["verdict"][isa], group["real"]["verdict"][isa]) == want, (scales, group)
        if want[0] == "exact":
            for _ in range(4):
                x = {"x": rng.integers(0, 256, [1, 2, 8, 8], dtype=np.uint8)}
                off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, x)[0]
                on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, x)[0]
                assert np.array_equal(off, on)
        elif want[0] == "refuted":
            conv_counterexample_reproduces(model, group["counterexample"][isa])
        else:
            near = group["near_boundary"]
            assert 0 < near["accumulators"] < near["reachable"] and near["channels"] == 4, near
