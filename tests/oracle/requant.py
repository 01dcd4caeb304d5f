"""Runs one-node QLinearConv / QLinearMatMul / QGemm models (and unfused QDQ twins) in ONNX Runtime
for tests/ort_requant.rs and tests/ort_matmul_dynamic.rs.

    python requant.py CASES.json OUTPUTS.json

CASES.json is a list of cases written by the Rust tests (`"w_input": true` makes B a graph input);
scales travel as f32 bit patterns so no decimal conversion touches them. OUTPUTS.json gets one entry per case: the flat output codes, or
{"error": message} when ONNX Runtime refuses the model. One process runs every case.
"""

import json
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

DTYPES = {"u8": (np.uint8, TensorProto.UINT8), "i8": (np.int8, TensorProto.INT8), "i32": (np.int32, TensorProto.INT32)}


def f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def codes(name, values, dtype, shape):
    return helper.make_tensor(name, DTYPES[dtype][1], shape, np.asarray(values, dtype=DTYPES[dtype][0]).flatten().tolist())


def floats(name, bits, shape):
    return helper.make_tensor(name, TensorProto.FLOAT, shape, f32(bits).tolist())


def params(c):
    """Scale / zero-point initializers shared by every fused op and the unfused twin."""
    per_channel = len(c["w_scale"]) > 1
    wshape = [len(c["w_scale"])] if per_channel else []
    w_zp = c["w_zp"] * len(c["w_scale"]) if per_channel and len(c["w_zp"]) == 1 else c["w_zp"]
    return [
        floats("x_scale", [c["x_scale"]], []),
        codes("x_zp", [c["x_zp"]], c["x_type"], []),
        floats("w_scale", c["w_scale"], wshape),
        codes("w_zp", w_zp, c["w_type"], wshape),
        floats("y_scale", [c["y_scale"]], []),
        codes("y_zp", [c["y_zp"]], c["x_type"], []),
    ]


def fused(c):
    inits = params(c) + [codes("w", c["w"], c["w_type"], c["w_shape"])]
    op = c["op"]
    if op == "conv":
        ins = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
        if c["bias"] is not None:
            inits.append(codes("bias", c["bias"], "i32", [len(c["bias"])]))
            ins.append("bias")
        a = c["attrs"]
        node = helper.make_node("QLinearConv", ins, ["y"], pads=a["pads"], strides=a["strides"], dilations=a["dilations"], group=a["group"])
    elif op == "matmul":
        node = helper.make_node("QLinearMatMul", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"], ["y"])
    else:
        ins = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "", "y_scale", "y_zp"]
        if c["bias"] is not None:
            inits.append(codes("bias", c["bias"], "i32", [len(c["bias"])]))
            ins[6] = "bias"
        a = c["attrs"]
        alpha = float(f32([a["alpha"]])[0])
        node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", alpha=alpha, transA=a["transA"], transB=a["transB"])
    return node, inits


def unfused(c):
    """DQ(x), DQ(w) [, DQ(bias)] → MatMul / Conv [+ bias] → Q, with the same parameters."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"], axis=c["w_axis"]),
    ]
    inits = params(c) + [codes("w", c["w"], c["w_type"], c["w_shape"])]
    if c["op"] == "matmul":
        nodes.append(helper.make_node("MatMul", ["xf", "wf"], ["yf"]))
    else:
        ins = ["xf", "wf"]
        if c["bias"] is not None:
            inits += [codes("bias", c["bias"], "i32", [len(c["bias"])]), floats("b_scale", c["b_scale"], [len(c["b_scale"])])]
            nodes.append(helper.make_node("DequantizeLinear", ["bias", "b_scale"], ["bf"], axis=0))
            ins.append("bf")
        a = c["attrs"]
        nodes.append(helper.make_node("Conv", ins, ["yf"], pads=a["pads"], strides=a["strides"], dilations=a["dilations"], group=a["group"]))
    nodes.append(helper.make_node("QuantizeLinear", ["yf", "y_scale", "y_zp"], ["y"]))
    return nodes, inits


def run(c):
    if c.get("unfused"):
        nodes, inits = unfused(c)
    else:
        node, inits = fused(c)
        nodes = [node]
    elem = DTYPES[c["x_type"]][1]
    inputs = [helper.make_tensor_value_info("x", elem, c["x_shape"])]
    feeds = {"x": np.asarray(c["x"], dtype=DTYPES[c["x_type"]][0]).reshape(c["x_shape"])}
    if c.get("w_input"):
        # B as a graph input: a MatMul of two activations, nothing prepacked.
        inits = [t for t in inits if t.name != "w"]
        inputs.append(helper.make_tensor_value_info("w", DTYPES[c["w_type"]][1], c["w_shape"]))
        feeds["w"] = np.asarray(c["w"], dtype=DTYPES[c["w_type"]][0]).reshape(c["w_shape"])
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, c["level"])
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        (y,) = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the refusal itself is the result
        return {"error": str(e).splitlines()[0]}
    return y.astype(np.int64).flatten().tolist()


def main():
    cases = json.load(open(sys.argv[1]))
    assert ort.__version__ == "1.31.1", ort.__version__
    assert onnx.__version__ == "1.23.2", onnx.__version__
    json.dump([run(c) for c in cases], open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
