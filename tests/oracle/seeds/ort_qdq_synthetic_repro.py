# Provenance: vendored from the seed material qdqc started from (shared/seeds/, outside this
# repository), unchanged but for these two lines; the script of an ONNX Runtime issue.
"""Reproduction of ORT's unsound QDQ fusion on a residual block whose Q output feeds two DQs.

Reconstructed from the script in an ONNX Runtime issue (indentation rebuilt, logic unchanged).
Writes synthetic_shared_q.onnx (next to this script, or to the path given as argument) and compares ORT_DISABLE_ALL vs ORT_ENABLE_ALL.
Expected (per the issue): max diff 0.38 (= 1 LSB of the output scale), 25 elements differ.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "synthetic_shared_q.onnx")

sx, sw1, s1, sa1, sw2, s2, sa2 = 0.09, 0.002, 0.06, 0.37, 0.01, 0.15, 0.38
ZP = 128

rng = np.random.default_rng(0)
W1 = np.clip(np.round((rng.random((4, 4, 3, 3)) * 2 - 1).astype(np.float32) * 5.0 / sw1), 0, 255).astype(np.uint8)
W2 = np.clip(np.round((rng.random((4, 4, 3, 3)) * 2 - 1).astype(np.float32) * 5.0 / sw2), 0, 255).astype(np.uint8)

inits = []
nodes = []


def S(name, v):
    inits.append(numpy_helper.from_array(np.array(v, dtype=np.float32), f"s_{name}"))


def Z(name):
    inits.append(numpy_helper.from_array(np.array(ZP, dtype=np.uint8), f"zp_{name}"))


def qdq(name):
    nodes.append(helper.make_node("QuantizeLinear", [name, f"s_{name}", f"zp_{name}"], [f"q_{name}"], name=f"Q_{name}"))
    nodes.append(helper.make_node("DequantizeLinear", [f"q_{name}", f"s_{name}", f"zp_{name}"], [f"dq_{name}"], name=f"DQ_{name}"))


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 8, 8])

qdq("x")
nodes.append(helper.make_node("DequantizeLinear", ["w1", "s_w1", "zp_w1"], ["w1_dq"], name="DQ_w1"))
nodes.append(helper.make_node("Conv", ["dq_x", "w1_dq"], ["c1"], name="Conv1", pads=[1, 1, 1, 1]))
qdq("c1")
nodes.append(helper.make_node("Add", ["dq_c1", "dq_x"], ["add1"], name="Add1"))
nodes.append(helper.make_node("QuantizeLinear", ["add1", "s_add1", "zp_add1"], ["q_add1"], name="Q_add1"))
# one Q output consumed by two DQs: one feeds the skip connection, the other the next conv
nodes.append(helper.make_node("DequantizeLinear", ["q_add1", "s_add1", "zp_add1"], ["skip1"], name="DQ_add1_skip"))
nodes.append(helper.make_node("DequantizeLinear", ["q_add1", "s_add1", "zp_add1"], ["next1"], name="DQ_add1_next"))
nodes.append(helper.make_node("DequantizeLinear", ["w2", "s_w2", "zp_w2"], ["w2_dq"], name="DQ_w2"))
nodes.append(helper.make_node("Conv", ["next1", "w2_dq"], ["c2"], name="Conv2", pads=[1, 1, 1, 1]))
qdq("c2")
nodes.append(helper.make_node("Add", ["dq_c2", "skip1"], ["add2"], name="Add2"))
qdq("add2")
nodes[-1].output[0] = "output"  # final DQ output renamed "output"

inits += [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2")]
for n, v in [("x", sx), ("w1", sw1), ("c1", s1), ("add1", sa1), ("w2", sw2), ("c2", s2), ("add2", sa2)]:
    S(n, v)
    Z(n)

graph = helper.make_graph(nodes, "shared_q_residual", [x], [y], initializer=inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 9
onnx.checker.check_model(model)
os.makedirs(os.path.dirname(OUT), exist_ok=True)
onnx.save(model, OUT)


def run(level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.full([1, 4, 8, 8], 1.0, dtype=np.float32)})[0]


print("onnxruntime", ort.__version__, "onnx", onnx.__version__, "numpy", np.__version__)
a = run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
b = run(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
d = np.abs(a - b)
print("max diff", float(d.max()), "n diff", int((d > 0).sum()), "of", d.size)
print("diff in LSB of output scale:", sorted(set(np.round(d[d > 0] / sa2, 6).tolist())))
sys.exit(0)
