"""A tiny version of bench/decoder.py's decode-step model (1 block, hidden 64, vocab 512), both variants:
it passes onnx's full_check, ONNX Runtime 1.31.1 runs it and, as the benchmark relies on, fuses every weight
MatMul into MatMulNBits except the tied lm_head (and dequantizes the whole tied table twice per step);
`qdqc compile` (default `exact` contract) gives outputs byte-identical to the original under ORT_DISABLE_ALL,
both under ORT_DISABLE_ALL and under ORT_ENABLE_ALL with the session profile qdqc prints.
"""
from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from oracle_util import REPO, describe, full_check_error, run_qdqc, ort_session as session

sys.path.insert(0, str(REPO / "bench"))
import decoder  # noqa: E402

N_INPUTS = 4
OFF, ON = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL



def differing(ref: ort.InferenceSession, other: ort.InferenceSession, feeds) -> dict:
    """{output name: elements whose bits differ} over FEEDS, for the outputs that differ."""
    names = [o.name for o in ref.get_outputs()]
    diff = {}
    for feed in feeds:
        for name, a, b in zip(names, ref.run(None, feed), other.run(None, feed)):
            assert a.dtype == b.dtype and a.shape == b.shape, f"{name}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
            n = int(np.sum(a.view(np.uint32) != b.view(np.uint32))) if a.dtype == np.float32 else int(np.sum(a != b))
            if n:
                diff[name] = diff.get(name, 0) + n
    return diff


@pytest.fixture(scope="module", params=decoder.VARIANTS)
def tiny(request, tmp_path_factory):
    cfg = replace(decoder.TINY, variant=request.param)
    path = decoder.write(cfg, tmp_path_factory.mktemp(cfg.name))  # full_check inside
    return cfg, path


def test_tiny_decoder_is_valid_and_runs(tiny):
    cfg, path = tiny
    assert full_check_error(path) is None, full_check_error(path)
    logits = session(path, OFF).run(["logits"], decoder.feeds(cfg, 1)[0])[0]
    assert logits.shape == (1, 1, cfg.vocab) and np.all(np.isfinite(logits))


def test_ort_default_fuses_every_weight_matmul_but_the_tied_lm_head(tiny):
    _, path = tiny
    f = decoder.ort_default_fusions(path)
    assert f["weight_matmuls"] == 7, f
    assert f["matmulnbits"] == 6 and not f["lm_head_fused"], decoder.describe_fusions(f)
    # EnsureUniqueDQForNodeUnit gives the Gather and the lm_head a DequantizeLinear each
    assert f["tied_table_dequantized"] == 2, decoder.describe_fusions(f)


def test_exact_compile_is_byte_identical_under_both_profiles(qdqc, tiny, tmp_path):
    cfg, path = tiny
    out = tmp_path / "out.onnx"
    r = run_qdqc(qdqc, "compile", path, "-o", out)
    assert r.returncode == 0, describe(r)
    assert full_check_error(out) is None, full_check_error(out)
    profile = dict(kv.split("=", 1) for kv in r.stdout.split("any level with ", 1)[1].split())
    feeds = decoder.feeds(cfg, N_INPUTS)
    original = session(path, OFF)
    assert differing(original, session(out, OFF), feeds) == {}
    assert differing(original, session(out, ON, profile), feeds) == {}, f"under ORT_ENABLE_ALL with {profile}"
