"""Writes tests/rust_codegen/models/softmax_codes.onnx and softmax_codes_cut.onnx: attention-like
softmaxes on codes, `DequantizeLinear → Softmax → QuantizeLinear` — u8 codes along the last axis
(MiniLM's scales: input 0.1224 at zero point 132, output 1/255 at 0), i8 codes in and out along
the last axis, and u8 codes along axis 1 (not the last: not collapsed). The `_cut` model is the
same graph with every f32 intermediate also a graph output, so that nothing is collapsed
(codegen/src/rust/softmax_codes.rs): the reference tests/rust_codegen.rs compares with. Run with
the oracle venv:

    target/venv/bin/python tests/rust_codegen/make_softmax_codes.py
"""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(cut: bool) -> onnx.ModelProto:
    inits, nodes, floats = [], [], []

    def param(name, scale, zp, dtype):
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), f"s_{name}"))
        inits.append(numpy_helper.from_array(np.array(zp, dtype), f"z_{name}"))

    def softmax(x, p_in, p_out, axis, out):
        f, e = f"{out}_dq", f"{out}_softmax"
        nodes.append(helper.make_node("DequantizeLinear", [x, f"s_{p_in}", f"z_{p_in}"], [f], name=f"{out}_DQ"))
        nodes.append(helper.make_node("Softmax", [f], [e], name=e, axis=axis))
        nodes.append(helper.make_node("QuantizeLinear", [e, f"s_{p_out}", f"z_{p_out}"], [out], name=f"{out}_Q"))
        floats.extend([f, e])

    param("x", 0.1224194, 132, np.uint8)
    param("p", 1 / 255, 0, np.uint8)
    param("x8", 0.0763276, 22, np.int8)
    param("p8", 1 / 256, -128, np.int8)
    softmax("x", "x", "p", -1, "y_last")
    softmax("x8", "x8", "p8", 2, "y_i8")
    softmax("x", "x", "p", 1, "y_axis1")
    outs = [("y_last", TensorProto.UINT8), ("y_i8", TensorProto.INT8), ("y_axis1", TensorProto.UINT8)]
    outs += [(f, TensorProto.FLOAT) for f in floats] if cut else []
    graph = helper.make_graph(
        nodes,
        "softmax_codes",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 12, 64]), helper.make_tensor_value_info("x8", TensorProto.INT8, [2, 12, 64])],
        [helper.make_tensor_value_info(o, t, [2, 12, 64]) for o, t in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    folder = Path(__file__).parent / "models"
    onnx.save(build(False), folder / "softmax_codes.onnx")
    onnx.save(build(True), folder / "softmax_codes_cut.onnx")


if __name__ == "__main__":
    main()
