"""The session profile `qdqc compile` prints (src/profile.rs, docs/session-profile.md) against ONNX Runtime's
float fusions. One small float model per fusion that ORT 1.31.1 applies at ORT_ENABLE_ALL and that changes bits:
compiled by qdqc, run under ORT_ENABLE_ALL with the printed profile, its outputs are byte-identical to the
original's under ORT_DISABLE_ALL; and with that fusion's names taken out of the profile's disabled list, the
original's outputs differ (so every listed name is needed, and a rename in a newer ORT shows up here).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import describe, run_qdqc, ort_session as session

N_INPUTS = 8
DISABLED = "optimization.disable_specified_optimizers"
F = TensorProto.FLOAT


def model(name, nodes, consts: dict, inputs: dict) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    ins = [helper.make_tensor_value_info(k, F, s) for k, s in inputs.items()]
    outs = [helper.make_tensor_value_info("y", F, None)]
    m = helper.make_model(helper.make_graph(nodes, name, ins, outs, inits), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def n(op, ins, out, **attrs):
    return helper.make_node(op, ins, [out], name=out, **attrs)


def patterns():
    """{fusion: (model, names that disable it)}; seeded, deterministic."""
    rng = np.random.default_rng(0)
    h = 64
    gamma, beta = 1 + 0.1 * rng.standard_normal(h), 0.1 * rng.standard_normal(h)
    w = 0.1 * rng.standard_normal((h, h))
    cw = 0.3 * rng.standard_normal((8, 3, 3, 3))

    def bn(c):
        return {"sc": 1 + 0.2 * rng.standard_normal(c), "bb": rng.standard_normal(c), "mu": rng.standard_normal(c),
                "var": 1 + rng.random(c)}

    x, img = {"x": [4, h]}, {"x": [1, 3, 8, 8]}
    batch_norm = n("BatchNormalization", ["c", "sc", "bb", "mu", "var"], "y")
    rms = [n("Pow", ["x", "two"], "p"), n("ReduceMean", ["p"], "v", axes=[-1]), n("Add", ["v", "eps"], "ve"),
           n("Sqrt", ["ve"], "s"), n("Div", ["x", "s"], "nrm"), n("Mul", ["nrm", "g"], "y")]
    ln = [n("ReduceMean", ["x"], "m", axes=[-1]), n("Sub", ["x", "m"], "d"), n("Pow", ["d", "two"], "p"),
          n("ReduceMean", ["p"], "v", axes=[-1]), n("Add", ["v", "eps"], "ve"), n("Sqrt", ["ve"], "s"),
          n("Div", ["d", "s"], "nrm"), n("Mul", ["nrm", "g"], "ng"), n("Add", ["ng", "b"], "y")]
    gelu = [n("Div", ["x", "sq2"], "a"), n("Erf", ["a"], "e"), n("Add", ["e", "one"], "e1"),
            n("Mul", ["x", "e1"], "m"), n("Mul", ["m", "half"], "y")]
    skip_ln = [n("Add", ["x", "z"], "a"), n("LayerNormalization", ["a", "g", "b"], "y")]
    ln_params = {"g": 1 + 0.1 * rng.standard_normal(512), "b": 0.1 * rng.standard_normal(512)}
    attention = {"x": [1, 8, 1, 64], "z": [1, 8, 64, 65]}
    return {
        # the three the decoder of bench/decoder.py needs
        "SkipLayerNormFusion": (model("skip_ln", skip_ln, ln_params, {"x": [1, 1, 512], "z": [1, 1, 512]}),
                                ["SkipLayerNormFusion"]),
        "MatMulScaleFusion": (model("matmul_scale", [n("MatMul", ["x", "z"], "m"), n("Mul", ["m", "s"], "y")],
                                    {"s": 0.125}, attention), ["MatMulScaleFusion"]),
        "MatmulTransposeFusion": (model("matmul_transpose", [n("Transpose", ["z"], "t", perm=[0, 1, 3, 2]),
                                                             n("MatMul", ["x", "t"], "y")], {},
                                        {"x": [1, 8, 1, 64], "z": [1, 8, 65, 64]}), ["MatmulTransposeFusion"]),
        # decomposed normalizations and Gelu
        "LayerNormFusion": (model("layer_norm", ln, {"two": 2.0, "eps": 1e-5, "g": gamma, "b": beta}, x),
                            ["LayerNormFusionL1", "LayerNormFusionL2", "SimplifiedLayerNormFusion"]),
        "SimplifiedLayerNormFusion": (model("rms_norm", rms, {"two": 2.0, "eps": 1e-5, "g": gamma}, x),
                                      ["SimplifiedLayerNormFusion"]),
        "GeluFusion": (model("gelu", gelu, {"sq2": np.sqrt(2.0), "one": 1.0, "half": 0.5}, x),
                       ["GeluFusionL1", "GeluFusionL2"]),
        # level-1 rules that fold parameters into other ops or weights
        "DivMulFusion": (model("div_mul", [n("Div", ["one", "x"], "r"), n("Mul", ["r", "z"], "y")], {"one": 1.0},
                               {"x": [4, h], "z": [4, h]}), ["DivMulFusion"]),
        "ConvBNFusion": (model("conv_bn", [n("Conv", ["x", "cw"], "c"), batch_norm], {"cw": cw, **bn(8)}, img),
                         ["ConvBNFusion"]),
        "ConvMulFusion": (model("conv_mul", [n("Conv", ["x", "cw"], "c"), n("Mul", ["c", "s"], "y")],
                                {"cw": cw, "s": (1 + 0.2 * rng.standard_normal(8)).reshape(8, 1, 1)}, img),
                          ["ConvMulFusion"]),
        "ConvAddFusion": (model("conv_add", [n("Conv", ["x", "cw", "cb"], "c"), n("Add", ["c", "s"], "y")],
                                {"cw": cw, "cb": rng.standard_normal(8), "s": rng.standard_normal(8).reshape(8, 1, 1)},
                                img), ["ConvAddFusion"]),
        "MatmulBNFusion": (model("matmul_bn", [n("MatMul", ["x", "w"], "c"), batch_norm], {"w": w, **bn(h)}, x),
                           ["MatMul_BatchNormalization_Fusion"]),
    }


PATTERNS = patterns()



def differing(ref, other, feeds) -> int:
    return sum(int(np.sum(a.view(np.uint32) != b.view(np.uint32)))
               for f in feeds for a, b in zip(ref.run(None, f), other.run(None, f)))


@pytest.mark.parametrize("fusion", PATTERNS)
def test_the_profile_keeps_float_bits_and_needs_each_entry(qdqc, fusion, tmp_path):
    m, names = PATTERNS[fusion]
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(m, str(src))
    r = run_qdqc(qdqc, "compile", src, "-o", out)
    assert r.returncode == 0, describe(r)
    profile = dict(kv.split("=", 1) for kv in r.stdout.split("any level with ", 1)[1].split())
    rng = np.random.default_rng(1)
    feeds = [{i.name: (2 * rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])).astype(np.float32)
              for i in m.graph.input} for _ in range(N_INPUTS)]
    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    reference = session(src, off)
    assert differing(reference, session(out, on, profile), feeds) == 0, f"{fusion}: under ORT_ENABLE_ALL with {profile}"

    listed = profile[DISABLED].split(";")
    assert all(x in listed for x in names), f"{names} not all in {listed}"
    without = profile | {DISABLED: ";".join(x for x in listed if x not in names)}
    changed = differing(reference, session(src, on, without), feeds)
    assert changed > 0, f"{fusion} no longer changes bits without {names}"
