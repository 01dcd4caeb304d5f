#!/usr/bin/env python3
"""Origin groups of ONNX Runtime's drift in QDQ models, and what `qdqc audit` says about them.

    python tests/oracle/origins.py [--qdqc BIN] [--runs N] [CORPUS_DIR | MODEL.onnx ...]

Every quantized tensor (every QuantizeLinear output of the main graph; Q nodes in If/Loop/Scan
bodies cannot be exposed as graph outputs and are counted apart) is made a graph output, and the
model runs under ORT_ENABLE_ALL and ORT_DISABLE_ALL on identical seeded inputs. A Q output's
group is the Q, the float ops between it and the DequantizeLinears (or graph inputs) that feed it,
and those DQs; its feeds are the codes the DQs read and any float tensor entering from outside
(a graph input, a non-quantized op's output). A group is an ORIGIN when its output differs
between the two runs while every feed is identical: the drift starts there. A group whose output
differs while only a float feed differs is counted as `float-fed` (the drift came from float code
upstream, not from a quantized rewrite).

Each origin is then looked up in `qdqc audit --ort-isa host --json` of the probe model (the one
with every quantized tensor exposed, which is the model whose drift was observed: exposing a Q's
output changes what ORT fuses), under both contracts (matched by its Q output in a group's
`outputs`): listed or not, and the verdict of the host profile. None may be `exact`. For each, the op ORT runs in its place is read from the
ORT_ENABLE_ALL optimized model (the node producing the Q output there), with the group's float
nodes ORT removed. With a corpus directory (tests/oracle/real_corpus.py's or corpus.py's
manifest), every QDQ model in it is checked, with the manifest's input spec when it has one.
Prints one line per origin and a table per op type.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402
import real_corpus  # noqa: E402

N_RUNS = 2
QDQ_KINDS = ("qdq", "nncf", "pow2", "seed", "external")


# ----------------------------------------------------------------------------------------------
# groups


def q_groups(model: onnx.ModelProto) -> dict[str, dict]:
    """Main-graph Q output → {op, nodes, codes, floats}: op is the op type feeding the Q (`DQ` for
    a DQ → Q requantization), nodes the float ops between the Q and its DQs, codes the tensors the
    DQs read, floats the float tensors entering the group from elsewhere: graph inputs, the outputs
    of If/Loop/Scan, and float tensors no code reaches (a LayerNorm of embeddings feeding a
    smooth-quant Mul), whose float ops are ORT's float fusions, not this group's. The Q's producer
    is always the group's own node, so exposing a boundary never blocks a fusion into the Q."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {t.name for t in g.initializer}
    reached: dict[str, bool] = {}

    def reaches_codes(t: str) -> bool:
        """Whether activation codes (a Q, or a DQ of a non-initializer) feed `t`."""
        stack = [t]
        while stack:
            x = stack[-1]
            if x in reached:
                stack.pop()
                continue
            n = producer.get(x)
            if n is None or n.op_type == "DequantizeLinear" and n.input[0] in inits:
                reached[x] = False
            elif n.op_type == "QuantizeLinear" or n.op_type == "DequantizeLinear":
                reached[x] = True
            else:
                todo = [i for i in n.input if i and i not in reached]
                if todo:
                    stack.extend(todo)
                    continue
                reached[x] = any(reached.get(i, False) for i in n.input if i)
            stack.pop()
        return reached[t]

    out = {}
    for q in g.node:
        if q.op_type != "QuantizeLinear":
            continue
        first = producer.get(q.input[0])
        op = "input" if first is None else ("DQ" if first.op_type == "DequantizeLinear" else first.op_type)
        nodes, codes, floats, seen = [], [], [], set()
        stack = [q.input[0]]
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            n = producer.get(t)
            if n is None:
                if t not in inits:
                    floats.append(t)  # a graph input
            elif n.op_type == "DequantizeLinear":
                if n.input[0] not in inits:
                    codes.append(n.input[0])
            elif n.op_type == "QuantizeLinear":
                codes.append(t)
            elif n.op_type == "Constant":
                pass
            elif all(i in inits or not i for i in n.input) and n.op_type != "Shape":
                pass  # computed from initializers only: the same in both runs
            elif any(a.type == onnx.AttributeProto.GRAPH for a in n.attribute) or (t != q.input[0] and not reaches_codes(t)):
                floats.append(t)
            else:
                nodes.append(n.name or n.output[0])
                stack.extend(n.input)
        out[q.output[0]] = {"op": op, "nodes": nodes, "codes": sorted(set(codes)), "floats": sorted(set(floats))}
    return out


def subgraph_q_count(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "QuantizeLinear" for g in corpus.iter_graphs(model.graph) if g is not model.graph
               for n in g.node)


def with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    inits = {t.name for t in m.graph.initializer}
    for n in sorted(set(names) - existing - inits):
        m.graph.output.append(helper.make_empty_tensor_value_info(n))
    return m


def session(model, level, optimized: Path | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def default_feeds(sess: ort.InferenceSession, name: str, n: int) -> list[dict]:
    from oracle_util import random_inputs, session_inputs

    return random_inputs(name, session_inputs(sess), n)


def _op_name(n: onnx.NodeProto) -> str:
    return f"{n.domain}.{n.op_type}" if n.domain else n.op_type


def find_origins(model: onnx.ModelProto, feeds=None, name: str = "model", n_runs: int = N_RUNS) -> dict:
    """Run the probe model under both levels; returns {groups, origins, float_fed, differing,
    ort_ops}: origins and float_fed are sorted lists of Q outputs, ort_ops maps each Q output to
    (op ORT runs there, group nodes ORT removed)."""
    groups = q_groups(model)
    watched = set(groups) | {t for gr in groups.values() for t in gr["codes"] + gr["floats"]}
    probe = with_outputs(model, watched)
    with tempfile.TemporaryDirectory(prefix="qdqc-origins-") as tmp:
        opt_path = Path(tmp) / "optimized.onnx"
        on_s = session(probe, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, opt_path)
        optimized = onnx.load(str(opt_path), load_external_data=False)
    off_s = session(probe, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    names = [o.name for o in off_s.get_outputs()]
    if feeds is None:
        feeds = default_feeds(off_s, name, n_runs)
    differs, feed_differs = set(), set()
    for feed in feeds:
        off = dict(zip(names, off_s.run(None, feed)))
        on = dict(zip(names, on_s.run(None, feed)))
        for t in watched:
            if t in off and off[t].tobytes() != on[t].tobytes():
                differs.add(t)
    origins, float_fed = [], []
    for t, gr in groups.items():
        if t not in differs:
            continue
        if any(c in differs for c in gr["codes"]):
            continue
        (float_fed if any(f in differs for f in gr["floats"]) else origins).append(t)
    opt_producer = {o: n for n in optimized.graph.node for o in n.output}
    opt_names = {n.name for n in optimized.graph.node}
    ort_ops = {}
    for t in origins + float_fed:
        n = opt_producer.get(t)
        layout = ""
        while n is not None and n.op_type in ("Transpose", "ReorderOutput") and n.input[0] in opt_producer:
            layout = f" (then {n.op_type}: layout pass)"
            n = opt_producer[n.input[0]]
        what = "?" if n is None else _op_name(n) + layout
        if n is not None and n.op_type == "QuantizeLinear" and n.input[0] in opt_producer:
            what += f" of {_op_name(opt_producer[n.input[0]])}"  # the float path before the Q changed
        removed = [x for x in groups[t]["nodes"] if x not in opt_names]
        ort_ops[t] = (what, removed)
    return {"groups": groups, "origins": sorted(origins), "float_fed": sorted(float_fed),
            "differing": len(differs & set(groups)), "ort_ops": ort_ops, "probe": probe}


# ----------------------------------------------------------------------------------------------
# audit


def audit(qdqc: Path, path: Path) -> dict:
    """`qdqc audit --json --ort-isa host`: both contracts, `exact` in each group's own maps and
    `real` in its `real` object."""
    r = subprocess.run([str(qdqc), "audit", str(path), "--json", "--ort-isa", "host"], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(f"qdqc audit {path} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def host_profile(qdqc: Path) -> str:
    r = subprocess.run([str(qdqc), "host"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"qdqc host exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout.split()[0]


def verdicts(report: dict, profile: str, contract: str) -> dict[str, tuple]:
    """Q output → (rule, op, verdict of CONTRACT under PROFILE, reason) of the audit group listing it."""
    out = {}
    for g in report["groups"]:
        v = g if contract == "exact" else g.get("real", {})
        for t in g["outputs"]:
            out[t] = (g["rule"], g["op"], v.get("verdict", {}).get(profile, "not audited for " + profile),
                      v.get("reason", {}).get(profile, ""))
    return out


def judge(qdqc: Path, found: dict, profile: str) -> list[dict]:
    """One row per origin: op, listed, exact/real verdicts, what ORT did. The audit reads the
    PROBE model (every quantized tensor a graph output), not the original: exposing a Q's output
    changes what ORT fuses (a Q → DQ pair feeding a graph output stays int8, so int8 groups that
    stay float in the original become int8 QLinear kernels), and the origins are the probe's."""
    with tempfile.TemporaryDirectory(prefix="qdqc-origins-") as tmp:
        path = Path(tmp) / "probe.onnx"
        onnx.save_model(found["probe"], str(path))
        report = audit(qdqc, path)
    exact, real = verdicts(report, profile, "exact"), verdicts(report, profile, "real")
    near = {t: (g.get("near_boundary") or {}).get("accumulators", 0) for g in report["groups"] for t in g["outputs"]}
    rows = []
    for t in found["origins"]:
        gr = found["groups"][t]
        ort_op, removed = found["ort_ops"][t]
        rows.append({
            "tensor": t, "op": gr["op"], "ort_op": ort_op, "removed": removed,
            "listed": t in exact or t in real,
            "exact": exact.get(t, (None, None, "not listed", ""))[2],
            "real": real.get(t, (None, None, "not listed", ""))[2],
            "rule": (exact.get(t) or real.get(t) or ("", ""))[0],
            "reason": exact.get(t, (None, None, None, ""))[3],
            "near_boundary": near.get(t, 0),
        })
    return rows


def table(rows: list[dict]) -> str:
    by_op = defaultdict(Counter)
    for r in rows:
        c = by_op[r["op"]]
        c["found"] += 1
        c["listed"] += r["listed"]
        c["refuted exact"] += r["exact"] == "refuted"
        c["refuted real"] += r["real"] == "refuted"
        c["unknown"] += r["listed"] and "refuted" not in (r["exact"], r["real"]) and "unknown" in (r["exact"], r["real"])
        c["called exact"] += r["exact"] == "exact"
        c["not listed"] += not r["listed"]
    cols = ["found", "listed", "refuted exact", "refuted real", "unknown", "called exact", "not listed"]
    lines = ["| op | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
    total = Counter()
    for op in sorted(by_op):
        total.update(by_op[op])
        lines.append(f"| {op} | " + " | ".join(str(by_op[op][c]) for c in cols) + " |")
    lines.append("| all | " + " | ".join(str(total[c]) for c in cols) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# main


def models_of(args) -> list[tuple[str, Path, list | None]]:
    out = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            manifest = json.loads((p / "manifest.json").read_text())
            for e in manifest["models"]:
                if e["kind"] in QDQ_KINDS:
                    out.append((e["name"], p / e["file"], e.get("inputs")))
        else:
            out.append((p.stem, p, None))
    return out


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qdqc", default=os.environ.get("QDQC_BIN", REPO / "target" / "debug" / "qdqc"))
    ap.add_argument("--runs", type=int, default=N_RUNS)
    ap.add_argument("paths", nargs="*")
    args = ap.parse_args(argv[1:])
    paths = args.paths or [os.environ.get("QDQC_REAL_CORPUS", REPO / "target" / "real-corpus")]
    qdqc = Path(args.qdqc)
    profile = host_profile(qdqc)
    print(f"host profile: {profile}")
    rows, float_fed, skipped_sub, failed = [], 0, 0, []
    for name, path, inputs in models_of(paths):
        model = onnx.load(str(path))
        feeds = None
        if inputs is not None:
            feeds = real_corpus.feeds(inputs, zlib.crc32(name.encode()), args.runs)
        try:
            found = find_origins(model, feeds, name, args.runs)
        except ort.capi.onnxruntime_pybind11_state.Fail as e:
            failed.append(f"{name}: ONNX Runtime: {str(e).strip()[:300]}")
            continue
        sub = subgraph_q_count(model)
        skipped_sub += sub
        try:
            model_rows = judge(qdqc, found, profile)
        except RuntimeError as e:  # qdqc refuses the model: its origins count as not listed
            failed.append(f"{name}: {e}")
            model_rows = [{"tensor": t, "op": found["groups"][t]["op"], "ort_op": found["ort_ops"][t][0],
                           "removed": found["ort_ops"][t][1], "listed": False, "exact": "audit failed",
                           "real": "audit failed", "rule": "", "reason": ""} for t in found["origins"]]
        float_fed += len(found["float_fed"])
        print(f"{name}: {len(found['groups'])} quantized tensors, {found['differing']} differ, "
              f"{len(found['origins'])} origin(s), {len(found['float_fed'])} float-fed"
              + (f", {sub} Q in subgraphs not exposed" if sub else ""))
        for r in model_rows:
            r["model"] = name
            removed = f", removed {r['removed']}" if r["removed"] else ""
            print(f"  {r['op']:>10} {r['tensor']}: ORT runs {r['ort_op']}{removed}; audit "
                  + (f"{r['rule']}: exact {r['exact']}, real {r['real']}" if r["listed"] else "NOT LISTED")
                  + (f" ({r['reason'][:160]})" if r["reason"] else ""))
        for t in found["float_fed"]:
            print(f"  float-fed {found['groups'][t]['op']} {t}: ORT runs {found['ort_ops'][t][0]}")
        rows += model_rows
    print()
    print(table(rows))
    print(f"\n{len(rows)} origin groups, {float_fed} float-fed groups, {skipped_sub} Q nodes in subgraphs not exposed")
    for f in failed:
        print(f"FAILED: {f}")
    bad = [r for r in rows if r["exact"] == "exact"]
    if failed:
        return 1
    if bad:
        print(f"UNSOUND: {len(bad)} origin group(s) called exact: {[(r['model'], r['tensor']) for r in bad]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
