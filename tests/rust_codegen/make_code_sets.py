"""Writes tests/rust_codegen/models/code_sets_u8.onnx and code_sets_u8_cut.onnx: ops on the codes
of one uint8 input `x` ([1, 256], fed every code once) that compute one function of each code —
a GELU-like diamond (`x·a`, Tanh, `+ 1`, the product of the two branches) and SiLU plus a constant
— and a product with a second input `z` (not a function of `x` alone). The `_cut` model is the
same graph with every intermediate code tensor also a graph output, so that none of its sets is
collapsed (codegen/src/rust/code_sets.rs): the reference tests/rust_codegen.rs compares with.
Run with the oracle venv:

    target/venv/bin/python tests/rust_codegen/make_code_sets.py
"""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(cut: bool) -> onnx.ModelProto:
    inits, nodes, codes = [], [], []

    def param(name, scale, zp):
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), f"s_{name}"))
        inits.append(numpy_helper.from_array(np.array(zp, np.uint8), f"z_{name}"))
        return name

    def dq(x, p):
        # One DQ per reader, as quantize_static writes them.
        out = f"{x}_f{sum(n.op_type == 'DequantizeLinear' for n in nodes)}"
        nodes.append(helper.make_node("DequantizeLinear", [x, f"s_{p}", f"z_{p}"], [out], name=f"{out}_DQ"))
        return out

    def q(f, out, p):
        nodes.append(helper.make_node("QuantizeLinear", [f, f"s_{p}", f"z_{p}"], [out], name=f"{out}_Q"))
        codes.append(out)
        return out

    def const(name, code, p):
        inits.append(numpy_helper.from_array(np.array(code, np.uint8), name))
        return dq(name, p)

    def op(kind, ins, out):
        nodes.append(helper.make_node(kind, ins, [out], name=out))
        return out

    param("x", 0.0625, 128)
    param("half", 1 / 256, 0)
    param("h", 0.0371, 120)
    param("t", 1 / 127, 128)
    param("one", 1 / 128, 0)
    param("u", 0.0093, 3)
    param("y", 0.0517, 100)
    param("s", 1 / 255, 0)
    param("m", 0.0447, 130)
    param("z", 0.031, 140)
    # GELU-like: h = x·½, t = tanh(x), u = t + 1, y = h·u.
    h = q(op("Mul", [dq("x", "x"), const("c_half", 128, "half")], "h_mul"), "h", "h")
    t = q(op("Tanh", [dq("x", "x")], "t_tanh"), "t", "t")
    u = q(op("Add", [dq(t, "t"), const("c_one", 128, "one")], "u_add"), "u", "u")
    q(op("Mul", [dq(h, "h"), dq(u, "u")], "y_mul"), "y_gelu", "y")
    # SiLU then + 1: s = sigmoid(x), m = x·s, y = m + 1.
    s = q(op("Sigmoid", [dq("x", "x")], "s_sigmoid"), "s", "s")
    m = q(op("Mul", [dq("x", "x"), dq(s, "s")], "m_mul"), "m", "m")
    q(op("Add", [dq(m, "m"), const("c_one2", 128, "one")], "y2_add"), "y_silu", "y")
    # Refused: a product with another varying tensor.
    q(op("Mul", [dq("x", "x"), dq("z", "z")], "y3_mul"), "y_mulz", "y")
    outs = ["y_gelu", "y_silu", "y_mulz"] + ([c for c in codes if not c.startswith("y_")] if cut else [])
    graph = helper.make_graph(
        nodes,
        "code_sets",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 256]), helper.make_tensor_value_info("z", TensorProto.UINT8, [1, 256])],
        [helper.make_tensor_value_info(o, TensorProto.UINT8, [1, 256]) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    folder = Path(__file__).parent / "models"
    onnx.save(build(False), folder / "code_sets_u8.onnx")
    onnx.save(build(True), folder / "code_sets_u8_cut.onnx")


if __name__ == "__main__":
    main()
