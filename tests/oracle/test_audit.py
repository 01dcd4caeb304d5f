"""`qdqc audit` against ONNX Runtime: its verdicts for this machine's profile (`qdqc host`: the
kernels ORT runs here, e.g. x86-avx2's saturating u8×s8 GEMM on AVX2 without VNNI) must agree with
what ORT's optimizer actually does to the corpus models.

* The seed's Add2 fusion is refuted, and its counterexample, replayed as a one-Add QDQ model,
  makes ORT_ENABLE_ALL and ORT_DISABLE_ALL return exactly the predicted codes.
* Every "origin" group (its quantized output differs between ORT_ENABLE_ALL and ORT_DISABLE_ALL
  while all its integer inputs are identical) has verdict `refuted`; no `exact` verdict is ever
  contradicted by such a run. The audit reads the probe model (every quantized tensor made a graph
  output), not the original: a Q feeding a graph output changes what ORT fuses (QDQS8ToU8 leaves
  its pair int8, so int8 Add/Mul groups fuse there and not in the original), and the verdicts must
  be about the graph ORT ran.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import describe, model_path, random_inputs, run_qdqc, session_inputs, ort_session as session
from origins import with_outputs

N_RUNS = 4
NP_TYPES = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16}
ONNX_TYPES = {"u8": TensorProto.UINT8, "i8": TensorProto.INT8, "u16": TensorProto.UINT16, "i16": TensorProto.INT16}


def audit(qdqc, path) -> dict:
    r = run_qdqc(qdqc, "audit", path, "--json", "--ort-isa", "all")
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout)



def f32(bits: str) -> np.float32:
    return np.array([int(bits, 16)], dtype=np.uint32).view(np.float32)[0]


# ----------------------------------------------------------------------------------------------
# the seed


def one_add_model(params: dict, shape) -> onnx.ModelProto:
    """inputs a, b (codes) → DQ → Add → Q → output codes, with the group's own parameters."""
    (pa, pb), pc = params["inputs"], params["outputs"][0]
    inits = []
    for name, p in [("a", pa), ("b", pb), ("c", pc)]:
        inits.append(numpy_helper.from_array(np.array(f32(p["scale_bits"][0]), np.float32), f"s_{name}"))
        inits.append(numpy_helper.from_array(np.array(p["zero_point"][0], NP_TYPES[p["type"]]), f"z_{name}"))
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "s_a", "z_a"], ["da"], name="DQ_a"),
        helper.make_node("DequantizeLinear", ["b", "s_b", "z_b"], ["db"], name="DQ_b"),
        helper.make_node("Add", ["da", "db"], ["sum"], name="Add"),
        helper.make_node("QuantizeLinear", ["sum", "s_c", "z_c"], ["c"], name="Q_c"),
    ]
    ins = [helper.make_tensor_value_info(n, ONNX_TYPES[p["type"]], shape) for n, p in [("a", pa), ("b", pb)]]
    out = helper.make_tensor_value_info("c", ONNX_TYPES[pc["type"]], shape)
    g = helper.make_graph(nodes, "one_add", ins, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


def test_seed_add_is_refuted_and_the_counterexample_reproduces_in_ort(qdqc, host, corpus_manifest):
    entry = next(m for m in corpus_manifest["models"] if m["name"] == "seed_synthetic_shared_q")
    report = audit(qdqc, model_path(entry))
    group = next((g for g in report["groups"] if "q_add2" in g["outputs"]), None)
    assert group is not None, f"no audited group produces q_add2: {[g['outputs'] for g in report['groups']]}"
    assert group["rule"] == "2DQ" and group["op"] == "Add", group
    assert group["verdict"][host] == "refuted", group
    cx = group["counterexample"][host]
    a, b = (v for _, v in cx["inputs"])
    shape = [1, 4, 8, 8]  # the seed's layout, so ORT runs the same vector kernel
    model = one_add_model(group["params"], shape)
    feed = {
        "a": np.full(shape, a, NP_TYPES[group["params"]["inputs"][0]["type"]]),
        "b": np.full(shape, b, NP_TYPES[group["params"]["inputs"][1]["type"]]),
    }
    off = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
    on = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feed)[0]
    assert set(off.ravel().tolist()) == {cx["unfused"]}, (off.ravel()[:4], cx)
    assert set(on.ravel().tolist()) == {cx["fused"]}, (on.ravel()[:4], cx)
    assert cx["unfused"] != cx["fused"]


# ----------------------------------------------------------------------------------------------
# origin groups on the corpus


def quantized_tensors(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Main-graph Q outputs → the tensors feeding the group that produces them: the inputs of the
    DQs in front of the Q's producer, and its other (float) inputs as they are, so a group whose
    float input already differs (a drop behind a propagated Q) is no origin."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for q in model.graph.node:
        if q.op_type != "QuantizeLinear":
            continue
        op = producer.get(q.input[0])
        feeds = []
        for i in (op.input if op is not None else []):
            dq = producer.get(i)
            if dq is not None and dq.op_type == "DequantizeLinear":
                feeds.append(dq.input[0])
            elif op.op_type == "DequantizeLinear":
                feeds.append(op.input[0])
            elif i:
                feeds.append(i)
        out[q.output[0]] = feeds
    return out


def qdq_entries():
    from oracle_util import manifest

    return [m for m in manifest()["models"] if m["kind"] in ("qdq", "pow2", "seed", "external")]


@pytest.mark.parametrize("qdq_entry", qdq_entries(), ids=lambda m: m["name"])
def test_origin_groups_are_refuted_and_exact_verdicts_hold(qdqc, host, qdq_entry, tmp_path):
    entry = qdq_entry
    path = model_path(entry)
    model = onnx.load(str(path))
    groups = quantized_tensors(model)
    watched = set(groups) | {i for feeds in groups.values() for i in feeds}
    probe = with_outputs(model, watched)
    off_s = session(probe, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if entry["name"] == "seed_if_outer_scope":
        # The seed's own bug: ORT 1.31.1 cannot create this session with its QDQ fusions on.
        with pytest.raises(Exception, match="Missing required weight"):
            session(probe, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        return
    on_s = session(probe, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    names = [o.name for o in off_s.get_outputs()]
    probe_path = tmp_path / "probe.onnx"
    onnx.save(probe, str(probe_path))
    report = audit(qdqc, probe_path)
    verdict = {}
    for g in report["groups"]:
        for t in g["outputs"]:
            verdict[t] = g["verdict"].get(host, "not fused")
    origins, contradicted = set(), []
    for feed in random_inputs(entry["name"], session_inputs(off_s), N_RUNS):
        off = dict(zip(names, off_s.run(None, feed)))
        on = dict(zip(names, on_s.run(None, feed)))
        same = lambda t: t not in off or np.array_equal(off[t], on[t])  # initializers are not outputs
        for t, feeds in groups.items():
            if all(same(i) for i in feeds) and not same(t):
                origins.add(t)
    for t in sorted(origins):
        if verdict.get(t) == "exact":
            contradicted.append(t)
    missing = [t for t in sorted(origins) if verdict.get(t) != "refuted"]
    assert not contradicted, f"exact verdicts contradicted by ORT: {contradicted}"
    assert not missing, f"origin groups not refuted: {[(t, verdict.get(t, 'no group')) for t in missing]}"
