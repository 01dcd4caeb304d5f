"""`qdqc compile` with its proof-gated fusions, under the default `exact` contract on every ISA
profile, against ONNX Runtime: the compiled model's outputs are byte-identical to the original's
under ORT_DISABLE_ALL, and under ORT_ENABLE_ALL with the session profile qdqc prints. Its Q/DQ
boundaries differ from the original's only inside the groups it fused.
"""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from oracle_util import describe, full_check_error, model_path, random_inputs, run_qdqc, session_inputs, ort_session as session, compile_with_report

N_INPUTS = 16
PROFILE = {
    "session.disable_quant_qdq": "1",
    "session.disable_double_qdq_remover": "1",
    "optimization.disable_specified_optimizers": (
        "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;ConstantFolding;NchwcTransformer;NhwcTransformer;"
        "SkipLayerNormFusion;MatMulScaleFusion;MatmulTransposeFusion;"
        "LayerNormFusionL1;LayerNormFusionL2;SimplifiedLayerNormFusion;GeluFusionL1;GeluFusionL2;FastGeluFusion;"
        "DivMulFusion;ConvBNFusion;ConvMulFusion;ConvAddFusion;MatMul_BatchNormalization_Fusion"
    ),
}



@pytest.fixture(scope="module")
def compiled_exact(qdqc, tmp_path_factory):
    cache = {}

    def get(entry):
        if entry["name"] not in cache:
            out, report, r = compile_with_report(qdqc, model_path(entry), tmp_path_factory.mktemp(entry["name"]))
            printed = dict(kv.split("=", 1) for kv in r.stdout.split("any level with ", 1)[1].split())
            assert printed == PROFILE, f"the printed profile is not the one tested: {printed}"
            cache[entry["name"]] = (out, report)
        return cache[entry["name"]]

    return get


def assert_byte_identical_under_both_profiles(entry, out, report, n_inputs: int):
    """OUT's outputs equal the original's, byte for byte, under ORT_DISABLE_ALL and under
    ORT_ENABLE_ALL with the printed profile, on N_INPUTS seeded inputs (full_check first)."""
    src = model_path(entry)
    if entry["full_check"]:
        assert full_check_error(out) is None, full_check_error(out)
    original = session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    plain = session(out, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    profiled = session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE)
    for i, feed in enumerate(random_inputs(entry["name"], session_inputs(original), n_inputs)):
        want = original.run(None, feed)
        for label, sess in [("ORT_DISABLE_ALL", plain), ("ORT_ENABLE_ALL + profile", profiled)]:
            for k, (a, b) in enumerate(zip(want, sess.run(None, feed))):
                assert a.dtype == b.dtype and a.shape == b.shape, (label, k)
                assert a.tobytes() == b.tobytes(), (
                    f"{label}: output {k} differs on input {i} ({int(np.sum(a != b))} elements); "
                    f"re-signed: {[r['tensor'] for r in report.get('resigned', [])]}; "
                    f"fused: {[d['output'] for d in report['decisions'] if d['fired']]}"
                )


def test_outputs_byte_identical_under_both_profiles(compiled_exact, entry):
    out, report = compiled_exact(entry)
    assert_byte_identical_under_both_profiles(entry, out, report, N_INPUTS)


def test_only_fused_boundaries_disappear(qdqc, compiled_exact, entry):
    src = model_path(entry)
    out, report = compiled_exact(entry)
    r = run_qdqc(qdqc, "placement", src, out, "--json")
    assert r.returncode == 0, describe(r)
    placement = json.loads(r.stdout)
    fused_nodes = {n for d in report["decisions"] if d["fired"] for n in d["nodes"]}
    stray = [e for e in placement["a_only"] if e["consumer"] not in fused_nodes]
    assert not stray, f"boundaries removed outside fused groups: {stray}"
    assert not placement["b_only"], placement["b_only"]
    same = run_qdqc(qdqc, "placement", src, src, "--json")
    p = json.loads(same.stdout)
    assert not p["a_only"] and not p["b_only"], p
