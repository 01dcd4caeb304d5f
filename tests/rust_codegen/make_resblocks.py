"""Writes tests/rust_codegen/models/resblocks_u8s8_pt_pow2.onnx: four identical residual blocks
(QDQ Conv, QDQ Conv, QDQ Add) on one activation scale, power-of-two scales, seeded int8 weights —
a small model whose generated code has a repeated block (codegen/src/rust/repeat.rs), for
tests/rust_codegen.rs's snapshot and byte-identity test. Run with the oracle venv:

    target/venv/bin/python tests/rust_codegen/make_resblocks.py
"""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, C, HW = 4, 8, 8
S_ACT, ZP_ACT, S_W = 2.0**-4, 128, 2.0**-7


def main():
    rng = np.random.default_rng(12)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    const("s_act", np.array(S_ACT, np.float32))
    const("zp_act", np.array(ZP_ACT, np.uint8))
    const("s_w", np.array(S_W, np.float32))
    const("zp_w", np.array(0, np.int8))
    const("s_b", np.array(S_ACT * S_W, np.float32))
    const("zp_b", np.array(0, np.int32))

    def q(x, out):
        nodes.append(helper.make_node("QuantizeLinear", [x, "s_act", "zp_act"], [out], name=f"{out}_Q"))
        return out

    def dq(x, out):
        nodes.append(helper.make_node("DequantizeLinear", [x, "s_act", "zp_act"], [out], name=f"{out}_DQ"))
        return out

    def conv(x, tag):
        w = const(f"{tag}_w", rng.integers(-24, 25, size=(C, C, 3, 3)).astype(np.int8))
        b = const(f"{tag}_b", rng.integers(-512, 513, size=(C,)).astype(np.int32))
        nodes.append(helper.make_node("DequantizeLinear", [w, "s_w", "zp_w"], [f"{tag}_wf"], name=f"{tag}_wDQ"))
        nodes.append(helper.make_node("DequantizeLinear", [b, "s_b", "zp_b"], [f"{tag}_bf"], name=f"{tag}_bDQ"))
        nodes.append(helper.make_node("Conv", [x, f"{tag}_wf", f"{tag}_bf"], [f"{tag}_y"], name=f"{tag}_Conv", pads=[1, 1, 1, 1]))
        return f"{tag}_y"

    h = q("x", "x_q")
    for i in range(LAYERS):
        t = f"block{i}"
        skip = dq(h, f"{t}_in")
        a = dq(q(conv(skip, f"{t}_conv1"), f"{t}_conv1_q"), f"{t}_conv1_dq")
        b = dq(q(conv(a, f"{t}_conv2"), f"{t}_conv2_q"), f"{t}_conv2_dq")
        nodes.append(helper.make_node("Add", [b, skip], [f"{t}_sum"], name=f"{t}_Add"))
        h = q(f"{t}_sum", f"{t}_out")
    dq(h, "y")
    graph = helper.make_graph(
        nodes,
        "resblocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="make_resblocks.py")
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    out = Path(__file__).resolve().parent / "models" / "resblocks_u8s8_pt_pow2.onnx"
    onnx.save(model, out)
    print(out)


if __name__ == "__main__":
    main()
