#!/usr/bin/env python3
"""A decoder-like QDQ model for the decode-step benchmark (bench/decode.py), built with onnx.helper.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" bench/decoder.py OUTDIR [--variant int4|int8|all] [--layers 6 --hidden 512 --vocab 32000 ...]

writes OUTDIR/decoder_<variant>.onnx, checks it with onnx.checker (full_check), runs it once in ONNX
Runtime, and prints what ORT's default optimization (ORT_ENABLE_ALL) makes of it: which MatMuls become
MatMulNBits, whether the tied lm_head is one of them, what is left of the weight DequantizeLinears.

The model is one decode step at batch 1 of a pre-LayerNorm transformer decoder:

    input_ids [1,1] int64, past_key.i / past_value.i [1, heads, past, 64] float (one pair per block)
    x = Transpose(Gather(DQ(W), input_ids, axis=1), [1,2,0])             embedding, [1,1,H]
    per block: x += Wo·attention(LN(x) with q/k/v = LN(x)·DQ(Wq|Wk|Wv), keys and values
               Concat(past, current) along the sequence, Softmax over all of them)
               x += DQ(W2)·Gelu(DQ(W1)·LN(x))                                MLP H → 4H → H
    logits [1,1,V] = MatMul(LN(x), DQ(W)),  present_key.i / present_value.i [1, heads, past+1, 64]

Tied embedding: ONE quantized tensor W [H, V] with its scale and zero point, and ONE DequantizeLinear
whose output feeds both the embedding Gather (along axis 1) and the lm_head MatMul. The layout is
the one ORT's DQ → MatMul → MatMulNBits selector wants for B = [K, N] (int4: blocked along axis 0 = K;
int8: per output column, axis 1), so the lm_head would be fused if it were not shared.

Variants (every weight MatMul is weight-only quantized, activations stay float):
  int4  uint4 codes with uint4 zero points, blocks of 32 along K (DQ axis 0, block_size 32)
  int8  int8 codes, symmetric (zero points 0), one scale per output column (DQ axis 1)

Weights are seeded normal (std 0.02, the residual projections 0.02/sqrt(2·layers), GPT-2's
initialisation) and quantized with min/max (int4, asymmetric per block) or absmax (int8) scales.
"""
from __future__ import annotations

import argparse
import collections
import math
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21  # int4 and blocked DequantizeLinear
IR_VERSION = 10
VARIANTS = ("int4", "int8")
TIED = "embed_q"  # the codes of the tied embedding / lm_head weight
KV_STD = 0.5  # magnitude of the seeded past keys and values, about that of the computed ones


@dataclass(frozen=True)
class Config:
    variant: str = "int4"
    layers: int = 6
    hidden: int = 512
    vocab: int = 32000
    head_dim: int = 64
    past: int = 64
    block: int = 32
    seed: int = 0

    @property
    def heads(self) -> int:
        return self.hidden // self.head_dim

    @property
    def name(self) -> str:
        return f"decoder_{self.variant}"


TINY = Config(layers=1, hidden=64, vocab=512, head_dim=32, past=8)


# ----------------------------------------------------------------------------------------------
# weight quantization


def quantize_int4_blocked(w: np.ndarray, block: int):
    """uint4 codes, scales and zero points, asymmetric min/max per block of BLOCK rows of each column."""
    k, n = w.shape
    if k % block:
        raise ValueError(f"K = {k} is not a multiple of the block size {block}")
    blocks = w.reshape(k // block, block, n)
    lo = np.minimum(blocks.min(axis=1), 0.0)
    hi = np.maximum(blocks.max(axis=1), 0.0)
    scale = ((hi - lo) / 15.0).astype(np.float32)
    scale[scale == 0] = 1.0
    zp = np.clip(np.rint(-lo / scale), 0, 15).astype(np.uint8)
    q = np.clip(np.rint(blocks / scale[:, None, :]) + zp[:, None, :], 0, 15).astype(np.uint8)
    return q.reshape(k, n), scale, zp


def quantize_int8_per_column(w: np.ndarray):
    """int8 codes and one symmetric absmax scale per column (axis 1), zero points 0."""
    scale = (np.abs(w).max(axis=0) / 127.0).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale, np.zeros(scale.shape, np.int8)


def uint4_tensor(name: str, codes: np.ndarray) -> TensorProto:
    """A UINT4 initializer; raw data packs two codes per byte, element 0 in the low nibble."""
    flat = codes.reshape(-1).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    packed = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)
    return helper.make_tensor(name, TensorProto.UINT4, list(codes.shape), packed.tobytes(), raw=True)


class Builder:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def weight(self, name: str, k: int, n: int, std: float) -> str:
        """DQ(W) for a seeded W [K, N]; returns the DequantizeLinear output."""
        w = (self.rng.standard_normal((k, n)) * std).astype(np.float32)
        if self.cfg.variant == "int4":
            q, scale, zp = quantize_int4_blocked(w, self.cfg.block)
            self.inits += [uint4_tensor(f"{name}_q", q), uint4_tensor(f"{name}_zp", zp)]
            self.const(f"{name}_scale", scale)
            attrs = {"axis": 0, "block_size": self.cfg.block}
        elif self.cfg.variant == "int8":
            q, scale, zp = quantize_int8_per_column(w)
            self.const(f"{name}_q", q)
            self.const(f"{name}_scale", scale)
            self.const(f"{name}_zp", zp)
            attrs = {"axis": 1}
        else:
            raise ValueError(f"unknown variant {self.cfg.variant!r} (one of {', '.join(VARIANTS)})")
        return self.node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zp"], f"{name}_dq", **attrs)

    def layer_norm(self, x: str, name: str) -> str:
        h = self.cfg.hidden
        gamma = self.const(f"{name}_gamma", (1.0 + 0.1 * self.rng.standard_normal(h)).astype(np.float32))
        beta = self.const(f"{name}_beta", (0.02 * self.rng.standard_normal(h)).astype(np.float32))
        return self.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    def heads(self, x: str, name: str) -> str:
        """[1, 1, H] → [1, heads, 1, head_dim]."""
        c = self.cfg
        shape = self.const(f"{name}_shape", np.array([1, 1, c.heads, c.head_dim], np.int64))
        return self.node("Transpose", [self.node("Reshape", [x, shape], f"{name}_split")], name, perm=[0, 2, 1, 3])

    def block(self, x: str, i: int) -> str:
        c = self.cfg
        h, p = c.hidden, f"b{i}"
        out_std = 0.02 / math.sqrt(2 * c.layers)
        a = self.layer_norm(x, f"{p}_ln1")
        q = self.heads(self.node("MatMul", [a, self.weight(f"{p}_wq", h, h, 0.02)], f"{p}_q"), f"{p}_qh")
        k = self.heads(self.node("MatMul", [a, self.weight(f"{p}_wk", h, h, 0.02)], f"{p}_k"), f"{p}_kh")
        v = self.heads(self.node("MatMul", [a, self.weight(f"{p}_wv", h, h, 0.02)], f"{p}_v"), f"{p}_vh")
        keys = self.node("Concat", [f"past_key.{i}", k], f"present_key.{i}", axis=2)
        values = self.node("Concat", [f"past_value.{i}", v], f"present_value.{i}", axis=2)
        scores = self.node("MatMul", [q, self.node("Transpose", [keys], f"{p}_kt", perm=[0, 1, 3, 2])], f"{p}_qk")
        scale = self.const(f"{p}_inv_sqrt_d", np.array(1.0 / math.sqrt(c.head_dim), np.float32))
        probs = self.node("Softmax", [self.node("Mul", [scores, scale], f"{p}_scaled")], f"{p}_probs", axis=-1)
        ctx = self.node("MatMul", [probs, values], f"{p}_ctx")
        ctx = self.node("Transpose", [ctx], f"{p}_ctx_t", perm=[0, 2, 1, 3])
        merge_shape = self.const(f"{p}_merge_shape", np.array([1, 1, h], np.int64))
        merged = self.node("Reshape", [ctx, merge_shape], f"{p}_merged")
        attn = self.node("MatMul", [merged, self.weight(f"{p}_wo", h, h, out_std)], f"{p}_o")
        x = self.node("Add", [x, attn], f"{p}_res1")
        m = self.layer_norm(x, f"{p}_ln2")
        up = self.node("MatMul", [m, self.weight(f"{p}_w1", h, 4 * h, 0.02)], f"{p}_up")
        act = self.node("Gelu", [up], f"{p}_gelu")
        down = self.node("MatMul", [act, self.weight(f"{p}_w2", 4 * h, h, out_std)], f"{p}_down")
        return self.node("Add", [x, down], f"{p}_res2")


def build(cfg: Config) -> onnx.ModelProto:
    """The decode-step model for CFG (deterministic in CFG)."""
    if cfg.hidden % cfg.head_dim:
        raise ValueError(f"hidden {cfg.hidden} is not a multiple of head_dim {cfg.head_dim}")
    b = Builder(cfg)
    tied = b.weight(TIED.removesuffix("_q"), cfg.hidden, cfg.vocab, 0.02)  # [H, V]: the lm_head's B = [K, N]
    gathered = b.node("Gather", [tied, "input_ids"], "embed_gather", axis=1)  # [H, 1, 1]
    x = b.node("Transpose", [gathered], "embed_tokens", perm=[1, 2, 0])  # [1, 1, H]
    for i in range(cfg.layers):
        x = b.block(x, i)
    b.node("MatMul", [b.layer_norm(x, "final_ln"), tied], "logits")

    kv = [1, cfg.heads, cfg.past, cfg.head_dim]
    present = [1, cfg.heads, cfg.past + 1, cfg.head_dim]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, cfg.vocab])]
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}.{i}", TensorProto.FLOAT, kv))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}.{i}", TensorProto.FLOAT, present))
    graph = helper.make_graph(b.nodes, cfg.name, inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="qdqc bench/decoder.py")
    model.ir_version = IR_VERSION
    return model


def feeds(cfg: Config, n: int, seed: int = 1) -> list[dict]:
    """N seeded decode-step inputs: a random token and past keys/values of std KV_STD."""
    rng = np.random.default_rng(seed)
    kv = (1, cfg.heads, cfg.past, cfg.head_dim)
    out = []
    for _ in range(n):
        feed = {"input_ids": rng.integers(0, cfg.vocab, size=(1, 1), dtype=np.int64)}
        for i in range(cfg.layers):
            for kind in ("key", "value"):
                feed[f"past_{kind}.{i}"] = (KV_STD * rng.standard_normal(kv)).astype(np.float32)
        out.append(feed)
    return out


def write(cfg: Config, out_dir: Path) -> Path:
    """Build, full_check and save CFG's model as OUT_DIR/<name>.onnx."""
    model = build(cfg)
    onnx.checker.check_model(model, full_check=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{cfg.name}.onnx"
    onnx.save(model, str(path))
    return path


# ----------------------------------------------------------------------------------------------
# what ONNX Runtime's default optimization does with it


def ort_default_fusions(path: Path) -> dict:
    """Optimize PATH with ORT_ENABLE_ALL (default session options otherwise) and read the result."""
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    weight_matmuls = {
        n.name for n in model.graph.node
        if n.op_type == "MatMul" and any(i.endswith("_dq") for i in n.input)
    }
    with tempfile.TemporaryDirectory(prefix="qdqc-decoder-") as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(optimized)
        so.log_severity_level = 3
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        opt = onnx.load(str(optimized))
    ops = collections.Counter(n.op_type for n in opt.graph.node)
    by_output = {o: n for n in opt.graph.node for o in n.output}
    nbits = [n for n in opt.graph.node if n.op_type == "MatMulNBits"]
    lm_head = by_output.get("logits")
    float_weights = sum(
        1 for t in opt.graph.initializer
        if t.data_type == TensorProto.FLOAT and len(t.dims) == 2 and min(t.dims) >= 64
    )
    left = sorted(n.name for n in opt.graph.node if n.op_type == "MatMul" and n.name in weight_matmuls)
    return {
        "ops": dict(sorted(ops.items())),
        "weight_matmuls_left": left,
        # DequantizeLinears of the whole tied table that run on every decode step
        "tied_table_dequantized": sum(1 for n in opt.graph.node
                                      if n.op_type == "DequantizeLinear" and n.input[0] == TIED),
        "weight_matmuls": len(weight_matmuls),
        "matmulnbits": len(nbits),
        "matmulnbits_levels": sorted({a.i for n in nbits for a in n.attribute if a.name == "accuracy_level"}),
        "lm_head_op": lm_head.op_type if lm_head is not None else None,
        "lm_head_fused": lm_head is not None and lm_head.op_type == "MatMulNBits",
        "dequantize_left": ops.get("DequantizeLinear", 0),
        "float_weight_initializers": float_weights,
    }


def describe_fusions(f: dict) -> str:
    lm = "fused into MatMulNBits" if f["lm_head_fused"] else f"REFUSED (stays {f['lm_head_op']} on a DequantizeLinear)"
    return (
        f"{f['matmulnbits']} of {f['weight_matmuls']} weight MatMuls become MatMulNBits "
        f"(accuracy_level {f['matmulnbits_levels'] or '-'}), "
        f"left as MatMul: {', '.join(f['weight_matmuls_left']) or 'none'}; "
        f"tied lm_head {lm}; "
        f"the whole tied table dequantized {f['tied_table_dequantized']}x per step; "
        f"{f['dequantize_left']} DequantizeLinear left, {f['float_weight_initializers']} float weight matrices "
        f"(constant-folded DQs); ops: {', '.join(f'{k} {v}' for k, v in f['ops'].items())}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--variant", choices=(*VARIANTS, "all"), default="all")
    d = Config()
    for field in ("layers", "hidden", "vocab", "head_dim", "past", "block", "seed"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(d, field))
    args = ap.parse_args()

    import onnxruntime as ort

    for variant in VARIANTS if args.variant == "all" else (args.variant,):
        cfg = replace(d, variant=variant, **{f: getattr(args, f) for f in
                                             ("layers", "hidden", "vocab", "head_dim", "past", "block", "seed")})
        path = write(cfg, args.out_dir)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits = sess.run(["logits"], feeds(cfg, 1)[0])[0]
        print(f"{path} ({path.stat().st_size / 1e6:.1f} MB): full_check ok; ORT runs it, logits {list(logits.shape)} "
              f"std {float(logits.std()):.3g}")
        print(f"  ORT {ort.__version__} ORT_ENABLE_ALL: {describe_fusions(ort_default_fusions(path))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
