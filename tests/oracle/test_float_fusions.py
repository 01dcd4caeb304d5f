"""`qdqc compile --allow ort-float-fusions` (src/profile.rs): the printed session profile leaves ONNX
Runtime's float fusions on (ORT_ENABLE_ALL) and keeps QDQ handling and the rewrites of quantized tensors
off. The float deviation is not measured by qdqc; here, on every qdq/pow2 corpus model compiled under
`exact`: the compiled model under that lossy profile gives the bytes of the ORIGINAL under the same
profile (ORT_ENABLE_ALL with just ORT's QDQ handling disabled), on seeded inputs: qdqc's fusions add
no deviation of their own to what ORT's float fusions bring. A failure prints both deviations from the
original under ORT_DISABLE_ALL (the float fusions could apply differently to a compiled graph; on the
corpus they do not). The report marks the float ops lossy.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from oracle_util import compile_with_report, manifest, model_path, random_inputs, session_inputs, ort_session as session

N_INPUTS = 8
KINDS = ("qdq", "pow2")
LOSSY_PROFILE = {
    "session.disable_quant_qdq": "1",
    "session.disable_double_qdq_remover": "1",
    "optimization.disable_specified_optimizers": "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;NhwcTransformer",
}
ON, OFF = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype.kind != "f":
        return float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))) if a.size else 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


MODELS = [m for m in manifest()["models"] if m["kind"] in KINDS]


@pytest.mark.parametrize("qdq_model", MODELS, ids=[m["name"] for m in MODELS])
def test_lossy_profile_adds_no_deviation_of_qdqc(qdqc, qdq_model, tmp_path):
    entry = qdq_model
    src = model_path(entry)
    out, report, r = compile_with_report(qdqc, src, tmp_path, "--allow", "ort-float-fusions")
    printed = dict(kv.split("=", 1) for kv in r.stdout.split("any level with ", 1)[1].split())
    assert printed == LOSSY_PROFILE, f"the printed profile is not the one tested: {printed}"
    assert report["session_profile"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert "not measured by qdqc" in report["session_profile"]["lossy"], report["session_profile"]
    assert "float ops lossy" in r.stdout, r.stdout
    original_lossy, original_off = session(src, ON, LOSSY_PROFILE), session(src, OFF)
    compiled_lossy = session(out, ON, LOSSY_PROFILE)
    for i, feed in enumerate(random_inputs(entry["name"], session_inputs(original_off), N_INPUTS)):
        ref, want, got = original_off.run(None, feed), original_lossy.run(None, feed), compiled_lossy.run(None, feed)
        for k, (a, b, c) in enumerate(zip(ref, want, got)):
            assert b.dtype == c.dtype and b.shape == c.shape, (i, k)
            assert b.tobytes() == c.tobytes(), (
                f"output {k} on input {i}: the compiled model under the lossy profile differs from the original under "
                f"it ({int(np.sum(b != c))} elements); against the original under ORT_DISABLE_ALL the compiled model "
                f"deviates by {max_abs(a, c):.3e}, the original under the lossy profile by {max_abs(a, b):.3e}")


def test_without_allow_no_lossy_profile(qdqc, tmp_path):
    entry = next(m for m in manifest()["models"] if m["kind"] == "qdq")
    _, report, r = compile_with_report(qdqc, model_path(entry), tmp_path)
    assert "lossy" not in report["session_profile"] and report["session_profile"]["graph_optimization_level"] == "ORT_DISABLE_ALL"
    assert "float ops lossy" not in r.stdout
