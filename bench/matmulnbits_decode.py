"""Decode-step latency of a decoder-like QDQ model compiled with `--allow matmulnbits=LEVEL`,
against the original under ONNX Runtime's own default optimization (ORT_ENABLE_ALL, its QDQ
optimizer fusing every DQ→MatMul it accepts at its default accuracy level 4).

The model: token id → embedding Gather on the tied table DQ(E) (int8, per column), L blocks of
int4 blockwise DQ→MatMul (up, Relu, down, residual Add), and the lm_head MatMul reading the
same DQ(E). ORT 1.31.1 refuses to fuse the lm_head (its weight is shared with the Gather) and
dequantizes the whole table every step; qdqc fuses it. One decode step = one token, batch 1.

    python bench/matmulnbits_decode.py [--qdqc target/release/qdqc] [--hidden 256] [--vocab 16384]

Prints per level: median step time of the original (ORT default) and of the compiled model
(ORT_ENABLE_ALL with qdqc's session profile), the speedup, and the deviation qdqc reported for
the lm_head next to the one measured on the step's logits against the original under
ORT_DISABLE_ALL.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

REPO = Path(__file__).resolve().parents[1]
PROFILE = {
    "session.disable_quant_qdq": "1",
    "session.disable_double_qdq_remover": "1",
    "optimization.disable_specified_optimizers": "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;ConstantFolding;NchwcTransformer;NhwcTransformer",
}


def decoder(hidden: int, vocab: int, layers: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def int4_weight(name, k, n):
        inits.append(h.make_tensor(f"{name}_q", T.INT4, (k, n), rng.integers(-8, 8, (k, n)).flatten().tolist()))
        inits.append(nh.from_array((rng.random((k // 32, n)) * 0.02 / np.sqrt(k)).astype(np.float32), f"{name}_s"))
        nodes.append(h.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s"], [name], axis=0, block_size=32))

    inits.append(nh.from_array(rng.integers(-127, 128, (hidden, vocab)).astype(np.int8), "emb_q"))
    inits.append(nh.from_array((rng.random(vocab) * 0.02 + 0.005).astype(np.float32), "emb_s"))
    nodes.append(h.make_node("DequantizeLinear", ["emb_q", "emb_s"], ["emb"], axis=1, name="dq_emb"))
    nodes.append(h.make_node("Gather", ["emb", "ids"], ["x_col"], axis=1, name="embed"))
    nodes.append(h.make_node("Transpose", ["x_col"], ["x0"], perm=[1, 0]))
    x = "x0"
    for i in range(layers):
        int4_weight(f"up{i}", hidden, 4 * hidden)
        int4_weight(f"down{i}", 4 * hidden, hidden)
        nodes += [h.make_node("MatMul", [x, f"up{i}"], [f"u{i}"], name=f"up{i}_mm"), h.make_node("Relu", [f"u{i}"], [f"r{i}"]),
                  h.make_node("MatMul", [f"r{i}", f"down{i}"], [f"d{i}"], name=f"down{i}_mm"), h.make_node("Add", [x, f"d{i}"], [f"x{i + 1}"])]
        x = f"x{i + 1}"
    nodes.append(h.make_node("MatMul", [x, "emb"], ["logits"], name="lm_head"))
    g = h.make_graph(nodes, "decoder", [h.make_tensor_value_info("ids", T.INT64, [1])], [h.make_tensor_value_info("logits", T.FLOAT, [1, vocab])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def session(path, level, config):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    # One thread: the ratio, not the machine's parallelism, is what is measured.
    so.intra_op_num_threads = 1
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def median_step(sess, feeds, repeats):
    for f in feeds[:3]:
        sess.run(None, f)
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        sess.run(None, feeds[i % len(feeds)])
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qdqc", default=str(REPO / "target" / "release" / "qdqc"))
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    src = tmp / "decoder.onnx"
    onnx.save(decoder(args.hidden, args.vocab, args.layers), src)
    feeds = [{"ids": np.array([t])} for t in np.random.default_rng(1).integers(0, args.vocab, 16)]
    original = session(src, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, {})
    unfused = session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, {})
    base = median_step(original, feeds, args.repeats)
    print(f"decoder-like model: hidden {args.hidden}, vocab {args.vocab}, {args.layers} blocks; original under ORT default: {base * 1e3:.3f} ms/step")
    for level in ["acc1", "acc4"]:
        out, report = tmp / f"{level}.onnx", tmp / f"{level}.json"
        r = subprocess.run([args.qdqc, "compile", str(src), "-o", str(out), "--report", str(report), "--allow", f"matmulnbits={level}"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        decisions = [d for d in json.loads(report.read_text())["decisions"] if d.get("lossy")]
        lm_head = next(d for d in decisions if "lm_head" in d["nodes"])["lossy"]["deviation"][0]
        compiled = session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, PROFILE)
        step = median_step(compiled, feeds, args.repeats)
        want = np.concatenate([unfused.run(None, f)[0] for f in feeds]).astype(np.float64)
        got = np.concatenate([compiled.run(None, f)[0] for f in feeds]).astype(np.float64)
        dev = np.abs(got - want).max()
        print(f"  {level}: {len(decisions)} MatMulNBits, {step * 1e3:.3f} ms/step, {base / step:.2f}x; lm_head deviation reported "
              f"(random) max abs {lm_head['max_abs']:.2e} rel {lm_head['max_rel']:.2e}; logits measured max abs {dev:.2e} rel {dev / np.abs(want).max():.2e}")


if __name__ == "__main__":
    main()
