"""`qdqc compile --ort-isa host` (this machine's profile alone, as `qdqc host` prints it) under
`exact`, against ONNX Runtime: with an x86 profile qdqc re-signs int8 activations to uint8
(`lower/src/resign.rs`) and fuses what that profile's kernels make exact (x86-avx512vnni: exact
u8×s8 accumulation; x86-avx2: only where no int16 pair saturates). The compiled model's outputs
must stay byte-identical to the original's under ORT_DISABLE_ALL and under ORT_ENABLE_ALL with the
printed session profile; every re-signed tensor is proven and its zero point is moved by exactly
128. On arm64-neon nothing is re-signed (ORT runs s8 kernels there).
"""
from __future__ import annotations

import onnx
import pytest

from oracle_util import compile_with_report, model_path
from test_compile_exact import assert_byte_identical_under_both_profiles

N_INPUTS = 8


@pytest.fixture(scope="module")
def compiled_x86(qdqc, tmp_path_factory):
    cache = {}

    def get(entry):
        if entry["name"] not in cache:
            out, report, _ = compile_with_report(qdqc, model_path(entry), tmp_path_factory.mktemp(entry["name"]), "--ort-isa", "host")
            cache[entry["name"]] = (out, report)
        return cache[entry["name"]]

    return get


def test_outputs_byte_identical(compiled_x86, entry):
    out, report = compiled_x86(entry)
    assert_byte_identical_under_both_profiles(entry, out, report, N_INPUTS)


def test_resigned_tensors_are_uint8_with_shifted_zero_points(compiled_x86, entry, host):
    """Where nothing is re-signed, the report says why: no int8 tensor to re-sign (no costs
    weighed: uint8 or float models, any non-x86 profile), or the cost model kept int8 (its costs
    in the report); an `s8s8` model on an x86 profile always has its costs weighed."""
    out, report = compiled_x86(entry)
    costs = report.get("resign_costs")
    if "s8s8" in entry["name"] and host.startswith("x86-"):
        assert costs is not None and costs["chosen"] in ("int8", "uint8"), (entry["name"], costs)
    if not report["resigned"]:
        assert costs is None or costs["chosen"] == "int8", (entry["name"], host, costs)
        return
    m = onnx.load(str(out), load_external_data=False)
    inits = {t.name: t for t in m.graph.initializer}
    for r in report["resigned"]:
        assert r["verdict"] == "exact" and r["zero_point_uint8"] == r["zero_point_int8"] + 128, r
    # Every QuantizeLinear left in the main graph that writes a re-signed tensor now writes uint8.
    written = {r["tensor"] for r in report["resigned"]}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] in written:
            zp = inits[n.input[2]]
            assert zp.data_type == onnx.TensorProto.UINT8, (n.name, zp.data_type)
    assert report["resign_costs"]["chosen"] == "uint8"


def test_s8s8_corpus_models_run_uint8_kernels(compiled_x86, corpus_manifest, host):
    """The point of re-signing: on the s8s8 models, every fused QLinearConv/QLinearMatMul/QGemm
    takes uint8 activations (ORT's fast x86 u8s8 path) unless the cost model kept int8. On a
    non-x86 host nothing is re-signed."""
    checked = 0
    for entry in corpus_manifest["models"]:
        if "s8s8" not in entry["name"]:
            continue
        out, report = compiled_x86(entry)
        if not host.startswith("x86-"):
            assert not report["resigned"] and "resign_costs" not in report, (entry["name"], host, report["resigned"])
            checked += 1
            continue
        if report.get("resign_costs", {}).get("chosen") != "uint8":
            continue
        m = onnx.load(str(out), load_external_data=False)
        types = {t.name: t.data_type for t in m.graph.initializer}
        for n in m.graph.node:
            if n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm"):
                assert types.get(n.input[2]) == onnx.TensorProto.UINT8, (entry["name"], n.name)
                checked += 1
    assert checked > 0, f"no fused integer kernel on uint8 activations in the s8s8 corpus on {host}"
