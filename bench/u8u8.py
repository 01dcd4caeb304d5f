#!/usr/bin/env python3
"""ORT's integer GEMM/conv kernels for s8 weights against the same weights shifted to u8, on this host.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" bench/u8u8.py [--runs 15] [--json]

Why: on x86 without VNNI, ORT's u8×s8 kernels saturate pairs of products to int16
(vpmaddubsw), its u8×u8 kernels widen every product (exact). qdqc emits an s8-weight group with
uint8 weights (codes + 128, zero point + 128: the same accumulator) where the s8 form is refuted
on x86-avx2 (rewrites/src/rules/gemm.rs). This measures what that form costs on the host at hand.

Per shape (Conv and MatMul shapes of the OCR detector and a MiniLM encoder, see SHAPES), one
model each: `unfused` (DQ → Conv/MatMul → Q under qdqc's session profile, what stays when no form
is proven), `u8s8` (QLinearConv/QLinearMatMul, int8 weights, zero point 0: ConvSym on x86) and
`u8u8` (the same weights + 128, zero point 128). 1 thread, the sessions take turns batch by batch,
median seconds per run over --runs batches. Prints the host's ORT profile (`qdqc host` when the
binary is there), times in µs and the ratios u8u8/u8s8 and u8u8/unfused (below 1 is faster).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "oracle"))
import oracle_util  # noqa: E402

# (name, kind, activation shape, weight shape, group)
SHAPES = [
    ("conv3x3 32→32 80×80", "conv", [1, 32, 80, 80], [32, 32, 3, 3], 1),
    ("conv1x1 64→128 40×40", "conv", [1, 64, 40, 40], [128, 64, 1, 1], 1),
    ("conv3x3 96→96 20×20", "conv", [1, 96, 20, 20], [96, 96, 3, 3], 1),
    ("conv1x1 256→96 10×10", "conv", [1, 256, 10, 10], [96, 256, 1, 1], 1),
    ("matmul 128×384·384×384", "matmul", [1, 128, 384], [384, 384], 1),
    ("matmul 128×384·384×1536", "matmul", [1, 128, 384], [384, 1536], 1),
    ("matmul 128×1536·1536×384", "matmul", [1, 128, 1536], [1536, 384], 1),
]
PROFILE = dict(kv.split("=", 1) for kv in (
    "session.disable_quant_qdq=1 session.disable_double_qdq_remover=1 "
    "optimization.disable_specified_optimizers=ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;"
    "ConstantFolding;NchwcTransformer;NhwcTransformer").split())


def model(kind, xshape, wshape, group, form, rng):
    w8 = rng.integers(-127, 128, size=wshape, dtype=np.int64)
    m = wshape[0] if kind == "conv" else wshape[1]
    sw = (rng.random(m) * 0.01 + 0.001).astype(np.float32)
    sx, zx, sy, zy = np.float32(0.02), np.uint8(128), np.float32(0.05), np.uint8(128)
    axis = 0 if kind == "conv" else 1
    inits = [numpy_helper.from_array(np.array(sx), "sx"), numpy_helper.from_array(np.array(zx), "zx"),
             numpy_helper.from_array(np.array(sy), "sy"), numpy_helper.from_array(np.array(zy), "zy"),
             numpy_helper.from_array(sw, "sw")]
    if form == "u8u8":
        inits += [numpy_helper.from_array((w8 + 128).astype(np.uint8), "w"),
                  numpy_helper.from_array(np.full(m, 128, np.uint8), "zw")]
    else:
        inits += [numpy_helper.from_array(w8.astype(np.int8), "w"), numpy_helper.from_array(np.zeros(m, np.int8), "zw")]
    pads = {"pads": [wshape[2] // 2] * 4} if kind == "conv" else {}
    if form == "unfused":
        nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
                 helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=axis),
                 helper.make_node("Conv" if kind == "conv" else "MatMul", ["xf", "wf"], ["yf"], **pads),
                 helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    else:
        op = "QLinearConv" if kind == "conv" else "QLinearMatMul"
        nodes = [helper.make_node(op, ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], **pads)]
    graph = helper.make_graph(nodes, form, [helper.make_tensor_value_info("x", TensorProto.UINT8, xshape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def host_profile() -> str:
    qdqc = REPO / "target" / "debug" / "qdqc"
    if not qdqc.is_file():
        return "unknown (no target/debug/qdqc)"
    return subprocess.run([str(qdqc), "host"], capture_output=True, text=True).stdout.strip()


def measure(name, kind, xshape, wshape, group, runs, tmp: Path):
    import onnxruntime as ort
    sessions = {}
    for form in ("unfused", "u8s8", "u8u8"):
        p = tmp / f"{form}.onnx"
        onnx.save(model(kind, xshape, wshape, group, form, np.random.default_rng(0)), p)
        sessions[form] = oracle_util.ort_session(p, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE)
    feed = {"x": np.random.default_rng(1).integers(0, 256, size=xshape, dtype=np.uint8)}
    outs = {k: s.run(None, feed)[0] for k, s in sessions.items()}
    if not np.array_equal(outs["u8s8"], outs["u8u8"]) and host_profile() != "x86-avx2":
        raise SystemExit(f"{name}: u8s8 and u8u8 differ on a host whose u8s8 kernel is exact")
    for s in sessions.values():
        for _ in range(3):
            s.run(None, feed)
    t0 = time.perf_counter()
    sessions["u8s8"].run(None, feed)
    batch = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))
    samples = {k: [] for k in sessions}
    for _ in range(runs):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                s.run(None, feed)
            samples[k].append((time.perf_counter() - t0) / batch)
    t = {k: statistics.median(v) for k, v in samples.items()}
    return {"shape": name, **{f"{k}_us": v * 1e6 for k, v in t.items()},
            "u8u8_vs_u8s8": t["u8u8"] / t["u8s8"], "u8u8_vs_unfused": t["u8u8"] / t["unfused"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import onnxruntime as ort
    with tempfile.TemporaryDirectory(prefix="qdqc-u8u8-") as tmp:
        rows = [measure(*s, args.runs, Path(tmp)) for s in SHAPES]
    host = host_profile()
    if args.json:
        print(json.dumps({"host": host, "onnxruntime": ort.__version__, "rows": rows}, indent=2))
        return
    print(f"host profile {host}, onnxruntime {ort.__version__}, 1 thread, µs per run (median of {args.runs} batches)")
    print(f"{'shape':<26} {'unfused':>9} {'u8s8':>9} {'u8u8':>9} {'u8u8/u8s8':>10} {'u8u8/unfused':>13}")
    for r in rows:
        print(f"{r['shape']:<26} {r['unfused_us']:>9.1f} {r['u8s8_us']:>9.1f} {r['u8u8_us']:>9.1f} "
              f"{r['u8u8_vs_u8s8']:>10.2f} {r['u8u8_vs_unfused']:>13.2f}")


if __name__ == "__main__":
    main()
