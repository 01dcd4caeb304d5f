"""ONNX's backend node tests of the quantized ops against `qdqc compile --target rust`.

The cases are the `onnx` package's own (onnx 1.23.2, `onnx.backend.test.case.node`: the generators
behind onnx/backend/test/data/node, which the wheel does not ship): every case whose model holds
one of QUANTIZED_OPS. For each case:

* the model's graph inputs other than the node's first one (scales, zero points, and the weights
  of QLinearMatMul / QLinearConv / MatMulInteger / ConvInteger) become initializers holding the
  case's data-set values. The Rust target specializes kernels and proofs on constant quantization
  parameters (an op reading them at run time is refused, naming the node); on the case's data set
  the op computes the same thing. The first input stays a graph input, fed from the data set;
* a supported case compiles (`--target rust`, default contract), its crate builds (the shared
  CARGO_TARGET_DIR of test_rust_real.py), its harness runs on the data set, and every output must
  equal the case's expected output bit for bit (dtype, shape, bytes);
* an unsupported case is listed in UNSUPPORTED with the reason: `qdqc compile` must exit 2 with one
  line naming the node (or, for a model qdqc cannot read at all, the problem), nothing written.
  A listed case that starts compiling fails the test, so the list stays true; a case in neither
  list fails too (no silent skip).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from oracle_util import QDQC_BIN, REPO
from test_rust_real import build

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear"}

# case → (what the one-line error must contain, why the backend does not run it).
UNSUPPORTED = {
    "test_convinteger_with_padding": ("ConvInteger", "int32 accumulator output: the harness and kernels write u8/i8/f32 only"),
    "test_convinteger_without_padding": ("ConvInteger", "int32 accumulator output"),
    "test_matmulinteger": ("MatMulInteger", "int32 accumulator output"),
    "test_dequantizelinear_e4m3fn": ("FLOAT8E4M3FN", "float8 codes: 8-bit integer codes only"),
    "test_dequantizelinear_e4m3fn_float16": ("FLOAT8E4M3FN", "float8 codes"),
    "test_dequantizelinear_e4m3fn_zero_point": ("FLOAT8E4M3FN", "float8 codes"),
    "test_dequantizelinear_e5m2": ("FLOAT8E5M2", "float8 codes"),
    "test_dequantizelinear_float4e2m1": ("FLOAT4E2M1", "float4 codes"),
    "test_dequantizelinear_int16": ("INT16", "16-bit codes"),
    "test_dequantizelinear_uint16": ("UINT16", "16-bit codes"),
    "test_dequantizelinear_int4": ("INT4", "4-bit codes"),
    "test_dequantizelinear_uint4": ("UINT4", "4-bit codes"),
    "test_dequantizelinear_int2": ("INT2", "2-bit codes"),
    "test_dequantizelinear_uint2": ("UINT2", "2-bit codes"),
    "test_dequantizelinear_blocked": ("block_size", "blocked quantization"),
    "test_quantizelinear_e4m3fn": ("FLOAT8E4M3FN", "float8 codes"),
    "test_quantizelinear_e5m2": ("FLOAT8E5M2", "float8 codes"),
    "test_quantizelinear_float4e2m1": ("FLOAT4E2M1", "float4 codes"),
    "test_quantizelinear_int16": ("INT16", "16-bit codes"),
    "test_quantizelinear_uint16": ("UINT16", "16-bit codes"),
    "test_quantizelinear_int4": ("INT4", "4-bit codes"),
    "test_quantizelinear_uint4": ("UINT4", "4-bit codes"),
    "test_quantizelinear_int2": ("INT2", "2-bit codes"),
    "test_quantizelinear_uint2": ("UINT2", "2-bit codes"),
    "test_quantizelinear_blocked_asymmetric": ("block_size", "blocked quantization"),
    "test_quantizelinear_blocked_symmetric": ("block_size", "blocked quantization"),
    "test_dynamicquantizelinear": ("DynamicQuantizeLinear", "run-time scale and zero point (three outputs)"),
    "test_dynamicquantizelinear_max_adjusted": ("DynamicQuantizeLinear", "run-time scale and zero point"),
    "test_dynamicquantizelinear_min_adjusted": ("DynamicQuantizeLinear", "run-time scale and zero point"),
    # The expansion: Constant nodes (tensor attributes), ReduceMin/Max, Round, Cast, a run-time scale.
    "test_dynamicquantizelinear_expanded": ("(Constant): attribute value", "the expansion's Constant nodes and run-time scale"),
    "test_dynamicquantizelinear_max_adjusted_expanded": ("(Constant): attribute value", "the expansion's ops"),
    "test_dynamicquantizelinear_min_adjusted_expanded": ("(Constant): attribute value", "the expansion's ops"),
}


def cases() -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = node.collect_testcases(None)
    return sorted((c for c in found if any(n.op_type in QUANTIZED_OPS for n in c.model.graph.node)), key=lambda c: c.name)


CASES = {c.name: c for c in cases()}


def bound(case) -> tuple[onnx.ModelProto, dict]:
    """The case's model with every graph input but the node's first one an initializer of the data
    set's value; the feed for the rest."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    ins, _ = case.data_sets[0]
    keep = {n.input[0] for n in model.graph.node if n.input}
    feed = {}
    graph_inputs = list(model.graph.input)
    del model.graph.input[:]
    for vi, value in zip(graph_inputs, ins):
        if vi.name in keep:
            model.graph.input.append(vi)
            feed[vi.name] = value if isinstance(value, np.ndarray) else numpy_helper.to_array(value)
        else:
            model.graph.initializer.append(tensor(value, vi.name))
    return model, feed


def tensor(value, name: str) -> onnx.TensorProto:
    """A data-set value (an array, or a TensorProto for the types numpy lacks) as an initializer."""
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def compile_case(name: str):
    case = CASES[name]
    # The case name is the crate's: a fixed folder per case (see test_rust_real.work).
    tmp = REPO / "target" / "rust-backend-tests" / name
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model, feed = bound(case)
    src = tmp / f"{name}.onnx"
    onnx.save(model, src)
    crate = tmp / "crate"
    r = subprocess.run([str(QDQC_BIN), "compile", str(src), "--target", "rust", "-o", str(crate)], capture_output=True, text=True, timeout=600)
    return case, tmp, crate, feed, r


def test_every_quantized_case_is_listed():
    assert CASES, "onnx ships no backend node case of the quantized ops: nothing checked"
    stale = sorted(set(UNSUPPORTED) - set(CASES))
    assert not stale, f"UNSUPPORTED lists cases onnx no longer has: {stale}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_node_case(name):
    case, tmp, crate, feed, r = compile_case(name)
    if name in UNSUPPORTED:
        needle, why = UNSUPPORTED[name]
        assert r.returncode == 2, f"{name} ({why}) is listed unsupported but compiles (exit {r.returncode}): update UNSUPPORTED\n{r.stderr}"
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, f"{name}: expected one line naming {needle!r}: {r.stderr}"
        assert not crate.exists(), f"{name}: something was written"
        print(f"{name}: unsupported ({why}): {r.stderr.strip()}")
        return
    assert r.returncode == 0, f"{name}: {r.stderr.strip()}"
    harness = build(crate)
    inputs, outputs = tmp / "in.npz", tmp / "out.npz"
    np.savez(inputs, **feed)
    h = subprocess.run([str(harness), str(inputs), str(outputs)], capture_output=True, text=True)
    assert h.returncode == 0, f"{name}: harness failed: {h.stderr}"
    got = dict(np.load(outputs))
    _, expected = case.data_sets[0]
    for vi, want in zip(case.model.graph.output, expected):
        want = np.asarray(want)
        assert vi.name in got, f"{name}: no output {vi.name}"
        g = got[vi.name]
        assert g.dtype == want.dtype and g.shape == want.shape, f"{name}: {vi.name}: {g.dtype}{list(g.shape)} vs expected {want.dtype}{list(want.shape)}"
        assert g.tobytes() == want.tobytes(), f"{name}: {vi.name}: {int(np.sum(g != want))} of {g.size} elements differ\ngot {g}\nwant {want}"
    print(f"{name}: {len(expected)} output(s) bit-identical ({sum(np.asarray(w).size for w in expected)} elements)")


def test_an_f16_dequantize_scale_is_refused(tmp_path):
    """f16 scales are read only where they are parameters of a requantization (QLinearMatMul,
    QLinearConv): a DequantizeLinear with an f16 scale writes f16, which the backend refuses."""
    from onnx import TensorProto, helper

    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq_f16")
    inits = [numpy_helper.from_array(np.array(0.5, dtype=np.float16), "s"), numpy_helper.from_array(np.array(3, dtype=np.uint8), "z")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])], inits)
    src = tmp_path / "dq_f16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), src)
    crate = tmp_path / "crate"
    r = subprocess.run([str(QDQC_BIN), "compile", str(src), "--target", "rust", "-o", str(crate)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "dq_f16" in r.stderr and "FLOAT16" in r.stderr, r.stderr
    assert not crate.exists()


def test_batched_weights_of_another_batch_are_refused(tmp_path):
    """QLinearMatMul with 3-D weights runs one GEMM per batch (codegen/src/rust/batched.rs): an input
    whose batch differs (ONNX would broadcast) is refused, naming the node."""
    from onnx import TensorProto, helper

    q = lambda name, v, t: numpy_helper.from_array(np.array(v, dtype=t), name)  # noqa: E731
    inits = [q("sa", 0.5, np.float32), q("za", 0, np.uint8), q("w", np.ones((2, 4, 3)), np.uint8), q("sw", 0.25, np.float32),
             q("zw", 0, np.uint8), q("sy", 1.0, np.float32), q("zy", 0, np.uint8)]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sw", "zw", "sy", "zy"], ["y"], name="mm_broadcast")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 2, 3])], inits)
    src = tmp_path / "mm_broadcast.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), src)
    crate = tmp_path / "crate"
    r = subprocess.run([str(QDQC_BIN), "compile", str(src), "--target", "rust", "-o", str(crate)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "mm_broadcast" in r.stderr and "no broadcasting" in r.stderr, r.stderr
    assert not crate.exists()
