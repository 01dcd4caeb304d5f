"""`qdqc compile --allow matmulnbits[=LEVEL]` (contract `lossy`) against ONNX Runtime 1.31.1.

* Where ORT's own optimizer fuses DQ→MatMul/Gemm into MatMulNBits (unshared main-graph
  initializers), qdqc's packed B, scales and zero points and the node's attributes equal the ones
  ORT writes (optimized_model_filepath) byte for byte, and the compiled model under the session
  profile gives outputs byte-identical to the original under ORT_ENABLE_ALL with
  `session.qdq_matmulnbits_accuracy_level` set to the same level: same packing, same kernel.
* The deviation qdqc reports on `--inputs` activations is consistent with what ORT's MatMulNBits
  actually deviates from the unfused graph (ORT_DISABLE_ALL) on them; acc1 stays within 1e-4
  relative.
* Shared weights (tied embedding + lm_head, two MatMuls) and If/Loop/Scan bodies reading W, its
  scale or zero point from an enclosing graph (the seed PR's repro and the mixed-scope cases)
  compile, load under ORT_ENABLE_ALL with the session profile, and stay within tolerance of the
  original; initializers nothing reads any more are gone, nothing is stored as a float copy.
* Nothing lossy happens without `--allow`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from oracle_util import describe, run_qdqc, ort_session as session

PROFILE = {
    "session.disable_quant_qdq": "1",
    "session.disable_double_qdq_remover": "1",
    "optimization.disable_specified_optimizers": "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;ConstantFolding;NchwcTransformer;NhwcTransformer",
}
TYPES = {"int2": T.INT2, "uint2": T.UINT2, "int4": T.INT4, "uint4": T.UINT4, "int8": T.INT8, "uint8": T.UINT8}
LEVELS = {"acc0": "0", "acc1": "1", "acc4": "4"}
SEED_REPRO = Path(__file__).resolve().parent / "seeds" / "ort_matmulnbits_if_repro.py"


def code_range(ty):
    bits = int(ty[-1])
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if ty.startswith("int") else (0, (1 << bits) - 1)



def reference(model, feed):
    return session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)


def profiled(path, feed):
    return session(path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE).run(None, feed)


def quantized_weight(rng, ty, k, n, layout, zp, prefix="w"):
    """Initializers of DQ(W): W [K, N], scale and zero point; the DQ's attributes."""
    lo, hi = code_range(ty)
    shape = {"tensor": (), "channel": (n,)}[layout] if layout in ("tensor", "channel") else (-(-k // int(layout[5:])), n)
    w = rng.integers(lo, hi + 1, (k, n))
    inits = [h.make_tensor(f"{prefix}_q", TYPES[ty], (k, n), w.flatten().tolist()),
             nh.from_array((rng.random(shape) * 0.05 + 0.01).astype(np.float32), f"{prefix}_scale")]
    if zp:
        inits.append(h.make_tensor(f"{prefix}_zp", TYPES[ty], shape, np.asarray(rng.integers(lo, hi + 1, shape)).flatten().tolist()))
    attrs = {"tensor": {}, "channel": {"axis": 1}}[layout] if layout in ("tensor", "channel") else {"axis": 0, "block_size": int(layout[5:])}
    return inits, [i.name for i in inits], attrs


def opset_for(ty):
    return (25, 11) if ty.endswith("2") else (21, 10)


def make_model(ty, k, n, layout, zp, target="MatMul", bias=False, rows=3, seed=0, **gemm):
    rng = np.random.default_rng(seed)
    inits, names, attrs = quantized_weight(rng, ty, k, n, layout, zp)
    nodes = [h.make_node("DequantizeLinear", names, ["w"], name="dq_w", **attrs)]
    ins = ["a", "w"]
    if bias:
        inits.append(nh.from_array(rng.standard_normal(n).astype(np.float32), "bias"))
        ins.append("bias")
    nodes.append(h.make_node(target, ins, ["y"], name="mm", **gemm))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", T.FLOAT, [rows, k])], [h.make_tensor_value_info("y", T.FLOAT, [rows, n])], inits)
    opset, ir = opset_for(ty)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=ir)


def compile_model(qdqc, tmp_path, model, *args, name="m"):
    src, out, report = tmp_path / f"{name}.onnx", tmp_path / f"{name}.out.onnx", tmp_path / f"{name}.report.json"
    onnx.save(model, src)
    r = run_qdqc(qdqc, "compile", src, "-o", out, "--report", report, *args)
    assert r.returncode == 0, describe(r)
    return src, out, json.loads(report.read_text())


def ort_fused(model, level, tmp_path):
    """ORT's own optimized model at ORT_ENABLE_ALL with the accuracy level."""
    path = tmp_path / f"ort_{level}.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", LEVELS[level])
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(path)


def nbits_inputs(model):
    """(attributes, input arrays) of the one MatMulNBits node of a model's main graph."""
    (node,) = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    inits = {t.name: nh.to_array(t) for t in model.graph.initializer}
    attrs = {a.name: a.i for a in node.attribute if a.name != "weight_prepacked"}
    return attrs, [inits.get(i) if i else None for i in node.input[1:]]


CASES = [(ty, layout, zp, k) for ty in TYPES for layout in ["block16", "block32", "channel", "tensor"] for zp in [True, False] for k in [40, 64]]


@pytest.mark.parametrize("ty,layout,zp,k", CASES, ids=[f"{t}-{l}-{'zp' if z else 'nozp'}-K{k}" for t, l, z, k in CASES])
def test_packing_and_outputs_equal_orts_own_fusion(qdqc, tmp_path, ty, layout, zp, k):
    for level, target, bias in [("acc1", "MatMul", False), ("acc4", "Gemm", True)]:
        model = make_model(ty, k, 24, layout, zp, target=target, bias=bias)
        _, out, report = compile_model(qdqc, tmp_path, model, "--allow", f"matmulnbits={level}", name=f"{level}")
        (decision,) = [d for d in report["decisions"] if d["fired"]]
        assert decision["lossy"]["contract"] == "lossy" and decision["lossy"]["accuracy_level"] == level
        ours = onnx.load(out)
        assert [n.op_type for n in ours.graph.node] == ["MatMulNBits"]
        theirs = ort_fused(model, level, tmp_path)
        assert [n.op_type for n in theirs.graph.node] == ["MatMulNBits"], "ORT 1.31.1 fuses this case"
        (our_attrs, our_inputs), (ort_attrs, ort_inputs) = nbits_inputs(ours), nbits_inputs(theirs)
        assert our_attrs == ort_attrs
        assert len(our_inputs) == len(ort_inputs)
        for i, (a, b) in enumerate(zip(our_inputs, ort_inputs)):
            assert (a is None) == (b is None), f"input {i + 1} present in one model only"
            if a is not None:
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"input {i + 1} ({level}) differs from ORT's packing"
        feed = {"a": np.random.default_rng(1).standard_normal((3, k)).astype(np.float32)}
        want = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, {"session.qdq_matmulnbits_accuracy_level": LEVELS[level]}).run(None, feed)[0]
        got = profiled(out, feed)[0]
        assert got.tobytes() == want.tobytes(), f"{level}: {int(np.sum(got != want))} elements differ from ORT's own MatMulNBits"


@pytest.mark.parametrize("level", ["acc0", "acc1", "acc4"])
@pytest.mark.parametrize("ty,layout", [("int4", "block32"), ("uint8", "channel"), ("int8", "block128"), ("uint4", "tensor")])
def test_reported_deviation_matches_orts(qdqc, tmp_path, level, ty, layout):
    k, n, rows = 256, 64, 16
    model = make_model(ty, k, n, layout, True, rows=rows, seed=3)
    acts = np.random.default_rng(7).uniform(-2, 2, (rows, k)).astype(np.float32)
    npz = tmp_path / "acts.npz"
    np.savez(npz, a=acts)
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", f"matmulnbits={level}", "--inputs", npz)
    (decision,) = [d for d in report["decisions"] if d["fired"]]
    random, supplied = decision["lossy"]["deviation"]
    assert random["inputs"].startswith("random") and random["rows"] == 8
    assert str(npz) in supplied["inputs"] and supplied["rows"] == rows
    feed = {"a": acts}
    exact = reference(model, feed)[0].astype(np.float64)
    fused = profiled(out, feed)[0].astype(np.float64)
    measured = np.abs(fused - exact).max()
    reported = supplied["max_abs"]
    scale = np.abs(exact).max()
    # Both stand against the unfused graph; ORT's own f32 MatMul rounding is the tiny epsilon.
    eps = 4e-6 * scale
    assert measured <= 2 * reported + eps and reported <= 2 * measured + eps, (measured, reported)
    if level != "acc4":
        assert supplied["max_rel"] <= 1e-4 and random["max_rel"] <= 1e-4
        assert measured / scale <= 1e-4
    else:
        assert supplied["max_rel"] > 1e-4, "acc4 quantizes activations: its deviation is visible"


def test_one_dimensional_activation(qdqc, tmp_path):
    """MatMul of a 1-D A gives [N]; so does MatMulNBits."""
    model = make_model("uint4", 64, 16, "block32", True)
    model.graph.input[0].CopyFrom(h.make_tensor_value_info("a", T.FLOAT, [64]))
    model.graph.output[0].CopyFrom(h.make_tensor_value_info("y", T.FLOAT, [16]))
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits")
    assert [d["fired"] for d in report["decisions"]] == [True]
    feed = {"a": np.random.default_rng(8).standard_normal(64).astype(np.float32)}
    want, got = reference(model, feed)[0], profiled(out, feed)[0]
    assert got.shape == want.shape == (16,) and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_nothing_lossy_without_allow(qdqc, tmp_path):
    model = make_model("int4", 64, 16, "block32", True)
    _, out, report = compile_model(qdqc, tmp_path, model)
    assert not any(d.get("lossy") for d in report["decisions"])
    assert "matmulnbits-matmul" not in report["rules"]
    assert [n.op_type for n in onnx.load(out).graph.node] == ["DequantizeLinear", "MatMul"]
    feed = {"a": np.ones((3, 64), np.float32)}
    assert profiled(out, feed)[0].tobytes() == reference(model, feed)[0].tobytes()


def test_refused_forms_say_why(qdqc, tmp_path):
    cases = {
        "transB": make_model("int4", 32, 32, "block16", True, target="Gemm", transB=1),
        "alpha": make_model("int4", 32, 32, "block16", True, target="Gemm", alpha=2.0),
    }
    for name, model in cases.items():
        _, out, report = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits", name=name)
        (decision,) = report["decisions"]
        assert not decision["fired"] and name in next(iter(decision["reason"].values())), decision
        assert "MatMulNBits" not in [n.op_type for n in onnx.load(out).graph.node]


def test_unknown_allow_is_a_usage_error(qdqc, tmp_path):
    model = make_model("int4", 32, 8, "block16", True)
    onnx.save(model, tmp_path / "m.onnx")
    for bad in ["frobnicate", "matmulnbits=acc9"]:
        r = run_qdqc(qdqc, "compile", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--allow", bad)
        assert r.returncode == 2 and not (tmp_path / "o.onnx").exists(), describe(r)


def test_tied_embedding_and_shared_lm_head(qdqc, tmp_path):
    """Gather(DQ(W)) embeds token ids; two MatMuls read the same DQ(W): both become MatMulNBits
    sharing one packed B, the Gather keeps DQ(W), W stays once, no float copy of W."""
    rng = np.random.default_rng(5)
    k, n = 64, 96
    inits, names, attrs = quantized_weight(rng, "int8", k, n, "block32", True)
    nodes = [
        h.make_node("DequantizeLinear", names, ["w"], name="dq_w", **attrs),
        h.make_node("Gather", ["w", "ids"], ["emb"], name="embed", axis=0),
        h.make_node("MatMul", ["h", "w"], ["logits"], name="lm_head"),
        h.make_node("MatMul", ["h2", "w"], ["logits2"], name="lm_head2"),
    ]
    ins = [h.make_tensor_value_info("ids", T.INT64, [2]), h.make_tensor_value_info("h", T.FLOAT, [2, k]), h.make_tensor_value_info("h2", T.FLOAT, [1, k])]
    outs = [h.make_tensor_value_info("emb", T.FLOAT, [2, n]), h.make_tensor_value_info("logits", T.FLOAT, [2, n]), h.make_tensor_value_info("logits2", T.FLOAT, [1, n])]
    model = h.make_model(h.make_graph(nodes, "tied", ins, outs, inits), opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits=acc4")
    assert sorted(d["nodes"][-1] for d in report["decisions"] if d["fired"] and d["lossy"]) == ["lm_head", "lm_head2"]
    compiled = onnx.load(out)
    assert sorted(n.op_type for n in compiled.graph.node) == ["DequantizeLinear", "Gather", "MatMulNBits", "MatMulNBits"]
    b_inputs = {n.input[1] for n in compiled.graph.node if n.op_type == "MatMulNBits"}
    assert len(b_inputs) == 1, "both consumers read one packed B"
    names = [t.name for t in compiled.graph.initializer]
    assert names.count("w_q") == 1 and len(names) == len(set(names))
    assert not any(t.data_type == T.FLOAT and tuple(t.dims) == (k, n) for t in compiled.graph.initializer), "no float copy of W"
    feed = {"ids": np.array([3, 60]), "h": rng.standard_normal((2, k)).astype(np.float32), "h2": rng.standard_normal((1, k)).astype(np.float32)}
    want, got = reference(model, feed), profiled(out, feed)
    assert got[0].tobytes() == want[0].tobytes(), "the embedding is untouched"
    for a, b in zip(got[1:], want[1:]):
        assert np.abs(a - b).max() <= 0.05 * np.abs(b).max()


def test_unread_initializers_are_pruned_but_not_inputs_or_unused_ones(qdqc, tmp_path):
    model = make_model("uint4", 64, 16, "block32", True)
    model.graph.initializer.append(nh.from_array(np.zeros(3, np.float32), "unused_by_author"))
    _, out, _ = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits")
    names = {t.name for t in onnx.load(out).graph.initializer}
    assert "unused_by_author" in names and not names & {"w_q", "w_scale", "w_zp"}


def if_model(where, loop="If"):
    """DQ→MatMul in an If (both branches), Loop or Scan body; `where` maps each of w_q, w_scale,
    w_zp to 'outer' (an initializer of the main graph) or 'local' (of the body)."""
    rng = np.random.default_rng(11)
    k, n = 64, 32
    inits, names, attrs = quantized_weight(rng, "uint8", k, n, "block32", True)
    zp = nh.to_array(inits[2])
    inits[2] = nh.from_array(np.where(zp == 0, 128, zp).astype(np.uint8), "w_zp")  # nonzero zero point
    outer = [t for t in inits if where[t.name] == "outer"]
    local = [t for t in inits if where[t.name] == "local"]

    def body(name, inputs, outputs):
        # A is a body value nothing declares a shape for, as in exported merged decoders.
        relu = h.make_node("Relu", ["x"], [f"xr_{name}"])
        dq = h.make_node("DequantizeLinear", names, [f"wf_{name}"], **attrs)
        mm = h.make_node("MatMul", [f"xr_{name}", f"wf_{name}"], [f"y_{name}"])
        nodes = [relu, dq, mm]
        if loop == "Loop":
            nodes.append(h.make_node("Identity", ["cond_in"], ["cond_out"]))
        return h.make_graph(nodes, name, inputs, outputs, [onnx.TensorProto.FromString(t.SerializeToString()) for t in local])

    x = h.make_tensor_value_info("x", T.FLOAT, [1, k])
    if loop == "Scan":
        # The body multiplies each scanned row [1, K] of xs [T, 1, K]; its input is the body's own.
        b = body("scan", [h.make_tensor_value_info("x", T.FLOAT, [1, k])], [h.make_tensor_value_info("y_scan", T.FLOAT, [1, n])])
        node = h.make_node("Scan", ["xs"], ["y"], body=b, num_scan_inputs=1)
        g = h.make_graph([node], "g", [h.make_tensor_value_info("xs", T.FLOAT, [3, 1, k])], [h.make_tensor_value_info("y", T.FLOAT, None)], outer)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    if loop == "If":
        node = h.make_node("If", ["cond"], ["y"], then_branch=body("then", [], [h.make_tensor_value_info("y_then", T.FLOAT, [1, n])]),
                           else_branch=body("else", [], [h.make_tensor_value_info("y_else", T.FLOAT, [1, n])]))
        ins = [h.make_tensor_value_info("cond", T.BOOL, []), x]
    else:
        b = body("loop", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, [])],
                 [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y_loop", T.FLOAT, [1, n])])
        node = h.make_node("Loop", ["trip", ""], ["y"], body=b)
        ins = [h.make_tensor_value_info("trip", T.INT64, []), x]
    g = h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", T.FLOAT, None)], outer)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


SCOPES = {
    "all-outer": {"w_q": "outer", "w_scale": "outer", "w_zp": "outer"},
    "weight-local-scale-outer": {"w_q": "local", "w_scale": "outer", "w_zp": "outer"},
    "weight-scale-local-zp-outer": {"w_q": "local", "w_scale": "local", "w_zp": "outer"},
    "all-local": {"w_q": "local", "w_scale": "local", "w_zp": "local"},
}


@pytest.mark.parametrize("loop", ["If", "Loop", "Scan"])
@pytest.mark.parametrize("scopes", list(SCOPES), ids=list(SCOPES))
def test_bodies_with_outer_scope_parameters(qdqc, tmp_path, scopes, loop):
    model = if_model(SCOPES[scopes], loop)
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits")
    fired = [d for d in report["decisions"] if d["fired"]]
    assert len(fired) == (2 if loop == "If" else 1), report["decisions"]
    compiled = onnx.load(out)
    bodies = [a.g for a in compiled.graph.node[0].attribute if a.g.node]
    assert all(any(n.op_type == "MatMulNBits" for n in b.node) for b in bodies)
    assert all(n.op_type != "DequantizeLinear" for b in bodies for n in b.node)
    assert not {t.name for t in compiled.graph.initializer} & {"w_q", "w_scale", "w_zp"}, "outer initializers no body reads are pruned"
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    feeds = {
        "If": [{"cond": np.array(c), "x": x} for c in (True, False)],
        "Loop": [{"trip": np.array(2), "x": x}],
        "Scan": [{"xs": np.random.default_rng(3).standard_normal((3, 1, 64)).astype(np.float32)}],
    }[loop]
    for feed in feeds:
        want, got = reference(model, feed)[0], profiled(out, feed)[0]
        assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
        # ORT's default session (its own QDQ optimizer on) loads it too.
        session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feed)


def test_seed_repro_compiles_and_runs(qdqc, tmp_path):
    src = tmp_path / "if_outer_scope.onnx"
    r = subprocess.run([sys.executable, str(SEED_REPRO), str(src)], capture_output=True, text=True, timeout=120)
    assert src.is_file(), r.stderr
    _, out, report = compile_model(qdqc, tmp_path, onnx.load(src), "--allow", "matmulnbits=acc4")
    assert sum(d["fired"] for d in report["decisions"]) == 2
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    for c in (True, False):
        feed = {"cond": np.array(c), "x": x}
        want = reference(onnx.load(src), feed)[0]
        for got in (profiled(out, feed)[0], session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feed)[0]):
            assert np.abs(got - want).max() <= 0.05 * max(np.abs(want).max(), 1e-3)


@pytest.mark.parametrize("level", ["acc1", "acc4"])
def test_f16_dequantize_cast_to_f32(qdqc, tmp_path, level):
    """DQ(W) with an f16 scale → Cast(to f32) → MatMul: fused in f32 with the f16 scales widened;
    the f16 rounding of each weight the fused node skips is in the reported deviation."""
    rng = np.random.default_rng(9)
    k, n, rows = 128, 48, 4
    w = rng.integers(-8, 8, (k, n))
    scale = (rng.random((k // 32, n)) * 0.05 + 0.01).astype(np.float16)
    inits = [h.make_tensor("w_q", T.INT4, (k, n), w.flatten().tolist()), nh.from_array(scale, "w_scale")]
    nodes = [h.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w16"], axis=0, block_size=32),
             h.make_node("Cast", ["w16"], ["w32"], to=T.FLOAT), h.make_node("MatMul", ["a", "w32"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", T.FLOAT, [rows, k])], [h.make_tensor_value_info("y", T.FLOAT, [rows, n])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    acts = rng.uniform(-1, 1, (rows, k)).astype(np.float32)
    np.savez(tmp_path / "acts.npz", a=acts)
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", f"matmulnbits={level}", "--inputs", tmp_path / "acts.npz")
    (decision,) = [d for d in report["decisions"] if d["fired"]]
    assert decision["rule"] == "matmulnbits-matmul-cast"
    assert [n.op_type for n in onnx.load(out).graph.node] == ["MatMulNBits"]
    want = reference(model, {"a": acts})[0].astype(np.float64)
    got = profiled(out, {"a": acts})[0].astype(np.float64)
    measured, reported, scale_ = np.abs(got - want).max(), decision["lossy"]["deviation"][1]["max_abs"], np.abs(want).max()
    eps = 4e-6 * scale_
    assert measured <= 2 * reported + eps and reported <= 2 * measured + eps, (measured, reported)


def test_body_reads_the_packing_of_its_enclosing_graph(qdqc, tmp_path):
    """The main graph and an If branch both multiply by DQ(W): W is packed once, in the main
    graph; the branch reads that packing from the outer scope (no shadowing copy)."""
    rng = np.random.default_rng(13)
    k, n = 64, 16
    inits, names, attrs = quantized_weight(rng, "int4", k, n, "block32", True)

    def branch(name, nodes):
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(f"y_{name}", T.FLOAT, [1, n])])

    then_nodes = [h.make_node("DequantizeLinear", names, ["wf_then"], **attrs), h.make_node("MatMul", ["x", "wf_then"], ["y_then"])]
    else_nodes = [h.make_node("Identity", ["y_main"], ["y_else"])]
    nodes = [h.make_node("DequantizeLinear", names, ["wf"], **attrs), h.make_node("MatMul", ["x", "wf"], ["y_main"]),
             h.make_node("If", ["cond"], ["y"], then_branch=branch("then", then_nodes), else_branch=branch("else", else_nodes))]
    ins = [h.make_tensor_value_info("cond", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [1, k])]
    model = h.make_model(h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("y", T.FLOAT, [1, n])], inits),
                         opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    _, out, report = compile_model(qdqc, tmp_path, model, "--allow", "matmulnbits")
    assert sum(d["fired"] for d in report["decisions"]) == 2
    compiled = onnx.load(out)
    then_branch = next(a.g for a in compiled.graph.node[-1].attribute if a.name == "then_branch")
    assert [n.op_type for n in then_branch.node] == ["MatMulNBits"] and not then_branch.initializer
    main_nbits = next(n for n in compiled.graph.node if n.op_type == "MatMulNBits")
    assert list(then_branch.node[0].input) == list(main_nbits.input), "the branch reads the main graph's packing"
    x = rng.standard_normal((1, k)).astype(np.float32)
    for c in (True, False):
        feed = {"cond": np.array(c), "x": x}
        want, got = reference(model, feed)[0], profiled(out, feed)[0]
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
