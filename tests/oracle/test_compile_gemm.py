"""The QLinearConv / QLinearMatMul / QGemm rules of `qdqc compile` against ONNX Runtime, on small
QDQ groups built here (the corpus's quantize_static scales are generic, so its groups are refused
under `exact`):

* power-of-two scales, `exact` contract: the group is fused, and the fused model's outputs are
  byte-identical to the original's under ORT_DISABLE_ALL;
* generic scales, `real` contract: the group is fused with synthesized scales (x_scale = y_scale
  = 1, w_scale = a per-channel multiplier), and ONNX Runtime's outputs equal the exact rational
  `sat(rne(Σ (x − zx)(w − zw)·sx·sw/sy + b·sb/sy) + zy)` of the original parameters, computed
  here with Python fractions. The K = 2 MatMul feeds every pair of activation codes.

Weights and scales (as f32 bit patterns) are those of tests/rules_gemm.rs.
"""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from oracle_util import describe, ort_session, run_qdqc

POWER_OF_TWO = (2.0**-7, [2.0**-6, 2.0**-7], 2.0**-3)
GENERIC_REAL = (0x3D006A38, [0x3BD134C4, 0x3C0F4E62], 0x3D96BCB9)
X_ZP = Y_ZP = 128


def f32(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def scales(kind: str) -> tuple[float, list[float], float]:
    if kind == "power_of_two":
        return POWER_OF_TWO
    x, w, y = GENERIC_REAL
    return f32(x), [f32(b) for b in w], f32(y)


def weights(n: int) -> np.ndarray:
    """|w| ≤ 40: no pair of u8·s8 products leaves int16 on x86-avx2."""
    return np.array([(i * 37 + 11) % 81 - 40 for i in range(n)], dtype=np.int8)


def full_range_weights(n: int) -> np.ndarray:
    """Codes over all of int8, with pairs whose u8·s8 products leave int16 on x86-avx2."""
    return np.array([127 if i % 4 < 2 else (i * 97 + 13) % 256 - 128 for i in range(n)], dtype=np.int8)


class Group:
    """DQ(x) → Conv / MatMul / Gemm (DQ'd constant weights, optional DQ'd bias) → Q, with a
    Python evaluation of its exact rational semantics."""

    def __init__(self, op: str, kind: str, x_shape: list[int], w_shape: list[int], bias: list[int] | None, alpha: float = 1.0,
                 full_range: bool = False, w_zp: int | None = None):
        """`full_range`: int8 weights whose pairs can saturate int16 on x86-avx2. `w_zp`: per-tensor
        uint8 weights (codes + 128) with that asymmetric zero point and one scalar scale, as
        quantize_static writes for `per_channel=False, WeightType.QUInt8`."""
        self.op, self.x_shape, self.w_shape, self.bias, self.alpha, self.w_zp = op, x_shape, w_shape, bias, alpha, w_zp
        self.sx, self.sw, self.sy = scales(kind)
        n = int(np.prod(w_shape))
        self.w = (full_range_weights(n) if full_range else weights(n)).reshape(w_shape)
        if w_zp is not None:
            self.sw = self.sw[:1]
            self.w = (self.w.astype(np.int64) + 128).astype(np.uint8)

    def bias_scales(self) -> list[float]:
        acc = [np.float32(self.alpha) * np.float32(self.sx) if self.op == "Gemm" else np.float32(self.sx) for _ in self.sw]
        return [float(a * np.float32(w)) for a, w in zip(acc, self.sw)]

    def model(self):
        c = len(self.sw)
        w_axis = 1 if self.op == "MatMul" else 0
        nodes = [
            helper.make_node("DequantizeLinear", ["x", "s_x", "z_x"], ["dx"]),
            helper.make_node("DequantizeLinear", ["w", "s_w", "z_w"], ["dw"], axis=w_axis),
        ]
        w_params = (
            [helper.make_tensor("s_w", TensorProto.FLOAT, [c], self.sw), helper.make_tensor("z_w", TensorProto.INT8, [c], [0] * c)]
            if self.w_zp is None
            else [helper.make_tensor("s_w", TensorProto.FLOAT, [], self.sw), helper.make_tensor("z_w", TensorProto.UINT8, [], [self.w_zp])]
        )
        w_type = TensorProto.INT8 if self.w_zp is None else TensorProto.UINT8
        inits = [
            helper.make_tensor("s_x", TensorProto.FLOAT, [], [self.sx]),
            helper.make_tensor("z_x", TensorProto.UINT8, [], [X_ZP]),
            helper.make_tensor("w", w_type, self.w_shape, self.w.flatten().tolist()),
            *w_params,
            helper.make_tensor("s_y", TensorProto.FLOAT, [], [self.sy]),
            helper.make_tensor("z_y", TensorProto.UINT8, [], [Y_ZP]),
        ]
        ins = ["dx", "dw"]
        if self.bias is not None:
            nodes.append(helper.make_node("DequantizeLinear", ["b", "s_b"], ["db"], axis=0))
            inits += [helper.make_tensor("b", TensorProto.INT32, [c], self.bias), helper.make_tensor("s_b", TensorProto.FLOAT, [c], self.bias_scales())]
            ins.append("db")
        attrs = {"Conv": {"pads": [1, 1, 1, 1]}, "MatMul": {}, "Gemm": {"transB": 1, "alpha": self.alpha}}[self.op]
        nodes.append(helper.make_node(self.op, ins, ["out"], **attrs))
        nodes.append(helper.make_node("QuantizeLinear", ["out", "s_y", "z_y"], ["y"]))
        graph = helper.make_graph(nodes, self.op.lower(), [helper.make_tensor_value_info("x", TensorProto.UINT8, self.x_shape)], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        return m

    def accumulators(self, x: np.ndarray) -> np.ndarray:
        """Σ (x − zx)(w − zw) per output, as int64, in the output's layout."""
        u = x.astype(np.int64) - X_ZP
        w = self.w.astype(np.int64) - (self.w_zp or 0)
        if self.op == "MatMul":
            return u @ w
        if self.op == "Gemm":
            return u @ w.T
        n, cin, h, wd = u.shape
        padded = np.zeros((n, cin, h + 2, wd + 2), dtype=np.int64)
        padded[:, :, 1:-1, 1:-1] = u
        out = np.zeros((n, w.shape[0], h, wd), dtype=np.int64)
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", padded[:, :, i : i + h, j : j + wd], w[:, :, i, j])
        return out

    def exact(self, x: np.ndarray) -> np.ndarray:
        """The `real` contract: the exact rational value, rounded half to even once."""
        acc = self.accumulators(x)
        axis = 1 if self.op == "Conv" else acc.ndim - 1
        sy = Fraction(self.sy)
        units = [Fraction(self.alpha) * Fraction(self.sx) * Fraction(w) for w in self.sw]
        bias = [Fraction(b) * Fraction(s) for b, s in zip(self.bias, self.bias_scales())] if self.bias is not None else [Fraction(0)] * len(self.sw)
        out = np.empty(acc.shape, dtype=np.uint8)
        for idx, a in np.ndenumerate(acc):
            c = idx[axis] if len(units) > 1 else 0
            q = round((a * units[c] + bias[c]) / sy)  # Fraction.__round__ ties to even
            out[idx] = min(max(q + Y_ZP, 0), 255)
        return out


def compile_group(qdqc, tmp_path, group: Group, contract: str):
    src, out, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save_model(group.model(), str(src))
    r = run_qdqc(qdqc, "compile", src, "-o", out, "--contract", contract, "--report", report)
    assert r.returncode == 0, describe(r)
    decisions = json.loads(report.read_text())["decisions"]
    assert len(decisions) == 1 and decisions[0]["fired"], decisions
    return src, out, decisions[0]


def activations(shape: list[int], n: int, seed: int) -> list[np.ndarray]:
    """All-zero, all-255, all-zero-point, then seeded random codes."""
    rng = np.random.default_rng(seed)
    fixed = [np.full(shape, v, dtype=np.uint8) for v in (0, 255, X_ZP)]
    return fixed + [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


POWER_OF_TWO_GROUPS = {
    "conv_bias": lambda: Group("Conv", "power_of_two", [1, 2, 4, 4], [2, 2, 3, 3], [-2000, 900]),
    "matmul": lambda: Group("MatMul", "power_of_two", [64, 16], [16, 2], None),
    "gemm_alpha": lambda: Group("Gemm", "power_of_two", [64, 4], [2, 4], None, alpha=0.5),
}

# Groups whose own scales ORT's multiplier gets wrong against the exact rational (tests/rules_gemm.rs).
GENERIC_GROUPS = {
    "conv_bias": lambda: Group("Conv", "generic", [1, 2, 4, 4], [2, 2, 3, 3], [-300, 450]),
    "matmul": lambda: Group("MatMul", "generic", [64, 2], [2, 2], None),
    "gemm_alpha": lambda: Group("Gemm", "generic", [64, 16], [2, 16], None, alpha=0.75),
    # One weight scale, synthesized per output channel: QGemm wants a zero point of the same shape.
    "gemm_per_tensor_asymmetric_u8": lambda: Group("Gemm", "generic", [64, 16], [2, 16], None, w_zp=131),
    "matmul_per_tensor_asymmetric_u8": lambda: Group("MatMul", "generic", [64, 2], [2, 2], None, w_zp=131),
}


@pytest.mark.parametrize("name", POWER_OF_TWO_GROUPS)
def test_power_of_two_fusion_is_byte_identical(qdqc, tmp_path, name):
    group = POWER_OF_TWO_GROUPS[name]()
    src, out, decision = compile_group(qdqc, tmp_path, group, "exact")
    assert set(decision["verdict"].values()) == {"exact"}, decision
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == [decision["fused_op"].split(".")[-1]]
    original, fused = ort_session(src), ort_session(out)
    for i, x in enumerate(activations(group.x_shape, 32, 7)):
        (want,), (got,) = original.run(None, {"x": x}), fused.run(None, {"x": x})
        assert want.tobytes() == got.tobytes(), f"input {i}: {int(np.sum(want != got))} elements differ"


@pytest.mark.parametrize("name", GENERIC_GROUPS)
def test_real_synthesis_equals_the_exact_rational(qdqc, tmp_path, name):
    group = GENERIC_GROUPS[name]()
    _, out, decision = compile_group(qdqc, tmp_path, group, "real")
    assert all("synthesized" in p["detail"] and "own scales: refuted" in p["detail"] for p in decision["proof"].values()), decision
    fused = ort_session(out)
    for i, x in enumerate(activations(group.x_shape, 16, 11)):
        (got,) = fused.run(None, {"x": x})
        want = group.exact(x)
        assert np.array_equal(got, want), f"input {i}: {int(np.sum(got != want))} elements differ from the exact rational"


# Int8 weights whose pairs saturate on x86-avx2: fused with uint8 weights (rewrites/src/rules/u8_weights.rs).
SATURATING_GROUPS = {
    "conv_bias_exact": lambda: Group("Conv", "power_of_two", [1, 2, 4, 4], [2, 2, 3, 3], [-2000, 900], full_range=True),
    "matmul_exact": lambda: Group("MatMul", "power_of_two", [64, 16], [16, 2], None, full_range=True),
    "gemm_real": lambda: Group("Gemm", "generic", [64, 16], [2, 16], None, alpha=0.75, full_range=True),
}


@pytest.mark.parametrize("name", SATURATING_GROUPS)
def test_saturating_int8_weights_run_as_uint8_weights(qdqc, tmp_path, name):
    group = SATURATING_GROUPS[name]()
    contract = name.rsplit("_", 1)[1]
    src, out, decision = compile_group(qdqc, tmp_path, group, contract)
    assert decision["rule"].endswith("-u8-weights") and set(decision["verdict"].values()) == {"exact"}, decision
    m = onnx.load(str(out))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    (node,) = m.graph.node
    w, zw = inits[node.input[3]], inits[node.input[5]]
    assert w.dtype == np.uint8 and np.array_equal(w.astype(np.int16) - 128, group.w.astype(np.int16)), node.input[3]
    assert zw.dtype == np.uint8 and set(zw.flatten().tolist()) == {128}, zw
    original, fused = ort_session(src), ort_session(out)
    for i, x in enumerate(activations(group.x_shape, 16, 13)):
        (got,) = fused.run(None, {"x": x})
        # `exact` (power-of-two scales): the original under ORT_DISABLE_ALL; `real`: the exact rational.
        want = original.run(None, {"x": x})[0] if contract == "exact" else group.exact(x)
        assert want.tobytes() == got.tobytes(), f"input {i}: {int(np.sum(want != got))} elements differ"


def test_real_synthesis_on_every_pair_of_activation_codes(qdqc, tmp_path):
    group = Group("MatMul", "generic", [65536, 2], [2, 2], None)
    _, out, _ = compile_group(qdqc, tmp_path, group, "real")
    codes = np.arange(256, dtype=np.uint8)
    x = np.stack(np.meshgrid(codes, codes, indexing="ij"), axis=-1).reshape(-1, 2)
    (got,) = ort_session(out).run(None, {"x": x})
    # Exact in integers: rne(acc·sx·sw/sy) with every scale an exact dyadic rational.
    acc = group.accumulators(x)
    want = np.empty_like(got)
    for c in range(2):
        ratio = Fraction(group.sx) * Fraction(group.sw[c]) / Fraction(group.sy)
        col = [min(max(round(int(a) * ratio) + Y_ZP, 0), 255) for a in acc[:, c]]
        want[:, c] = np.array(col, dtype=np.uint8)
    assert np.array_equal(got, want), f"{int(np.sum(got != want))} of {got.size} outputs differ from the exact rational"
    assert ort.__version__ == "1.31.1", ort.__version__
