"""`qdqc compile --target rust` on the decoder of bench/decoder.py (issue #13): weight-only int4
(uint4 codes, blocks of 32 along K) and int8 (per output column) weights, the tied embedding /
lm_head table, KV-cache Concat, Softmax, Gelu, LayerNormalization; under `--contract exact` and
`--contract real`.

* test_decoder_against_onnx_runtime: a small configuration (SMALL: 2 blocks, hidden 512, vocab
  4096, past 64 — the full-size model's every shape but the layer count and vocabulary; the
  benchmark bench/rust_decode.py compiles and runs the full one) is compiled, its crate built
  (debug, `-D warnings`) and its harness run on N_FEEDS seeded decode steps; every output (logits
  and the present keys/values) is compared with ONNX Runtime 1.31.1 ORT_DISABLE_ALL on the same
  model: same shape and dtype, finite, max deviation printed and bounded. The bound: both are f32
  evaluations of the same function in different orders (ORT's MLAS sgemm blocks K and uses FMA,
  its Gelu/Softmax/LayerNorm have their own approximations; ours are the kernel crate's fixed
  orders), and no step of either quantizes anything. A K-term f32 dot product is within
  γ_K·Σ|x·w| ≈ K·2^-24·Σ|x·w| of the exact one (K ≤ 2048: 1.2e-4 relative to Σ|x·w|), so
  the two programs may differ by a small multiple of that through the 2 blocks' residual stream:
  REL_BOUND = 1e-3 of the output's magnitude. A wrong layout, nibble order, block or parameter
  moves the output by its own magnitude (the weights are std 0.02, their decode error is 1/15 of
  a block's range), far beyond it. No float copy of a quantized weight (`groups.json`'s
  `float_copies` empty).
* test_weight_only_matmul_order: MatMul(x, DQ(W)) alone, W int4 blocked and int8 per column, each
  at K = 512 and N = 200 (a partial last panel): the generated program's output equals, bit for
  bit, the documented order evaluated independently in numpy — `w = fl32(fl32(q − zp)·s)`, then
  `acc = fl32(acc + fl32(x[k]·w[k]))` for k = 0 … K−1 from +0 (numpy's float32 ops round each
  operation; no FMA). The same sum backwards differs in some element's last bits (asserted, so
  the comparison can see a wrong order).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import QDQC_BIN, REPO, ort_session
from test_rust_real import build
import onnxruntime as ort

CONTRACTS = ["exact", "real"]
VARIANTS = ["int4", "int8"]
N_FEEDS = 3
REL_BOUND = 1e-3


def _decoder():
    spec = importlib.util.spec_from_file_location("bench_decoder", REPO / "bench" / "decoder.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_decoder"] = mod
    spec.loader.exec_module(mod)
    return mod


decoder = _decoder()
SMALL = dict(layers=2, vocab=4096)


def work(label: str) -> Path:
    d = REPO / "target" / "rust-decoder" / label
    d.mkdir(parents=True, exist_ok=True)
    return d


def generate(model: Path, out: Path, contract: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(QDQC_BIN), "compile", str(model), "--target", "rust", "--contract", contract, "-o", str(out)],
                          capture_output=True, text=True, timeout=900)


def run(harness: Path, feed: dict, tmp: Path, k: int) -> dict:
    inputs, outputs = tmp / f"in{k}.npz", tmp / f"out{k}.npz"
    np.savez(inputs, **feed)
    h = subprocess.run([str(harness), str(inputs), str(outputs)], capture_output=True, text=True)
    assert h.returncode == 0, f"harness failed: {h.stderr}"
    return dict(np.load(outputs))


def compiled(model: Path, tmp: Path, contract: str) -> Path:
    crate = tmp / f"crate_{contract}"
    r = generate(model, crate, contract)
    assert r.returncode == 0, f"{model.name} --contract {contract}: {r.stderr.strip()}"
    copies = json.loads((crate / "groups.json").read_text())["float_copies"]
    assert not copies, f"{model.name} {contract}: float copies of quantized constants: {copies}"
    return build(crate)


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_against_onnx_runtime(variant, contract):
    cfg = replace(decoder.Config(), variant=variant, **SMALL)
    tmp = work(f"{variant}_{contract}")
    model = decoder.write(cfg, tmp)
    harness = compiled(model, tmp, contract)
    plain = ort_session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    names = [o.name for o in plain.get_outputs()]
    worst, scale, same = {}, {}, []
    for k, feed in enumerate(decoder.feeds(cfg, N_FEEDS)):
        got = run(harness, feed, tmp, k)
        for o, want in zip(names, plain.run(None, feed)):
            assert o in got, f"the harness wrote no output '{o}'"
            b = got[o]
            assert b.shape == want.shape and b.dtype == want.dtype, f"{o}: ORT {want.dtype}{list(want.shape)} vs Rust {b.dtype}{list(b.shape)}"
            assert np.all(np.isfinite(b)), f"{o}: non-finite elements"
            worst[o] = max(worst.get(o, 0.0), float(np.max(np.abs(b.astype(np.float64) - want))))
            scale[o] = max(scale.get(o, 0.0), float(np.max(np.abs(want))))
            if o == "logits":
                same.append(float(np.mean(b == want)))
    rel = {o: worst[o] / scale[o] for o in names}
    top = max(rel, key=rel.get)
    print(f"decoder {variant} {contract}: max deviation from ORT_DISABLE_ALL over {N_FEEDS} steps: logits {worst['logits']:.3g} "
          f"(max |logit| {scale['logits']:.3g}, relative {rel['logits']:.2e}); worst output {top} relative {rel[top]:.2e}; "
          f"logits identical per step: {', '.join(f'{s:.0%}' for s in same)}")
    for o in names:
        assert rel[o] <= REL_BOUND, f"{variant} {contract}: {o} deviates {worst[o]} (relative {rel[o]:.2e} > {REL_BOUND})"


def weight_only_model(variant: str, k: int, n: int, path: Path):
    """MatMul(x [1, K], DQ(W) [K, N]) with the decoder's quantization of W; returns the codes,
    scales and zero points expanded to [K, N]."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
    if variant == "int4":
        q, s, z = decoder.quantize_int4_blocked(w, 32)
        inits = [decoder.uint4_tensor("w_q", q), decoder.uint4_tensor("w_zp", z), numpy_helper.from_array(s, "w_s")]
        attrs = {"axis": 0, "block_size": 32}
        s_full, z_full = np.repeat(s, 32, axis=0), np.repeat(z, 32, axis=0)
    else:
        q, s, z = decoder.quantize_int8_per_column(w)
        inits = [numpy_helper.from_array(q, "w_q"), numpy_helper.from_array(s, "w_s"), numpy_helper.from_array(z, "w_zp")]
        attrs = {"axis": 1}
        s_full, z_full = np.broadcast_to(s, (k, n)), np.broadcast_to(z, (k, n))
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], name="w_dq", **attrs),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, f"wo_{variant}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return q.astype(np.int64), s_full.astype(np.float32), z_full.astype(np.int64)


def documented_order(x: np.ndarray, q, s, z) -> np.ndarray:
    w = ((q - z).astype(np.float32) * s).astype(np.float32)
    acc = np.zeros(q.shape[1], np.float32)
    for k in range(q.shape[0]):
        acc = (acc + (np.float32(x[k]) * w[k]).astype(np.float32)).astype(np.float32)
    return acc


@pytest.mark.parametrize("variant", VARIANTS)
def test_weight_only_matmul_order(variant):
    k, n = 512, 200
    tmp = work(f"weight_only_{variant}")
    path = tmp / f"wo_{variant}.onnx"
    q, s, z = weight_only_model(variant, k, n, path)
    harness = compiled(path, tmp, "real")
    rng = np.random.default_rng(11)
    mismatches, shuffled_differs = 0, False
    for t in range(3):
        x = rng.standard_normal((1, k)).astype(np.float32)
        got = run(harness, {"x": x}, tmp, t)["y"][0]
        want = documented_order(x[0], q, s, z)
        mismatches += int(np.sum(got.view(np.uint32) != want.view(np.uint32)))
        # The check can fail: the same sum in reverse order changes some element's bits.
        backwards = documented_order(x[0][::-1], q[::-1], s[::-1], z[::-1])
        shuffled_differs |= bool(np.any(backwards.view(np.uint32) != want.view(np.uint32)))
    print(f"weight-only MatMul {variant} {k}x{n}: {mismatches} mismatching elements of {3 * n} against the documented order")
    assert shuffled_differs, "another summation order gives the same bits here: the check would not see a wrong order"
    assert mismatches == 0
