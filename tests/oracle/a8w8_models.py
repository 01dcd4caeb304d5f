"""The A8W8 seed's cases as ONNX models (DQ(x_q) · DQ(w_q) → MatMul/Gemm → Q): the activation codes
are the graph input, the weights constant, the output codes the graph output.

* `per_tensor` — one scale each side, 8×16×6 (int8, no zero points);
* `per_axis` — s_x[m] (DQ axis 0 on a rank-2 activation) × s_w[n] (DQ axis 1 on a [K, N] weight),
  8×16×6, int8, no zero points, as an exporter writes them;
* `per_axis_large` — the same at 256×1024×1024;
* `asymmetric` — per-row × per-column with zero points on both sides (uint8 activations with
  z_x[m], int8 weights with z_w[n], uint8 output with z_y), 8×16×6;
* `per_token_gemm` — a rank-3 [2, 4, 16] activation per token (axis 1) into Gemm-free MatMul, and
  `gemm_bias` — Gemm with transB and an int32 bias at its own scale, per-row × per-column;
* float output (no Q): `float_out` — per-row × per-column with zero points, `float_out_per_tensor`
  — one activation scale, 8×16×6;
* refused: `per_k` — s_x along K (DQ axis 1 of the [M, K] activation), `blocked_k` — weights
  blocked along K (block size 4), `weight_k` — s_w per K row (DQ axis 0 of the [K, N] weight).

`python a8w8_models.py DIR` writes them all; `build(name)` returns one.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPES = {"small": (8, 16, 6), "large": (256, 1024, 1024)}


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _scales(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    """n scales drawn log-uniformly from [lo, hi]: generic 24-bit mantissas."""
    return _f32(np.exp(rng.uniform(np.log(lo), np.log(hi), size=n)))


def _graph(name: str, x_type: int, x_shape: list[int], nodes: list, inits: list, y_type: int, y_shape: list[int]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x_q", x_type, x_shape)],
                          [helper.make_tensor_value_info("y_q", y_type, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_name="qdqc-a8w8-seed")
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def build(name: str) -> onnx.ModelProto:
    rng = np.random.default_rng(sum(map(ord, name)))
    m, k, n = SHAPES["large" if name == "per_axis_large" else "small"]
    init = numpy_helper.from_array
    if name in ("per_tensor", "per_axis", "per_axis_large", "per_k", "weight_k", "blocked_k"):
        w = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
        x_axis, w_axis, block = None, None, 0
        if name == "per_tensor":
            sx, sw = _scales(rng, 1, 0.01, 0.03).reshape(()), _scales(rng, 1, 0.002, 0.006).reshape(())
        elif name in ("per_axis", "per_axis_large"):
            sx, sw, x_axis, w_axis = _scales(rng, m, 0.01, 0.03), _scales(rng, n, 0.002, 0.006), 0, 1
        elif name == "per_k":
            sx, sw, x_axis = _scales(rng, k, 0.01, 0.03), _scales(rng, 1, 0.002, 0.006).reshape(()), 1
        elif name == "weight_k":
            sx, sw, w_axis = _scales(rng, 1, 0.01, 0.03).reshape(()), _scales(rng, k, 0.002, 0.006), 0
        else:
            sx, sw, w_axis, block = _scales(rng, 1, 0.01, 0.03).reshape(()), _scales(rng, (k // 4) * n, 0.002, 0.006).reshape(k // 4, n), 0, 4
        # About 40 codes per standard deviation of the product.
        sy = _f32(float(np.median(sx)) * float(np.median(sw)) * 73.0 * 73.0 * np.sqrt(k) / 40.0)
        dq_x = helper.make_node("DequantizeLinear", ["x_q", "s_x"], ["x"], name="dq_x", **({} if x_axis is None else {"axis": x_axis}))
        w_attrs = {} if w_axis is None else {"axis": w_axis}
        if block:
            w_attrs["block_size"] = block
        dq_w = helper.make_node("DequantizeLinear", ["w_q", "s_w"], ["w"], name="dq_w", **w_attrs)
        nodes = [dq_x, dq_w, helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
                 helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"], name="q_y")]
        inits = [init(sx, "s_x"), init(w, "w_q"), init(sw, "s_w"), init(sy, "s_y"), init(np.array(0, np.int8), "z_y")]
        return _graph(name, TensorProto.INT8, [m, k], nodes, inits, TensorProto.INT8, [m, n])
    if name == "asymmetric":
        sx, zx = _scales(rng, m, 0.01, 0.03), rng.integers(90, 170, size=m, dtype=np.uint8)
        sw, zw = _scales(rng, n, 0.002, 0.006), rng.integers(-20, 21, size=n, dtype=np.int8)
        w = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
        sy = _f32(0.02 * 0.004 * 73.0 * 73.0 * np.sqrt(k) / 40.0)
        nodes = [helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"], name="dq_x", axis=0),
                 helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], name="dq_w", axis=1),
                 helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
                 helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"], name="q_y")]
        inits = [init(sx, "s_x"), init(zx, "z_x"), init(w, "w_q"), init(sw, "s_w"), init(zw, "z_w"), init(sy, "s_y"),
                 init(np.array(131, np.uint8), "z_y")]
        return _graph(name, TensorProto.UINT8, [m, k], nodes, inits, TensorProto.UINT8, [m, n])
    if name == "per_token":
        b, t = 2, 4
        sx, zx = _scales(rng, t, 0.01, 0.03), rng.integers(-30, 30, size=t, dtype=np.int8)
        sw = _scales(rng, n, 0.002, 0.006)
        w = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
        sy = _f32(0.02 * 0.004 * 73.0 * 73.0 * np.sqrt(k) / 40.0)
        nodes = [helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"], name="dq_x", axis=1),
                 helper.make_node("DequantizeLinear", ["w_q", "s_w"], ["w"], name="dq_w", axis=1),
                 helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
                 helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"], name="q_y")]
        inits = [init(sx, "s_x"), init(zx, "z_x"), init(w, "w_q"), init(sw, "s_w"), init(sy, "s_y"), init(np.array(-3, np.int8), "z_y")]
        return _graph(name, TensorProto.INT8, [b, t, k], nodes, inits, TensorProto.INT8, [b, t, n])
    if name == "gemm_bias":
        sx, zx = _scales(rng, m, 0.01, 0.03), rng.integers(100, 150, size=m, dtype=np.uint8)
        sw, zw = _scales(rng, n, 0.002, 0.006), rng.integers(-10, 11, size=n, dtype=np.int8)
        w = rng.integers(-127, 128, size=(n, k), dtype=np.int8)  # transB
        bias = rng.integers(-3000, 3000, size=n, dtype=np.int32)
        sb = _scales(rng, n, 1e-5, 1e-4)
        sy = _f32(0.02 * 0.004 * 73.0 * 73.0 * np.sqrt(k) / 40.0)
        nodes = [helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"], name="dq_x", axis=0),
                 helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], name="dq_w", axis=0),
                 helper.make_node("DequantizeLinear", ["b_q", "s_b"], ["b"], name="dq_b", axis=0),
                 helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm", transB=1),
                 helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"], name="q_y")]
        inits = [init(sx, "s_x"), init(zx, "z_x"), init(w, "w_q"), init(sw, "s_w"), init(zw, "z_w"), init(bias, "b_q"), init(sb, "s_b"),
                 init(sy, "s_y"), init(np.array(120, np.uint8), "z_y")]
        return _graph(name, TensorProto.UINT8, [m, k], nodes, inits, TensorProto.UINT8, [m, n])
    if name in ("float_out", "float_out_per_tensor"):
        per_row = name == "float_out"
        sx = _scales(rng, m, 0.01, 0.03) if per_row else _scales(rng, 1, 0.01, 0.03).reshape(())
        zx = rng.integers(-20, 21, size=m, dtype=np.int8) if per_row else np.array(5, np.int8)
        sw, zw = _scales(rng, n, 0.002, 0.006), rng.integers(-10, 11, size=n, dtype=np.int8)
        w = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
        nodes = [helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"], name="dq_x", **({"axis": 0} if per_row else {})),
                 helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], name="dq_w", axis=1),
                 helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
        inits = [init(sx, "s_x"), init(zx, "z_x"), init(w, "w_q"), init(sw, "s_w"), init(zw, "z_w")]
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x_q", TensorProto.INT8, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
        fm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_name="qdqc-a8w8-seed")
        fm.ir_version = 10
        onnx.checker.check_model(fm, full_check=True)
        return fm
    raise ValueError(f"unknown model {name}")


FUSED = ["per_tensor", "per_axis", "per_axis_large", "asymmetric", "per_token", "gemm_bias"]
REFUSED = ["per_k", "weight_k", "blocked_k"]
FLOAT = ["float_out", "float_out_per_tensor"]

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in FUSED + REFUSED + FLOAT:
        onnx.save(build(name), out / f"{name}.onnx")
        print(out / f"{name}.onnx")
