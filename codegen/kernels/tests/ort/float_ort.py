"""Runs one-node float ONNX models through ONNX Runtime for tests/float_ort.rs.

Usage: python float_ort.py CASES.json OUT_DIR

CASES.json is a list of {"op", "opset", "attrs": {name: [kind, value]}, "inputs": [{"shape", "file"}]}:
attribute kinds "f" (an f32 bit pattern, so the attribute is exactly the kernel's), "i", "ints"
or "s"; inputs are raw little-endian f32 files, or {"absent": true} for an optional input left out. Each model runs with ORT_DISABLE_ALL on one thread (the
unfused CPU kernels the contract compares against); output i is written raw to OUT_DIR/i.bin.
"""
import json
import os
import struct
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def attribute(kind, value):
    if kind == "f":
        return struct.unpack("<f", struct.pack("<I", value))[0]
    if kind == "i":
        return int(value)
    if kind == "ints":
        return [int(v) for v in value]
    if kind == "s":
        return str(value)
    raise SystemExit(f"float_ort.py: unknown attribute kind {kind!r}")


def main():
    cases = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # no deprecation warnings (tf_half_pixel_for_nn is still run)
    for i, case in enumerate(cases):
        names, infos, feeds = [], [], {}
        for j, inp in enumerate(case["inputs"]):
            if inp.get("absent"):
                names.append("")  # an optional input left out (Resize's roi)
                continue
            name = f"x{j}"
            data = np.fromfile(inp["file"], dtype="<f4").reshape(inp["shape"])
            names.append(name)
            infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, inp["shape"]))
            feeds[name] = data
        attrs = {k: attribute(kind, v) for k, (kind, v) in case["attrs"].items()}
        node = helper.make_node(case["op"], names, ["y"], **attrs)
        graph = helper.make_graph([node], "case", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case["opset"])])
        model.ir_version = 10
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        (y,) = session.run(None, feeds)
        np.ascontiguousarray(y, dtype="<f4").tofile(os.path.join(out_dir, f"{i}.bin"))


if __name__ == "__main__":
    main()
