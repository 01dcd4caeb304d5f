#!/usr/bin/env python3
"""Build the qdqc test corpus deterministically.

    python tests/oracle/corpus.py OUTDIR

Writes every model plus OUTDIR/manifest.json. Everything is seeded: running it twice gives the
same bytes (given the pinned versions in requirements.txt). Model kinds:

  float     small float models built with onnx.helper (opset 21, ir_version 10)
  qdq       the float models quantized by onnxruntime.quantization.quantize_static (QDQ format)
  pow2      each qdq model with every Q/DQ scale rounded to the nearest power of two (see pow2_variant)
  seed      models built by the seed scripts in tests/oracle/seeds/ (vendored repros of ORT bugs)
  external  a QDQ model whose initializers live in an external data file
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SEEDS_DIR = HERE / "seeds"

OPSET = 21
IR_VERSION = 10
N_CALIB = 8

# (script file name, corpus name, description)
SEED_SCRIPTS = [
    (
        "ort_qdq_synthetic_repro.py",
        "seed_synthetic_shared_q",
        "Seed: residual QDQ block (opset 13) where one Q output feeds two DQs; "
        "ORT_ENABLE_ALL fusion differs from ORT_DISABLE_ALL by 1 LSB on 25 elements.",
    ),
    (
        "ort_matmulnbits_if_repro.py",
        "seed_if_outer_scope",
        "Seed: If whose two branches each do DQ->MatMul on uint8 weights from the outer graph (opset 21); "
        "ORT 1.31.1 fails at session creation with default optimizations.",
    ),
]

# Quantization variants: name -> (activation type, weight type, per_channel, extra_options, description)
QUANT_VARIANTS = ["u8u8_pt", "s8s8_pc", "u8s8_pc_asym"]

# Ops quantized on top of ORT's default list (which has no Gelu / HardSigmoid / LSTM in QDQ mode).
EXTRA_QUANT_OPS = ["Gelu", "HardSigmoid", "LSTM"]


# --------------------------------------------------------------------------------------------
# helpers


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _init(name: str, arr: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def _w(rng: np.random.Generator, shape, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * (1.0 / np.sqrt(fan_in))).astype(np.float32)


def _b(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.standard_normal(n) * 0.1).astype(np.float32)


def _model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="qdqc-corpus",
        producer_version="1",
        doc_string=doc,
    )
    onnx.checker.check_model(m, full_check=True)
    return m


def _vi(name: str, elem: int, shape):
    return helper.make_tensor_value_info(name, elem, shape)


# --------------------------------------------------------------------------------------------
# float architectures. Each returns (model, input spec for calibration {name: (dtype, shape)})


def build_cnn_residual():
    rng = _rng(101)
    inits = [
        _init("c1_w", _w(rng, (8, 3, 3, 3), 27)),
        _init("c1_b", _b(rng, 8)),
        _init("c2_w", _w(rng, (8, 8, 3, 3), 72)),
        _init("c2_b", _b(rng, 8)),
        _init("c3_w", _w(rng, (16, 16, 3, 3), 144)),
        _init("c3_b", _b(rng, 16)),
        _init("fc_w", _w(rng, (10, 272), 272)),
        _init("fc_b", _b(rng, 10)),
    ]
    N = helper.make_node
    nodes = [
        N("Conv", ["input", "c1_w", "c1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        N("Relu", ["c1"], ["r1"], name="relu1"),
        N("Conv", ["r1", "c2_w", "c2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        N("Relu", ["c2"], ["r2"], name="relu2"),
        N("Add", ["r1", "r2"], ["res"], name="residual_add"),
        N("Concat", ["res", "r1"], ["cat"], name="concat", axis=1),  # [1,16,16,16]
        N("MaxPool", ["cat"], ["mp"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),  # [1,16,8,8]
        N("Conv", ["mp", "c3_w", "c3_b"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        N("Relu", ["c3"], ["r3"], name="relu3"),
        N("AveragePool", ["r3"], ["ap"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2]),  # [1,16,4,4]
        N("Flatten", ["ap"], ["ap_flat"], name="flatten_ap", axis=1),  # [1,256]
        N("GlobalAveragePool", ["r3"], ["gap"], name="gap"),  # [1,16,1,1]
        N("Flatten", ["gap"], ["gap_flat"], name="flatten_gap", axis=1),  # [1,16]
        N("Concat", ["ap_flat", "gap_flat"], ["feat"], name="concat_feat", axis=1),  # [1,272]
        N("Gemm", ["feat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "cnn_residual",
        [_vi("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [_vi("logits", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return _model(g, "CNN: Conv+Relu, residual Add, Concat, MaxPool, AveragePool, GlobalAveragePool, Flatten, Gemm")


def build_transformer_block():
    rng = _rng(202)
    S, D, H, F = 16, 64, 4, 128
    Dh = D // H
    inits = [
        _init("ln1_g", (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)),
        _init("ln1_b", _b(rng, D)),
        _init("wq", _w(rng, (D, D), D)),
        _init("bq", _b(rng, D)),
        _init("wk", _w(rng, (D, D), D)),
        _init("bk", _b(rng, D)),
        _init("wv", _w(rng, (D, D), D)),
        _init("bv", _b(rng, D)),
        _init("wo", _w(rng, (D, D), D)),
        _init("bo", _b(rng, D)),
        _init("ln2_g", (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)),
        _init("ln2_b", _b(rng, D)),
        _init("w1", _w(rng, (D, F), D)),
        _init("b1", _b(rng, F)),
        _init("w2", _w(rng, (F, D), F)),
        _init("b2", _b(rng, D)),
        _init("heads_shape", np.array([1, S, H, Dh], dtype=np.int64)),
        _init("model_shape", np.array([1, S, D], dtype=np.int64)),
        _init("attn_scale", np.array(1.0 / np.sqrt(Dh), dtype=np.float32)),
    ]
    N = helper.make_node
    nodes = [N("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["ln1"], name="ln1", axis=-1, epsilon=1e-5)]
    for p in ("q", "k", "v"):
        nodes += [
            N("MatMul", ["ln1", f"w{p}"], [f"{p}_mm"], name=f"{p}_proj"),
            N("Add", [f"{p}_mm", f"b{p}"], [f"{p}_lin"], name=f"{p}_bias"),
            N("Reshape", [f"{p}_lin", "heads_shape"], [f"{p}_heads"], name=f"{p}_reshape"),
        ]
    nodes += [
        N("Transpose", ["q_heads"], ["q_t"], name="q_transpose", perm=[0, 2, 1, 3]),  # [1,H,S,Dh]
        N("Transpose", ["k_heads"], ["k_t"], name="k_transpose", perm=[0, 2, 3, 1]),  # [1,H,Dh,S]
        N("Transpose", ["v_heads"], ["v_t"], name="v_transpose", perm=[0, 2, 1, 3]),  # [1,H,S,Dh]
        N("MatMul", ["q_t", "k_t"], ["scores"], name="qk"),
        N("Mul", ["scores", "attn_scale"], ["scores_scaled"], name="scale"),
        N("Softmax", ["scores_scaled"], ["probs"], name="softmax", axis=-1),
        N("MatMul", ["probs", "v_t"], ["ctx"], name="attn_v"),
        N("Transpose", ["ctx"], ["ctx_t"], name="ctx_transpose", perm=[0, 2, 1, 3]),
        N("Reshape", ["ctx_t", "model_shape"], ["ctx_flat"], name="ctx_reshape"),
        N("MatMul", ["ctx_flat", "wo"], ["o_mm"], name="o_proj"),
        N("Add", ["o_mm", "bo"], ["o_lin"], name="o_bias"),
        N("Add", ["x", "o_lin"], ["res1"], name="residual1"),
        N("LayerNormalization", ["res1", "ln2_g", "ln2_b"], ["ln2"], name="ln2", axis=-1, epsilon=1e-5),
        N("MatMul", ["ln2", "w1"], ["f1_mm"], name="ffn1"),
        N("Add", ["f1_mm", "b1"], ["f1"], name="ffn1_bias"),
        N("Gelu", ["f1"], ["f1_act"], name="gelu"),
        N("MatMul", ["f1_act", "w2"], ["f2_mm"], name="ffn2"),
        N("Add", ["f2_mm", "b2"], ["f2"], name="ffn2_bias"),
        N("Add", ["res1", "f2"], ["y"], name="residual2"),
    ]
    g = helper.make_graph(
        nodes,
        "transformer_block",
        [_vi("x", TensorProto.FLOAT, [1, S, D])],
        [_vi("y", TensorProto.FLOAT, [1, S, D])],
        inits,
    )
    return _model(
        g, "Transformer encoder block: LayerNormalization, MatMul QKV, 4-head Softmax attention, Gelu MLP, residuals"
    )


def build_dwsep_net():
    rng = _rng(303)
    C0, C1, C2 = 8, 16, 4
    inits = [
        _init("dw1_w", _w(rng, (C0, 1, 3, 3), 9)),
        _init("dw1_b", _b(rng, C0)),
        _init("pw1_w", _w(rng, (C1, C0, 1, 1), C0)),
        _init("pw1_b", _b(rng, C1)),
        _init("dw2_w", _w(rng, (C1, 1, 3, 3), 9)),
        _init("dw2_b", _b(rng, C1)),
        _init("pw2_w", _w(rng, (C2, C1, 1, 1), C1)),
        _init("pw2_b", _b(rng, C2)),
        _init("up_scales", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32)),
        _init("down_scales", np.array([1.0, 1.0, 0.5, 0.5], dtype=np.float32)),
    ]
    N = helper.make_node

    def hswish(x, tag):
        return [
            N("HardSigmoid", [x], [f"{tag}_hs"], name=f"{tag}_hardsigmoid", alpha=1.0 / 6.0, beta=0.5),
            N("Mul", [x, f"{tag}_hs"], [f"{tag}_hsw"], name=f"{tag}_hardswish_mul"),
        ]

    nodes = [N("Conv", ["input", "dw1_w", "dw1_b"], ["dw1"], name="dw1", group=C0, pads=[1, 1, 1, 1])]
    nodes += hswish("dw1", "a1")
    nodes += [N("Conv", ["a1_hsw", "pw1_w", "pw1_b"], ["pw1"], name="pw1")]
    nodes += hswish("pw1", "a2")
    nodes += [
        N("Resize", ["a2_hsw", "", "up_scales"], ["up"], name="upsample_nearest", mode="nearest"),  # [1,16,32,32]
        N("Conv", ["up", "dw2_w", "dw2_b"], ["dw2"], name="dw2", group=C1, pads=[1, 1, 1, 1]),
        N("Relu", ["dw2"], ["dw2_r"], name="dw2_relu"),
        N("Conv", ["dw2_r", "pw2_w", "pw2_b"], ["pw2"], name="pw2"),  # [1,4,32,32]
        N("Resize", ["pw2", "", "down_scales"], ["out"], name="downsample_linear", mode="linear"),  # [1,4,16,16]
    ]
    g = helper.make_graph(
        nodes,
        "dwsep_net",
        [_vi("input", TensorProto.FLOAT, [1, C0, 16, 16])],
        [_vi("out", TensorProto.FLOAT, [1, C2, 16, 16])],
        inits,
    )
    return _model(
        g,
        "Depthwise-separable net: depthwise (group) Conv + pointwise Conv, hard-swish (HardSigmoid*x), "
        "Resize nearest x2 upsample, Resize linear x0.5",
    )


def build_lstm_net():
    rng = _rng(404)
    T, B, I, Hd, O = 8, 1, 16, 32, 10
    inits = [
        _init("lstm_W", _w(rng, (1, 4 * Hd, I), I)),
        _init("lstm_R", _w(rng, (1, 4 * Hd, Hd), Hd)),
        _init("lstm_B", _b(rng, 8 * Hd).reshape(1, 8 * Hd)),
        _init("squeeze_axes", np.array([1], dtype=np.int64)),
        _init("head_w", _w(rng, (Hd, O), Hd)),
        _init("head_b", _b(rng, O)),
    ]
    N = helper.make_node
    nodes = [
        N("LSTM", ["seq", "lstm_W", "lstm_R", "lstm_B"], ["Y", "Y_h"], name="lstm", hidden_size=Hd),
        N("Squeeze", ["Y", "squeeze_axes"], ["Y_sq"], name="squeeze_dir"),  # [T,B,Hd]
        N("MatMul", ["Y_sq", "head_w"], ["head_mm"], name="head"),
        N("Add", ["head_mm", "head_b"], ["logits"], name="head_bias"),
    ]
    g = helper.make_graph(
        nodes,
        "lstm_net",
        [_vi("seq", TensorProto.FLOAT, [T, B, I])],
        [_vi("logits", TensorProto.FLOAT, [T, B, O]), _vi("Y_h", TensorProto.FLOAT, [1, B, Hd])],
        inits,
    )
    return _model(g, "LSTM (hidden 32, seq 8) followed by MatMul+Add head")


def build_loop_if_net():
    rng = _rng(505)
    C, K = 4, 32
    inits = [
        _init("then_w", _w(rng, (C, C, 3, 3), 9 * C)),
        _init("then_b", _b(rng, C)),
        _init("else_w", _w(rng, (C, C, 1, 1), C)),
        _init("proj_w", _w(rng, (C * 8 * 8, K), C * 64)),
        _init("loop_w", _w(rng, (K, K), K)),
        _init("loop_b", _b(rng, K)),
        _init("trip_count", np.array(3, dtype=np.int64)),
        _init("loop_cond", np.array(True, dtype=np.bool_)),
    ]
    N = helper.make_node
    then_g = helper.make_graph(
        [
            N("Conv", ["x", "then_w", "then_b"], ["then_c"], name="then_conv", pads=[1, 1, 1, 1]),
            N("Relu", ["then_c"], ["then_y"], name="then_relu"),
        ],
        "then_branch",
        [],
        [_vi("then_y", TensorProto.FLOAT, [1, C, 8, 8])],
    )
    else_g = helper.make_graph(
        [
            N("Conv", ["x", "else_w"], ["else_c"], name="else_conv"),
            N("Sigmoid", ["else_c"], ["else_y"], name="else_sigmoid"),
        ],
        "else_branch",
        [],
        [_vi("else_y", TensorProto.FLOAT, [1, C, 8, 8])],
    )
    body = helper.make_graph(
        [
            N("MatMul", ["h_in", "loop_w"], ["body_mm"], name="body_matmul"),
            N("Add", ["body_mm", "loop_b"], ["body_lin"], name="body_bias"),
            N("Tanh", ["body_lin"], ["h_out"], name="body_tanh"),
            N("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "loop_body",
        [
            _vi("iter", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, None),
            _vi("h_in", TensorProto.FLOAT, [1, K]),
        ],
        [_vi("cond_out", TensorProto.BOOL, None), _vi("h_out", TensorProto.FLOAT, [1, K])],
    )
    nodes = [
        N("If", ["cond"], ["branch_y"], name="if_branch", then_branch=then_g, else_branch=else_g),
        N("Flatten", ["branch_y"], ["flat"], name="flatten", axis=1),
        N("MatMul", ["flat", "proj_w"], ["h0"], name="proj"),
        N("Loop", ["trip_count", "loop_cond", "h0"], ["h_final"], name="loop", body=body),
    ]
    g = helper.make_graph(
        nodes,
        "loop_if_net",
        [_vi("cond", TensorProto.BOOL, []), _vi("x", TensorProto.FLOAT, [1, C, 8, 8])],
        [_vi("h_final", TensorProto.FLOAT, [1, K])],
        inits,
    )
    return _model(
        g,
        "If (then: Conv+Relu, else: 1x1 Conv+Sigmoid, weights and x from the outer graph) -> Flatten -> MatMul -> "
        "Loop x3 (MatMul+Add+Tanh with outer-graph weights)",
    )


ARCHS = [
    ("cnn_residual", build_cnn_residual),
    ("transformer_block", build_transformer_block),
    ("dwsep_net", build_dwsep_net),
    ("lstm_net", build_lstm_net),
    ("loop_if_net", build_loop_if_net),
]


# --------------------------------------------------------------------------------------------
# quantization


def _np_dtype(elem_type: int):
    return helper.tensor_dtype_to_np_dtype(elem_type)


def graph_inputs(model: onnx.ModelProto):
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        out.append((vi.name, _np_dtype(tt.elem_type), shape))
    return out


def random_feed(inputs, rng: np.random.Generator, index: int):
    """One input dict. Bool inputs are random except sample 0 (all True) and 1 (all False)."""
    feed = {}
    for name, dtype, shape in inputs:
        if dtype == np.bool_:
            if index == 0:
                v = np.ones(shape, dtype=np.bool_)
            elif index == 1:
                v = np.zeros(shape, dtype=np.bool_)
            else:
                v = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.floating):
            v = rng.standard_normal(shape).astype(dtype)
        else:
            v = rng.integers(0, 4, size=shape).astype(dtype)
        feed[name] = np.asarray(v, dtype=dtype)
    return feed


def make_reader(model: onnx.ModelProto, seed: int):
    from onnxruntime.quantization import CalibrationDataReader

    class SeededReader(CalibrationDataReader):
        def __init__(self):
            rng = _rng(seed)
            ins = graph_inputs(model)
            self.data = [random_feed(ins, rng, i) for i in range(N_CALIB)]
            self.it = iter(self.data)

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter(self.data)

        def __len__(self):
            return len(self.data)

        def set_range(self, start_index, end_index):
            self.it = iter(self.data[start_index:end_index])

    return SeededReader()


def variant_config(variant: str):
    from onnxruntime.quantization import QuantType

    if variant == "u8u8_pt":
        return (
            QuantType.QUInt8,
            QuantType.QUInt8,
            False,
            {"WeightSymmetric": False, "ActivationSymmetric": False},
            "uint8 activations (asymmetric), uint8 asymmetric weights, per-tensor",
        )
    if variant == "s8s8_pc":
        return (
            QuantType.QInt8,
            QuantType.QInt8,
            True,
            {"WeightSymmetric": True, "ActivationSymmetric": True},
            "int8 symmetric activations (so Relu is kept), int8 symmetric weights, per-channel",
        )
    if variant == "u8s8_pc_asym":
        return (
            QuantType.QUInt8,
            QuantType.QInt8,
            True,
            {"WeightSymmetric": False, "ActivationSymmetric": False},
            "uint8 activations (asymmetric), int8 asymmetric weights (non-zero zero points), per-channel",
        )
    raise ValueError(variant)


def asymmetric_weight_overrides(model: onnx.ModelProto) -> dict:
    """TensorQuantOverrides asking for asymmetric per-channel quantization of Conv/Gemm/MatMul weights."""
    inits = {i.name: i for i in model.graph.initializer}
    ov = {}
    for n in model.graph.node:
        if len(n.input) < 2 or n.input[1] not in inits:
            continue
        if n.op_type == "Conv":
            axis = 0
        elif n.op_type == "Gemm":
            trans_b = [a.i for a in n.attribute if a.name == "transB"]
            axis = 0 if trans_b and trans_b[0] else 1
        elif n.op_type == "MatMul":
            axis = len(inits[n.input[1]].dims) - 1
        else:
            continue
        ov[n.input[1]] = [{"axis": axis, "symmetric": False}]
    return ov


def quantize(float_path: Path, out_path: Path, model: onnx.ModelProto, variant: str, seed: int, subgraphs: bool):
    from onnxruntime.quantization import QuantFormat, quantize_static
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    act, wt, per_channel, extra, desc = variant_config(variant)
    extra = dict(extra)
    if per_channel and extra.get("WeightSymmetric") is False:
        # ORT's QDQ quantizer forces per-channel weights to symmetric unless a per-tensor override says
        # otherwise, so WeightSymmetric=False alone leaves every per-channel zero point at 0.
        extra["TensorQuantOverrides"] = asymmetric_weight_overrides(model)
    if subgraphs:
        extra["EnableSubgraph"] = True
    ops = sorted(set(QLinearOpsRegistry) | set(QDQRegistry) | set(EXTRA_QUANT_OPS))
    quantize_static(
        str(float_path),
        str(out_path),
        make_reader(model, seed),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=ops,
        per_channel=per_channel,
        activation_type=act,
        weight_type=wt,
        extra_options=extra,
    )
    return desc


# --------------------------------------------------------------------------------------------
# power-of-two variants
#
# With power-of-two scales every rescaling in a QDQ group is a shift: DQ products are exact, and
# requantization multipliers such as sx·sw/sy are powers of two. These are the models where
# Conv/MatMul/Add fusions must be provable under the `exact` contract.


def nearest_pow2(s: float) -> int:
    """The exponent k of the power of two nearest to s > 0 in log2.

    Exact: with 2^(k0) <= s < 2^(k0+1), s is nearer 2^k0 in log2 iff s < sqrt(2)·2^k0, i.e.
    s² < 2·4^k0, compared in rationals (no float log2 whose rounding could pick the wrong side).
    A tie would need s = sqrt(2)·2^k0, which is irrational, so it cannot happen."""
    f = Fraction(s)
    if not (math.isfinite(s) and f > 0):
        raise ValueError(f"scale {s!r} is not positive and finite")
    _, e = math.frexp(s)  # s = m·2^e with 0.5 <= m < 1
    k0 = e - 1
    return k0 if f * f < 2 * Fraction(4) ** k0 else k0 + 1


def _pow2_array(arr: np.ndarray, what: str) -> np.ndarray:
    """Every element of ARR (a float scale tensor) rounded to the nearest power of two, in ARR's dtype.
    Fails when the result is not a normal number of that dtype (contract §7.1: subnormal scales are a hazard
    of their own, not what these models are for)."""
    info = np.finfo(arr.dtype)
    out = np.empty_like(arr)
    for i, v in enumerate(arr.ravel().tolist()):
        p = np.ldexp(np.float64(1.0), nearest_pow2(float(v)))
        if not (float(info.tiny) <= p <= float(info.max)):
            raise ValueError(f"{what}: scale {v!r} rounds to 2^{int(np.log2(p))}, not a normal {arr.dtype}")
        out.ravel()[i] = p  # a normal power of two: exact in the dtype
    return out


def _along(scale: np.ndarray, shape, axis: int, what: str) -> np.ndarray:
    """SCALE (one element, or one per index of AXIS as DequantizeLinear reads it) broadcast to SHAPE."""
    if scale.size == 1:
        return np.broadcast_to(scale.reshape(()), shape)
    if len(shape) == 0 or scale.size != shape[axis % len(shape)]:
        raise ValueError(f"{what}: scale of {scale.size} elements does not fit codes of shape {list(shape)}, axis {axis}")
    view = [1] * len(shape)
    view[axis % len(shape)] = scale.size
    return np.broadcast_to(scale.reshape(view), shape)


def _rne(x: Fraction) -> int:
    return round(x)  # Fraction.__round__ rounds half to even


def _fit(arr: np.ndarray, shape, what: str) -> np.ndarray:
    """ARR (one element, or as many as SHAPE holds) as an array of SHAPE."""
    if arr.size == 1:
        return np.broadcast_to(arr.reshape(()), shape).copy()
    if arr.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"{what}: {arr.size} values do not fit shape {list(shape)}")
    return arr.reshape(shape).copy()


def pow2_variant(qm: onnx.ModelProto, float_model: onnx.ModelProto | None) -> tuple[onnx.ModelProto, dict]:
    """A copy of QM with every float scale initializer feeding a QuantizeLinear/DequantizeLinear (scale
    input, any graph, per-tensor or per-channel) rounded to the nearest power of two, and the int32 bias
    DQs kept consistent:

    * a bias is a DequantizeLinear of an INT32 initializer. Its scale is recomputed as
      fl(x_scale'·w_scale') from the rounded scales of the DQs feeding inputs 0 and 1 of its consumer
      (Conv, Gemm, LayerNormalization as quantize_static writes them), so ORT's "bias scale = sx·sw
      bitwise" condition (contract §3.4) holds exactly; a product of powers of two is exact. The source
      model must satisfy that relation (to rounding), else this fails rather than guess.
    * its int32 codes are recomputed as rne(b / bias_scale') + zp from the float bias b when one is
      known: the float initializer named like the codes without quantize_static's `_quantized` suffix,
      in QM itself, else in FLOAT_MODEL (quantize_static's QDQ output does not keep it). Otherwise the
      codes are rescaled, rne((code - zp)·bias_scale / bias_scale') + zp in exact rationals: exact
      whenever that is an integer, else the nearest (ties to even). Leaving the int32 range is an error.

    Weight and activation codes and all zero points are kept as they are: the pow2 model is a model
    of its own, not an approximation of the float one (its codes all stay valid). Returns the model and
    counts for its description."""
    m = onnx.ModelProto()
    m.CopyFrom(qm)
    float_inits = {}
    if float_model is not None:
        float_inits = {t.name: t for g in iter_graphs(float_model.graph) for t in g.initializer}
    stats = {"scales": 0, "changed": 0, "biases": 0, "bias_from_float": 0, "bias_rescaled_exact": 0,
             "bias_rescaled_rounded": 0}
    # Initializers are keyed by (index of the defining graph in walk order, name): names may repeat
    # across subgraphs, and a scale shared by several Q/DQ nodes must be rounded once.
    scales: dict[tuple, onnx.TensorProto] = {}
    biases: list = []

    def scale_of(scope, node, where):
        if len(node.input) < 2 or node.input[1] not in scope:
            raise ValueError(f"{where}: node {node.name!r} ({node.op_type}) has no initializer scale; "
                             f"pow2_variant only rewrites initializer scales")
        key, t = scope[node.input[1]]
        if t.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            raise ValueError(f"{where}: scale {t.name!r} of {node.name!r} has type "
                             f"{TensorProto.DataType.Name(t.data_type)}, not float/float16")
        return key, t

    def walk(graph: onnx.GraphProto, outer: dict):
        gi = walk.count
        walk.count += 1
        scope = dict(outer)
        scope.update({t.name: ((gi, t.name), t) for t in graph.initializer})
        producer = {o: n for n in graph.node for o in n.output}
        consumers: dict[str, list] = {}
        for n in graph.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        for n in graph.node:
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                continue
            key, t = scale_of(scope, n, graph.name)
            x = scope.get(n.input[0])
            if n.op_type == "DequantizeLinear" and x is not None and x[1].data_type == TensorProto.INT32:
                biases.append((n, key, t, x[1], scope, producer, consumers.get(n.output[0], [])))
            else:
                scales[key] = t
        for n in graph.node:
            for a in n.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    walk(sg, scope)

    walk.count = 0
    walk(m.graph, {})
    rounded: dict[tuple, np.ndarray] = {}
    for key, t in scales.items():
        arr = numpy_helper.to_array(t)
        rounded[key] = _pow2_array(arr, t.name)
        stats["scales"] += 1
        stats["changed"] += int(np.sum(rounded[key] != arr))

    new_biases: dict[tuple, np.ndarray] = {}
    for dq, bkey, bs, codes_t, scope, producer, users in biases:
        if bkey in scales:
            raise ValueError(f"bias scale {bs.name!r} is also the scale of a non-bias Q/DQ")
        if not users:
            raise ValueError(f"int32 DQ {dq.name!r} has no consumer")
        old_scale = numpy_helper.to_array(bs)
        want = None
        for user in users:
            # quantize_static writes the bias as input 2 of a node whose inputs 0 and 1 are DQ outputs.
            dqs = [producer.get(i) for i in user.input[:2]]
            if len(user.input) < 3 or user.input[2] != dq.output[0] or any(
                d is None or d.op_type != "DequantizeLinear" for d in dqs
            ):
                raise ValueError(f"int32 DQ {dq.name!r} feeds {user.op_type} {user.name!r} other than as the bias "
                                 f"(input 2) of a node whose inputs 0 and 1 are DequantizeLinear outputs")
            (kx, sx_t), (kw, sw_t) = (scale_of(scope, d, user.name) for d in dqs)
            if kx not in rounded or kw not in rounded:
                raise ValueError(f"{user.name}: its x or w scale is itself a bias scale")
            dtype = old_scale.dtype
            what = f"bias scale {bs.name!r} of {user.op_type} {user.name!r}"
            before = _fit(numpy_helper.to_array(sx_t).astype(dtype) * numpy_helper.to_array(sw_t).astype(dtype),
                          old_scale.shape, what)
            if not np.allclose(before, old_scale, rtol=1e-6, atol=0):
                raise ValueError(f"{what} is not {sx_t.name}·{sw_t.name} in the source model")
            prod = _fit((rounded[kx].astype(dtype) * rounded[kw].astype(dtype)).astype(dtype), old_scale.shape, what)
            if want is not None and not np.array_equal(want, prod):
                raise ValueError(f"int32 DQ {dq.name!r} feeds nodes with different x_scale·w_scale")
            want = prod
        new_biases[bkey] = want

        # the codes: from the float bias when known, else rescaled
        codes = numpy_helper.to_array(codes_t).astype(np.int64)
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        new_s, old_s = (_along(v, codes.shape, axis, dq.name) for v in (want, old_scale))
        zp = np.zeros(codes.shape, np.int64)
        if len(dq.input) > 2 and dq.input[2]:
            if dq.input[2] not in scope:
                raise ValueError(f"int32 DQ {dq.name!r}: zero point {dq.input[2]!r} is not an initializer")
            zp = _along(numpy_helper.to_array(scope[dq.input[2]][1]).astype(np.int64), codes.shape, axis, dq.name)
        base = codes_t.name[: -len("_quantized")] if codes_t.name.endswith("_quantized") else None
        fb = scope.get(base, (None, None))[1] if base else None
        if fb is None or fb.data_type != TensorProto.FLOAT:
            fb = float_inits.get(base) if base else None
        fvals = numpy_helper.to_array(fb) if fb is not None and fb.data_type == TensorProto.FLOAT else None
        if fvals is not None and fvals.shape != codes.shape:
            fvals = None
        out = np.empty(codes.shape, dtype=np.int64)
        for idx in np.ndindex(codes.shape):
            ns = Fraction(float(new_s[idx]))
            if fvals is not None:
                out[idx] = _rne(Fraction(float(fvals[idx])) / ns) + int(zp[idx])
            else:
                exact = int(codes[idx] - zp[idx]) * Fraction(float(old_s[idx])) / ns
                out[idx] = _rne(exact) + int(zp[idx])
                stats["bias_rescaled_exact" if exact.denominator == 1 else "bias_rescaled_rounded"] += 1
        if fvals is not None:
            stats["bias_from_float"] += 1
        info = np.iinfo(np.int32)
        if out.min(initial=0) < info.min or out.max(initial=0) > info.max:
            raise ValueError(f"bias {codes_t.name!r} leaves the int32 range at scale {want.tolist()}")
        codes_t.CopyFrom(numpy_helper.from_array(out.astype(np.int32), codes_t.name))
        stats["biases"] += 1

    for key, t in scales.items():
        t.CopyFrom(numpy_helper.from_array(rounded[key], t.name))
    for dq, bkey, bs, *_ in biases:
        bs.CopyFrom(numpy_helper.from_array(new_biases[bkey], bs.name))
    return m, stats


def pow2_description(name: str, stats: dict) -> str:
    d = (f"{name} with every Q/DQ scale rounded to the nearest power of two in log2 ({stats['scales']} scale "
         f"tensors, {stats['changed']} values changed); weight/activation codes and zero points kept")
    if stats["biases"]:
        how = []
        if stats["bias_from_float"]:
            how.append(f"rne(b/scale) from the float bias for {stats['bias_from_float']}")
        rescaled = stats["biases"] - stats["bias_from_float"]
        if rescaled:
            how.append(f"rescaled from the source codes for {rescaled} ({stats['bias_rescaled_exact']} codes exact, "
                       f"{stats['bias_rescaled_rounded']} rounded to nearest)")
        d += (f"; {stats['biases']} int32 bias DQs: scale = fl(x_scale·w_scale) of the rounded scales, codes "
              + ", ".join(how))
    return d


# --------------------------------------------------------------------------------------------
# inspection helpers (also used by the tests)


def iter_graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sg in attr.graphs:
                    yield from iter_graphs(sg)


def count_qdq(model: onnx.ModelProto):
    """(QuantizeLinear count, DequantizeLinear count, same for main graph only)."""
    q = dq = mq = mdq = 0
    for i, g in enumerate(iter_graphs(model.graph)):
        for n in g.node:
            if n.op_type == "QuantizeLinear":
                q += 1
                mq += i == 0
            elif n.op_type == "DequantizeLinear":
                dq += 1
                mdq += i == 0
    return {"quantize_linear": q, "dequantize_linear": dq, "main_quantize_linear": mq, "main_dequantize_linear": mdq}


def quantized_op_types(model: onnx.ModelProto):
    """Op types (other than Q/DQ) that consume the output of a DequantizeLinear, in any graph."""
    dq_out = set()
    for g in iter_graphs(model.graph):
        for n in g.node:
            if n.op_type == "DequantizeLinear":
                dq_out.update(n.output)
    ops = set()
    for g in iter_graphs(model.graph):
        for n in g.node:
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(i in dq_out for i in n.input):
                ops.add(n.op_type)
    return sorted(ops)


def subgraph_qdq(model: onnx.ModelProto) -> int:
    c = count_qdq(model)
    return c["quantize_linear"] + c["dequantize_linear"] - c["main_quantize_linear"] - c["main_dequantize_linear"]


def full_check_error(path: Path) -> str | None:
    """None if onnx.checker.check_model(path, full_check=True) passes, else the first line of its error."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return None
    except Exception as e:  # noqa: BLE001 - any checker failure means "does not pass"
        lines = str(e).strip().splitlines()
        return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def generator_fingerprint() -> str:
    """sha256 over this script and the seed scripts: a manifest with another value is stale."""
    h = hashlib.sha256(Path(__file__).resolve().read_bytes())
    for script, _, _ in SEED_SCRIPTS:
        src = SEEDS_DIR / script
        if not src.is_file():
            raise FileNotFoundError(f"seed script {src} is missing (tests/oracle/seeds/ is part of the repository)")
        h.update(script.encode() + b"\0" + src.read_bytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# main


def manifest_entry(outdir: Path, name: str, file: str, kind: str, description: str, **extra) -> dict:
    """One manifest row, with onnx.checker's full_check verdict (and its error) on the written file."""
    err = full_check_error(outdir / file)
    e = {"name": name, "file": file, "kind": kind, "description": description, "full_check": err is None}
    if err is not None:
        e["full_check_error"] = err
    e.update(extra)
    return e


def build(outdir: Path) -> dict:
    import onnxruntime

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static warns about pre-processing
    if not SEEDS_DIR.is_dir():
        sys.exit(f"corpus.py: seed directory {SEEDS_DIR} not found (tests/oracle/seeds/ is part of the repository)")
    outdir.mkdir(parents=True, exist_ok=True)
    entries = []

    def add(name, file, kind, description, **extra):
        entries.append(manifest_entry(outdir, name, file, kind, description, **extra))

    with tempfile.TemporaryDirectory(prefix="qdqc-corpus-") as tmp:
        tmp = Path(tmp)
        for ai, (arch, builder) in enumerate(ARCHS):
            model = builder()
            float_file = f"{arch}_float.onnx"
            onnx.save_model(model, outdir / float_file)
            add(f"{arch}_float", float_file, "float", model.doc_string)
            has_sub = any(g is not model.graph for g in iter_graphs(model.graph))
            for vi, variant in enumerate(QUANT_VARIANTS):
                name = f"{arch}_{variant}"
                tmp_out = tmp / f"{name}.onnx"
                desc = quantize(outdir / float_file, tmp_out, model, variant, seed=1000 + 10 * ai + vi,
                                subgraphs=has_sub)
                qm = onnx.load_model(str(tmp_out))
                onnx.save_model(qm, outdir / f"{name}.onnx")
                description = f"{model.doc_string}; quantize_static QDQ, {desc}; QDQ on: " + ", ".join(
                    quantized_op_types(qm)
                )
                if has_sub:
                    if subgraph_qdq(qm):
                        description += "; subgraphs quantized (EnableSubgraph=True)"
                    else:
                        description += (
                            "; EnableSubgraph=True had no effect with QuantFormat.QDQ: "
                            "QDQ only in the main graph, If/Loop bodies stay float"
                        )
                add(name, f"{name}.onnx", "qdq", description)
                pm, pstats = pow2_variant(qm, model)
                onnx.save_model(pm, outdir / f"{name}_pow2.onnx")
                add(f"{name}_pow2", f"{name}_pow2.onnx", "pow2", pow2_description(name, pstats), source=name)

        # seed models: run the seed scripts, which write the model to argv[1]
        for script, name, desc in SEED_SCRIPTS:
            src = SEEDS_DIR / script
            if not src.is_file():
                sys.exit(f"corpus.py: seed script {src} is missing")
            dst = outdir / f"{name}.onnx"
            r = subprocess.run([sys.executable, str(src), str(dst)], capture_output=True, text=True, cwd=tmp)
            if r.returncode != 0 or not dst.is_file():
                sys.exit(f"corpus.py: seed script {src} failed (rc={r.returncode}):\n{r.stdout}\n{r.stderr}")
            add(name, dst.name, "seed", desc)

        # external data: a QDQ CNN with all initializers in one external file. (A model whose Reshape
        # shapes are external fails onnx's path-based full_check: its shape inference cannot read them.)
        ext_name = "external_data"
        ext_src = "cnn_residual_u8s8_pc_asym"
        src_model = onnx.load_model(str(outdir / f"{ext_src}.onnx"))
        ext_file = f"{ext_name}.onnx"
        data_file = f"{ext_file}.data"
        if (outdir / data_file).exists():
            (outdir / data_file).unlink()  # onnx appends to an existing data file
        onnx.save_model(
            src_model,
            str(outdir / ext_file),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_file,
            size_threshold=0,
        )
        add(
            ext_name,
            ext_file,
            "external",
            f"{ext_src} with every initializer stored in external data "
            f"({data_file}, size_threshold=0)",
            data_files=[data_file],
        )

    manifest = {
        "generator": "tests/oracle/corpus.py",
        "generator_sha256": generator_fingerprint(),
        "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
        "models": entries,
    }
    with open(outdir / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    return manifest


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(argv[1]).resolve()
    manifest = build(outdir)
    for e in manifest["models"]:
        size = (outdir / e["file"]).stat().st_size + sum((outdir / d).stat().st_size for d in e.get("data_files", []))
        print(f"{e['name']:34s} {e['kind']:8s} {size:9d} B  full_check={e['full_check']}")
    print(f"wrote {len(manifest['models'])} models to {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
