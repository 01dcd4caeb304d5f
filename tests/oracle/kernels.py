"""Run ONNX Runtime's quantized element-wise, lookup-table and pooling kernels for tests/ort_elementwise.rs.

    python kernels.py CASES.json DIR

CASES.json (written by the Rust test) lists cases; each names an op, its dtype, quantization
parameters, attributes and its data inputs as raw files in DIR. For every case this script
builds the one-node com.microsoft model (the fused form) and, when asked, the unfused
DequantizeLinear → float op → QuantizeLinear graph, runs both with graph optimizations disabled
(so each runs exactly as written), and writes their outputs' raw bytes to DIR/<id>.fused.bin and
DIR/<id>.unfused.bin. A case marked "may_fail" whose fused model throws gets DIR/<id>.error.bin
(the message) instead. One process runs every case; any other failure exits non-zero with the
case id.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

DTYPES = {"uint8": (np.uint8, TensorProto.UINT8), "int8": (np.int8, TensorProto.INT8), "bool": (np.bool_, TensorProto.BOOL)}
UNFUSED_OP = {
    "QLinearAdd": "Add",
    "QLinearMul": "Mul",
    "QLinearSigmoid": "Sigmoid",
    "QLinearLeakyRelu": "LeakyRelu",
    "QLinearGlobalAveragePool": "GlobalAveragePool",
    "QLinearAveragePool": "AveragePool",
    "QLinearSoftmax": "Softmax",
}


class Graph:
    """Nodes, initializers and graph inputs of one model under construction."""

    def __init__(self, case: dict, dtype: int):
        self.case, self.dtype, self.nodes, self.inits = case, dtype, [], []

    def qparams(self, name: str) -> tuple[str, str]:
        scale, zero_point = self.case["q"][name]
        np_type = DTYPES[self.case["dtype"]][0]
        self.inits.append(numpy_helper.from_array(np.array(scale, dtype=np.float32), f"{name}_s"))
        self.inits.append(numpy_helper.from_array(np.array(zero_point, dtype=np_type), f"{name}_z"))
        return f"{name}_s", f"{name}_z"

    def dq(self, x: str, name: str) -> str:
        s, z = self.qparams(name)
        self.nodes.append(helper.make_node("DequantizeLinear", [x, s, z], [f"{x}_dq"]))
        return f"{x}_dq"

    def q(self, x: str, name: str, out: str) -> None:
        s, z = self.qparams(name)
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [out]))

    def model(self, inputs: list[tuple[str, int, list[int]]], out: tuple[str, int]) -> bytes:
        graph = helper.make_graph(
            self.nodes,
            self.case["id"],
            [helper.make_tensor_value_info(n, t, shape) for n, t, shape in inputs],
            [helper.make_tensor_value_info(out[0], out[1], None)],
            initializer=self.inits,
        )
        opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8
        return model.SerializeToString()


def input_names(case: dict) -> list[str]:
    return [f"in{i}" for i in range(len(case["inputs"]))]


def fused(case: dict, dtype: int) -> bytes:
    g = Graph(case, dtype)
    op, names = case["op"], input_names(case)
    if op in ("QLinearAdd", "QLinearMul"):
        ins = [names[0], *g.qparams("a"), names[1], *g.qparams("b"), *g.qparams("c")]
    elif op == "QLinearWhere":
        ins = [names[0], names[1], *g.qparams("x"), names[2], *g.qparams("y"), *g.qparams("z")]
    elif op == "QLinearConcat":
        ins = [*g.qparams("y")]
        for i, n in enumerate(names):
            ins += [n, *g.qparams(f"x{i}")]
    else:
        ins = [names[0], *g.qparams("x"), *g.qparams("y")]
    g.nodes.append(helper.make_node(op, ins, ["out"], domain="com.microsoft", **case.get("attrs", {})))
    return g.model(graph_inputs(case), ("out", dtype))


def unfused(case: dict, dtype: int) -> bytes:
    g = Graph(case, dtype)
    op, names = case["op"], input_names(case)
    attrs = {k: v for k, v in case.get("attrs", {}).items() if k not in ("opset", "channels_last")}
    if op in ("QLinearAdd", "QLinearMul"):
        g.nodes.append(helper.make_node(UNFUSED_OP[op], [g.dq(names[0], "a"), g.dq(names[1], "b")], ["f"]))
        out = "c"
    elif op == "QLinearWhere":
        g.nodes.append(helper.make_node("Where", [names[0], g.dq(names[1], "x"), g.dq(names[2], "y")], ["f"]))
        out = "z"
    elif op == "QLinearConcat":
        g.nodes.append(helper.make_node("Concat", [g.dq(n, f"x{i}") for i, n in enumerate(names)], ["f"], **attrs))
        out = "y"
    else:
        g.nodes.append(helper.make_node(UNFUSED_OP[op], [g.dq(names[0], "x")], ["f"], **attrs))
        out = "y"
    g.q("f", out, "out")
    return g.model(graph_inputs(case), ("out", dtype))


def graph_inputs(case: dict) -> list[tuple[str, int, list[int]]]:
    return [(n, DTYPES[i["dtype"]][1], i["shape"]) for n, i in zip(input_names(case), case["inputs"])]


def feeds(case: dict, root: Path) -> dict[str, np.ndarray]:
    out = {}
    for n, i in zip(input_names(case), case["inputs"]):
        data = np.fromfile(root / i["file"], dtype=DTYPES[i["dtype"]][0])
        out[n] = data.reshape(i["shape"])
    return out


def run(model: bytes, inputs: dict[str, np.ndarray], threads: int) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def main() -> int:
    cases_path, root = Path(sys.argv[1]), Path(sys.argv[2])
    cases = json.loads(cases_path.read_text())["cases"]
    for case in cases:
        try:
            dtype = DTYPES[case["dtype"]][1]
            inputs = feeds(case, root)
            threads = case.get("threads", 1)
            try:
                run(fused(case, dtype), inputs, threads).tofile(root / f"{case['id']}.fused.bin")
            except Exception as e:  # an expected refusal: ORT's kernel throws
                if not case.get("may_fail"):
                    raise
                (root / f"{case['id']}.error.bin").write_text(f"{type(e).__name__}: {e}")
                continue
            if case.get("unfused"):
                run(unfused(case, dtype), inputs, threads).tofile(root / f"{case['id']}.unfused.bin")
        except Exception as e:  # report which case failed, then fail
            print(f"case {case['id']}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    print(f"onnxruntime {ort.__version__}: {len(cases)} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
