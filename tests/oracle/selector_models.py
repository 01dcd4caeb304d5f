#!/usr/bin/env python3
"""Small QDQ models for the differential test of qdqc's ORT 1.31 optimizer replay
(rewrites/ort/src/optimizer/) and of its hazards (rewrites/ort/src/hazards.rs).

    python tests/oracle/selector_models.py OUTDIR

Writes OUTDIR/<name>.onnx for every model of `selector_models()` and `hazard_models()`, and
OUTDIR/manifest.json listing both. Deterministic: one seeded generator, fixed build order, so two
runs give the same bytes (given the pinned onnx/numpy of requirements.txt).

Each selector model isolates one decision of ORT's QDQ optimizer: a selector rule and its
conditions (types, scales, zero points, opsets, attributes, graph outputs, shared nodes), or one
of the transformers around it (DoubleQDQPairsRemover, QDQPropagation, EnsureUniqueDQForNodeUnit,
WeightBiasQuantization, WhereDummyDq, Relu/ClipQuantRewrite, QDQFinalCleanup, DQ→MatMulNBits),
in the main graph and in If/Loop bodies. Every node has a name unique in its graph except the
deliberately unnamed ArgMax nodes (the test joins them by their outputs).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OPSET = 21
IR_VERSION = 10
SEED = 1


# ----------------------------------------------------------------------------------------------
# building blocks


def init(name: str, arr) -> onnx.TensorProto:
    return nh.from_array(np.asarray(arr), name)


def vi(name: str, t=T.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, t, shape)


def Q(x, s, z, out, **attrs):
    return h.make_node("QuantizeLinear", [x, s, z] if z else [x, s], [out], name=out, **attrs)


def DQ(x, s, z, out, **attrs):
    return h.make_node("DequantizeLinear", [x, s, z] if z else [x, s], [out], name=out, **attrs)


def qdq(x, s, z, out, q=None):
    """x → Q (named q_<out>) → DQ (named <out>)."""
    q = q or "q_" + out
    return [Q(x, s, z, q), DQ(q, s, z, out)]


def P():
    """The shared scalar parameters every model carries."""
    return [
        init("s", np.float32(0.1)),
        init("z", np.uint8(0)),
        init("z8", np.int8(0)),
        init("s2", np.float32(0.2)),
        init("z16", np.uint16(0)),
        init("sneg", np.float32(-0.1)),
        init("zb", np.uint8(3)),
        init("z8b", np.int8(3)),
    ]


def X(*names):
    return [vi(x, T.FLOAT, [1, 4, 4, 4]) for x in names]


def Y(*names):
    return [vi(x, T.FLOAT, None) for x in names]


class Builder:
    def __init__(self):
        self.rng = np.random.default_rng(SEED)
        self.models: dict[str, onnx.ModelProto] = {}

    def add(self, name, nodes, inputs, outputs, inits, opset=OPSET):
        assert name not in self.models, f"duplicate model name {name}"
        g = h.make_graph(nodes, "g", inputs, outputs, inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=IR_VERSION)
        check_names(m.graph, name)
        self.models[name] = m

    def W(self, dt=np.int8, shape=(4, 4, 3, 3), lo=-100, hi=100):
        return self.rng.integers(lo, hi, shape).astype(dt)


def check_names(g: onnx.GraphProto, model: str):
    names = [n.name for n in g.node if n.name]
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"{model}: node names {dup} are not unique in graph {g.name}"
    for n in g.node:
        assert n.name or n.op_type == "ArgMax", f"{model}: unnamed {n.op_type} node"
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                check_names(a.g, model)


# ----------------------------------------------------------------------------------------------
# selector models


def selector_models() -> dict[str, onnx.ModelProto]:
    b = Builder()
    add, W, rng = b.add, b.W, b.rng

    # -- one op between DQ and Q: drop rules, 1DQ/1DQ_CPU rules, and what blocks them
    def unary(name, op, opset=OPSET, z="z", s="s", so=None, zo=None, extra=(), inits=(), **attrs):
        so, zo = so or s, zo or z
        nodes = qdq("x", s, z, "dx") + [h.make_node(op, ["dx", *extra], ["c"], name="c", **attrs)] + qdq("c", so, zo, "y")
        add(name, nodes, X("x"), Y("y"), P() + list(inits), opset)

    perm = dict(perm=[0, 2, 3, 1])
    unary("transpose", "Transpose", **perm)
    unary("transpose_u16", "Transpose", z="z16", **perm)
    unary("transpose_s8", "Transpose", z="z8", **perm)
    unary("transpose_diffscale", "Transpose", so="s2", **perm)
    unary("transpose_diffzp", "Transpose", zo="zb", **perm)
    unary("transpose_neg", "Transpose", s="sneg", **perm)
    unary("reshape", "Reshape", extra=["shape"], inits=[init("shape", np.array([1, 64], np.int64))])
    unary("maxpool12", "MaxPool", opset=12, kernel_shape=[2, 2])
    unary("maxpool11", "MaxPool", opset=11, kernel_shape=[2, 2])
    unary("maxpool22", "MaxPool", opset=22, kernel_shape=[2, 2])
    unary("maxpool_neg", "MaxPool", s="sneg", kernel_shape=[2, 2])
    unary("maxpool_s8", "MaxPool", z="z8", kernel_shape=[2, 2])
    unary("reducemax", "ReduceMax", opset=18)
    unary("d2s", "DepthToSpace", blocksize=2)
    sc = [init("sc", np.array([1, 1, 2, 2], np.float32))]
    unary("resize_nearest", "Resize", opset=19, extra=["", "sc"], inits=sc)
    unary("resize_linear", "Resize", opset=19, extra=["", "sc"], inits=sc, mode="linear")
    unary("resize_cubic", "Resize", opset=19, extra=["", "sc"], inits=sc, mode="cubic")
    unary("resize_align_corners", "Resize", opset=19, extra=["", "sc"], inits=sc, coordinate_transformation_mode="align_corners")
    unary("resize_floor", "Resize", opset=19, extra=["", "sc"], inits=sc, nearest_mode="floor")
    unary("resize_u16", "Resize", z="z16", extra=["", "sc"], inits=sc)
    unary("sigmoid", "Sigmoid")
    unary("sigmoid_u16", "Sigmoid", z="z16")
    unary("sigmoid_s8", "Sigmoid", z="z8")
    unary("sigmoid_u8_to_s8", "Sigmoid", zo="z8")
    unary("leakyrelu", "LeakyRelu")
    unary("softmax", "Softmax", opset=13)
    unary("softmax_s8", "Softmax", z="z8", opset=13)
    unary("softmax11", "Softmax", opset=11)
    unary("avgpool", "AveragePool", kernel_shape=[2, 2])
    unary("avgpool_dil", "AveragePool", opset=19, kernel_shape=[2, 2], dilations=[2, 2])
    unary("gavgpool", "GlobalAveragePool")
    unary("relu_alone", "Relu")
    unary("relu_zb", "Relu", z="zb")
    unary("pad", "Pad", extra=["pads"], inits=[init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])

    unary("squeeze", "Squeeze", extra=["ax"], inits=[init("ax", np.array([0], np.int64))])
    unary("unsqueeze", "Unsqueeze", extra=["ax"], inits=[init("ax", np.array([0], np.int64))])
    unary("flatten", "Flatten", axis=1)
    unary("slice", "Slice", extra=["st", "en"], inits=[init("st", np.array([1], np.int64)), init("en", np.array([3], np.int64))])
    unary("gather", "Gather", extra=["idx"], inits=[init("idx", np.array([0, 2], np.int64))], axis=1)
    unary("expand", "Expand", extra=["shp"], inits=[init("shp", np.array([2, 4, 4, 4], np.int64))])
    unary("tile", "Tile", extra=["rep"], inits=[init("rep", np.array([1, 2, 1, 1], np.int64))])
    unary("s2d", "SpaceToDepth", blocksize=2)
    unary("reducemin", "ReduceMin", opset=18)
    unary("tanh", "Tanh")
    unary("instnorm", "InstanceNormalization", extra=["g", "bb"], inits=[init("g", np.ones(4, np.float32)), init("bb", np.zeros(4, np.float32))])

    # -- ArgMax on codes (dropDQ); these ArgMax nodes are unnamed on purpose
    int64_y = [vi("y", T.INT64, None)]
    add("argmax", qdq("x", "s", "z", "dx") + [h.make_node("ArgMax", ["dx"], ["y"], axis=1)], X("x"), int64_y, P())
    add("argmax_nozp", [Q("x", "s", "z", "qx"), DQ("qx", "s", None, "dx"), h.make_node("ArgMax", ["dx"], ["y"], axis=1)], X("x"), int64_y, P())
    add("argmax_neg", qdq("x", "sneg", "z", "dx") + [h.make_node("ArgMax", ["dx"], ["y"], axis=1)], X("x"), int64_y, P())
    add("argmax_u16", qdq("x", "s", "z16", "dx") + [h.make_node("ArgMax", ["dx"], ["y"], axis=1)], X("x"), int64_y, P())

    # -- binary ops
    def binary(name, op="Add", za="z", zb="z", zo="z", float_b=False, out_c=False, extra_consumer=False, shared=False, opset=OPSET):
        nodes = qdq("a", "s", za, "da")
        if shared:
            bname = "da"
        elif float_b:
            bname = "bf"
        else:
            nodes += qdq("b", "s", zb, "db")
            bname = "db"
        nodes += [h.make_node(op, ["da", bname], ["c"], name="c")] + qdq("c", "s", zo, "y")
        outs = Y("y")
        if out_c:
            outs += Y("c")
        if extra_consumer:
            nodes.append(h.make_node("Relu", ["c"], ["r"], name="r"))
            outs += Y("r")
        add(name, nodes, X("a", "b"), outs, P() + [init("bf", np.ones((1, 4, 4, 4), np.float32))], opset)

    binary("add")
    binary("add_opset23", opset=23)
    binary("add_opset25", opset=25)
    binary("mul", "Mul")
    binary("sub", "Sub")
    binary("add_floatb", float_b=True)
    binary("add_graphout", out_c=True)
    binary("add_qandnonq", extra_consumer=True)
    binary("add_u16", za="z16", zb="z16", zo="z16")
    binary("add_s8", za="z8", zb="z8", zo="z8")
    binary("add_mixed", za="z", zb="z8", zo="z")
    binary("add_same_input", shared=True)
    binary("div", "Div")
    binary("add_u8_to_s8", zo="z8")
    add("add_const_dq", qdq("a", "s", "z", "da") + [DQ("kq", "s", "z", "dk"), h.make_node("Add", ["da", "dk"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("a"), Y("y"), P() + [init("kq", np.array(7, np.uint8))])
    add("seed_shared_q_residual",  # one Q feeding two DQs, one of them a residual Add input
        [Q("x", "s", "z", "qx"), DQ("qx", "s", "z", "dx1"), DQ("qx", "s", "z", "dx2"), h.make_node("Sigmoid", ["dx1"], ["sg"], name="sg")]
        + qdq("sg", "s", "z", "dsg") + [h.make_node("Add", ["dsg", "dx2"], ["c"], name="c")] + qdq("c", "s2", "z", "y"),
        X("x"), Y("y"), P())
    add("matmul_two_activations", qdq("a", "s", "z", "da") + qdq("b", "s", "z", "db") + [h.make_node("MatMul", ["da", "db"], ["c"], name="c")] + qdq("c", "s2", "z", "y"),
        [vi("a", T.FLOAT, [2, 4]), vi("b", T.FLOAT, [4, 3])], Y("y"), P())

    # -- per-channel activation parameters: ORT fuses most groups anyway (see hazards.rs)
    def pc(x, out):
        return [Q(x, "sc4", "zc4", "q_" + out, axis=1), DQ("q_" + out, "sc4", "zc4", out, axis=1)]

    pc_inits = P() + [init("sc4", np.array([0.1, 0.2, 0.1, 0.1], np.float32)), init("zc4", np.zeros(4, np.uint8))]
    for op, attrs in [("Sigmoid", {}), ("Softmax", {"axis": 1}), ("AveragePool", {"kernel_shape": [2, 2]}), ("GlobalAveragePool", {}),
                      ("Transpose", {"perm": [0, 1, 3, 2]}), ("MaxPool", {"kernel_shape": [2, 2]})]:
        add(f"per_channel_{op.lower()}", pc("x", "dx") + [h.make_node(op, ["dx"], ["c"], name="c", **attrs)] + pc("c", "y"), X("x"), Y("y"), pc_inits)
    for op in ["Add", "Concat"]:
        attrs = {"axis": 2} if op == "Concat" else {}
        add(f"per_channel_{op.lower()}", pc("a", "da") + pc("b", "db") + [h.make_node(op, ["da", "db"], ["c"], name="c", **attrs)] + pc("c", "y"),
            X("a", "b"), Y("y"), pc_inits)

    # -- Concat, Where, Split
    def concat(name, zb="z", sb="s2", float_b=False, z="z"):
        nodes = qdq("a", "s", z, "da") + ([] if float_b else qdq("b", sb, zb, "db"))
        nodes += [h.make_node("Concat", ["da", "b" if float_b else "db"], ["c"], axis=1, name="c")] + qdq("c", "s", z, "y")
        add(name, nodes, X("a", "b"), Y("y"), P())

    concat("concat")
    concat("concat_floatin", float_b=True)
    concat("concat_s8", zb="z8", sb="s", z="z8")
    concat("concat_mixed", zb="z16", sb="s")
    cond = [vi("cond", T.BOOL, [1, 4, 4, 4])]
    add(
        "where",
        qdq("a", "s", "z", "da") + qdq("b", "s", "z", "db") + [h.make_node("Where", ["cond", "da", "db"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        cond + X("a", "b"), Y("y"), P(),
    )
    add(
        "where_dummy",
        qdq("a", "s", "z", "da") + [h.make_node("Where", ["cond", "da", "k"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        cond + X("a"), Y("y"), P() + [init("k", np.float32(0.5))],
    )

    def split(name, s2="s", z="z"):
        nodes = qdq("x", "s", z, "dx") + [h.make_node("Split", ["dx"], ["c1", "c2"], axis=1, num_outputs=2, name="sp")]
        nodes += qdq("c1", "s", z, "y1") + qdq("c2", s2, z, "y2")
        add(name, nodes, X("x"), Y("y1", "y2"), P())

    split("split")
    split("split_diff", "s2")
    split("split_u16", z="z16")

    # -- Conv
    def conv(name, xz="z", wdt=np.int8, bias="int", act=None, qzp=True, shared=False, graph_out_q=False, clip=None):
        inits = P() + [
            init("w", W(wdt)), init("sw", np.float32(0.01)), init("zw", wdt(0)),
            init("bq", np.array([30, -20, 5, 7], np.int32)), init("sb", np.float32(0.001)), init("sbw", np.float32(0.0005)),
            init("zbi", np.int32(0)), init("zb1", np.int32(1)), init("bf", np.array([0.3, -0.2, 0.1, 0], np.float32)),
            init("b8", np.array([1, 2, 3, 4], np.int8)), init("sb8", np.float32(0.001)),
            init("mn", np.float32(0.0)), init("mx", np.float32(6.0)),
        ]
        nodes = qdq("x", "s", xz, "dx") + [DQ("w", "sw", "zw", "dw")]
        ins = ["dx", "dw"]
        bias_dq = {"int": ("bq", "sb", "zbi"), "wrongscale": ("bq", "sbw", "zbi"), "int8": ("b8", "sb8", "z8"),
                   "nozp": ("bq", "sb", None), "zp1": ("bq", "sb", "zb1")}
        if bias in bias_dq:
            nodes.append(DQ(*bias_dq[bias], "db"))
            ins.append("db")
        elif bias == "float":
            ins.append("bf")
        nodes.append(h.make_node("Conv", ins, ["c"], pads=[1, 1, 1, 1], name="c"))
        cur = "c"
        if act == "Relu":
            nodes.append(h.make_node("Relu", ["c"], ["r"], name="r"))
            cur = "r"
        if act == "Clip":
            nodes.append(h.make_node("Clip", ["c", "mn"] + (["mx"] if clip != "nomax" else []), ["r"], name="r"))
            cur = "r"
        nodes += [Q(cur, "s", xz if qzp else None, "qy"), DQ("qy", "s", xz if qzp else None, "y")]
        outs = Y("y")
        if shared:
            nodes.append(h.make_node("Sigmoid", ["dx"], ["y2"], name="y2"))
            outs += Y("y2")
        if graph_out_q:
            outs += [vi("qy", T.INT8 if xz == "z8" else T.UINT8, None)]
        add(name, nodes, X("x"), outs, inits)

    conv("conv")
    conv("conv_wrongbiasscale", bias="wrongscale")
    conv("conv_nobias", bias=None)
    conv("conv_floatbias", bias="float")
    conv("conv_int8bias", bias="int8")
    conv("conv_bias_nozp", bias="nozp")
    conv("conv_bias_zp1", bias="zp1")
    conv("conv_s8", xz="z8")
    conv("conv_s8_shared", xz="z8", shared=True)
    conv("conv_u8_shared", shared=True)
    conv("conv_relu", act="Relu")
    conv("conv_relu_nozp", act="Relu", qzp=False)
    conv("conv_clip", act="Clip")
    conv("conv_clip_nomax", act="Clip", clip="nomax")
    conv("conv_u8w", wdt=np.uint8)
    conv("conv_qgraphout", graph_out_q=True)
    conv("conv_u16", xz="z16", bias=None)
    add("conv_depthwise",
        qdq("x", "s", "z", "dx") + [DQ("w", "sw", "zw", "dw"), h.make_node("Conv", ["dx", "dw"], ["c"], group=4, pads=[1, 1, 1, 1], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + [init("w", W(np.int8, (4, 1, 3, 3))), init("sw", np.float32(0.01)), init("zw", np.int8(0))])
    add("conv_1d",
        qdq("x", "s", "z", "dx") + [DQ("w", "sw", "zw", "dw"), h.make_node("Conv", ["dx", "dw"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        [vi("x", T.FLOAT, [1, 4, 8])], Y("y"), P() + [init("w", W(np.int8, (2, 4, 3))), init("sw", np.float32(0.01)), init("zw", np.int8(0))])
    add("convtranspose",
        qdq("x", "s", "z", "dx") + [DQ("w", "sw", "zw", "dw"), h.make_node("ConvTranspose", ["dx", "dw"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + [init("w", W(np.int8, (4, 2, 3, 3))), init("sw", np.float32(0.01)), init("zw", np.int8(0))])
    add("convtranspose_floatweight",
        qdq("x", "s", "z", "dx") + [h.make_node("ConvTranspose", ["dx", "wf"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + [init("wf", rng.standard_normal((4, 2, 3, 3)).astype(np.float32))])

    def convpc(name, xz="z", out_shared=False, sb=None, sx_input=False):
        """Per-channel weights; bias scale sb (default: exactly x_scale·w_scale per channel)."""
        sw = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
        sb = np.float32(0.1) * sw if sb is None else np.asarray(sb, np.float32)
        inits = P() + [init("w", W(np.int8)), init("sw", sw), init("zw", np.zeros(4, np.int8)), init("bq", np.arange(4).astype(np.int32)),
                       init("sbv", sb), init("zbv", np.zeros(sb.shape, np.int32))]
        ins = X("x")
        if sx_input:  # the activation scale is a graph input, so the bias scale cannot be checked
            inits = [i for i in inits if i.name != "s"]
            ins += [vi("s", T.FLOAT, [])]
        nodes = qdq("x", "s", xz, "dx") + [
            DQ("w", "sw", "zw", "dw", axis=0), DQ("bq", "sbv", "zbv", "db", axis=0),
            h.make_node("Conv", ["dx", "dw", "db"], ["c"], pads=[1, 1, 1, 1], name="c"), Q("c", "s2", xz, "qy"), DQ("qy", "s2", xz, "y"),
        ]
        outs = Y("y")
        if out_shared:
            nodes.append(DQ("qy", "s2", xz, "y2"))
            outs += Y("y2")
        add(name, nodes, ins, outs, inits)

    e = np.float32(0.1) * np.array([0.01, 0.02, 0.03, 0.04], np.float32)
    convpc("conv_perchannel")
    convpc("conv_s8_outshared", xz="z8", out_shared=True)
    convpc("conv_s8_perchannel", xz="z8")
    convpc("conv_pc_ch3_off", sb=np.concatenate([e[:3], e[3:] * np.float32(1.5)]))
    convpc("conv_pc_scalar_bias_scale", sb=np.float32(0.001))
    convpc("conv_pc_bias_2ulp", sb=np.nextafter(np.nextafter(e, np.float32(1)), np.float32(1)))
    convpc("conv_pc_bias_0p5pct", sb=e * np.float32(1.005))
    convpc("conv_pc_bias_2pct", sb=e * np.float32(1.02))
    convpc("conv_sx_input", sx_input=True)
    add(
        "conv_floatweight",
        qdq("x", "s", "z", "dx") + [h.make_node("Conv", ["dx", "wf", "bf"], ["c"], pads=[1, 1, 1, 1], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"),
        P() + [init("wf", rng.standard_normal((4, 4, 3, 3)).astype(np.float32)), init("bf", np.array([0.3, -0.2, 0.1, 0], np.float32))],
    )

    # -- MatMul
    def mm(name, q=True, adt="z", bdt=np.int8, relu_then=None, out_c=False):
        inits = P() + [init("w", W(bdt, (4, 4))), init("sw", np.float32(0.01)), init("zw", bdt(0))]
        nodes = qdq("a", "s", adt, "da") + [DQ("w", "sw", "zw", "dw"), h.make_node("MatMul", ["da", "dw"], ["c"], name="c")]
        if q:
            nodes += qdq("c", "s", adt, "y")
        elif relu_then:
            nodes += [h.make_node("Relu", ["c"], ["r"], name="r"), h.make_node(relu_then, ["r"], ["y"], name="y")]
        else:
            nodes += [h.make_node("Sigmoid", ["c"], ["y"], name="y")]
        add(name, nodes, [vi("a", T.FLOAT, [2, 4])], Y("y", *(["c"] if out_c else [])), inits)

    mm("matmul")
    mm("matmul_noq", q=False)
    mm("matmul_noq_relu", q=False, relu_then="Sigmoid")
    mm("matmul_s8", adt="z8")
    mm("matmul_s8_noq", q=False, adt="z8")
    mm("matmul_u8w", bdt=np.uint8)
    mm("matmul_q_graphout", out_c=True)
    mm("matmul_u16", adt="z16", bdt=np.int8)
    add(
        "matmul_s8_shared",
        [Q("a", "s", "z8", "qa"), DQ("qa", "s", "z8", "da"), DQ("w", "sw", "zw", "dw"), h.make_node("MatMul", ["da", "dw"], ["c"], name="c"),
         h.make_node("Sigmoid", ["da"], ["y2"], name="y2")] + qdq("c", "s", "z8", "y"),
        [vi("a", T.FLOAT, [2, 4])], Y("y", "y2"), P() + [init("w", W(np.int8, (4, 4))), init("sw", np.float32(0.01)), init("zw", np.int8(0))],
    )
    add(
        "dq_reshape_matmul",
        [DQ("w", "sw", "zw", "dw"), h.make_node("Reshape", ["dw", "shp"], ["rw"], name="rw"), h.make_node("MatMul", ["da", "rw"], ["c"], name="c")]
        + qdq("a0", "s", "z", "da") + qdq("c", "s", "z", "y"),
        [vi("a0", T.FLOAT, [2, 4])], Y("y"),
        P() + [init("w", W(np.int8, (16,))), init("sw", np.float32(0.01)), init("zw", np.int8(0)), init("shp", np.array([4, 4], np.int64))],
    )

    # -- Gemm
    def gemm(name, beta=None, bias=True, q=True, alpha=None, floatbias=False, sb=0.0005, zb=0, transA=None, az="z", wdt=np.int8):
        inits = P() + [
            init("w", W(wdt, (4, 3), 0 if wdt == np.uint8 else -100, 200 if wdt == np.uint8 else 100)), init("sw", np.float32(0.01)), init("zw", wdt(0)),
            init("bq", np.array([1, 2, 3], np.int32)), init("sb", np.float32(sb)), init("zbi", np.int32(zb)), init("bf", np.ones(3, np.float32)),
        ]
        nodes = qdq("a", "s", az, "da") + [DQ("w", "sw", "zw", "dw")]
        ins = ["da", "dw"]
        if bias and not floatbias:
            nodes.append(DQ("bq", "sb", "zbi", "db"))
            ins.append("db")
        if floatbias:
            ins.append("bf")
        kw = {k: v for k, v in dict(beta=beta, alpha=alpha, transA=transA).items() if v is not None}
        nodes.append(h.make_node("Gemm", ins, ["c"], name="c", **kw))
        nodes += qdq("c", "s", az, "y") if q else [h.make_node("Sigmoid", ["c"], ["y"], name="y")]
        add(name, nodes, [vi("a", T.FLOAT, [4, 2] if transA else [2, 4])], Y("y"), inits)

    gemm("gemm")
    gemm("gemm_beta1", beta=1.0)
    gemm("gemm_beta05", beta=0.5)
    gemm("gemm_noq", q=False)
    gemm("gemm_nobias", bias=False)
    gemm("gemm_floatbias", floatbias=True)
    gemm("gemm_alpha2", alpha=2.0)
    gemm("gemm_alpha2_nobias", alpha=2.0, bias=False)
    gemm("gemm_alpha_1ulp_nobias", alpha=float(np.nextafter(np.float32(1), np.float32(2))), bias=False)
    gemm("gemm_sb_10x", sb=0.005)
    gemm("gemm_bias_zp5", zb=5)
    gemm("gemm_transA", transA=1)
    gemm("gemm_s8", bias=False, az="z8")
    gemm("gemm_u8w_s8a", bias=False, az="z8", wdt=np.uint8)

    # per-tensor or per-column parameters only (PR #28714): A [2, 4], B [4, N = 3]
    def gemm_pc(name, a=("s", "z", 1), w=("sw", "zw", 1), y=("s", "z", 1), transB=False):
        inits = P() + [
            init("w", W(np.int8, (3, 4) if transB else (4, 3))), init("sw", np.float32(0.01)), init("zw", np.int8(0)),
            init("s1", np.full(1, 0.1, np.float32)), init("u1", np.zeros(1, np.uint8)),
            init("s3", np.array([0.1, 0.2, 0.3], np.float32)), init("u3", np.zeros(3, np.uint8)), init("i3", np.zeros(3, np.int8)),
            init("s4", np.full(4, 0.1, np.float32)), init("u4", np.zeros(4, np.uint8)), init("i4", np.zeros(4, np.int8)),
        ]
        nodes = [Q("a", a[0], a[1], "qa", axis=a[2]), DQ("qa", a[0], a[1], "da", axis=a[2]), DQ("w", w[0], w[1], "dw", axis=w[2]),
                 h.make_node("Gemm", ["da", "dw"], ["c"], name="c", transB=int(transB)), Q("c", y[0], y[1], "qy", axis=y[2]), DQ("qy", y[0], y[1], "y", axis=y[2])]
        add(name, nodes, [vi("a", T.FLOAT, [2, 4])], Y("y"), inits)

    gemm_pc("gemm_one_element_params", a=("s1", "u1", 1), y=("s1", "u1", 1))
    gemm_pc("gemm_per_column_b", w=("s3", "i3", 1))
    gemm_pc("gemm_per_column_b_transb", w=("s3", "i3", 0), transB=True)
    gemm_pc("gemm_per_row_b", w=("s4", "i4", 0))
    gemm_pc("gemm_per_channel_a", a=("s4", "u4", 1))
    gemm_pc("gemm_per_channel_y", y=("s3", "u3", 1))

    # -- DQ → MatMul/Gemm with constant 4/8-bit weights (MatMulNBits)
    def nbits(name, wdt=T.INT4, per="block", block=16, shared=False, op="MatMul", alpha=None, fbias=False, one_dq_two=False):
        k, n = 32, 8
        vals = rng.integers(-8, 8, (k, n)) if wdt in (T.INT4, T.INT8) else rng.integers(0, 16, (k, n))
        w = h.make_tensor("w", wdt, [k, n], vals.flatten().tolist())
        attrs = {}
        if per == "tensor":
            s, zp = init("sw", np.float32(0.01)), h.make_tensor("zw", wdt, [], [0])
        elif per == "channel":
            s, zp, attrs = init("sw", np.full((n,), 0.01, np.float32)), h.make_tensor("zw", wdt, [n], [0] * n), {"axis": 1}
        else:
            s = init("sw", np.full((k // block, n), 0.01, np.float32))
            zp = h.make_tensor("zw", wdt, [k // block, n], [0] * (k // block * n))
            attrs = {"axis": 0, "block_size": block}
        ins = ["x", "dw"] + (["bfl"] if fbias else [])
        kw = {} if alpha is None else {"alpha": alpha}
        nodes = [DQ("w", "sw", "zw", "dw", **attrs), h.make_node(op, ins, ["y"], name="y", **kw)]
        outs, gins = [vi("y", T.FLOAT, [2, n])], [vi("x", T.FLOAT, [2, k])]
        if shared:
            nodes += [DQ("w", "sw", "zw", "dw2", **attrs), h.make_node("MatMul", ["x", "dw2"], ["y2"], name="y2")]
            outs.append(vi("y2", T.FLOAT, [2, n]))
        if one_dq_two:
            nodes.append(h.make_node("MatMul", ["x2", "dw"], ["y2"], name="y2"))
            outs.append(vi("y2", T.FLOAT, [2, n]))
            gins.append(vi("x2", T.FLOAT, [2, k]))
        add(name, nodes, gins, outs, [w, s, zp, init("bfl", np.ones(n, np.float32))])

    nbits("nbits_int4")
    nbits("nbits_uint4", wdt=T.UINT4)
    nbits("nbits_int8_tensor", T.INT8, "tensor")
    nbits("nbits_int8_channel", T.INT8, "channel")
    nbits("nbits_block8", block=8)
    nbits("nbits_block32", block=32)
    nbits("nbits_shared", shared=True)
    nbits("nbits_one_dq_two_matmuls", one_dq_two=True)
    nbits("nbits_gemm", op="Gemm")
    nbits("nbits_gemm_int8_channel", T.INT8, "channel", op="Gemm")
    nbits("nbits_gemm_bias", T.INT8, "channel", op="Gemm", fbias=True)
    nbits("nbits_gemm_alpha2", T.INT8, "channel", op="Gemm", alpha=2.0)

    # -- DoubleQDQPairsRemover, QDQFinalCleanup
    def dbl(name, s1="s", z1="z", s2="s2", z2="z"):
        add(name, qdq("x", s1, z1, "d1") + qdq("d1", s2, z2, "y"), X("x"), Y("y"), P())

    dbl("double_same", s2="s")
    dbl("double_diff")
    dbl("double_diffzp", z2="zb")
    dbl("double_s8", z1="z8", z2="z8", s2="s")
    dbl("double_u16", z1="z16", z2="z16")
    add("double_three", qdq("x", "s", "z", "d1") + qdq("d1", "s2", "z", "d2") + qdq("d2", "s", "z", "y"), X("x"), Y("y"), P())
    u8_in = [vi("xq", T.UINT8, [4])]
    add("dq_q_cleanup", [DQ("xq", "s", "z", "d"), Q("d", "s", "z", "q"), DQ("q", "s2", "z", "y")], u8_in, Y("y"), P())
    add("dq_q_cleanup_diff", [DQ("xq", "s", "z", "d"), Q("d", "s2", "z", "q"), DQ("q", "s2", "z", "y")], u8_in, Y("y"), P())
    add("dq_q_cleanup_two_q", [DQ("xq", "s", "z", "d"), Q("d", "s", "z", "q1"), Q("d", "s", "z", "q2"), DQ("q1", "s2", "z", "y1"), DQ("q2", "s", "z", "y2")],
        u8_in, Y("y1", "y2"), P())

    # -- Relu / Clip before a Q, after a float op (Relu/ClipQuantRewrite)
    def act(name, op, z="z", s="s", mn=None, mx=None, nozp=False, opset=OPSET, extra=()):
        inits = P() + [init("mn", np.float32(mn if mn is not None else 0)), init("mx", np.float32(mx if mx is not None else 0))] + list(extra)
        if op == "Clip" and opset < 11:
            clip = h.make_node("Clip", ["sg"], ["r"], name="r", **({"min": mn} if mn is not None else {}), **({"max": mx} if mx is not None else {}))
        elif op == "Clip":
            clip = h.make_node("Clip", ["sg"] + (["mn"] if mn is not None else ([""] if mx is not None else [])) + (["mx"] if mx is not None else []), ["r"], name="r")
        else:
            clip = h.make_node(op, ["sg"], ["r"], name="r")
        nodes = qdq("x", s, z, "dx") + [h.make_node("Sigmoid", ["dx"], ["sg"], name="sg"), clip,
                                        Q("r", s, None if nozp else z, "qy"), DQ("qy", s, None if nozp else z, "y")]
        add(name, nodes, X("x"), Y("y"), inits, opset)

    act("relu_q", "Relu")
    act("relu_q_zb", "Relu", z="zb")
    act("relu_q_s8", "Relu", z="z8")
    act("relu_q_nozp", "Relu", nozp=True)
    act("relu_q_neg", "Relu", s="sneg")
    act("relu_q_16", "Relu", z="z16")
    act("clip_q_full", "Clip", mn=0.0, mx=25.5)
    act("clip_q_6", "Clip", mn=0.0, mx=6.0)
    act("clip_q_min_only", "Clip", mn=0.0)
    act("clip_q_max_only", "Clip", mx=25.5)
    act("clip_q_min004", "Clip", mn=0.04)
    act("clip_q_min004_max", "Clip", mn=0.04, mx=25.5)
    act("clip_q_min_neg", "Clip", mn=-1.0, mx=30.0)
    act("clip6_attrs", "Clip", mn=0.0, mx=25.5, opset=10)
    act("clip6_noattrs", "Clip", opset=10)
    # int8 activations: zero point −128 makes a Relu redundant; a Clip within FLT_EPSILON of a
    # tiny scale's range is removed although it clips (the audit refutes it).
    tiny = [init("stiny", np.float32(1e-9)), init("zm128", np.int8(-128))]
    act("relu_q_s8_min", "Relu", z="zm128", extra=tiny[1:])
    act("clip_q_s8_eps", "Clip", s="stiny", z="zm128", mn=0.0, mx=2e-7, extra=tiny)
    add(
        "clip_int4_q",
        qdq("x", "s", "z", "dx") + [h.make_node("Sigmoid", ["dx"], ["sg"], name="sg"), h.make_node("Clip", ["sg", "mn", "mx"], ["r"], name="r"),
                                    Q("r", "s", "z4", "qy"), DQ("qy", "s", "z4", "y")],
        X("x"), Y("y"), P() + [init("mn", np.float32(0)), init("mx", np.float32(1)), h.make_tensor("z4", T.INT4, [], [0])],
    )
    add(
        "relu_int4_q",
        qdq("x", "s", "z", "dx") + [h.make_node("Sigmoid", ["dx"], ["sg"], name="sg"), h.make_node("Relu", ["sg"], ["r"], name="r"),
                                    Q("r", "s", "z4", "qy"), DQ("qy", "s", "z4", "y")],
        X("x"), Y("y"), P() + [h.make_tensor("z4", T.INT4, [], [3])],
    )

    # -- subgraphs
    then = h.make_graph(qdq("a", "s", "z", "da") + qdq("b", "s", "z", "db") + [h.make_node("Add", ["da", "db"], ["c"], name="c")] + qdq("c", "s", "z", "ty"),
                        "then", [], [vi("ty", T.FLOAT, [1, 4, 4, 4])])
    els = h.make_graph([h.make_node("Identity", ["a"], ["ey"], name="ey")], "else", [], [vi("ey", T.FLOAT, [1, 4, 4, 4])])
    add("if_add", [h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=els, name="if")], [vi("cond", T.BOOL, [])] + X("a", "b"), Y("y"), P())
    inner = h.make_graph([h.make_node("Sigmoid", ["dx"], ["c"], name="c")] + qdq("c", "s", "z", "ty"), "then", [], [vi("ty", T.FLOAT, [1, 4, 4, 4])])
    els = h.make_graph([h.make_node("Identity", ["dx"], ["ey"], name="ey")], "else", [], [vi("ey", T.FLOAT, [1, 4, 4, 4])])
    add("if_outer_dq", qdq("x", "s", "z", "dx") + [h.make_node("If", ["cond"], ["y"], then_branch=inner, else_branch=els, name="if")],
        [vi("cond", T.BOOL, [])] + X("x"), Y("y"), P())
    body = h.make_graph(
        qdq("a", "s", "z", "da") + [h.make_node("Sigmoid", ["da"], ["c"], name="c")] + qdq("c", "s", "z", "ly") + [h.make_node("Identity", ["cond_in"], ["cond_out"], name="co")],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, [])], [vi("cond_out", T.BOOL, []), vi("ly", T.FLOAT, [1, 4, 4, 4])],
    )
    add("loop_sigmoid", [h.make_node("Loop", ["n", "cond"], ["y"], body=body, name="loop")], [vi("n", T.INT64, []), vi("cond", T.BOOL, [])] + X("a"), Y("y"), P())
    w_init = init("w", W(np.int8, (4, 4)))
    nested_then = h.make_graph(qdq("a", "s", "z", "da") + [DQ("w", "sw", "zw", "dw"), h.make_node("MatMul", ["da", "dw"], ["c"], name="c")] + qdq("c", "s", "z", "ty"),
                               "then", [], [vi("ty", T.FLOAT, [2, 4])])
    nested_else = h.make_graph([h.make_node("Identity", ["a"], ["ey"], name="ey")], "else", [], [vi("ey", T.FLOAT, [2, 4])])
    loop_body = h.make_graph(
        [h.make_node("If", ["cond_in"], ["ly"], then_branch=nested_then, else_branch=nested_else, name="inner_if"), h.make_node("Identity", ["cond_in"], ["cond_out"], name="co")],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, [])], [vi("cond_out", T.BOOL, []), vi("ly", T.FLOAT, [2, 4])],
    )
    add("loop_if_matmul", [h.make_node("Loop", ["n", "cond"], ["y"], body=loop_body, name="loop")],
        [vi("n", T.INT64, []), vi("cond", T.BOOL, []), vi("a", T.FLOAT, [2, 4])], Y("y"), P() + [w_init, init("sw", np.float32(0.01)), init("zw", np.int8(0))])

    # -- structure: shared DQs, propagation, duplicate Qs, parameters that are not initializers
    add("add_shared_dq",
        qdq("a", "s", "z", "da") + qdq("b", "s", "z", "db") + [h.make_node("Add", ["da", "db"], ["c1"], name="c1"), h.make_node("Mul", ["da", "db"], ["c2"], name="c2")]
        + qdq("c1", "s", "z", "y1") + qdq("c2", "s", "z", "y2"), X("a", "b"), Y("y1", "y2"), P())
    add("add_s8_q_two_dq",
        [Q("a", "s", "z8", "qa"), DQ("qa", "s", "z8", "da"), DQ("qa", "s", "z8", "da2")] + qdq("b", "s", "z8", "db")
        + [h.make_node("Add", ["da", "db"], ["c"], name="c"), h.make_node("Sigmoid", ["da2"], ["y2"], name="y2")] + qdq("c", "s", "z8", "y"),
        X("a", "b"), Y("y", "y2"), P())
    add("transpose_prop",
        qdq("x", "s", "z", "dx") + [h.make_node("Transpose", ["dx"], ["t"], perm=[0, 1, 3, 2], name="t"), h.make_node("Sigmoid", ["t"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P())
    add("maxpool_chain_prop",
        qdq("x", "s", "z", "dx") + [h.make_node("MaxPool", ["dx"], ["m"], kernel_shape=[2, 2], name="m"), h.make_node("Transpose", ["m"], ["r"], perm=[0, 1, 3, 2], name="r"),
                                    h.make_node("Sigmoid", ["r"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P())
    add("q_prop_backward",
        qdq("x", "s", "z", "dx") + [h.make_node("Sigmoid", ["dx"], ["sg"], name="sg"), h.make_node("Reshape", ["sg", "shape"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + [init("shape", np.array([1, 64], np.int64))])
    add("two_identical_q",
        qdq("a", "s", "z", "da") + [h.make_node("Sigmoid", ["da"], ["c"], name="c"), Q("c", "s", "z", "q1"), Q("c", "s", "z", "q2"), DQ("q1", "s", "z", "y1"), DQ("q2", "s", "z", "y2")],
        X("a"), Y("y1", "y2"), P())
    add("transpose_q_nozp_outdtype",
        [Q("x", "s", "z8", "qx"), DQ("qx", "s", "z8", "dx"), h.make_node("Transpose", ["dx"], ["c"], perm=[0, 2, 3, 1], name="c"),
         Q("c", "s", None, "qy", output_dtype=T.INT8), DQ("qy", "s", None, "y")],
        X("x"), Y("y"), P())
    add("constant_node_scales",
        [h.make_node("Constant", [], ["cs"], value_float=0.1, name="cs"), h.make_node("Constant", [], ["cz"], value=h.make_tensor("czv", T.UINT8, [], [0]), name="cz")]
        + qdq("x", "cs", "cz", "dx") + [h.make_node("Transpose", ["dx"], ["c"], perm=[0, 2, 3, 1], name="c")] + qdq("c", "cs", "cz", "y"),
        X("x"), Y("y"), P())
    add("overridable_scale",
        qdq("x", "s", "z", "dx") + [h.make_node("Transpose", ["dx"], ["c"], perm=[0, 2, 3, 1], name="c")] + qdq("c", "s", "z", "y"),
        X("x") + [vi("s", T.FLOAT, [])], Y("y"), P())
    add("scale_graph_input",
        qdq("x", "sx", "z", "dx") + [h.make_node("Sigmoid", ["dx"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x") + [vi("sx", T.FLOAT, [])], Y("y"), P())
    # -- NNCF's float32 weights quantized at run time: W → Q → DQ → Conv
    wf = init("wf", rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32))
    add("conv_fp32_weight_q", qdq("x", "s", "z", "dx") + [Q("wf", "s", "z8", "qw"), DQ("qw", "s", "z8", "dw"),
                                                          h.make_node("Conv", ["dx", "dw"], ["c"], name="c", pads=[1, 1, 1, 1])] + qdq("c", "s2", "z", "y"),
        X("x"), Y("y"), P() + [wf])
    # -- int8 Add whose Q pairs QDQS8ToU8 leaves int8 (their Qs also feed graph outputs): int8 QLinearAdd
    add("add_s8_exposed", qdq("a", "s", "z8", "da", q="qa") + qdq("b", "s2", "z8", "db", q="qb") + [h.make_node("Add", ["da", "db"], ["c"], name="c")]
        + qdq("c", "s", "z8", "y"), X("a", "b"), Y("y") + [vi("qa", T.INT8, None), vi("qb", T.INT8, None)], P())

    return b.models


# ----------------------------------------------------------------------------------------------
# hazard models: one or two hazards each (the test lists the kinds it expects)


def hazard_models() -> dict[str, onnx.ModelProto]:
    b = Builder()
    add, W = b.add, b.W

    def transpose(name, s="s", z="z"):
        nodes = qdq("x", s, z, "dx") + [h.make_node("Transpose", ["dx"], ["c"], perm=[0, 2, 3, 1], name="c")] + qdq("c", s, z, "y")
        return nodes

    extra = [init("s0", np.float32(0.0)), init("snan", np.float32(np.nan)), init("ssub", np.float32(1e-40)),
             onnx.TensorProto(name="z_bad", data_type=T.UINT8, int32_data=[300])]  # outside uint8
    add("hz_zero_scale", transpose("hz", s="s0"), X("x"), Y("y"), P() + extra)
    add("hz_nan_scale", transpose("hz", s="snan"), X("x"), Y("y"), P() + extra)
    add("hz_subnormal_scale", transpose("hz", s="ssub"), X("x"), Y("y"), P() + extra)
    add("hz_zero_point_range", transpose("hz", z="z_bad"), X("x"), Y("y"), P() + extra)
    add("hz_fp16_quantize", [Q("x", "sh", "z8", "qx"), DQ("qx", "sh", "z8", "y")], [vi("x", T.FLOAT16, [4])], [vi("y", T.FLOAT16, None)],
        P() + [init("sh", np.float16(0.1))])
    add("hz_q_output_dtype", [Q("x", "s", None, "qx", output_dtype=T.INT8), DQ("qx", "s", None, "y")], X("x"), Y("y"), P())
    add("hz_int8_wrap", [h.make_node("Sub", ["a", "zc"], ["d"], name="sub"), h.make_node("Cast", ["d"], ["y"], to=T.INT32, name="cast")],
        [vi("a", T.UINT8, [4])], [vi("y", T.INT32, None)], P() + [init("zc", np.array([128] * 4, np.uint8))])
    sc = [init("sc", np.array([1, 1, 2, 2], np.float32))]
    add("hz_resize_linear", qdq("x", "s", "z", "dx") + [h.make_node("Resize", ["dx", "", "sc"], ["c"], mode="linear", name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + sc, 19)

    def conv(name, sb=np.float32(0.1) * np.float32(0.01), bzp=0, wzp=None, w=None):
        """u8 activations, s8 weights; per-channel weight zero points when wzp is a list."""
        weights = W(np.int8, (4, 4, 3, 3), -60, 60) if w is None else w
        if wzp is None:
            wdq = DQ("w", "sw", "zw", "dw")
            winits = [init("sw", np.float32(0.01)), init("zw", np.int8(0))]
        else:
            wdq = DQ("w", "sw", "zw", "dw", axis=0)
            winits = [init("sw", np.full(4, 0.01, np.float32)), init("zw", np.array(wzp, np.int8))]
        nodes = qdq("x", "s", "z", "dx") + [wdq, DQ("bq", "sb", "zbi", "db"), h.make_node("Conv", ["dx", "dw", "db"], ["c"], pads=[1, 1, 1, 1], name="c")] + qdq("c", "s2", "z", "y")
        inits = P() + winits + [init("w", weights), init("bq", np.array([30, -20, 5, 7], np.int32)), init("sb", np.float32(sb)), init("zbi", np.int32(bzp))]
        add(name, nodes, X("x"), Y("y"), inits)

    exact = np.float32(0.1) * np.float32(0.01)  # x_scale · w_scale
    conv("hz_conv_clean", sb=exact)
    conv("hz_bias_scale", sb=np.nextafter(np.nextafter(exact, np.float32(1)), np.float32(1)))  # 2 ulps off: fused anyway
    add("hz_bias_zero_point",  # a Gemm is fused whatever its bias zero point; QGemm ignores it
        qdq("a", "s", "z", "da") + [DQ("w", "sw", "zw", "dw"), DQ("bq", "sb", "zbi", "db"), h.make_node("Gemm", ["da", "dw", "db"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        [vi("a", T.FLOAT, [2, 4])], Y("y"),
        P() + [init("w", W(np.int8, (4, 3), -60, 60)), init("sw", np.float32(0.01)), init("zw", np.int8(0)), init("bq", np.array([1, 2, 3], np.int32)),
               init("sb", exact), init("zbi", np.int32(1000))])
    conv("hz_weight_zero_points", wzp=[0, 1, 0, 0])
    conv("hz_s8_pair_overflow", w=W(np.int8, (4, 4, 3, 3), 100, 120))
    add("hz_softmax_int8", qdq("x", "s", "z8", "dx") + [h.make_node("Softmax", ["dx"], ["c"], name="c")] + [Q("c", "sp", "z8", "qy"), DQ("qy", "sp", "z8", "y")],
        X("x"), Y("y"), P() + [init("sp", np.float32(1 / 256))], 13)
    pc_inits = [init("sc4", np.array([0.1, 0.2, 0.1, 0.1], np.float32)), init("zc4", np.zeros(4, np.uint8))]
    add("hz_per_channel_sigmoid",
        [Q("x", "sc4", "zc4", "qx", axis=1), DQ("qx", "sc4", "zc4", "dx", axis=1), h.make_node("Sigmoid", ["dx"], ["c"], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P() + pc_inits)
    add("hz_per_channel_conv",  # per-channel weights are fine, a per-channel output is not
        qdq("x", "s", "z", "dx") + [DQ("w", "sw", "zw", "dw"), h.make_node("Conv", ["dx", "dw"], ["c"], name="c"), Q("c", "sc4", "zc4", "qy", axis=1),
                                    DQ("qy", "sc4", "zc4", "y", axis=1)],
        X("x"), Y("y"), P() + pc_inits + [init("w", W(np.int8, (4, 4, 1, 1), -60, 60)), init("sw", np.float32(0.01)), init("zw", np.int8(0))])
    add("hz_avgpool_dilations",
        qdq("x", "s", "z", "dx") + [h.make_node("AveragePool", ["dx"], ["c"], kernel_shape=[2, 2], dilations=[2, 2], name="c")] + qdq("c", "s", "z", "y"),
        X("x"), Y("y"), P(), 19)
    then = h.make_graph(transpose("hz", s="s0"), "then", [], [vi("y", T.FLOAT, [1, 4, 4, 4])])
    els = h.make_graph([h.make_node("Identity", ["x"], ["ey"], name="ey")], "else", [], [vi("ey", T.FLOAT, [1, 4, 4, 4])])
    add("hz_in_subgraph", [h.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=els, name="if")],
        [vi("cond", T.BOOL, [])] + X("x"), Y("out"), P() + extra)
    return b.models


# ----------------------------------------------------------------------------------------------


def generator_fingerprint() -> str:
    return hashlib.sha256(Path(__file__).resolve().read_bytes()).hexdigest()


def write(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    sel, hz = selector_models(), hazard_models()
    for name, m in {**sel, **hz}.items():
        (out / f"{name}.onnx").write_bytes(m.SerializeToString(deterministic=True))
    manifest = {
        "generator": "tests/oracle/selector_models.py",
        "generator_sha256": generator_fingerprint(),
        "selectors": sorted(sel),
        "hazards": sorted(hz),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTDIR")
    m = write(Path(sys.argv[1]))
    print(f"{len(m['selectors'])} selector models, {len(m['hazards'])} hazard models in {sys.argv[1]}")
