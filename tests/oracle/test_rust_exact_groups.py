"""`qdqc compile --target rust --contract real`: every group the generated program runs, recomputed
exactly from the input codes the program itself computed.

For the synthetic CNN corpus (SYNTHETIC: the qdq and pow2 variants of cnn_residual and dwsep_net),
the real CNNs of test_rust_real.py (MODELS, pinned the same way) and the published transformers
(TRANSFORMERS), this test

* compiles under `--contract real`; the crate's `groups.json` (codegen/src/rust/manifest.rs) lists
  every op writing codes: kind, tensor names, scales (f32 bits), zero points, attributes, constants;
* builds the crate (the shared CARGO_TARGET_DIR of test_rust_real.py) and runs its harness with
  `--intermediates` on N_FEEDS seeded inputs: every code tensor the program computed, graph inputs
  of code type included;
* recomputes every group's output from ITS input codes as the program wrote them, with the ONNX
  reference semantics under `real` (contract §2.3: `sat(rne(v / s_y) + z_y)` of the exact real v):
  integer accumulation in int64 (Conv, Gemm, pool sums), exact rationals of the f32 scales and
  integer cross-multiplication for the rounding (`requantize` of test_compile_real.py), numpy for
  ops that move codes, onnx's reference evaluator for Resize; and demands every element equal;
* checks the manifest against the original model where a fired decision of the compile report
  names the group's nodes (PROVENANCE): scales and zero points of its DequantizeLinear /
  QuantizeLinear nodes, the weight initializer, a bias whose scale is exactly s_x·s_w — so a
  parameter qdqc read wrong is not checked against itself;
* prints groups and elements per model (the figures for the closing note).

`quantize` entries (f32 → codes) are no integer group: counted, not evaluated (their f32 input is
not written). Lookup tables are checked as applied (table[code]); a table of DQ → Relu → Q is also
derived exactly per code; other chains' tables rest on the `lookup-table` rule's proof.

The broken twins corrupt one output code, and one scale in the manifest, and demand the evaluator
report the mismatch.
"""
from __future__ import annotations

import copy
import filecmp
import itertools
import json
import shutil
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import real_corpus
from oracle_util import CORPUS_DIR, QDQC_BIN, REPO, manifest, random_inputs, session_inputs, ort_session
from test_compile_real import Evaluation, QParams, conv_acc, requantize
from test_rust_real import ENTRIES, MODELS, build, pin

SYNTHETIC_ARCHS = ("cnn_residual", "dwsep_net")
SYNTHETIC = [m["name"] for m in manifest()["models"] if m["kind"] in ("qdq", "pow2") and m["name"].startswith(SYNTHETIC_ARCHS)]
# Published transformers the Rust target compiles (issue #13): MiniLM-L3 as shipped, quantized by
# quantize_static (u8 activations, s8 per-channel weights).
TRANSFORMERS = ["minilm_u8s8_pc"]
N_FEEDS = 2
CODE = {"u8": np.uint8, "i8": np.int8}
DTYPES = {"UINT8": np.uint8, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64, "FLOAT": np.float32}
MAX_REPORTED = 5


def work(label: str) -> Path:
    """A fixed folder per model (cargo keys a build by crate name and source path: see
    test_rust_real.work), emptied but for the last generated crate (see `settle`)."""
    d = REPO / "target" / "rust-exact-tests" / label
    d.mkdir(parents=True, exist_ok=True)
    for p in d.iterdir():
        if p.name != "crate":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return d


def settle(fresh: Path, crate: Path):
    """Moves the crate just generated in FRESH to CRATE, unless CRATE holds the same files byte for
    byte: then the old files (and their times) stay, and cargo reuses the harness it built from
    them, which is the same program. Reruns skip the crate builds."""
    # Relative parts: the crate itself lives under the repository's target/.
    files = lambda root: sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and "target" not in p.relative_to(root).parts)  # noqa: E731
    same = crate.is_dir() and files(fresh) and files(crate) == files(fresh) and all(filecmp.cmp(crate / f, fresh / f, shallow=False) for f in files(fresh))
    if same:
        shutil.rmtree(fresh)
        return
    if crate.exists():
        shutil.rmtree(crate)
    fresh.rename(crate)


def f32(bits: int) -> Fraction:
    """The exact rational value of an f32 bit pattern."""
    return Fraction(float(np.array([bits], dtype=np.uint32).view(np.float32)[0]))


def qp(q: dict, dtype, rank: int) -> QParams:
    """Per-tensor parameters as test_compile_real's QParams views."""
    scale = np.empty([1] * rank, dtype=object)
    scale.flat[0] = f32(q["scale"])
    return QParams(scale, np.full([1] * rank, q["zero_point"], dtype=np.int64), np.dtype(dtype), "")


def channel_view(values, rank: int, axis: int = 1) -> np.ndarray:
    arr = np.asarray(values, dtype=object if isinstance(values[0], Fraction) else np.int64)
    if arr.size == 1:
        return arr.reshape([1] * rank)
    shape = [1] * rank
    shape[axis] = arr.size
    return arr.reshape(shape)


# ----------------------------------------------------------------------------------------------
# exact evaluation of one group


def constant(man: dict, model: onnx.ModelProto, inits: dict, name: str) -> np.ndarray:
    c = man["constants"][name]
    if c["source"] == "initializer":
        if name not in inits:
            raise AssertionError(f"constant {name!r}: no initializer of that name in the model")
        arr = inits[name]
        if list(arr.shape) != c["dims"] or arr.dtype != DTYPES[c["dtype"]]:
            raise AssertionError(f"constant {name!r}: the model has {arr.dtype}{list(arr.shape)}, the manifest {c['dtype']}{c['dims']}")
        return arr
    if c["dtype"] == "FLOAT":
        return np.array(c["values"], dtype=np.uint32).view(np.float32).reshape(c["dims"])
    return np.array(c["values"], dtype=DTYPES[c["dtype"]]).reshape(c["dims"])


def integer_group(g: dict, x: np.ndarray, w: np.ndarray, bias, out_shape, bias_scales=None) -> tuple[Evaluation, QParams]:
    """Conv / Gemm: (s_x·s_w[c]·Σ (x − z_x)(w − z_w[c]) + s_b[c]·bias[c]) / s_y, accumulated in
    int64; s_b the original bias's own scales where given (`bias_scales`), else s_x·s_w[c]."""
    p, kind = g["params"], g["kind"]
    i = p["int"]
    if kind == "conv":
        win = p["window"]
        attrs = {"group": p["groups"], "kernel_shape": win["kernel"], "strides": win["strides"], "dilations": win["dilations"], "pads": win["pads"]}
        wc = w.astype(np.int64) - channel_view(i["weight_zero_points"], w.ndim, 0)
        acc = conv_acc(x.astype(np.int64) - i["x"]["zero_point"], wc, attrs)
        axis = 1
    else:
        k, n = p["k"], p["n"]
        wm = w.T if p["trans_b"] else w
        if wm.shape != (k, n) or x.size % k:
            raise AssertionError(f"gemm: weights {list(w.shape)} (trans_b {p['trans_b']}) and input {list(x.shape)} do not fit k={k}, n={n}")
        wc = wm.astype(np.int64) - channel_view(i["weight_zero_points"], 2, 1)
        acc = (x.reshape(-1, k).astype(np.int64) - i["x"]["zero_point"]) @ wc
        if int(np.prod(out_shape)) != acc.size or out_shape[-1] != n:
            raise AssertionError(f"gemm: output {list(out_shape)} for an [{acc.shape[0]}, {n}] product")
        acc = acc.reshape(out_shape)
        axis = acc.ndim - 1
    sx, sy = f32(i["x"]["scale"]), f32(i["y"]["scale"])
    coef = channel_view([sx * f32(s) / sy for s in i["weight_scales"]], acc.ndim, axis)
    terms = [(coef, acc)]
    if bias is not None:
        bcoef = coef if bias_scales is None else channel_view([s / sy for s in bias_scales], acc.ndim, axis)
        terms.append((bcoef, channel_view(bias.astype(np.int64).tolist(), acc.ndim, axis)))
    y = qp(i["y"], CODE[g["elem"]], acc.ndim)
    return Evaluation(terms, acc.shape, lambda idx: f"accumulator={acc[idx]}"), y


def window_sums(x: np.ndarray, win: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per output position of a pool: the sum of the window's (zero-padded) elements and how many
    input elements (not pads) it covers; int64."""
    if win["ceil_mode"]:
        raise AssertionError("ceil_mode pools are not modelled here")
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
    n, c = x.shape[:2]
    attrs = {"group": 1, "kernel_shape": win["kernel"], "strides": win["strides"], "dilations": win["dilations"], "pads": win["pads"]}
    kern = np.ones((1, 1) + tuple(win["kernel"]), dtype=np.int64)
    sums = conv_acc(x.reshape((n * c, 1) + x.shape[2:]), kern, attrs)
    counts = conv_acc(ones, kern, attrs)
    return sums.reshape((n, c) + sums.shape[2:]), counts.reshape((1, 1) + counts.shape[2:])


def evaluate(g: dict, ins: list, out: np.ndarray, bias_scales=None):
    """(expected codes, description of an element) for one group, from its input codes `ins`."""
    kind, p, dtype = g["kind"], g["params"], CODE[g["elem"]]
    x = ins[0]
    if kind in ("conv", "gemm"):
        ev, y = integer_group(g, x, ins[1], ins[2], out.shape, bias_scales)
    elif kind in ("add", "mul"):
        a, b = ins
        shape = np.broadcast_shapes(a.shape, b.shape)
        da = np.broadcast_to(a.astype(np.int64) - p["a"]["zero_point"], shape)
        db = np.broadcast_to(b.astype(np.int64) - p["b"]["zero_point"], shape)
        sa, sb, sy = f32(p["a"]["scale"]), f32(p["b"]["scale"]), f32(p["y"]["scale"])
        rank = len(shape)
        one = lambda v: channel_view([v], rank)  # noqa: E731
        terms = [(one(sa / sy), da), (one(sb / sy), db)] if kind == "add" else [(one(sa * sb / sy), da * db)]
        ev, y = Evaluation(terms, shape, lambda i: f"a={da[i]} b={db[i]} (centred)"), qp(p["y"], dtype, rank)
    elif kind == "matmul":
        a, b = ins
        acc = np.matmul(a.astype(np.int64) - p["a"]["zero_point"], b.astype(np.int64) - p["b"]["zero_point"])
        ratio = f32(p["a"]["scale"]) * f32(p["b"]["scale"]) / f32(p["y"]["scale"])
        ev, y = Evaluation([(channel_view([ratio], acc.ndim), acc)], acc.shape, lambda i: f"acc={acc[i]}"), qp(p["y"], dtype, acc.ndim)
    elif kind in ("average_pool", "global_average_pool"):
        xc = x.astype(np.int64) - p["x"]["zero_point"]
        if kind == "global_average_pool":
            sums = xc.sum(axis=tuple(range(2, x.ndim)), keepdims=True)
            counts = np.full([1] * x.ndim, int(np.prod(x.shape[2:])), dtype=np.int64)
        else:
            sums, counts = window_sums(xc, p["window"])
            if p["count_include_pad"]:
                counts = np.full_like(counts, int(np.prod(p["window"]["kernel"])))
        ratio = f32(p["x"]["scale"]) / f32(p["y"]["scale"])
        coef = np.frompyfunc(lambda c: ratio / c, 1, 1)(counts.astype(object))
        ev, y = Evaluation([(coef, sums)], sums.shape, lambda i: f"sum={sums[i]}"), qp(p["y"], dtype, sums.ndim)
    elif kind == "concat":
        parts = []
        for xi, rq in zip(ins, p["requant"]):
            if rq is None:
                parts.append(xi)
                continue
            xc = xi.astype(np.int64) - rq["x"]["zero_point"]
            one = channel_view([f32(rq["x"]["scale"]) / f32(rq["y"]["scale"])], xi.ndim)
            codes, _ = requantize(Evaluation([(one, xc)], xi.shape, str), qp(rq["y"], dtype, xi.ndim))
            parts.append(codes)
        want = np.concatenate(parts, axis=p["axis"])
        return want, lambda i: "concat"
    else:
        return moved(g, x, out.shape, ins[1:]), lambda i: f"{kind} of codes"
    return requantize(ev, y)


def moved(g: dict, x: np.ndarray, out_shape, rest: list) -> np.ndarray:
    """Ops that select or copy codes, by numpy (Resize: onnx's reference evaluator); `rest` the
    inputs after the codes (Gather's indices when the program computes them)."""
    kind, p = g["kind"], g["params"]
    if kind == "reshape":
        if x.size != int(np.prod(out_shape)):
            raise AssertionError(f"reshape of {x.size} elements to {list(out_shape)}")
        return x.reshape(out_shape)
    if kind == "expand":
        return np.broadcast_to(x, out_shape) * np.ones(out_shape, dtype=x.dtype)
    if kind == "transpose":
        return np.transpose(x, p["perm"])
    if kind == "slice":
        index = [slice(None)] * x.ndim
        for s, e, a, st in zip(p["starts"], p["ends"], p["axes"], p["steps"]):
            index[a % x.ndim] = slice(s, e, st)
        return x[tuple(index)]
    if kind == "gather":
        # Constant indices are in the manifest; indices known at run time are the second input.
        idx = np.array(p["indices"], dtype=np.int64).reshape(p["indices_shape"]) if "indices" in p else rest[0]
        return np.take(x, np.where(idx < 0, idx + x.shape[p["axis"]], idx), axis=p["axis"])
    if kind == "lut":
        table = np.array(p["table"], dtype=CODE[g["elem"]])
        return table[x.view(np.uint8).astype(np.int64)]
    if kind == "max_pool":
        return max_pool(x, p["window"])
    if kind == "resize_nearest":
        return resize_nearest(x, p)
    raise AssertionError(f"group kind {kind!r} has no exact model here: add one")


def max_pool(x: np.ndarray, win: dict) -> np.ndarray:
    if win["ceil_mode"]:
        raise AssertionError("ceil_mode pools are not modelled here")
    nd = len(win["kernel"])
    low = np.iinfo(x.dtype).min
    pads = win["pads"]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)], constant_values=low)
    k, s, d = win["kernel"], win["strides"], win["dilations"]
    outs = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    best = np.full(x.shape[:2] + tuple(outs), low, dtype=x.dtype)
    for off in itertools.product(*(range(v) for v in k)):
        sl = tuple(slice(off[i] * d[i], off[i] * d[i] + s[i] * (outs[i] - 1) + 1, s[i]) for i in range(nd))
        best = np.maximum(best, xp[(slice(None), slice(None)) + sl])
    return best


TRANSFORMS = {"HalfPixel": "half_pixel", "Asymmetric": "asymmetric", "AlignCorners": "align_corners", "PytorchHalfPixel": "pytorch_half_pixel"}
NEAREST = {"RoundPreferFloor": "round_prefer_floor", "RoundPreferCeil": "round_prefer_ceil", "Floor": "floor", "Ceil": "ceil"}


def resize_nearest(x: np.ndarray, p: dict) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    inits = [numpy_helper.from_array(np.array([], dtype=np.float32), "roi")]
    if p["scales"] is not None:
        inits.append(numpy_helper.from_array(np.array(p["scales"], dtype=np.uint32).view(np.float32), "scales"))
        ins = ["x", "roi", "scales"]
    else:
        inits.append(numpy_helper.from_array(np.array(p["sizes"], dtype=np.int64), "sizes"))
        ins = ["x", "roi", "", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], mode="nearest", coordinate_transformation_mode=TRANSFORMS[p["transform"]],
                            nearest_mode=NEAREST[p["nearest"]])
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", elem, list(x.shape))], [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


# ----------------------------------------------------------------------------------------------
# one program run


def check_run(man: dict, model: onnx.ModelProto, tensors: dict, where: str, bias_scales: dict | None = None) -> tuple[dict, int, list]:
    """Evaluates every group of `man` on the program's tensors: ({kind: groups}, elements, failures);
    `bias_scales`: group node → the original bias's exact scales (provenance)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kinds: dict[str, int] = {}
    elements, failures = 0, []
    for g in man["groups"]:
        out = g["output"]
        if out not in tensors:
            failures.append(f"{where}: group {g['node']} ({g['kind']}): the harness wrote no '{out}'")
            continue
        got = tensors[out]
        if got.dtype != CODE[g["elem"]]:
            failures.append(f"{where}: {g['node']}: output {out} is {got.dtype}, the manifest says {g['elem']}")
            continue
        if g["kind"] in ("quantize", "quantize_by", "cast_to_code"):
            key = f"{g['kind']} (f32 in, not evaluated)"
            kinds[key] = kinds.get(key, 0) + 1
            continue
        if g["kind"] in ("unary_table", "code_table"):
            # A table of f32 functions of the codes (Sigmoid: no exact model here), or of a set of
            # ops on codes (code_sets.rs; its byte identity with the unfused ops is
            # tests/rust_codegen.rs's). What it must be: a function of the input code, the same
            # output wherever a code occurs.
            x = tensors.get(g["inputs"][0])
            if x is None:
                failures.append(f"{where}: {g['node']} ({g['kind']}): the harness wrote no '{g['inputs'][0]}'")
                continue
            seen = {}
            for a, b in zip(x.reshape(-1).tolist(), got.reshape(-1).tolist()):
                if seen.setdefault(a, b) != b:
                    failures.append(f"{where}: {g['node']} ({g['kind']}): code {a} gives {seen[a]} and {b}")
                    break
            key = f"quantize ({g['kind']}: functions of codes, checked as a function only)"
            kinds[key] = kinds.get(key, 0) + 1
            continue
        if g["kind"] == "softmax_codes":
            # DequantizeLinear → Softmax → QuantizeLinear on codes (softmax_codes.rs): Softmax is a
            # library function (no exact model; its byte identity with the three unfused kernels
            # is tests/rust_codegen.rs's). What it must be: within one code of the softmax of the
            # dequantized codes in f64, quantized with ties to even.
            x = tensors.get(g["inputs"][0])
            if x is None:
                failures.append(f"{where}: {g['node']} ({g['kind']}): the harness wrote no '{g['inputs'][0]}'")
                continue
            px, py = g["params"]["x"], g["params"]["y"]
            f32 = lambda b: float(np.array(b, np.uint32).view(np.float32))  # noqa: E731
            v = (x.astype(np.float64) - px["zero_point"]) * f32(px["scale"])
            e = np.exp(v - v.max(axis=-1, keepdims=True))
            info = np.iinfo(got.dtype)
            want = np.clip(np.rint(e / e.sum(axis=-1, keepdims=True) / f32(py["scale"])) + py["zero_point"], info.min, info.max)
            dev = int(np.abs(want - got.astype(np.int64)).max(initial=0))
            if dev > 1:
                failures.append(f"{where}: {g['node']} ({g['kind']}): {dev} codes from the f64 softmax")
            key = "softmax_codes (a library function: within one code of the f64 softmax)"
            kinds[key] = kinds.get(key, 0) + 1
            continue
        ins = []
        for t in g["inputs"]:
            if t in man["constants"]:
                ins.append(constant(man, model, inits, t))
            elif t in tensors:
                ins.append(tensors[t])
            else:
                raise AssertionError(f"{where}: group {g['node']}: input '{t}' is neither written by the harness nor a constant")
        if g["kind"] in ("conv", "gemm"):
            i = g["params"]["int"]
            ins.append(constant(man, model, inits, i["weights"]))
            ins.append(constant(man, model, inits, i["bias"]) if i["bias"] else None)
        try:
            want, show = evaluate(g, ins, got, (bias_scales or {}).get(g["node"]))
        except AssertionError as e:
            failures.append(f"{where}: {g['node']} ({g['kind']}): {e}")
            continue
        if want.shape != got.shape or want.dtype != got.dtype:
            failures.append(f"{where}: {g['node']} ({g['kind']}): program {got.dtype}{list(got.shape)}, exact {want.dtype}{list(want.shape)}")
            continue
        bad = np.argwhere(want != got)
        for idx in map(tuple, bad[:MAX_REPORTED]):
            failures.append(f"{where}: {g['node']} ({g['kind']}) element {[int(v) for v in idx]} ({show(idx)}): program {got[idx]}, exact {want[idx]}")
        if len(bad) > MAX_REPORTED:
            failures.append(f"{where}: {g['node']}: {len(bad)} of {got.size} elements differ")
        kinds[g["kind"]] = kinds.get(g["kind"], 0) + 1
        elements += got.size
    return kinds, elements, failures


def coverage(man: dict, tensors: dict) -> list:
    """Every code tensor the harness wrote comes from a manifest entry or is a graph input."""
    produced = {g["output"] for g in man["groups"]} | {i["name"] for i in man["inputs"]}
    return [f"code tensor '{k}' has no producer in groups.json" for k, v in tensors.items()
            if v.dtype in (np.uint8, np.int8) and k not in produced]


# ----------------------------------------------------------------------------------------------
# provenance: the manifest against the original model's Q/DQ nodes


def provenance(man: dict, model: onnx.ModelProto, report: dict) -> tuple[int, list, dict]:
    """For each group a fired decision names (by output), its parameters equal the original's.
    Returns (groups traced, problems, {group node: the original bias's exact scales}): the
    reference value v counts the bias at its OWN scale (contract §2.3: v is the original's), which
    in models quantized in f32 is fl32(s_x·s_w), not the exact product the kernel folds the codes
    with — the rule proves the difference never moves a reachable output, and this checks it."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    by_output = {d["output"]: d for d in report["decisions"] if d.get("fired")}
    checked, problems, bias_scales = 0, [], {}

    def bits(name: str) -> list[int]:
        return [int(b) for b in np.asarray(inits[name], dtype=np.float32).reshape(-1).view(np.uint32)]

    def zps(node) -> list[int]:
        return [int(v) for v in inits[node.input[2]].reshape(-1)] if len(node.input) > 2 and node.input[2] else [0]

    def same_q(q: dict, node, what: str):
        if bits(node.input[1]) != [q["scale"]] or zps(node) != [q["zero_point"]]:
            problems.append(f"{what}: manifest scale {q['scale']:#x} zp {q['zero_point']}, original {node.name}: "
                            f"scale {[hex(b) for b in bits(node.input[1])]} zp {zps(node)}")

    for g in man["groups"]:
        d = by_output.get(g["output"])
        if d is not None and g["kind"] == "lut":
            problems += relu_table(g, d, nodes, inits)
            checked += 1
        if d is None or g["kind"] not in ("conv", "gemm", "add", "mul", "matmul", "average_pool", "global_average_pool"):
            continue
        members = [nodes[n] for n in d["nodes"] if n in nodes]
        dqs = {n.output[0]: n for n in members if n.op_type == "DequantizeLinear"}
        qs = [n for n in members if n.op_type == "QuantizeLinear" and n.output[0] == g["output"]]
        ops = [n for n in members if n.op_type not in ("DequantizeLinear", "QuantizeLinear")]
        if len(qs) != 1 or len(ops) != 1:
            problems.append(f"{g['node']}: decision {d['rule']} does not name one float op and its Q")
            continue
        op, where = ops[0], f"{g['node']} ({d['rule']})"
        ins = [dqs.get(t) for t in op.input]
        p = g["params"]
        if g["kind"] in ("conv", "gemm"):
            i = p["int"]
            same_q(i["y"], qs[0], f"{where} y")
            if ins[0] is None or ins[1] is None:
                problems.append(f"{where}: the float op's inputs are not DequantizeLinear outputs")
                continue
            same_q(i["x"], ins[0], f"{where} x")
            w = ins[1]
            if w.input[0] != i["weights"] and not np.array_equal(inits.get(w.input[0]), inits.get(i["weights"])):
                problems.append(f"{where}: weights {i['weights']!r}, original DQ reads {w.input[0]!r}")
            ws, wz = bits(w.input[1]), zps(w)
            if ws != i["weight_scales"] and not (len(ws) == 1 and set(i["weight_scales"]) == set(ws)):
                problems.append(f"{where}: weight scales differ from {w.name}'s")
            if wz != i["weight_zero_points"] and not (len(wz) == 1 and set(i["weight_zero_points"]) == set(wz)):
                problems.append(f"{where}: weight zero points differ from {w.name}'s")
            b = ins[2] if len(ins) > 2 else None
            if (b is None) != (i["bias"] is None):
                problems.append(f"{where}: bias {i['bias']!r} vs original {b.name if b else None}")
            elif b is not None:
                bs = [f32(v) for v in bits(b.input[1])]
                if b.input[0] != i["bias"] or any(z != 0 for z in zps(b)):
                    problems.append(f"{where}: bias {i['bias']!r}; the original {b.name} reads {b.input[0]!r} with zero points {set(zps(b))}")
                bias_scales[g["node"]] = bs * i["channels"] if len(bs) == 1 else bs
        elif g["kind"] in ("add", "mul", "matmul"):
            same_q(p["y"], qs[0], f"{where} y")
            for q, dq in zip((p["a"], p["b"]), ins):
                if dq is None:
                    problems.append(f"{where}: an input is not a DequantizeLinear output")
                else:
                    same_q(q, dq, f"{where} {dq.name}")
        else:
            same_q(p["y"], qs[0], f"{where} y")
            if ins[0] is not None:
                same_q(p["x"], ins[0], f"{where} x")
        checked += 1
    return checked, problems, bias_scales


def relu_table(g: dict, d: dict, nodes: dict, inits: dict) -> list:
    """A lookup table of DQ → Relu → Q, derived exactly per code: sat(rne(max(0, (c − z_x)·s_x) / s_y) + z_y).
    Tables of other chains are checked as applied only (their derivation is the rule's proof)."""
    members = [nodes[n] for n in d["nodes"] if n in nodes]
    ops = [n.op_type for n in members]
    if ops != ["DequantizeLinear", "Relu", "QuantizeLinear"]:
        return [] if "Relu" not in ops else [f"{g['node']}: a Relu table from {ops}: not modelled here"]
    dq, q = members[0], members[2]
    zx = inits[dq.input[2]] if len(dq.input) > 2 and dq.input[2] else np.zeros((), np.uint8)
    zy = inits[q.input[2]] if len(q.input) > 2 and q.input[2] else np.zeros((), np.uint8)
    sx, sy = Fraction(float(inits[dq.input[1]])), Fraction(float(inits[q.input[1]]))
    info = np.iinfo(zy.dtype)
    codes = np.arange(256, dtype=np.uint8).view(zx.dtype).astype(np.int64)
    want = [min(max(round(max(Fraction(0), (int(c) - int(zx)) * sx) / sy) + int(zy), info.min), info.max) for c in codes]
    bad = [k for k, (a, b) in enumerate(zip(want, g["params"]["table"])) if a != b]
    return [f"{g['node']}: table entries {bad[:8]} differ from the exact Relu chain"] if bad else []


# ----------------------------------------------------------------------------------------------
# compile, build, run


def compiled(label: str, src: Path, tmp: Path, feeds: list[dict]) -> dict:
    crate, fresh, report = tmp / "crate", tmp / "fresh", tmp / "report.json"
    start = time.monotonic()
    r = subprocess.run([str(QDQC_BIN), "compile", str(src), "--target", "rust", "--contract", "real", "-o", str(fresh), "--report", str(report)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{label}: {r.stderr.strip()}"
    settle(fresh, crate)
    harness = build(crate)
    built = time.monotonic() - start
    runs = []
    for k, feed in enumerate(feeds):
        inputs, outputs = tmp / f"in{k}.npz", tmp / f"out{k}.npz"
        np.savez(inputs, **feed)
        h = subprocess.run([str(harness), str(inputs), str(outputs), "--intermediates"], capture_output=True, text=True)
        assert h.returncode == 0, f"{label}: harness failed: {h.stderr}"
        # The feed too: a group may read a graph input that is not codes (Gather's token ids).
        runs.append({**feed, **dict(np.load(outputs))})
    return {"manifest": json.loads((crate / "groups.json").read_text()), "report": json.loads(report.read_text()),
            "model": onnx.load(str(src)), "runs": runs, "built": built, "crate": crate}


def synthetic(name: str) -> dict:
    entry = next(m for m in manifest()["models"] if m["name"] == name)
    src = CORPUS_DIR / entry["file"]
    tmp = work(f"{name}_exactgroups")
    label_src = tmp / f"{name}_exactgroups.onnx"
    label_src.write_bytes(src.read_bytes())
    feeds = random_inputs(name, session_inputs(ort_session(src)), N_FEEDS)
    return compiled(name, label_src, tmp, feeds)


def real(name: str) -> dict:
    label = f"{name}_exactgroups"
    tmp = work(label)
    entry = ENTRIES[name]
    feeds = real_corpus.feeds(entry["inputs"], real_corpus.name_seed(name), N_FEEDS)
    return compiled(name, pin(entry, tmp, label), tmp, feeds)


def check(name: str, c: dict):
    start = time.monotonic()
    man, failures, kinds, elements = c["manifest"], [], {}, 0
    checked, problems, bias_scales = provenance(man, c["model"], c["report"])
    failures += [f"{name}: provenance: {p}" for p in problems]
    sx_sw = [g["node"] for g in man["groups"] if g["node"] in bias_scales and bias_scales[g["node"]] !=
             [f32(g["params"]["int"]["x"]["scale"]) * f32(s) for s in g["params"]["int"]["weight_scales"]]]
    for k, tensors in enumerate(c["runs"]):
        failures += [f"{name} feed {k}: {p}" for p in coverage(man, tensors)]
        kk, n, f = check_run(man, c["model"], tensors, f"{name} feed {k}", bias_scales)
        failures += f
        elements += n
        for key, v in kk.items():
            kinds[key] = max(kinds.get(key, 0), v)
    groups = sum(v for key, v in kinds.items() if not key.startswith("quantize"))
    took = time.monotonic() - start
    copies = man["float_copies"]
    print(f"{name}: {groups} groups, {elements} elements exact over {len(c['runs'])} feeds; {checked} groups' parameters "
          f"traced to the original ({len(sx_sw)} with a bias scale ≠ s_x·s_w exactly); {kinds}; "
          f"compile+build {c['built']:.1f} s, check {took:.1f} s; float copies of quantized constants: {len(copies)} "
          f"({sum(v['elements'] for v in copies.values())} elements, read by {sorted({v['read_by'] for v in copies.values()})[:4]})")
    assert not failures, f"{len(failures)} problem(s):\n" + "\n".join(failures[:40])
    assert groups > 0, f"{name}: no integer group in groups.json: this test proved nothing"
    return copies


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_groups_equal_the_exact_evaluation(name):
    copies = check(name, synthetic(name))
    # Every weight of these CNNs feeds an integer group under `real`: no float copy of one exists.
    assert not copies, f"{name}: float copies of quantized constants under real: {copies}"


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_exact_keeps_codes_not_float_copies(name):
    """Issue 12 under `exact`: the groups P2 refuses stay float (the non-pow2 models: their float
    Conv and Gemm read DequantizeLinear of constant weights and int32 biases); the crate keeps the
    codes and the kernels decode them (`float::dq::Dequantized`), and `groups.json` lists no float
    copy. That the decoded reads give the float copy's bits is codegen/kernels/tests/float_dq.rs."""
    entry = next(m for m in manifest()["models"] if m["name"] == name)
    tmp = work(f"{name}_exactcopies")
    out = tmp / "crate"
    r = subprocess.run([str(QDQC_BIN), "compile", str(CORPUS_DIR / entry["file"]), "--target", "rust", "--contract", "exact", "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{name}: {r.stderr.strip()}"
    man = json.loads((out / "groups.json").read_text())
    kept = (out / "src" / "lib.rs").read_text().count("float::dq::Dequantized::new")
    print(f"{name} exact: {kept} dequantized constants kept as codes, float copies {len(man['float_copies'])}")
    assert not man["float_copies"], f"{name}: float copies of quantized constants under exact: {man['float_copies']}"
    if entry["kind"] == "qdq":
        # Non-power-of-two scales: P2 refuses groups, whose weights are read as codes.
        assert kept > 0, f"{name}: no dequantized constant kept as codes under exact: this test proved nothing"


@pytest.mark.parametrize("name", MODELS + TRANSFORMERS)
def test_real_model_groups_equal_the_exact_evaluation(name):
    check(name, real(name))


def test_broken_twins_are_reported():
    """One output code off by one, one scale doubled and one weight zero point off by one in the
    manifest: each reported by the evaluation, the manifest's by the provenance check too."""
    name = "cnn_residual_u8s8_pc_asym_pow2"
    c = synthetic(name)
    man, model, tensors = c["manifest"], c["model"], c["runs"][0]
    _, problems, bias = provenance(man, model, c["report"])
    _, _, failures = check_run(man, model, tensors, "clean", bias)
    assert not problems, problems
    assert not failures, failures
    conv = next(g for g in man["groups"] if g["kind"] == "conv")
    out = tensors[conv["output"]].copy()
    flat = out.reshape(-1)
    flat[7] = flat[7] + 1 if flat[7] < np.iinfo(out.dtype).max else flat[7] - 1
    _, _, failures = check_run(man, model, dict(tensors, **{conv["output"]: out}), "one code", bias)
    assert any(conv["node"] in f and "element" in f for f in failures), failures
    broken = copy.deepcopy(man)
    g = next(g for g in broken["groups"] if g["output"] == conv["output"])
    g["params"]["int"]["x"]["scale"] += 0x00800000  # ×2: one exponent step
    _, _, failures = check_run(broken, model, tensors, "one scale", bias)
    assert any(conv["node"] in f for f in failures), "a doubled input scale went unnoticed"
    problems = provenance(broken, model, c["report"])[1]
    assert any(conv["node"] in p and " x:" in p for p in problems), problems
    # One element of a per-channel list: a weight zero point one step off.
    broken = copy.deepcopy(man)
    g = next(g for g in broken["groups"] if g["output"] == conv["output"])
    g["params"]["int"]["weight_zero_points"][0] += 1
    _, _, failures = check_run(broken, model, tensors, "one zero point", bias)
    assert any(conv["node"] in f and "element" in f for f in failures), "a weight zero point off by one went unnoticed"
    assert any(conv["node"] in p and "zero points" in p for p in provenance(broken, model, c["report"])[1])


def test_a_wrong_relu_table_is_reported():
    """One entry of a DQ → Relu → Q table off by one: the exact derivation and the applied-table
    check both report it."""
    c = synthetic("dwsep_net_s8s8_pc_pow2")
    man, model, tensors = c["manifest"], c["model"], c["runs"][0]
    assert not provenance(man, model, c["report"])[1]
    broken = copy.deepcopy(man)
    lut = next(g for g in broken["groups"] if g["kind"] == "lut")
    code = int(tensors[lut["inputs"][0]].reshape(-1).view(np.uint8)[0])
    lut["params"]["table"][code] += 1 if lut["params"]["table"][code] < 127 else -1
    assert any(lut["node"] in p and "table entries" in p for p in provenance(broken, model, c["report"])[1])
    _, _, failures = check_run(broken, model, tensors, "one table entry", provenance(man, model, c["report"])[2])
    assert any(lut["node"] in f and "element" in f for f in failures), failures
