"""qdqc's replay of ONNX Runtime 1.31's QDQ optimizer (rewrites/ort/src/optimizer/), as
`qdqc audit --json` reports it, against the pinned onnxruntime wheel.

For every model of selector_models.py and two ORT configurations

    default  default session options                  vs  qdqc audit --ort-isa <host>
    arm      session.qdqisint8allowed=1 (ARM's rules)  vs  qdqc audit --ort-isa arm64-neon

where <host> is this machine's profile (`qdqc host`): ORT's selectors are chosen when the wheel
is compiled, x86's on every x86 profile (x86-avx2 and x86-avx512vnni replay alike), ARM's on
arm64 (where both configurations are ARM's).

ORT optimizes the model at ORT_ENABLE_EXTENDED (levels 1 and 2, where every QDQ transformer runs;
level 3 only changes layouts) and saves it with `optimized_model_filepath`. The saved graph is
read back against the authored one, graph by graph (If/Loop bodies included):

* fused groups: a node that kept an authored node's name (ORT's fused node takes its target's
  name) but changed its op type is a fusion `(location, target, fused op)`; one that kept its op
  type but now reads its data input from something other than a DequantizeLinear runs on codes
  (`"<op> (on codes)"`, the drop rules). The set must equal the audit's groups with a non-empty
  `fused_op`, keyed the same way; for each, the fused node must write the audit's `outputs` (the
  authored Q outputs it replaced), read the codes of every authored DQ the audit lists, and see
  the code types the audit's `codes` give for the profile (x86 runs QDQS8ToU8 first; the types
  are asked of ORT itself). Values ORT renamed (QDQS8ToU8 inserts new Q outputs) are followed
  through the authored nodes that survive, and only to names ORT made.
* WeightBiasQuantization: the Conv/Gemm whose float weight or bias initializer ORT replaced must
  be the audit's WeightBiasQuantization groups.
* removed nodes: every authored node ORT removed must belong to some audit group (or be a Constant
  node, which ORT loads as an initializer, or a twin CSE merged, or an activation FusedConv
  absorbed), and the nodes the audit says are gone (absorbed Q nodes, unshared absorbed DQs, the
  Relu/Clip of Relu/ClipQuantRewrite, the inner pair of DoubleQDQPairsRemover,
  QDQFinalCleanupTransformer's nodes) must be gone.
* a session ORT refuses to create must be explained by the audit: a Relu/ClipQuantRewrite it
  reports as ORT_THROW, or a fused node it predicts that fails ORT's schema check.

The hazard models of selector_models.py go through `qdqc audit` too: each must report exactly the
hazard kinds on the nodes listed in HAZARDS, and the claims their messages make about the pinned
ORT are checked on the wheel where this machine can observe them.

Any difference fails with the whole diff of the model. Known artifacts of testing on an x86 host
are kept out explicitly (see FLOAT_FUSIONS and ARM_CAST_ARTIFACTS; the latter only on x86).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnxruntime as ort
import pytest

import selector_models
from oracle_util import describe, run_qdqc

CONFIGS = {
    "default": ("host", {}),
    "arm": ("arm64-neon", {"session.qdqisint8allowed": "1"}),
}
LEVEL = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED

# ConvActivationFusion (level 2, a float fusion the replay does not model, as it touches no Q/DQ)
# turns a Conv the QDQ selectors left alone plus its Relu/Clip into com.microsoft.FusedConv. Not
# a QDQ group: the node is skipped and the activation it absorbed counts as explained.
FLOAT_FUSIONS = {("Conv", "com.microsoft.FusedConv")}

# The QDQ selectors absorb a Clip between the target and its Q when QDQ::IsClipMadeRedundantByQ
# holds; it converts each bound to a code with static_cast<int32_t>(rint(bound / scale)). A bound
# outside int32 (a missing max is FLT_MAX) converts to INT_MIN on x86 (cvttss2si) and saturates on
# ARM64 (fcvtzs), so ARM absorbs such a Clip and x86 never does. The replay's arm64-neon profile
# models ARM; ORT with session.qdqisint8allowed=1 on this x86 host still converts like x86. Those
# groups (found by `arm_cast_artifacts`, and listed here so the set cannot change unnoticed) are
# left out of the arm comparison, which must then agree on everything else; ORT must not fuse them.
ARM_CAST_ARTIFACTS = {"clip_q_min004": [("", "sg", "com.microsoft.QLinearSigmoid")]}

MODELS = selector_models.selector_models()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("selector-models")
    selector_models.write(d)
    return d


# ----------------------------------------------------------------------------------------------
# reading ORT's optimized model


def qualified(n: onnx.NodeProto) -> str:
    return f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type


def graphs_of(n: onnx.NodeProto):
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from ((a.name, g) for g in a.graphs)


def is_qdq(n: onnx.NodeProto) -> bool:
    return n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear")


CODE_NAMES = {
    onnx.TensorProto.UINT8: "u8", onnx.TensorProto.INT8: "i8", onnx.TensorProto.UINT16: "u16",
    onnx.TensorProto.INT16: "i16", onnx.TensorProto.INT32: "i32", onnx.TensorProto.UINT4: "u4",
    onnx.TensorProto.INT4: "i4", onnx.TensorProto.FLOAT: "f32",
}


def value_types(g: onnx.GraphProto, outer: dict[str, int]) -> dict[str, int]:
    """Element types of the values of one ORT graph that a model states or a Q/DQ implies (the
    saved model has no value_info): initializers, graph inputs, Q outputs (their zero point's type,
    output_dtype, or uint8), and values read by a DQ (its zero point's type)."""
    types = dict(outer)
    types.update({t.name: t.data_type for t in g.initializer})
    types.update({i.name: i.type.tensor_type.elem_type for i in g.input})
    for n in g.node:
        if is_qdq(n) and n.op_type == "QuantizeLinear":
            dt = {a.name: a.i for a in n.attribute}.get("output_dtype", 0) or onnx.TensorProto.UINT8
            types.setdefault(n.output[0], types.get(n.input[2], dt) if len(n.input) > 2 and n.input[2] else dt)
    for n in g.node:
        if is_qdq(n) and n.op_type == "DequantizeLinear" and len(n.input) > 2 and n.input[2] in types:
            types.setdefault(n.input[0], types[n.input[2]])
    return types


def node_id(n: onnx.NodeProto, pos: int) -> str:
    """The name qdqc gives a node: its name, or #position when unnamed."""
    return n.name or f"#{pos}"


class Observed:
    """What ORT did to one model, read from the optimized graph against the authored one."""

    def __init__(self):
        self.groups: dict[tuple, dict] = {}
        self.removed: set[tuple[str, str]] = set()  # (location, node id)
        self.anomalies: list[str] = []
        self.authored: dict[str, dict[str, onnx.NodeProto]] = {}  # location -> node id -> node
        # location -> authored value -> the names it has in ORT's graph (QDQS8ToU8Transformer
        # renames values): read off the authored nodes that survive, slot by slot
        self.aliases: dict[str, dict[str, set[str]]] = {}
        # removals no audit group has to explain: Constant nodes, CSE twins, FusedConv activations
        self.explained: set[tuple[str, str]] = set()
        self.graph_outputs: dict[str, set[str]] = {}  # location -> names
        self.weight_bias_quantized: dict[tuple[str, str], list[str]] = {}  # (location, target) -> initializers
        self.types: dict[str, dict[str, int]] = {}  # location -> ORT value -> element type

    def walk(self, a: onnx.GraphProto, o: onnx.GraphProto, location: str = "", outer_types=None):
        loc = location.strip()
        self.types[loc] = value_types(o, outer_types or {})
        ids = {node_id(n, p): n for p, n in enumerate(a.node)}
        self.authored[loc] = ids
        self.graph_outputs[loc] = {v.name for v in a.output}
        aliases = self.aliases.setdefault(loc, {})
        values = {t for n in a.node for t in [*n.input, *n.output]} | {i.name for i in a.initializer} | {i.name for i in a.input}
        # ORT turns Constant nodes into initializers when it loads the graph.
        self.explained |= {(loc, i) for i, n in ids.items() if n.op_type == "Constant"}
        twins = {}  # identical authored nodes (CSE never merges DQs)
        for i, n in ids.items():
            if n.op_type != "DequantizeLinear":
                key = (n.domain, n.op_type, tuple(n.input), tuple(x.SerializeToString(deterministic=True) for x in n.attribute))
                twins.setdefault(key, []).append(i)
        named = {n.name: n for n in a.node if n.name}
        producer = {t: n for n in o.node for t in n.output}
        present = set()
        kept: dict[str, onnx.NodeProto] = {}  # authored node id -> its node in ORT's graph
        float_inits = {t.name for t in a.initializer if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)}
        for n in o.node:
            if n.name:
                src = named.get(n.name)
                sid = n.name
            else:  # unnamed: the authored unnamed node of the same op writing the same outputs
                cands = [(p, m) for p, m in enumerate(a.node) if not m.name and m.op_type == n.op_type and list(m.output) == list(n.output)]
                src, sid = (cands[0][1], node_id(cands[0][1], cands[0][0])) if len(cands) == 1 else (None, None)
            if src is None:
                if not is_qdq(n):  # ORT adds Q/DQ nodes itself (propagation, WeightBiasQuantization, ...)
                    self.anomalies.append(f"{loc or 'main graph'}: ORT node {n.name!r} ({qualified(n)}) matches no authored node")
                continue
            present.add(sid)
            kept[sid] = n
            for was, now in [*zip(src.input, n.input), *zip(src.output, n.output)]:
                if now not in values:  # renamed to a value ORT made, never to another authored one
                    aliases.setdefault(was, {was}).add(now)
            authored_subgraphs = dict(graphs_of(src))
            for attr, og in graphs_of(n):
                self.walk(authored_subgraphs[attr], og, f" in {src.op_type} '{src.name}'.{attr}{location}", self.types[loc])
            if is_qdq(src):
                continue
            op, fused = qualified(src), qualified(n)
            if (op, fused) in FLOAT_FUSIONS:
                for m in a.node:  # the activation it absorbed
                    if m.op_type in ("Relu", "Clip") and m.input and m.input[0] in src.output:
                        self.explained.add((loc, node_id(m, list(a.node).index(m))))
                continue
            if fused == op:
                data = n.input[0] if n.input else ""
                was = src.input[0] if src.input else ""
                p = producer.get(data)
                if data == was or (p is not None and p.op_type == "DequantizeLinear"):
                    continue
                fused = f"{src.op_type} (on codes)"
            self.groups[(loc, sid, fused)] = {"op": src.op_type, "inputs": list(n.input), "outputs": list(n.output)}
        self.removed |= {(loc, i) for i in ids if i not in present}
        # CommonSubexpressionElimination merged a removed node into an identical twin when the
        # consumers of its outputs that ORT kept now read the twin's outputs. The replay merges them
        # too but reports no group, as merging identical computations changes no value.
        for same in (t for t in twins.values() if len(t) > 1):
            for x in (i for i in same if i not in present):
                readers = [(kept[c], slot, out) for out in ids[x].output for c, m in ids.items() if c in kept
                           for slot, v in enumerate(m.input) if v == out]
                for y in (i for i in same if i != x):
                    rename = dict(zip(ids[x].output, ids[y].output))
                    if readers and all(k.input[slot] == rename[out] for k, slot, out in readers):
                        self.explained.add((loc, x))
        # WeightBiasQuantization: a Conv/ConvTranspose/Gemm that no longer reads its float weight
        # or bias initializer (ORT reads an int8 weight and an int32 bias behind new DQs instead).
        for i, n in kept.items():
            src = ids[i]
            if src.op_type in ("Conv", "ConvTranspose", "Gemm") and not is_qdq(src):
                gone = [v for v in src.input[1:3] if v in float_inits and v not in n.input]
                if gone:
                    self.weight_bias_quantized[(loc, i)] = gone


def ort_optimize(src: Path, dst: Path, config: dict) -> str | None:
    """Optimizes SRC into DST; the error message when ORT refuses to create the session."""
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVEL
    so.optimized_model_filepath = str(dst)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # the refusals are asserted on, not logged
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    try:
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return str(e)
    return None


ORT_TYPES = {f"tensor({t})": getattr(onnx.TensorProto, t.upper()) for t in ("uint8", "int8", "uint16", "int16", "int32", "uint4", "int4", "float")}


def ort_value_types(optimized: onnx.ModelProto) -> dict[str, int]:
    """Element types ORT infers for the main graph's values of its optimized model, asked by
    loading it again unoptimized with every node output made a graph output."""
    m = onnx.ModelProto()
    m.CopyFrom(optimized)
    declared = {o.name for o in m.graph.output}
    for n in m.graph.node:
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in n.output if t and t not in declared)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return {v.name: ORT_TYPES[v.type] for v in [*sess.get_inputs(), *sess.get_outputs()] if v.type in ORT_TYPES}


def audit(qdqc, path: Path, isa: str) -> dict:
    r = run_qdqc(qdqc, "audit", path, "--json", "--ort-isa", isa)
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout)


def fmt(key) -> str:
    loc, target, fused = key
    return f"{target} → {fused}" + (f" [{loc}]" if loc else "")


# ----------------------------------------------------------------------------------------------
# comparing


def compare(report: dict, seen: Observed, isa: str) -> list[str]:
    diff = list(seen.anomalies)
    predicted = {}
    rewrites = []
    for g in report["groups"]:
        if isa not in g["verdict"]:
            diff.append(f"audit group {g['rule']} on {g['target']} has no verdict for {isa}")
        if g["fused_op"]:
            predicted[(g["location"], g["target"], g["fused_op"])] = g
        else:
            rewrites.append(g)
    for k in sorted(set(predicted) - set(seen.groups)):
        diff.append(f"only qdqc: {fmt(k)} (rule {predicted[k]['rule']}, nodes {predicted[k]['nodes']})")
    for k in sorted(set(seen.groups) - set(predicted)):
        diff.append(f"only ORT:  {fmt(k)} (reads {seen.groups[k]['inputs']}, writes {seen.groups[k]['outputs']})")

    for k in sorted(set(seen.groups) & set(predicted)):
        g, o = predicted[k], seen.groups[k]
        loc, target, fused = k
        nodes = seen.authored[loc]
        if g["op"] != o["op"]:
            diff.append(f"{fmt(k)}: op {g['op']} in the audit, {o['op']} authored")
        alias = lambda t: seen.aliases[loc].get(t, {t})  # noqa: E731
        if g["outputs"]:
            written = set(o["outputs"])
            matched = [alias(t) & written for t in g["outputs"]]
            if not all(matched) or set().union(*matched) != written:
                diff.append(f"{fmt(k)}: ORT's node writes {o['outputs']}, the audit's Q outputs are {g['outputs']}")
        else:  # no Q absorbed: the target's own outputs, or ones ORT made (propagation)
            authored_values = {t for n in nodes.values() for t in n.output}
            stray = [t for t in o["outputs"] if t in authored_values and t not in nodes[target].output]
            if stray:
                diff.append(f"{fmt(k)}: ORT's node writes authored {stray}, the audit absorbed no Q")
        if fused != "com.microsoft.MatMulNBits":  # MatMulNBits reads repacked weights under new names
            for name in g["nodes"]:
                n = nodes.get(name)
                if n is not None and n.op_type == "DequantizeLinear" and not alias(n.input[0]) & set(o["inputs"]):
                    diff.append(f"{fmt(k)}: ORT's node does not read {n.input[0]!r}, the codes of DQ {name!r} the audit absorbs")
            # the code types the fused kernel reads and writes (QDQS8ToU8 on x86)
            types = seen.types[loc]
            codes = g.get("codes", {}).get(isa, {})
            absorbed = sorted({n for n in g["nodes"] if n in nodes and is_qdq(nodes[n]) and n != target})
            if sorted(codes) != absorbed:
                diff.append(f"{fmt(k)}: the audit gives code types for {sorted(codes)}, the group absorbs {absorbed}")
            for name, code in sorted(codes.items()):
                n = nodes[name]
                value, side = (n.input[0], "inputs") if n.op_type == "DequantizeLinear" else (n.output[0], "outputs")
                there = sorted(alias(value) & set(o[side]))
                got = sorted({CODE_NAMES.get(types[v], str(types[v])) for v in there if v in types})
                if got != [code]:
                    diff.append(f"{fmt(k)}: the codes of {name!r} are {code} in the audit, {got or 'unknown'} in ORT ({there})")

    wbq = {(g["location"], g["target"]) for g in rewrites if g["rule"] == "WeightBiasQuantization"}
    for loc, t in sorted(wbq - set(seen.weight_bias_quantized)):
        diff.append(f"only qdqc: WeightBiasQuantization of {t}" + (f" [{loc}]" if loc else ""))
    for (loc, t), gone in sorted(seen.weight_bias_quantized.items()):
        if (loc, t) not in wbq:
            diff.append(f"only ORT:  WeightBiasQuantization of {t}" + (f" [{loc}]" if loc else "") + f" (no longer reads {gone})")

    # removed nodes
    may, must = set(), set()
    consumers: dict[str, dict[str, int]] = {}
    for loc, nodes in seen.authored.items():
        c = consumers.setdefault(loc, {})
        for t in [t for n in nodes.values() for t in n.input] + sorted(seen.graph_outputs[loc]):
            c[t] = c.get(t, 0) + 1
    for g in report["groups"]:
        loc, nodes = g["location"], seen.authored.get(g["location"], {})
        may |= {(loc, n) for n in g["nodes"]}
        kinds = {n: nodes[n].op_type if n in nodes else "?" for n in g["nodes"]}
        if g["fused_op"]:
            for n, op in kinds.items():
                if op == "QuantizeLinear":
                    must.add((loc, n))
                elif op == "DequantizeLinear" and n != g["target"] and consumers[loc].get(nodes[n].output[0], 0) == 1:
                    must.add((loc, n))
        elif g["rule"] in ("ReluQuantRewrite", "ClipQuantRewrite") and "ORT_THROW" not in g.get("reason", {}).get(isa, ""):
            must.add((loc, g["nodes"][0]))
        elif g["rule"] == "DoubleQDQPairsRemover":
            must |= {(loc, n) for n in g["nodes"][1:3]}
        elif g["rule"] == "QDQFinalCleanupTransformer":
            must |= {(loc, n) for n in g["nodes"]}
    for loc, n in sorted(seen.removed - may - seen.explained):
        diff.append(f"ORT removed {n}" + (f" [{loc}]" if loc else "") + ", which no audit group contains")
    for loc, n in sorted(must - seen.removed):
        diff.append(f"ORT kept {n}" + (f" [{loc}]" if loc else "") + ", which the audit says is removed")
    return diff


def arm_cast_artifacts(report: dict, model: onnx.ModelProto, seen: Observed) -> list[tuple]:
    """Fused groups absorbing a Clip with a bound whose code is outside int32 (see ARM_CAST_ARTIFACTS)."""
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    big = float(np.finfo(np.float32).max)
    out = []
    for g in report["groups"]:
        nodes = seen.authored.get(g["location"], {})
        clips = [nodes[n] for n in g["nodes"] if n in nodes and nodes[n].op_type == "Clip"]
        qs = [nodes[n] for n in g["nodes"] if n in nodes and nodes[n].op_type == "QuantizeLinear"]
        if not g["fused_op"] or not clips or len(qs) != 1 or qs[0].input[1] not in consts:
            continue
        clip, scale = clips[0], np.float32(consts[qs[0].input[1]])
        if opset < 11:
            attrs = {a.name: a.f for a in clip.attribute}
            bounds = [attrs.get("min", -big), attrs.get("max", big)]
        else:
            slot = lambda i, d: float(consts[clip.input[i]]) if len(clip.input) > i and clip.input[i] else d  # noqa: E731
            bounds = [slot(1, -big), slot(2, big)]
        with np.errstate(over="ignore"):
            codes = [np.rint(np.float32(b) / scale) for b in bounds]
        if any(not np.isfinite(c) or abs(float(c)) >= 2.0**31 for c in codes):
            out.append((g["location"], g["target"], g["fused_op"]))
    return out


# ORT's source files of the fused kernels whose constructors check their parameters.
KERNEL_SOURCES = {
    "qlinear_lookup_table": ("com.microsoft.QLinearSigmoid", "com.microsoft.QLinearLeakyRelu"),
    "qlinear_softmax": ("com.microsoft.QLinearSoftmax",),
}


def explain_error(report: dict, error: str, isa: str) -> list[str]:
    """Why ORT refused the session, from the audit; the unexplained part, if any."""
    throws = [g for g in report["groups"] if "ORT_THROW" in g.get("reason", {}).get(isa, "")]
    if "GetQConstantLowerUpper" in error:
        return [] if throws else ["ORT threw in GetQConstantLowerUpper, the audit predicts no ORT_THROW"]
    # ORT's schema or type check rejected a node it created: a fusion the audit must predict
    m = re.search(r'In Node, \("([^"]*)", (\w+), "([^"]*)"', error) or re.search(r"Node \(([^)]*)\) Op \((\w+)\)", error)
    if m:
        name, op = m.group(1), m.group(2)
        if any(g["target"] == name and g["fused_op"].split(".")[-1] == op for g in report["groups"]):
            return []
        return [f"ORT rejected its fused node {name!r} ({op}), which the audit does not predict: {error[:300]}"]
    # a fused kernel refused its parameters when ORT created it: a fusion to it the audit predicts
    m = re.search(r"contrib_ops/cpu/quantization/(\w+)\.cc", error)
    if m and any(g["fused_op"] in KERNEL_SOURCES.get(m.group(1), ()) for g in report["groups"]):
        return []
    return [f"ORT failed: {error[:400]}"]


# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_replay_matches_ort(qdqc, host, model_dir, tmp_path, name, config):
    isa, session_config = CONFIGS[config]
    isa = host if isa == "host" else isa
    src = model_dir / f"{name}.onnx"
    report = audit(qdqc, src, isa)
    error = ort_optimize(src, tmp_path / "opt.onnx", session_config)
    if error is not None:
        unexplained = explain_error(report, error, isa)
        assert not unexplained, f"{name} ({config}):\n  " + "\n  ".join(unexplained)
        return
    optimized = onnx.load(str(tmp_path / "opt.onnx"))
    seen = Observed()
    seen.walk(MODELS[name].graph, optimized.graph)
    seen.types[""].update(ort_value_types(optimized))
    if config == "arm":
        artifacts = arm_cast_artifacts(report, MODELS[name], seen)
        # On an arm64 host ORT converts the bounds as ARM does: no artifacts.
        expected = ARM_CAST_ARTIFACTS.get(name, []) if host.startswith("x86-") else []
        assert artifacts == expected, f"{name}: ARM-only Clip absorptions {artifacts} on {host}; update ARM_CAST_ARTIFACTS"
        fused_by_ort = [k for k in artifacts if k in seen.groups]
        assert not fused_by_ort, f"{name}: ORT on this host fused {fused_by_ort} too; ARM_CAST_ARTIFACTS is stale"
        report = dict(report, groups=[g for g in report["groups"] if (g["location"], g["target"], g["fused_op"]) not in artifacts])
    diff = compare(report, seen, isa)
    assert not diff, f"{name} ({config}: ORT {ort.__version__} vs qdqc audit --ort-isa {isa}):\n  " + "\n  ".join(diff)


# ----------------------------------------------------------------------------------------------
# hazards (rewrites/ort/src/hazards.rs) through the CLI


def qdq_pair(kind: str, what: str, location: str = "") -> list[tuple[str, str, str]]:
    """The hazard on each Q and DQ of selector_models' `x → Q/DQ → Transpose → Q/DQ` block."""
    at = f" {location}" if location else ""
    nodes = [("q_dx", "QuantizeLinear"), ("dx", "DequantizeLinear"), ("q_y", "QuantizeLinear"), ("y", "DequantizeLinear")]
    return [(kind, f"node '{n}' ({op}){at}", what) for n, op in nodes]


# model -> every hazard `qdqc audit` must report: (kind, node, a phrase of the message)
HAZARDS = {
    "hz_conv_clean": [],
    "hz_zero_scale": qdq_pair("scale", "is zero"),
    "hz_nan_scale": qdq_pair("scale", "is NaN"),
    "hz_subnormal_scale": qdq_pair("scale", "is subnormal"),
    "hz_zero_point_range": qdq_pair("zero-point-range", "300 is outside u8 [0, 255]"),
    "hz_in_subgraph": qdq_pair("scale", "is zero", "in If 'if'.then_branch"),
    "hz_fp16_quantize": [("fp16-quantize", "node 'qx' (QuantizeLinear)", "quantizes float16 'x'")],
    "hz_q_output_dtype": [("q-output-dtype", "node 'qx' (QuantizeLinear)", "output_dtype i8")],
    "hz_int8_wrap": [("int8-arith-wrap", "node 'sub' (Sub)", "on u8 tensors")],
    "hz_resize_linear": [("resize-linear", "node 'c' (Resize)", "linear Resize")],
    "hz_bias_scale": [("bias-scale", "node 'c' (Conv)", "bias scale 0x3a831271")],
    "hz_bias_zero_point": [("bias-zero-point", "node 'c' (Gemm)", "'zbi'[0] = 1000")],
    "hz_weight_zero_points": [("weight-zero-points", "node 'c' (Conv)", "channel 0: 0, channel 1: 1")],
    "hz_s8_pair_overflow": [("s8-pair-overflow", "node 'c' (Conv)", "outside int16")],
    "hz_softmax_int8": [("softmax-int8", "node 'c' (Softmax)", "(on arm64-neon)")],
    "hz_avgpool_dilations": [("avgpool-dilations", "node 'c' (AveragePool)", "dilations [2, 2]")],
    "hz_per_channel_sigmoid": [("per-channel-activation", "node 'c' (Sigmoid)", "'sc4' of node 'dx' (DequantizeLinear) has 4 elements")],
    "hz_per_channel_conv": [("per-channel-activation", "node 'c' (Conv)", "'sc4' of node 'qy' (QuantizeLinear) has 4 elements")],
}


def test_hazards_reported_by_the_cli(qdqc, model_dir):
    assert sorted(HAZARDS) == sorted(selector_models.hazard_models()), "HAZARDS and hazard_models() list different models"
    diff = []
    for name, want in HAZARDS.items():
        got = audit(qdqc, model_dir / f"{name}.onnx", "all")["hazards"]
        pairs = sorted((h["kind"], h["node"]) for h in got)
        if pairs != sorted((k, n) for k, n, _ in want):
            diff.append(f"{name}: reported {pairs}, expected {sorted((k, n) for k, n, _ in want)}")
            continue
        for kind, node, phrase in want:
            messages = [h["message"] for h in got if (h["kind"], h["node"]) == (kind, node)]
            if not any(phrase in m for m in messages):
                diff.append(f"{name}: {kind} on {node} does not say {phrase!r}: {messages}")
    assert not diff, "\n".join(diff)


def session(model: Path, level, config=None, saved: Path | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if saved is not None:
        so.optimized_model_filepath = str(saved)
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def test_hazard_claims_about_the_pinned_ort(model_dir, tmp_path, host):
    """What the hazard messages say ORT 1.31.1 does, observed on the wheel: the ISA-independent
    claims, and s8-pair-overflow's as this host's kernels make it (wrong on x86-avx2, exact
    elsewhere)."""
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    rng = np.random.default_rng(0)

    def fused(name, op, config=None):
        saved = tmp_path / f"{name}.opt.onnx"
        s = session(model_dir / f"{name}.onnx", LEVEL, config, saved)
        ops = [n.op_type for n in onnx.load(str(saved)).graph.node]
        assert op in ops, f"{name}: ORT did not fuse {op}: {ops}"
        return s

    # avgpool-dilations: the fused QLinearAveragePool fails ORT's own schema check.
    with pytest.raises(Exception, match="QLinearAveragePool"):
        session(model_dir / "hz_avgpool_dilations.onnx", LEVEL)
    session(model_dir / "hz_avgpool_dilations.onnx", off)
    # bias-zero-point: QGemm adds the bias codes without subtracting their zero point.
    a = {"a": rng.standard_normal((2, 4)).astype(np.float32)}
    m = model_dir / "hz_bias_zero_point.onnx"
    assert not np.array_equal(session(m, off).run(None, a)[0], fused("hz_bias_zero_point", "QGemm").run(None, a)[0])
    # weight-zero-points and softmax-int8 concern older releases: 1.31.1 runs QLinearConv with
    # unequal weight zero points and honours them (its fixed-point requantization may round one
    # code differently; ignoring channel 1's zero point would move it by several), and its int8
    # QLinearSoftmax saturates (ARM's rules keep it int8).
    x = {"x": rng.uniform(0, 5, (1, 4, 4, 4)).astype(np.float32)}
    m = model_dir / "hz_weight_zero_points.onnx"
    codes = (session(m, off).run(None, x)[0] - fused("hz_weight_zero_points", "QLinearConv").run(None, x)[0]) / np.float32(0.2)
    assert np.abs(codes).max() <= 1.001, np.abs(codes).max(axis=(0, 2, 3))
    # per-channel-activation: the lookup table refuses a per-channel scale when the session is
    # created; QLinearConv refuses a per-channel output zero point at its first run.
    with pytest.raises(Exception, match="QlinearBuildLookupTable"):
        session(model_dir / "hz_per_channel_sigmoid.onnx", LEVEL)
    with pytest.raises(Exception, match="QLinearConv : result zero point must be a scalar"):
        fused("hz_per_channel_conv", "QLinearConv").run(None, x)
    session(model_dir / "hz_per_channel_conv.onnx", off).run(None, x)
    peaked = np.zeros((1, 4, 4, 4), np.float32)
    peaked[..., 0] = 2.0  # p ≈ 0.71: code 182 on a scale of 1/256, which saturates at 127
    m = model_dir / "hz_softmax_int8.onnx"
    y = fused("hz_softmax_int8", "QLinearSoftmax", {"session.qdqisint8allowed": "1"}).run(None, {"x": peaked})[0]
    assert np.array_equal(session(m, off).run(None, {"x": peaked})[0], y) and y.max() == np.float32(127 / 256)
    # s8-pair-overflow: code 255 in channels 0 and 1 of one pixel, a pair in MLAS's
    # kernel-position-major K order, sums to 255·(w0 + w1) > 32767 with weights in [100, 120].
    # x86-avx2's vpmaddubsw saturates it: the fused QLinearConv gives 32767·0.001 → 32.8 where
    # the float path clips at 255·0.2 = 51 (codes 164, 255). VNNI and NEON accumulate exactly.
    spot = np.zeros((1, 4, 4, 4), np.float32)
    spot[0, 0:2, 1, 1] = 25.5
    m = model_dir / "hz_s8_pair_overflow.onnx"
    want = session(m, off).run(None, {"x": spot})[0]
    got = fused("hz_s8_pair_overflow", "QLinearConv").run(None, {"x": spot})[0]
    if host == "x86-avx2":
        code = lambda c: np.float32(c) * np.float32(0.2)  # noqa: E731 (the output DQ)
        assert np.all(want[0, :, :3, :3] == code(255)) and np.all(got[0, :, :3, :3] == code(164)), (want[0, 0], got[0, 0])
    else:
        assert np.array_equal(want, got), f"{host}: {want[0, 0]} vs {got[0, 0]}"
