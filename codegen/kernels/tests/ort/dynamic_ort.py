"""Runs ONNX Runtime's `quantize_dynamic` form of a MatMul for tests/dynamic_ort.rs:
DynamicQuantizeLinear(x) -> Mul(x_scale, W_scale) -> MatMulInteger(x_q, W, x_zp, W_zp) -> Cast(float)
-> Mul(cast, scale product), node for node as `onnxruntime.quantization.quantize_dynamic` writes it.

Usage: python dynamic_ort.py CASES.json OUT_DIR

CASES.json is a list of {"m", "k", "n", "x", "w", "zw", "sw"}: file names of raw little-endian
x (f32, [m, k]), w (int8, [k, n]), zw (int8, one or n), sw (f32, one or n). Each model runs with
ORT_DISABLE_ALL on one thread; output i (f32, [m, n]) is written raw to OUT_DIR/i.bin.
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def model(k, n, w, zw, sw):
    shape = [] if len(zw) == 1 else [n]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"]),
        helper.make_node("Mul", ["x_scale", "W_scale"], ["scales"]),
        helper.make_node("MatMulInteger", ["x_q", "W", "x_zp", "W_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc_f", "scales"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(w.reshape(k, n), "W"),
        numpy_helper.from_array(zw.reshape(shape), "W_zp"),
        numpy_helper.from_array(sw.reshape(shape), "W_scale"),
    ]
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def main():
    cases = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    for i, c in enumerate(cases):
        m, k, n = c["m"], c["k"], c["n"]
        x = np.fromfile(c["x"], dtype="<f4").reshape(m, k)
        w = np.fromfile(c["w"], dtype=np.int8)
        zw = np.fromfile(c["zw"], dtype=np.int8)
        sw = np.fromfile(c["sw"], dtype="<f4")
        session = ort.InferenceSession(model(k, n, w, zw, sw), options, providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {"x": x})
        y.astype("<f4").tofile(os.path.join(out_dir, f"{i}.bin"))


if __name__ == "__main__":
    main()
