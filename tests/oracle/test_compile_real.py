"""`qdqc compile --contract real` against an independent exact evaluation.

Under `real` (docs/contract.md §2.3) every fused group must give `sat(rne(v / y_scale) + y_zero_point)`, where v is
the exact real value of the group's float op on exactly dequantized inputs. For every qdq and pow2
corpus model this test compiles under `real`, and for every fired decision whose fused op requantizes
(QLinearAdd, QLinearMul, QLinearConv, QLinearMatMul, QGemm) it

* finds the fused node by its name `<output>/qdqc_<OpType>` and checks its op type and domain;
* checks that its integer inputs are the codes the original group's DequantizeLinear nodes read
  (same tensor, or an initializer with the same bytes);
* exposes those inputs and the fused node's output as extra graph outputs of a copy of the compiled
  model and runs it in ONNX Runtime (ORT_DISABLE_ALL, one thread) on N_INPUTS seeded inputs;
* recomputes every output element in Python from the ORIGINAL model's parameters (scales as exact
  rationals of their f32 values, zero points, float-op attributes, the bias's own scale), with
  integer accumulation in int64 for Conv/MatMul/Gemm (a MatMul of two activations, as attention's,
  with numpy's batch broadcasting) and exact rounding half to even, and demands equality.

Fused ops of any other kind fail the test: they need an exact model here first. Ops on codes (data
movement, monotone ops) requantize nothing and are only counted. The last test asserts that the
corpus has at least one checked group, so the test cannot pass vacuously, and prints the counts.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from corpus import iter_graphs
from oracle_util import N_INPUTS, describe, manifest, model_path, random_inputs, run_qdqc, session_inputs, ort_session

KINDS = ("qdq", "pow2")

# Ops on codes (contract §5.2): codes pass through unchanged, nothing is requantized.
ON_CODES = {
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Slice", "Gather",
    "GatherElements", "DepthToSpace", "SpaceToDepth", "Split", "Concat", "Resize", "Pad", "Identity",
    "MaxPool", "ReduceMax", "ReduceMin", "ArgMax",
}

# Lookup tables (rule `lookup-table`, a Gather) and the QLinear* lookup and pooling kernels: their rules
# prove them by P1 over every code (every reachable sum for pools) against the `real`-contract
# reference; this oracle re-derives the Conv/MatMul/Gemm/Add/Mul groups of contract §5.7, §5.8 and §5.10.
PROVEN_PER_CODE = {
    "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearWhere",
    "QLinearGlobalAveragePool", "QLinearAveragePool",
}

# Fused op → (the float op its group contains, {fused-node input position: float-op input position})
# for the integer (code) inputs. Scales and zero points are read from the original group instead.
LAYOUT = {
    "QLinearAdd": ("Add", {0: 0, 3: 1}),
    "QLinearMul": ("Mul", {0: 0, 3: 1}),
    "QLinearConv": ("Conv", {0: 0, 3: 1, 8: 2}),
    "QLinearMatMul": ("MatMul", {0: 0, 3: 1}),
    "QGemm": ("Gemm", {0: 0, 3: 1, 6: 2}),
}

CODE_TYPES = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32)}
MAX_REPORTED = 5  # mismatching elements printed per group



def split_op(fused_op: str) -> tuple[str, str]:
    """'com.microsoft.QLinearAdd' → ('com.microsoft', 'QLinearAdd'); 'MaxPool (on codes)' → ('', 'MaxPool')."""
    head = fused_op.split(" (", 1)[0]
    domain, _, op = head.rpartition(".")
    return ("" if domain == "ai.onnx" else domain), op


def attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# ----------------------------------------------------------------------------------------------
# exact parameters of the original group


def exact(v) -> Fraction:
    """The exact rational value of an f32 (or f16) scale: every float is a dyadic rational."""
    return Fraction(float(v))


def frac_array(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    for idx in np.ndindex(values.shape):
        out[idx] = exact(values[idx])
    return out


@dataclass
class QParams:
    """A Q or DQ node's parameters as views broadcastable to its codes' shape: exact scales (object
    array of Fractions) and integer zero points; the code dtype."""

    scale: np.ndarray
    zero_point: np.ndarray
    dtype: np.dtype
    node: str


class Original:
    """The source model's main graph: initializers, producers, Q/DQ parameters."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.nodes = {n.name: n for n in model.graph.node}
        self.producer = {o: n for n in model.graph.node for o in n.output}

    def const(self, name: str, what: str) -> np.ndarray:
        if name not in self.inits:
            raise AssertionError(f"{what}: {name!r} is not an initializer of the original main graph")
        return self.inits[name]

    def qparams(self, node: onnx.NodeProto, rank: int, code_dtype=None) -> QParams:
        a = attrs(node)
        if a.get("block_size", 0):
            raise AssertionError(f"{node.name}: blocked quantization (block_size) is not modelled here")
        scale = self.const(node.input[1], f"scale of {node.name}")
        if scale.dtype not in (np.float32, np.float16):
            raise AssertionError(f"{node.name}: scale has dtype {scale.dtype}; only float32/float16 are modelled")
        if len(node.input) > 2 and node.input[2]:
            zp = self.const(node.input[2], f"zero point of {node.name}")
        else:
            # DQ: the codes' type; Q: output_dtype (opset 21), default uint8.
            if code_dtype is not None:
                dt = code_dtype
            else:
                dt = helper.tensor_dtype_to_np_dtype(a["output_dtype"]) if a.get("output_dtype") else np.uint8
            zp = np.zeros(scale.shape, dtype=dt)
        dtype = np.dtype(code_dtype) if code_dtype is not None else zp.dtype
        if dtype not in CODE_TYPES:
            raise AssertionError(f"{node.name}: code type {dtype} is not modelled here")

        def view(arr):
            if arr.size == 1:
                return arr.reshape([1] * rank)
            axis = a.get("axis", 1) % rank
            shape = [1] * rank
            shape[axis] = arr.size
            return arr.reshape(shape)

        return QParams(view(frac_array(scale)), view(zp.astype(np.int64)), dtype, node.name)


# ----------------------------------------------------------------------------------------------
# exact evaluation: each op gives v / y_scale as a sum of terms  coef_j · int_j  (coef_j exact
# rationals broadcastable to the output, int_j integer arrays), plus what to show on a mismatch.


def reduce_along(view: np.ndarray, axis: int, what: str) -> np.ndarray:
    """VIEW (broadcastable per-axis scale) with AXIS kept at size 1; fails if it varies along AXIS,
    where it could not be factored out of an integer accumulation."""
    axis %= view.ndim
    if view.shape[axis] != 1:
        first = np.take(view, [0], axis=axis)
        if not all(x == y for x, y in zip(np.broadcast_to(first, view.shape).ravel(), view.ravel())):
            raise AssertionError(f"{what}: the scale varies along the reduction axis; not modelled here")
        return first
    return view


def conv_acc(x: np.ndarray, w: np.ndarray, a: dict) -> np.ndarray:
    """Integer NCHW (N-d) convolution of zero-point-free codes, int64, as ONNX Conv defines it."""
    nd = x.ndim - 2
    group = a.get("group", 1)
    kernel = list(w.shape[2:])
    if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
        raise AssertionError(f"Conv kernel_shape {a['kernel_shape']} does not match weights {list(w.shape)}")
    strides = list(a.get("strides", [1] * nd))
    dil = list(a.get("dilations", [1] * nd))
    auto_pad = a.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("NOTSET", "VALID"):
        pads = list(a.get("pads", [0] * 2 * nd)) if auto_pad == "NOTSET" else [0] * 2 * nd
        begin, end = pads[:nd], pads[nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
    else:
        raise AssertionError(f"Conv auto_pad {auto_pad!r} is not modelled here")
    # Padding is the real value 0, i.e. code = zero point: 0 once the zero point is subtracted.
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)))
    outs = [(xp.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    n, c = x.shape[:2]
    m = w.shape[0]
    if c % group or m % group or w.shape[1] != c // group:
        raise AssertionError(f"Conv group={group} does not fit x {list(x.shape)} and w {list(w.shape)}")
    acc = np.zeros((n, group, m // group) + tuple(outs), dtype=np.int64)
    wg = w.reshape((group, m // group, c // group) + tuple(kernel))
    for k in itertools.product(*(range(s) for s in kernel)):
        window = tuple(slice(k[i] * dil[i], k[i] * dil[i] + strides[i] * (outs[i] - 1) + 1, strides[i]) for i in range(nd))
        xs = xp[(slice(None), slice(None)) + window].reshape((n, group, c // group) + tuple(outs))
        acc += np.einsum("ngc...,gmc->ngm...", xs, wg[(Ellipsis,) + k])
    return acc.reshape((n, m) + tuple(outs))


@dataclass
class Evaluation:
    terms: list  # [(coef object array of Fractions, int64 array)]
    shape: tuple
    show: callable  # output index → str with the integer inputs of that element


def centred(codes: np.ndarray, p: QParams) -> np.ndarray:
    return codes.astype(np.int64) - p.zero_point


def eval_add_mul(op, ins, params, a, y):
    (xa, pa), (xb, pb) = (ins[0], params[0]), (ins[1], params[1])
    shape = np.broadcast_shapes(xa.shape, xb.shape)
    da, db = np.broadcast_to(centred(xa, pa), shape), np.broadcast_to(centred(xb, pb), shape)
    if op == "Add":
        terms = [(pa.scale / y.scale, da), (pb.scale / y.scale, db)]
    else:
        terms = [(pa.scale * pb.scale / y.scale, da * db)]
    ba, bb = np.broadcast_to(xa, shape), np.broadcast_to(xb, shape)
    return Evaluation(terms, shape, lambda i: f"a={ba[i]} b={bb[i]}")


def per_channel(arr: np.ndarray, rank: int) -> np.ndarray:
    """A per-tensor (1 element) or per-output-channel array as a view for an [N, M, ...] output."""
    return arr.reshape([1] * rank) if arr.size == 1 else arr.reshape([1, arr.size] + [1] * (rank - 2))


def eval_conv(op, ins, params, a, y):
    (x, px), (w, pw) = (ins[0], params[0]), (ins[1], params[1])
    if px.scale.size != 1:
        raise AssertionError(f"Conv input scale {px.node}: only a per-tensor scale is modelled")
    if pw.scale.size != 1 and pw.scale.shape[0] != w.shape[0]:
        raise AssertionError(f"Conv weight scale {pw.node}: only per-tensor or per-output-channel (axis 0) is modelled")
    acc = conv_acc(centred(x, px), centred(w, pw), a)
    terms = [(px.scale.reshape(()) * per_channel(pw.scale, acc.ndim) / y.scale, acc)]
    bias_show = lambda i: ""  # noqa: E731
    if len(ins) > 2 and ins[2] is not None:
        b, pb = ins[2], params[2]
        if b.shape != (w.shape[0],):
            raise AssertionError(f"Conv bias of shape {list(b.shape)} for {w.shape[0]} output channels")
        # The bias counts with its OWN scale (the original DQ's), whatever the fused kernel assumes.
        terms.append((per_channel(pb.scale, acc.ndim) / y.scale, per_channel(centred(b, pb), acc.ndim)))
        bias_show = lambda i: f" bias={b[i[1]]}"  # noqa: E731
    return Evaluation(terms, acc.shape, lambda i: f"accumulator={acc[i]}{bias_show(i)}")


def eval_matmul(op, ins, params, a, y):
    (xa, pa), (xb, pb) = (ins[0], params[0]), (ins[1], params[1])
    if xa.ndim < 2 or xb.ndim < 2:
        raise AssertionError("MatMul with a 1-D operand is not modelled here")
    acc = np.matmul(centred(xa, pa), centred(xb, pb))
    sa = reduce_along(pa.scale, -1, f"MatMul A scale {pa.node}")
    sb = reduce_along(pb.scale, -2, f"MatMul B scale {pb.node}")
    return Evaluation([(sa * sb / y.scale, acc)], acc.shape, lambda i: f"accumulator={acc[i]}")


def eval_gemm(op, ins, params, a, y):
    (xa, pa), (xb, pb) = (ins[0], params[0]), (ins[1], params[1])
    ca, cb = centred(xa, pa), centred(xb, pb)
    sa, sb = pa.scale, pb.scale
    if a.get("transA", 0):
        ca, sa = ca.T, sa.T
    if a.get("transB", 0):
        cb, sb = cb.T, sb.T
    acc = ca @ cb
    alpha, beta = exact(np.float32(a.get("alpha", 1.0))), exact(np.float32(a.get("beta", 1.0)))
    terms = [(alpha * reduce_along(sa, 1, f"Gemm A scale {pa.node}") * reduce_along(sb, 0, f"Gemm B scale {pb.node}")
              / y.scale, acc)]
    bias_show = lambda i: ""  # noqa: E731
    if len(ins) > 2 and ins[2] is not None:
        c, pc = ins[2], params[2]
        cc = np.broadcast_to(centred(c, pc), acc.shape)
        terms.append((beta * pc.scale / y.scale, cc))
        bias_show = lambda i: f" C={np.broadcast_to(c, acc.shape)[i]}"  # noqa: E731
    return Evaluation(terms, acc.shape, lambda i: f"accumulator={acc[i]}{bias_show(i)}")


EVALUATORS = {"Add": eval_add_mul, "Mul": eval_add_mul, "Conv": eval_conv, "MatMul": eval_matmul, "Gemm": eval_gemm}


def requantize(ev: Evaluation, y: QParams):
    """(codes, exact(index) → v / y_scale): sat(rne(Σ coef·int) + zp) over ev.shape, in exact integers.

    Σ coef_j·int_j = N / D with D the product of the (few, per-channel) coefficients' denominators,
    so each element costs integer operations only; rne(N / D) is a floor division corrected by the
    remainder, ties to the even quotient."""
    numer = np.frompyfunc(lambda f: f.numerator, 1, 1)
    denom = np.frompyfunc(lambda f: f.denominator, 1, 1)
    dens = [denom(c) for c, _ in ev.terms]
    den = np.ones((), dtype=object)
    for d in dens:
        den = den * d
    num = np.zeros((), dtype=object)
    for (coef, ints), d in zip(ev.terms, dens):
        num = num + ints.astype(object) * numer(coef) * (den // d)
    num, den = np.broadcast_to(num, ev.shape), np.broadcast_to(den, ev.shape)
    q = num // den
    twice = 2 * (num - q * den)
    up = (twice > den) | ((twice == den) & (q % 2 == 1))
    q = q + up.astype(np.int64)
    info = np.iinfo(y.dtype)
    codes = np.clip((q + np.broadcast_to(y.zero_point, ev.shape)).astype(object), info.min, info.max)
    return codes.astype(np.int64).astype(y.dtype), lambda i: Fraction(num[i], den[i])


# ----------------------------------------------------------------------------------------------
# one model


@dataclass
class Group:
    decision: dict
    op: str  # fused op type
    node: onnx.NodeProto  # fused node in the compiled model
    float_op: onnx.NodeProto  # in the original
    dqs: list  # per float-op input: original DQ node or None (absent optional input)
    q: onnx.NodeProto  # original Q
    code_inputs: dict  # fused input position → tensor name in the compiled model


@dataclass
class Result:
    name: str
    groups: dict = field(default_factory=dict)  # op → count
    elements: int = 0
    on_codes: int = 0
    failures: list = field(default_factory=list)


def find_node(compiled: onnx.ModelProto, name: str) -> onnx.NodeProto | None:
    return next((n for n in compiled.graph.node if n.name == name), None)


def in_subgraph(compiled: onnx.ModelProto, name: str) -> bool:
    return any(n.name == name for g in list(iter_graphs(compiled.graph))[1:] for n in g.node)


def unsigned_twin(compiled: np.ndarray, original: np.ndarray) -> bool:
    """Whether `compiled` is `original`'s int8 codes re-signed: uint8, each code + 128."""
    return (compiled.dtype == np.uint8 and original.dtype == np.int8 and compiled.shape == original.shape
            and np.array_equal(compiled.astype(np.int16) - 128, original.astype(np.int16)))


def as_int8(codes: np.ndarray) -> np.ndarray:
    """The int8 codes a re-signed uint8 tensor stands for."""
    return (codes.astype(np.int16) - 128).astype(np.int8)


def locate(entry, d: dict, compiled: onnx.ModelProto, orig: Original, resigned: set) -> Group:
    domain, op = split_op(d["fused_op"])
    where = f"{entry['name']}: {d['rule']} → {d['fused_op']} for {d['output']}"
    float_type, positions = LAYOUT[op]
    name = f"{d['output']}/qdqc_{op}"
    node = find_node(compiled, name)
    if node is None:
        sub = in_subgraph(compiled, name)
        raise AssertionError(f"{where}: fused node {name!r} " + (
            "is in a subgraph; this test only exposes main-graph tensors" if sub else "is not in the compiled model"))
    if node.op_type != op or ("" if node.domain in ("", "ai.onnx") else node.domain) != domain:
        raise AssertionError(f"{where}: node {name!r} is {node.domain}.{node.op_type}, the report says {d['fused_op']}")
    if list(node.output)[:1] != [d["output"]]:
        raise AssertionError(f"{where}: fused node writes {list(node.output)}, the report says {d['output']}")
    members = [orig.nodes.get(n) for n in d["nodes"]]
    if any(m is None for m in members):
        raise AssertionError(f"{where}: group nodes {d['nodes']} are not all in the original main graph")
    float_ops = [m for m in members if m.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    if len(float_ops) != 1 or float_ops[0].op_type != float_type:
        raise AssertionError(f"{where}: expected one {float_type} among the group's nodes, got "
                             f"{[(m.name, m.op_type) for m in float_ops]}")
    fop = float_ops[0]
    q = orig.producer.get(d["output"])
    if q is None or q.op_type != "QuantizeLinear" or q.input[0] != fop.output[0]:
        raise AssertionError(f"{where}: {d['output']} is not written by a QuantizeLinear of {fop.name}'s output")
    dqs = []
    for i, t in enumerate(fop.input):
        if not t:
            dqs.append(None)
            continue
        dq = orig.producer.get(t)
        if dq is None or dq.op_type != "DequantizeLinear":
            raise AssertionError(f"{where}: input {i} ({t}) of {fop.name} is not a DequantizeLinear output")
        dqs.append(dq)
    code_inputs = {}
    compiled_inits = {t.name: t for t in compiled.graph.initializer}
    for pos, k in positions.items():
        fused_in = node.input[pos] if pos < len(node.input) else ""
        has_orig = k < len(dqs) and dqs[k] is not None
        if bool(fused_in) != has_orig:
            raise AssertionError(f"{where}: fused input {pos} is {fused_in!r} but {fop.name} input {k} is "
                                 f"{'a DQ' if has_orig else 'absent'}")
        if not fused_in:
            continue
        want = dqs[k].input[0]
        if fused_in != want:
            same = (fused_in in compiled_inits and want in orig.inits
                    and np.array_equal(numpy_helper.to_array(compiled_inits[fused_in]), orig.inits[want])
                    and numpy_helper.to_array(compiled_inits[fused_in]).dtype == orig.inits[want].dtype)
            # A re-signed constant (x86 targets, lower/src/resign.rs), or int8 weights emitted as uint8
            # (rule *-u8-weights, rewrites/src/rules/u8_weights.rs): its uint8 twin, checked here.
            twin = want in resigned or d["rule"].endswith("-u8-weights")
            same = same or (twin and fused_in in compiled_inits and want in orig.inits
                            and unsigned_twin(numpy_helper.to_array(compiled_inits[fused_in]), orig.inits[want]))
            if not same:
                raise AssertionError(f"{where}: fused input {pos} reads {fused_in!r}, but the group's "
                                     f"DequantizeLinear {dqs[k].name} reads {want!r}")
        elif want in orig.inits and fused_in in compiled_inits:
            if not np.array_equal(numpy_helper.to_array(compiled_inits[fused_in]), orig.inits[want]):
                raise AssertionError(f"{where}: initializer {want!r} changed between the original and the compiled model")
        code_inputs[pos] = fused_in
    return Group(d, op, node, fop, dqs, q, code_inputs)


def check_model(qdqc, entry, tmp, isa: str) -> Result:
    src = model_path(entry)
    out, report_path = tmp / "out.onnx", tmp / "report.json"
    r = run_qdqc(qdqc, "compile", src, "-o", out, "--contract", "real", "--report", report_path, "--ort-isa", isa)
    assert r.returncode == 0, describe(r)
    report = json.loads(report_path.read_text())
    # int8 tensors qdqc stored as uint8 + 128 (x86-only profiles): compared as the int8 codes they stand for.
    resigned = {x["tensor"] for x in report.get("resigned", [])}
    assert report["contract"] == "real", f"{entry['name']}: report contract is {report['contract']!r}"
    orig = Original(onnx.load(str(src)))
    compiled = onnx.load(str(out))
    res = Result(f"{entry['name']} [{isa}]")

    groups = []
    for d in report["decisions"]:
        if not d["fired"] or d.get("kept_unfused"):
            continue
        _, op = split_op(d["fused_op"])
        if op in LAYOUT:
            groups.append(locate(entry, d, compiled, orig, resigned))
        elif op in PROVEN_PER_CODE or d["rule"] == "lookup-table":
            res.on_codes += 1
        elif op in ON_CODES:
            res.on_codes += 1
        else:
            pytest.fail(f"{entry['name']}: rule {d['rule']} fired {d['fused_op']} for {d['output']} under `real`, "
                        f"but test_compile_real.py has no exact model of {op}: add one (LAYOUT and EVALUATORS) "
                        f"or list it in ON_CODES if it only moves codes", pytrace=False)
    # Every fused kernel of a checked type must come from a fired decision, or it would go unchecked.
    known = {g.node.name for g in groups}
    original_names = {n.name for g in iter_graphs(orig.model.graph) for n in g.node}
    stray = [f"{n.name} ({n.op_type})" for g in iter_graphs(compiled.graph) for n in g.node
             if n.op_type in LAYOUT and n.name not in known and n.name not in original_names]
    assert not stray, f"{entry['name']}: fused nodes without a fired decision in the report: {stray}"
    if not groups:
        return res

    # A copy of the compiled model with every fused node's code inputs and output as graph outputs.
    probe = onnx.ModelProto()
    probe.CopyFrom(compiled)
    inits = {t.name for t in probe.graph.initializer}
    graph_inputs = {i.name for i in probe.graph.input}
    existing = {o.name for o in probe.graph.output}
    watched = sorted({t for g in groups for t in g.code_inputs.values()} | {g.node.output[0] for g in groups})
    for t in watched:
        if t not in inits and t not in graph_inputs and t not in existing:
            probe.graph.output.append(helper.make_empty_tensor_value_info(t))
    sess = ort_session(probe)
    names = [o.name for o in sess.get_outputs()]
    const = {t.name: numpy_helper.to_array(t) for t in probe.graph.initializer}

    for k, feed in enumerate(random_inputs(entry["name"], session_inputs(sess), N_INPUTS)):
        values = dict(zip(names, sess.run(None, feed)))
        values.update(feed)
        for g in groups:
            got = values[g.node.output[0]]
            if g.node.output[0] in resigned:
                got = as_int8(got)
            float_type, positions = LAYOUT[g.op]
            ins, params = [], []
            for pos, kk in sorted(positions.items(), key=lambda p: p[1]):
                if pos not in g.code_inputs:
                    ins.append(None)
                    params.append(None)
                    continue
                t = g.code_inputs[pos]
                codes = const[t] if t in const else values[t]
                dq = g.dqs[kk]
                shifted = t != dq.input[0] and dq.input[0] in orig.inits and orig.inits[dq.input[0]].dtype == np.int8
                if dq.input[0] in resigned or (shifted and codes.dtype == np.uint8):
                    codes = as_int8(codes)
                params.append(orig.qparams(dq, codes.ndim, codes.dtype))
                ins.append(codes)
            y = orig.qparams(g.q, got.ndim)
            ev = EVALUATORS[float_type](float_type, ins, params, attrs(g.float_op), y)
            want, value = requantize(ev, y)
            where = f"{entry['name']} input #{k}: {g.node.name} (rule {g.decision['rule']})"
            if want.shape != got.shape or want.dtype != got.dtype:
                res.failures.append(f"{where}: ORT gave {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
                continue
            bad = np.argwhere(want != got)
            for idx in map(tuple, bad[:MAX_REPORTED]):
                v = value(idx)
                res.failures.append(
                    f"{where}: element {[int(i) for i in idx]} with {ev.show(idx)}: ORT {got[idx]}, exact {want[idx]} "
                    f"(v/y_scale = {v} ≈ {float(v):.9g})")
            if len(bad) > MAX_REPORTED:
                res.failures.append(f"{where}: ... {len(bad)} mismatching elements of {got.size} in all")
            res.elements += got.size
    for g in groups:
        res.groups[g.op] = res.groups.get(g.op, 0) + 1
    return res


# ----------------------------------------------------------------------------------------------
# tests


def real_entries():
    return [m for m in manifest()["models"] if m["kind"] in KINDS]


# Every profile (the default), and this machine's alone (`--ort-isa host`, the kernels ORT runs
# here): x86-only lists fuse more and re-sign int8 activations to uint8.
ISAS = ("all", "host")


@pytest.fixture(scope="module")
def checked(qdqc, tmp_path_factory):
    cache: dict[tuple, Result] = {}

    def get(entry, isa="all") -> Result:
        key = (entry["name"], isa)
        if key not in cache:
            cache[key] = check_model(qdqc, entry, tmp_path_factory.mktemp(entry["name"]), isa)
        return cache[key]

    return get


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("real_entry", real_entries(), ids=lambda m: m["name"])
def test_fused_groups_equal_the_exact_rational(checked, real_entry, isa):
    res = checked(real_entry, isa)
    assert not res.failures, f"{len(res.failures)} problem(s) under --contract real:\n" + "\n".join(res.failures)


def test_some_fused_group_is_checked(checked, capsys):
    entries = real_entries()
    assert entries, f"the corpus has no models of kinds {KINDS}"
    results = [checked(e, isa) for e in entries for isa in ISAS]
    by_op: dict[str, int] = {}
    for r in results:
        for op, n in r.groups.items():
            by_op[op] = by_op.get(op, 0) + n
    groups, elements = sum(by_op.values()), sum(r.elements for r in results)
    with capsys.disabled():
        print(f"\n[test_compile_real] {len(results)} models, {groups} fused groups checked "
              f"({', '.join(f'{op} {n}' for op, n in sorted(by_op.items())) or 'none'}), "
              f"{elements} output elements over {N_INPUTS} inputs each, "
              f"{sum(r.on_codes for r in results)} ops on codes not requantizing")
        for r in results:
            if r.groups:
                print(f"  {r.name:52s} {sum(r.groups.values()):3d} groups {r.elements:8d} elements  {r.groups}")
    assert groups > 0, (
        "no QLinearAdd/QLinearMul/QLinearConv/QLinearMatMul/QGemm group fired under --contract real on any "
        f"{'/'.join(KINDS)} corpus model: this test proved nothing")
