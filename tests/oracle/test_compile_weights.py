"""Weight-only rewrites of `qdqc compile` against ONNX Runtime, on the models of
`weight_models.py`: embeddings `Gather(DQ(W), ids)` in every parameter layout (tied to an lm_head
or not), DQ → MatMul / Gather(DQ(W)) inside If branches, a Loop body and a Scan body with weight,
scale and zero point local or outer-scope, and `x + DQ(b)` tables for `--fold-weights`.

For every model, compiled under the default `exact` contract (and again with `--fold-weights`):
the compiled model passes `onnx.checker` with full check, loads under
ORT_DISABLE_ALL and under ORT_ENABLE_ALL with the printed session profile, and its outputs are
byte-identical to the original's under ORT_DISABLE_ALL for indices covering [-V, V). The report
says what the gather rewrite did: fired (with the float table gone, or still materialised for the
named lm_head) or refused with the expected reason; the model size before and after is the files'.
"""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T

import weight_models as wm
from oracle_util import describe, run_qdqc
from test_compile_exact import PROFILE, session

GATHER = "gather-before-dequantize"

# name: (builder, expected gather decision: None (no Gather), "fired", or a refusal reason fragment)
EMBEDDINGS = {
    "int8_tensor": (lambda: wm.embedding(T.INT8, "tensor", tied=False), "fired"),
    "uint8_rows": (lambda: wm.embedding(T.UINT8, "rows", tied=False), "fired"),
    "int8_rows_tied": (lambda: wm.embedding(T.INT8, "rows", tied=True), "fired"),
    "int8_cols": (lambda: wm.embedding(T.INT8, "cols", tied=False), "fired"),
    "int8_block": (lambda: wm.embedding(T.INT8, "block", tied=False), "fired"),
    # A tied 4-bit table: the lm_head keeps the float table, so an int8 copy of the codes saves nothing.
    "int4_block_tied": (lambda: wm.embedding(T.INT4, "block", tied=True), "sub-byte codes need an 8-bit copy"),
    "uint4_rows": (lambda: wm.embedding(T.UINT4, "rows", tied=False), "fired"),
    "int16_rows": (lambda: wm.embedding(T.INT16, "rows", tied=False), "fired"),
    "int8_rows_gather_axis1_tied": (lambda: wm.embedding(T.INT8, "rows", tied=True, gather_axis=1), "fired"),
    "int8_block_gather_axis1": (lambda: wm.embedding(T.INT8, "block", tied=False, gather_axis=1), "fired"),
    "int8_row_block": (lambda: wm.embedding(T.INT8, "row_block", tied=False), "blocked parameters along the gather axis"),
}
SUBGRAPHS = {
    "if_matmul_all_outer": (lambda: wm.if_matmul(()), None),
    "if_matmul_weight_local_scale_outer": (lambda: wm.if_matmul(("w_q",)), None),
    "if_matmul_zero_point_outer": (lambda: wm.if_matmul(("w_q", "w_scale")), None),
    "if_matmul_all_local": (lambda: wm.if_matmul(("w_q", "w_scale", "w_zp")), None),
    "loop_matmul_outer": (lambda: wm.loop_matmul(), None),
    "scan_matmul_weight_and_zero_point_outer": (lambda: wm.scan_matmul(), None),
    "if_embedding_outer": (lambda: wm.if_embedding(), "fired"),
}
FOLDS = {
    "dq_add": (lambda: wm.dq_add(), None),
    "dq_add_uint8_tensor": (lambda: wm.dq_add(T.UINT8, "tensor"), None),
    "dq_add_int4_block": (lambda: wm.dq_add(T.INT4, "block"), None),
    "dq_add_uint4_cols": (lambda: wm.dq_add(T.UINT4, "cols"), None),
    "dq_add_int16_cols": (lambda: wm.dq_add(T.INT16, "cols"), None),
}
MODELS = {**EMBEDDINGS, **SUBGRAPHS, **FOLDS, "two_lookups": (lambda: wm.two_lookups(), "fired")}


def feeds_of(built):
    model, feeds = built
    return model, feeds if isinstance(feeds, list) else [feeds]


@pytest.fixture(scope="module")
def compiled(qdqc, tmp_path_factory):
    cache = {}

    def get(name: str, *flags: str):
        key = (name, flags)
        if key not in cache:
            d = tmp_path_factory.mktemp(name)
            model, feeds = feeds_of(MODELS[name][0]())
            src, out, report = d / "in.onnx", d / "out.onnx", d / "report.json"
            onnx.save(model, src)
            r = run_qdqc(qdqc, "compile", src, "-o", out, "--report", report, *flags)
            assert r.returncode == 0, describe(r)
            cache[key] = (src, out, json.loads(report.read_text()), feeds, r.stdout)
        return cache[key]

    return get


@pytest.mark.parametrize("flags", [(), ("--fold-weights",)], ids=["default", "fold"])
@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_byte_identical_under_both_profiles(compiled, name, flags):
    src, out, report, feeds, _ = compiled(name, *flags)
    onnx.checker.check_model(onnx.load(src), full_check=True)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    original = session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    plain = session(out, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    profiled = session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE)
    for feed in feeds:
        want = original.run(None, feed)
        for label, sess in [("ORT_DISABLE_ALL", plain), ("ORT_ENABLE_ALL + profile", profiled)]:
            for k, (a, b) in enumerate(zip(want, sess.run(None, feed))):
                assert a.dtype == b.dtype and a.shape == b.shape, (label, k)
                assert a.tobytes() == b.tobytes(), f"{label}: output {k} differs in {int(np.sum(a != b))} elements"


@pytest.mark.parametrize("name", list(MODELS))
def test_gather_decision_and_float_table(compiled, name):
    _, out, report, _, stdout = compiled(name)
    expected = MODELS[name][1]
    gathers = [d for d in report["decisions"] if d["rule"] == GATHER]
    if expected is None:
        assert gathers == []
        return
    assert gathers, "the rule made no decision"
    if expected != "fired":
        assert not any(d["fired"] for d in gathers)
        assert all(expected in r for d in gathers for r in d["reason"].values()), gathers
        assert report["float_tables"] == []
        return
    assert all(d["fired"] and set(d["verdict"].values()) == {"exact"} for d in gathers), gathers
    tables = report["float_tables"]
    assert len(tables) == len(gathers)
    for t in tables:
        assert t["elements"] == wm.V * wm.H and t["float_bytes"] == 4 * wm.V * wm.H
        if "tied" in name:
            assert t["materialised"] and t["readers"] == ["lm_head_T"], t
        else:
            assert not t["materialised"] and t["readers"] == [], t
    graph = onnx.load(out).graph
    nodes = [n for g in [graph] + [a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH] for n in g.node]
    assert sum(n.op_type == "Gather" and n.input[0] in ("W", "W/qdqc_i8", "W/qdqc_u8") for n in nodes) == len(gathers)


@pytest.mark.parametrize("name", ["int8_rows_tied", "int4_block_tied", "if_matmul_all_outer"])
def test_model_size_is_the_files(compiled, name):
    src, out, report, _, stdout = compiled(name)
    assert report["model_size"] == {"before_bytes": src.stat().st_size, "after_bytes": out.stat().st_size}
    assert f"{src.stat().st_size} → {out.stat().st_size} bytes" in stdout


def folds(report):
    return [d for d in report["decisions"] if d["rule"] == "fold-weights"]


@pytest.mark.parametrize("name", list(FOLDS))
def test_fold_weights_replaces_a_dq_read_elementwise_by_an_initializer(compiled, name):
    """4-, 8- and 16-bit codes, per-tensor / per-axis / blocked: the folded values give the
    original's bytes (test_outputs_byte_identical_under_both_profiles[...-fold])."""
    _, out, report, _, _ = compiled(name, "--fold-weights")
    assert [d["fired"] for d in folds(report)] == [True]
    graph = onnx.load(out).graph
    assert [n.op_type for n in graph.node] == ["Add"]
    assert any(t.name == "b_f" and t.data_type == T.FLOAT for t in graph.initializer)
    # The codes and their parameters, now unread, are pruned: the float table replaces them.
    assert not {"b", "s", "z"} & {t.name for t in graph.initializer}
    assert report["model_size"]["after_bytes"] == os.path.getsize(out)


def test_shared_table_parameters_are_copied_once(compiled):
    _, out, report, _, _ = compiled("two_lookups")
    graph = onnx.load(out).graph
    names = [t.name for t in graph.initializer]
    # The per-row copies exist once; the original s and z, now unread, are pruned.
    assert sorted(names) == ["W", "s/qdqc_rows", "z/qdqc_rows"], names
    assert [t["materialised"] for t in report["float_tables"]] == [False, False]


@pytest.mark.parametrize("name, reason", [
    ("if_matmul_all_local", "read by MatMul"),
    ("int8_rows_tied", "read by Transpose"),
])
def test_fold_weights_refuses_tables_whose_readers_see_constants_differently(compiled, name, reason):
    """ORT pre-packs a constant MatMul weight and sums in another order: folding the DQ of
    if_matmul_all_local changed 27 of its 32 outputs before this refusal existed."""
    _, out, report, _, _ = compiled(name, "--fold-weights")
    refused = [d for d in folds(report) if not d["fired"]]
    assert refused and all(reason in r for d in refused for r in d["reason"].values()), folds(report)
    assert not any(d["fired"] for d in folds(report))


def test_seed_repro_fails_in_ort_and_compiles_to_a_loading_model(compiled):
    """The seed PR's repro: ORT 1.31.1 itself fails at session creation under ORT_ENABLE_ALL; the
    compiled model loads under the session profile (and gives the original's bits, above)."""
    src, out, _, feeds, _ = compiled("if_matmul_all_outer")
    with pytest.raises(Exception, match="Missing required"):
        session(src, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE).run(None, feeds[0])
