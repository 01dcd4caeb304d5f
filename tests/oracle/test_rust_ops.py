"""`qdqc compile --target rust` on small QDQ models of the ops the real corpus brought in, end to
end against ONNX Runtime 1.31.1 ORT_DISABLE_ALL: the generator's parameters (channels, groups,
pads, output_padding, …) reach the kernel as ORT reads them.

* ConvTranspose between DequantizeLinear and QuantizeLinear (no integer kernel: it runs in f32
  under both contracts) in four geometries — ocr_det's 2×2 stride 2; 3×3 stride 2 with pads and
  output_padding; 2 groups, dilation 2, asymmetric pads; one with no bias — on power-of-two scales
  (every product and partial sum exact, P2), so the output codes must equal ORT's byte for byte;
* f32 Pad (reflect, constant with a value) and Where(Equal(x, c), a, x) behind DequantizeLinear,
  quantized again: byte for byte (a copy and a choice are exact);
* refusals: ConvTranspose with `output_shape`, Pad with an `axes` input — exit 2, one line naming
  the node, nothing written.

One crate per contract (the branches of one model), built with `-D warnings` into the shared
target/rust-real-build.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import QDQC_BIN, REPO, ort_session

BUILD_DIR = REPO / "target" / "rust-real-build"
X_SCALE, W_SCALE, Y_SCALE = 2.0**-4, 2.0**-5, 2.0**-6

# name -> (out channels per group · groups, kernel, attributes, bias?)
CONV_T = {
    "ct_ocr": (4, [2, 2], {"strides": [2, 2]}, True),
    "ct_pads": (6, [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, True),
    "ct_groups": (6, [3, 2], {"group": 2, "dilations": [2, 1], "strides": [1, 2], "pads": [1, 0, 2, 1], "output_padding": [0, 1]}, True),
    "ct_nobias": (3, [2, 3], {"strides": [3, 1], "pads": [0, 1, 0, 1]}, False),
}
CIN = 4


def initializer(name, array):
    return numpy_helper.from_array(array, name)


def model(extra_conv_attrs: dict | None = None, pad_axes: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    nodes, inits, outputs = [], [], []
    inits += [initializer("xs", np.array(X_SCALE, np.float32)), initializer("xz", np.array(128, np.uint8)),
              initializer("ys", np.array(Y_SCALE, np.float32)), initializer("yz", np.array(128, np.uint8))]
    nodes += [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
              helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx")]
    for name, (cout, kernel, attrs, bias) in CONV_T.items():
        groups = attrs.get("group", 1)
        w = rng.integers(-8, 9, size=[CIN, cout // groups] + kernel).astype(np.int8)
        inits += [initializer(f"{name}_w", w), initializer(f"{name}_ws", np.array(W_SCALE, np.float32)),
                  initializer(f"{name}_wz", np.array(0, np.int8))]
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_ws", f"{name}_wz"], [f"{name}_wd"], name=f"{name}_dqw"))
        inputs = ["xd", f"{name}_wd"]
        if bias:
            inits.append(initializer(f"{name}_b", (rng.integers(-64, 65, size=[cout]) * 2.0**-7).astype(np.float32)))
            inputs.append(f"{name}_b")
        all_attrs = dict(attrs, kernel_shape=kernel, **(extra_conv_attrs or {}))
        nodes += [helper.make_node("ConvTranspose", inputs, [f"{name}_y"], name=name, **all_attrs),
                  helper.make_node("QuantizeLinear", [f"{name}_y", "ys", "yz"], [f"{name}_q"], name=f"{name}_qy")]
        outputs.append(helper.make_tensor_value_info(f"{name}_q", TensorProto.UINT8, None))
    # Pad reflect / constant 0.5, then requantized.
    inits += [initializer("pads_r", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
              initializer("pads_c", np.array([0, 1, 0, 3, 0, 0, 2, 0], np.int64)),
              initializer("pad_value", np.array(0.5, np.float32))]
    nodes += [helper.make_node("Pad", ["xd", "pads_r"], ["pr"], name="pad_reflect", mode="reflect"),
              helper.make_node("QuantizeLinear", ["pr", "xs", "xz"], ["pr_q"], name="pr_qy")]
    pad_inputs = ["xd", "pads_c", "pad_value"] + (["pad_axes"] if pad_axes else [])
    if pad_axes:
        inits.append(initializer("pad_axes", np.array([0, 1, 2, 3], np.int64)))
    nodes += [helper.make_node("Pad", pad_inputs, ["pc"], name="pad_constant"),
              helper.make_node("QuantizeLinear", ["pc", "xs", "xz"], ["pc_q"], name="pc_qy")]
    # Where(Equal(x, 0.25), -1, x): TensorFlow's div_no_nan pattern.
    inits += [initializer("c", np.array(0.25, np.float32)), initializer("minus1", np.array(-1.0, np.float32))]
    nodes += [helper.make_node("Equal", ["xd", "c"], ["eq"], name="equal"),
              helper.make_node("Where", ["eq", "minus1", "xd"], ["wh"], name="where"),
              helper.make_node("QuantizeLinear", ["wh", "xs", "xz"], ["wh_q"], name="wh_qy")]
    outputs += [helper.make_tensor_value_info(n, TensorProto.UINT8, None) for n in ["pr_q", "pc_q", "wh_q"]]
    graph = helper.make_graph(nodes, "rust_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CIN, 5, 6])], outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def work(label: str):
    d = REPO / "target" / "rust-ops-tests" / label
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def compile_rust(m: onnx.ModelProto, d, label: str, contract: str):
    path = d / f"{label}.onnx"
    onnx.save(m, path)
    out = d / "crate"
    r = subprocess.run([str(QDQC_BIN), "compile", str(path), "--target", "rust", "--contract", contract, "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    return r, out


@pytest.mark.parametrize("contract", ["exact", "real"])
def test_conv_transpose_pad_and_where_are_byte_identical_to_onnx_runtime(contract):
    label = f"rust_ops_{contract}"
    d = work(label)
    m = model()
    r, crate = compile_rust(m, d, label, contract)
    assert r.returncode == 0, r.stderr
    # The ConvTranspose weights and bias are DequantizeLinear of constant codes: the crate keeps
    # the codes and the kernel decodes them (issue 12: no float copy of a quantized weight).
    man = json.loads((crate / "groups.json").read_text())
    assert not man["float_copies"], f"{contract}: float copies of quantized constants: {man['float_copies']}"
    print(f"{contract}: dequantized constants decoded by the kernels: {(crate / 'src' / 'lib.rs').read_text().count('float::dq::Dequantized::new')}")
    env = dict(os.environ, CARGO_TARGET_DIR=str(BUILD_DIR), RUSTFLAGS="-D warnings", CARGO_INCREMENTAL="0")
    b = subprocess.run([os.environ.get("CARGO", "cargo"), "build", "--offline", "--quiet"], cwd=crate, env=env, capture_output=True, text=True)
    assert b.returncode == 0, b.stderr[-4000:]
    names = [o.name for o in m.graph.output]
    for seed in range(3):
        x = np.random.default_rng(seed).uniform(-8, 8, size=(1, CIN, 5, 6)).astype(np.float32)
        x.flat[::7] = 0.25  # Equal's hits
        np.savez(d / "in.npz", x=x)
        h = subprocess.run([str(BUILD_DIR / "debug" / label), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        rust = dict(np.load(d / "out.npz"))
        ort = dict(zip(names, ort_session(m).run(names, {"x": x})))
        for n in names:
            assert rust[n].shape == ort[n].shape, f"{n}: Rust {rust[n].shape} vs ORT {ort[n].shape}"
            diff = int(np.count_nonzero(rust[n] != ort[n]))
            assert diff == 0, f"{contract} seed {seed}: {n}: {diff} of {ort[n].size} codes differ from ORT"
    print(f"{contract}: {len(names)} outputs x 3 seeds byte-identical to ORT_DISABLE_ALL")


@pytest.mark.parametrize("case,needle", [
    ("output_shape", "node 'ct_ocr' (ConvTranspose): attribute output_shape is not supported by the Rust target"),
    ("pad_axes", "node 'pad_constant' (Pad): Pad with an axes input is not supported by the Rust target"),
])
def test_unsupported_attributes_are_refused_naming_the_node(case, needle):
    d = work(f"refused_{case}")
    m = model(extra_conv_attrs={"output_shape": [10, 12]}) if case == "output_shape" else model(pad_axes=True)
    r, crate = compile_rust(m, d, case, "exact")
    assert r.returncode == 2, f"exit {r.returncode}: {r.stderr}"
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert not crate.exists(), "something was written"
