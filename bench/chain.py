#!/usr/bin/env python3
"""A long chain of identical quantized Conv + residual Add blocks (issue 10, "Scale"): every block
has the same scales, zero points and weight codes (each block its own weight initializer), so a
compile that proves each group afresh does the same proofs thousands of times.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" bench/chain.py OUT.onnx [--nodes 45000]
    /usr/bin/time -v target/release/qdqc compile OUT.onnx -o /tmp/c.onnx --report /tmp/c.json

Block i (7 nodes): d = DQ(q_i); c = Conv(d, DQ(w_i)) (1x1, 4 -> 4 channels, per-channel int8
weights); q_c = Q(c); s = Add(DQ(q_c), d); q_{i+1} = Q(s). The report's `stats.proof_memo`
gives how many proofs were reused.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto as T, helper


def chain(nodes: int) -> onnx.ModelProto:
    blocks = max(1, nodes // 7)
    c = 4
    w = np.array([[3, -7, 12, 1], [-5, 9, 2, -11], [8, 4, -6, 10], [1, -2, 3, -4]], np.int8).reshape(c, c, 1, 1)
    inits = [
        helper.make_tensor("s_a", T.FLOAT, [], [0.05]),
        helper.make_tensor("z_a", T.UINT8, [], [128]),
        helper.make_tensor("s_c", T.FLOAT, [], [0.07]),
        helper.make_tensor("z_c", T.UINT8, [], [120]),
        helper.make_tensor("s_w", T.FLOAT, [c], [0.011, 0.013, 0.017, 0.019]),
        helper.make_tensor("z_w", T.INT8, [c], [0, 0, 0, 0]),
    ]
    ns = [helper.make_node("QuantizeLinear", ["x", "s_a", "z_a"], ["q0"], name="Q_in")]
    for i in range(blocks):
        inits.append(helper.make_tensor(f"w{i}", T.INT8, [c, c, 1, 1], w.flatten().tolist()))
        ns += [
            helper.make_node("DequantizeLinear", [f"q{i}", "s_a", "z_a"], [f"d{i}"], name=f"DQ{i}"),
            helper.make_node("DequantizeLinear", [f"w{i}", "s_w", "z_w"], [f"dw{i}"], name=f"DQ_w{i}", axis=0),
            helper.make_node("Conv", [f"d{i}", f"dw{i}"], [f"c{i}"], name=f"Conv{i}"),
            helper.make_node("QuantizeLinear", [f"c{i}", "s_c", "z_c"], [f"qc{i}"], name=f"Q_c{i}"),
            helper.make_node("DequantizeLinear", [f"qc{i}", "s_c", "z_c"], [f"dc{i}"], name=f"DQ_c{i}"),
            helper.make_node("Add", [f"dc{i}", f"d{i}"], [f"s{i}"], name=f"Add{i}"),
            helper.make_node("QuantizeLinear", [f"s{i}", "s_a", "z_a"], [f"q{i + 1}"], name=f"Q{i}"),
        ]
    ns.append(helper.make_node("DequantizeLinear", [f"q{blocks}", "s_a", "z_a"], ["y"], name="DQ_out"))
    g = helper.make_graph(ns, "chain", [helper.make_tensor_value_info("x", T.FLOAT, [1, c, 4, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, c, 4, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--nodes", type=int, default=45000)
    args = ap.parse_args()
    m = chain(args.nodes)
    onnx.save(m, args.out)
    print(f"{args.out}: {len(m.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
