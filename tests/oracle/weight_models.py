"""Small weight-only QDQ models for `test_compile_weights.py` (and, written by `python
weight_models.py DIR`, the shipped cases tests/cases/tied_embedding_*.onnx):

* embeddings: `Gather(DQ(W), ids)` over every layout (per-tensor, per-row along the gather axis,
  per-axis and blocked along the other axis, blocked along the gather axis, Gather on axis 1),
  int8/uint8/int4/uint4/int16 codes, some tied to an lm_head `MatMul(emb, Transpose(DQ(W)))`;
* subgraphs: `DQ → MatMul` in If branches, a Loop body and a Scan body, each of weight, scale and zero point
  either local to the body or an initializer of the enclosing graph (the seed PR's mixed-scope
  cases), and a Gather(DQ(W)) in an If branch with outer-scope W, s, zp;
* `--fold-weights`: `x + DQ(b)` over 4/8/16-bit codes and every layout; two lookups sharing a table.

Everything is seeded; each builder returns (model, feeds) with indices covering [-V, V).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

V, H = 16, 64
OPSET = 21


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _codes(rng, dtype: int, shape) -> onnx.TensorProto:
    lo, hi = {T.INT8: (-128, 127), T.UINT8: (0, 255), T.INT4: (-8, 7), T.UINT4: (0, 15), T.INT16: (-3000, 3000)}[dtype]
    return rng.integers(lo, hi + 1, shape)


def _tensor(name: str, dtype: int, arr: np.ndarray) -> onnx.TensorProto:
    if dtype in (T.INT4, T.UINT4):
        return h.make_tensor(name, dtype, list(arr.shape), arr.flatten().tolist())
    np_type = {T.INT8: np.int8, T.UINT8: np.uint8, T.INT16: np.int16, T.FLOAT: np.float32}[dtype]
    return nh.from_array(arr.astype(np_type), name)


def _params(rng, dtype: int, shape, prefix: str = "") -> list[onnx.TensorProto]:
    scale = (rng.random(shape) * 0.05 + 0.001).astype(np.float32)
    zp = _codes(rng, dtype, shape) // 4
    return [_tensor(prefix + "s", T.FLOAT, scale), _tensor(prefix + "z", dtype, zp)]


def _ids() -> np.ndarray:
    return np.arange(-V, V, dtype=np.int64).reshape(2, V)


def embedding(dtype: int, layout: str, tied: bool, gather_axis: int = 0, seed: int = 1):
    """`Gather(DQ(W), ids, axis)`; `tied` adds `logits = MatMul(emb, Transpose(DQ(W)))`.
    layout: tensor | rows (per-axis along the gather axis) | cols (per-axis on the other axis) |
    block (blocked on the other axis, block 32) | row_block (blocked along the gather axis)."""
    rng = _rng(seed)
    shape = [V, H] if gather_axis == 0 else [H, V]
    other = 1 - gather_axis
    w = _codes(rng, dtype, shape)
    attrs = {}
    if layout == "tensor":
        pshape = []
    elif layout == "rows":
        pshape, attrs = [V], {"axis": gather_axis}
    elif layout == "cols":
        pshape, attrs = [H], {"axis": other}
    elif layout == "block":
        pshape = list(shape)
        pshape[other] //= 32
        attrs = {"axis": other, "block_size": 32}
    elif layout == "row_block":
        pshape = list(shape)
        pshape[gather_axis] //= 4
        attrs = {"axis": gather_axis, "block_size": 4}
    else:
        raise ValueError(layout)
    inits = [_tensor("W", dtype, w)] + _params(rng, dtype, pshape)
    nodes = [
        h.make_node("DequantizeLinear", ["W", "s", "z"], ["W_f"], name="DQ_W", **attrs),
        h.make_node("Gather", ["W_f", "ids"], ["emb"], name="embed", axis=gather_axis),
    ]
    emb_shape = [2, V, H] if gather_axis == 0 else [H, 2, V]
    outputs = [h.make_tensor_value_info("emb", T.FLOAT, emb_shape)]
    if tied:
        perm = [1, 0] if gather_axis == 0 else [0, 1]
        emb = "emb"
        if gather_axis == 1:  # emb is [H, 2, V]: bring H last
            nodes.append(h.make_node("Transpose", ["emb"], ["emb_t"], name="emb_T", perm=[1, 2, 0]))
            emb = "emb_t"
        nodes += [
            h.make_node("Transpose", ["W_f"], ["W_t"], name="lm_head_T", perm=perm),
            h.make_node("MatMul", [emb, "W_t"], ["logits"], name="lm_head"),
        ]
        outputs.append(h.make_tensor_value_info("logits", T.FLOAT, [2, V, V]))
    g = h.make_graph(nodes, "embedding", [h.make_tensor_value_info("ids", T.INT64, [2, V])], outputs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10), {"ids": _ids()}


def _matmul_body(name: str, local: dict[str, onnx.TensorProto], out: str) -> onnx.GraphProto:
    nodes = [
        h.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], [f"w_{name}"], name=f"DQ_{name}"),
        h.make_node("MatMul", ["x", f"w_{name}"], [out], name=f"MatMul_{name}"),
    ]
    return h.make_graph(nodes, name, [], [h.make_tensor_value_info(out, T.FLOAT, [1, 32])], list(local.values()))


def _matmul_params(seed: int) -> dict[str, onnx.TensorProto]:
    rng = _rng(seed)
    return {
        "w_q": nh.from_array(rng.integers(0, 256, (64, 32)).astype(np.uint8), "w_q"),
        "w_scale": nh.from_array(np.array(0.02, np.float32), "w_scale"),
        "w_zp": nh.from_array(np.array(128, np.uint8), "w_zp"),
    }


def if_matmul(local: tuple[str, ...], seed: int = 2):
    """DQ → MatMul in both If branches; the names in `local` are initializers of each branch, the
    others of the main graph (the seed PR's mixed-scope cases)."""
    params = _matmul_params(seed)
    inner = {k: v for k, v in params.items() if k in local}
    outer = [v for k, v in params.items() if k not in local]
    node = h.make_node("If", ["cond"], ["y"], name="If", then_branch=_matmul_body("then", inner, "y_then"), else_branch=_matmul_body("else", inner, "y_else"))
    g = h.make_graph([node], "if_matmul", [h.make_tensor_value_info("cond", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 32])], outer)
    x = _rng(seed + 1).standard_normal((1, 64)).astype(np.float32)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10)
    return model, [{"cond": np.array(c), "x": x} for c in (True, False)]


def loop_matmul(seed: int = 3):
    """DQ → MatMul in a Loop body (3 trips, x ← x·DQ(W)), W, scale and zero point all outer."""
    rng = _rng(seed)
    params = {
        "w_q": nh.from_array(rng.integers(0, 256, (8, 8)).astype(np.uint8), "w_q"),
        "w_scale": nh.from_array(np.array(0.01, np.float32), "w_scale"),
        "w_zp": nh.from_array(np.array(131, np.uint8), "w_zp"),
    }
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_f"], name="DQ_loop"),
            h.make_node("MatMul", ["x_in", "w_f"], ["x_out"], name="MatMul_loop"),
        ],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []), h.make_tensor_value_info("x_in", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [1, 8])],
    )
    trips = nh.from_array(np.array(3, np.int64), "trips")
    loop = h.make_node("Loop", ["trips", "", "x"], ["y"], name="Loop", body=body)
    g = h.make_graph([loop], "loop_matmul", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])], [h.make_tensor_value_info("y", T.FLOAT, [1, 8])], [trips] + list(params.values()))
    x = rng.standard_normal((1, 8)).astype(np.float32)
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10), [{"x": x}]


def scan_matmul(seed: int = 7):
    """DQ → MatMul in a Scan body over 3 rows of x, W and zero point outer, the scale local."""
    rng = _rng(seed)
    outer = [
        nh.from_array(rng.integers(-128, 128, (8, 8)).astype(np.int8), "w_q"),
        nh.from_array(np.array(-3, np.int8), "w_zp"),
    ]
    body = h.make_graph(
        [
            h.make_node("Identity", ["acc_in"], ["acc_out"]),
            h.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_f"], name="DQ_scan"),
            h.make_node("MatMul", ["row", "w_f"], ["y_row"], name="MatMul_scan"),
        ],
        "body",
        [h.make_tensor_value_info("acc_in", T.FLOAT, [1]), h.make_tensor_value_info("row", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("acc_out", T.FLOAT, [1]), h.make_tensor_value_info("y_row", T.FLOAT, [1, 8])],
        [nh.from_array(np.array(0.0078125, np.float32), "w_scale")],
    )
    scan = h.make_node("Scan", ["acc", "x"], ["acc_final", "y"], name="Scan", body=body, num_scan_inputs=1)
    g = h.make_graph([scan], "scan_matmul", [h.make_tensor_value_info("acc", T.FLOAT, [1]), h.make_tensor_value_info("x", T.FLOAT, [3, 1, 8])],
                     [h.make_tensor_value_info("acc_final", T.FLOAT, [1]), h.make_tensor_value_info("y", T.FLOAT, [3, 1, 8])], outer)
    feeds = {"acc": np.zeros(1, np.float32), "x": rng.standard_normal((3, 1, 8)).astype(np.float32)}
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10), [feeds]


def if_embedding(seed: int = 4):
    """Gather(DQ(W), ids) with per-row int8 parameters in both If branches; W, s, zp outer."""
    rng = _rng(seed)
    inits = [_tensor("W", T.INT8, _codes(rng, T.INT8, [V, H]))] + _params(rng, T.INT8, [V])

    def branch(name):
        nodes = [
            h.make_node("DequantizeLinear", ["W", "s", "z"], [f"W_{name}"], name=f"DQ_{name}", axis=0),
            h.make_node("Gather", [f"W_{name}", "ids"], [f"emb_{name}"], name=f"embed_{name}", axis=0),
        ]
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(f"emb_{name}", T.FLOAT, [2, V, H])])

    node = h.make_node("If", ["cond"], ["emb"], name="If", then_branch=branch("then"), else_branch=branch("else"))
    g = h.make_graph([node], "if_embedding", [h.make_tensor_value_info("cond", T.BOOL, []), h.make_tensor_value_info("ids", T.INT64, [2, V])],
                     [h.make_tensor_value_info("emb", T.FLOAT, [2, V, H])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10)
    return model, [{"cond": np.array(c), "ids": _ids()} for c in (True, False)]


def dq_add(dtype: int = T.INT8, layout: str = "cols", seed: int = 5):
    """y = x + DQ(b) with b [2, H]: the table's only reader is elementwise, so `--fold-weights`
    folds it. layout: tensor | cols (per-axis on axis 1) | block (block 32 on axis 1)."""
    rng = _rng(seed)
    pshape, attrs = {"tensor": ([], {}), "cols": ([H], {"axis": 1}), "block": ([2, H // 32], {"axis": 1, "block_size": 32})}[layout]
    inits = [_tensor("b", dtype, _codes(rng, dtype, [2, H]))] + _params(rng, dtype, pshape)
    nodes = [
        h.make_node("DequantizeLinear", ["b", "s", "z"], ["b_f"], name="DQ_b", **attrs),
        h.make_node("Add", ["x", "b_f"], ["y"], name="add_bias"),
    ]
    g = h.make_graph(nodes, "dq_add", [h.make_tensor_value_info("x", T.FLOAT, [2, H])], [h.make_tensor_value_info("y", T.FLOAT, [2, H])], inits)
    x = rng.standard_normal((2, H)).astype(np.float32)
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10), [{"x": x}]


def two_lookups(seed: int = 6):
    """Two embedding lookups (per-row int8) sharing W, s and zp: each is rewritten, and the
    parameter copies they need exist once."""
    rng = _rng(seed)
    inits = [_tensor("W", T.INT8, _codes(rng, T.INT8, [V, H]))] + _params(rng, T.INT8, [V])
    nodes = [h.make_node("DequantizeLinear", ["W", "s", "z"], ["W_f"], name="DQ_W", axis=0)]
    nodes += [h.make_node("Gather", ["W_f", ids], [f"emb_{ids}"], name=f"embed_{ids}", axis=0) for ids in ("ids", "pos")]
    g = h.make_graph(nodes, "two_lookups", [h.make_tensor_value_info(n, T.INT64, [2, V]) for n in ("ids", "pos")],
                     [h.make_tensor_value_info(f"emb_{n}", T.FLOAT, [2, V, H]) for n in ("ids", "pos")], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10)
    return model, [{"ids": _ids(), "pos": _ids()[:, ::-1].copy()}]


# The shipped cases: tied embeddings with the int8 per-row and the int4 block-32 layouts.
CASES = {
    "tied_embedding_int8_rows": lambda: embedding(T.INT8, "rows", tied=True),
    "tied_embedding_int4_block32": lambda: embedding(T.INT4, "block", tied=True),
}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    for name, build in CASES.items():
        onnx.save(build()[0], out / f"{name}.onnx")
