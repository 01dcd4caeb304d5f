#!/usr/bin/env python3
"""Decode-step latency of the decoder-like model (bench/decoder.py), compiled by qdqc, against ONNX Runtime.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release
    "$PY" bench/decode.py [--mode decoder|corpus|both] [--variants int4,int8] [--ort-isa all|x86-avx512vnni]
                          [--json] [--qdqc BIN]

For each variant of the decoder (int4 block-32 and int8 per-channel weights, tied embedding, 6 blocks,
hidden 512, vocab 32000, batch 1, one decode step over a past of 64) and, in corpus mode, for each
`qdq` and `pow2` corpus model of bench/latency.py, one row per configuration:

ORT default   the original under ORT_ENABLE_ALL (ORT's own fusions: DQ → MatMul → MatMulNBits at
              accuracy level 4 wherever its selector accepts the weight; the tied lm_head it refuses)
ORT off       the original under ORT_DISABLE_ALL: the reference every diff is taken against
ORT profile   the original under ORT_ENABLE_ALL with the session profile `qdqc compile` prints: where
              `exact` differs, this row says whether ORT's own passes under that profile do too
exact         `qdqc compile` (default contract `exact`), run under ORT_ENABLE_ALL with the session
              profile qdqc prints (parsed as in bench/latency.py); must not differ in a single bit
exact+fold    `qdqc compile --fold-weights`, same profile, must not differ either (only when the
              binary has the flag)
acc4, acc1    `qdqc compile --allow matmulnbits=acc4|acc1` (lossy contract), same profile (only
              when the binary has --allow)

Columns: µs per decode step (every session single-threaded, interleaved batches, median of --runs
batches, as bench/latency.py); speed = t(ORT default) / t, above 1 is faster; diff = output elements
(all outputs, all inputs) whose bits differ from ORT off; max abs / max rel = the largest |Δ| of the
logits (corpus: of every output) over the --diff-inputs seeded inputs, rel = max |Δ| / max |reference|
per output and input; size = the model file plus its external data; rules = the fired decisions of
the compile report by rule. Below the table: each lossy compile's per-instance deviations as its
report states them and its refused decisions with their reasons; the issue's acceptance targets
(acc4 >= 1.5x ORT default on the decoder, acc1 rel <= 1e-4), reported, not fatal.

Exit status 1 if an `exact` configuration differs from ORT off in any bit, or a compile or session
fails; 0 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import decoder  # noqa: E402
from latency import (  # noqa: E402
    KINDS, REPO, BenchError, compile_model, diff_count, ensure_corpus, seeded_inputs, session, time_sessions,
)

TARGET_ACC4_SPEED = 1.5
TARGET_ACC1_REL = 1e-4


def configurations(qdqc: Path) -> dict:
    """qdqc configurations to run: {key: (label, exact?, extra compile args)}, by what `compile --help` offers."""
    r = subprocess.run([str(qdqc), "compile", "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"{qdqc} compile --help exited {r.returncode}: {r.stderr.strip()[:200]}")
    configs = {"exact": ("exact", True, ())}
    if "--fold-weights" in r.stdout:
        configs["exact_fold"] = ("exact+fold", True, ("--fold-weights",))
    if "--allow" in r.stdout:
        for level in ("acc4", "acc1"):
            configs[level] = (level, False, ("--allow", f"matmulnbits={level}"))
    return configs


def model_bytes(path: Path) -> int:
    """The model file plus the external data files it names."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    files = {e.value for t in model.graph.initializer if uses_external_data(t)
             for e in t.external_data if e.key == "location"}
    return path.stat().st_size + sum((path.parent / f).stat().st_size for f in files)


def deviation(ref: list, other: list, which: list[int]) -> tuple[float, float]:
    """(max |Δ|, max over outputs and inputs of max |Δ| / max |reference|) of the outputs numbered WHICH."""
    abs_dev = rel_dev = 0.0
    for r_outs, o_outs in zip(ref, other):
        for i in which:
            a, b = r_outs[i].astype(np.float64), o_outs[i].astype(np.float64)
            if a.size == 0:
                continue
            d = float(np.max(np.abs(a - b)))
            scale = float(np.max(np.abs(a)))
            abs_dev = max(abs_dev, d)
            rel_dev = max(rel_dev, d / scale if scale > 0 else (0.0 if d == 0 else float("inf")))
    return abs_dev, rel_dev


def fired_rules(report: dict) -> dict:
    return dict(sorted(collections.Counter(d["rule"] for d in report.get("decisions", []) if d.get("fired")).items()))


def find_key(obj, part: str):
    """The value of the first key containing PART, depth first (the report schema of lossy rules may grow)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if part in k:
                return v
        for v in obj.values():
            found = find_key(v, part)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = find_key(v, part)
            if found is not None:
                return found
    return None


def refusals(report: dict) -> list[str]:
    """Every refused decision as 'rule at: reason' (one reason when every ISA profile gives the same)."""
    out = []
    for d in report.get("decisions", []):
        if d.get("fired"):
            continue
        why = d.get("reason") or d.get("counterexample") or d.get("verdict")
        why = sorted({str(v) for v in why.values()}) if isinstance(why, dict) else [str(why)]
        out.append(f"{d['rule']} {d.get('output') or '?'}: {'; '.join(why)[:200]}")
    return out


def lossy_instances(report: dict) -> list[dict]:
    """Every fired decision that carries a deviation, as the report gives it."""
    out = []
    for d in report.get("decisions", []):
        dev = find_key(d, "deviation") if d.get("fired") else None
        if dev is not None:
            at = d.get("output") or (d.get("nodes") or ["?"])[-1]
            out.append({"rule": d["rule"], "at": at, "accuracy_level": find_key(d, "accuracy_level"), "deviation": dev})
    return out


def measurements(deviation) -> list[dict]:
    """The deviation of one lossy instance as a list of {field: value} (one per input set it was measured on)."""
    if isinstance(deviation, dict):
        return [deviation]
    if isinstance(deviation, list):
        return [m for d in deviation for m in measurements(d)]
    return [{"deviation": deviation}]


def fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def failed(name: str, *errors: str) -> dict:
    """An empty result for NAME (with ERRORS if it could not be measured at all)."""
    return {"name": name, "rows": {}, "errors": list(errors), "instances": {}, "refused": {}}


def bench_one(name: str, src: Path, feeds: list[dict], compare: list[str] | None, tmp: Path, configs: dict,
              args) -> dict:
    """All configurations of one model: rows, failures, lossy instances."""
    import onnxruntime as ort

    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    result = failed(name)
    sessions = {"original_on": session(src, on), "original_off": session(src, off)}
    sizes = {"original_on": model_bytes(src), "original_off": model_bytes(src)}
    meta = {"original_on": ("ORT default", False, None), "original_off": ("ORT off", True, None)}
    for key, (label, exact, extra) in configs.items():
        out = tmp / f"{name}.{key}.onnx"
        try:
            report, profile = compile_model(args.qdqc, src, out, "exact", args.ort_isa, extra)
            sessions[key] = session(out, on, profile)
        except BenchError as e:
            result["errors"].append(f"{label}: {e}")
            continue
        if key == "exact":  # the original under the same profile: tells ORT's float passes from qdqc's rewrites
            sessions["original_profile"] = session(src, on, profile)
            sizes["original_profile"] = sizes["original_on"]
            meta["original_profile"] = ("ORT profile", False, None)
            sessions[key] = sessions.pop(key)
        sizes[key] = model_bytes(out)
        meta[key] = (label, exact, fired_rules(report))
        if not exact:
            result["instances"][label] = lossy_instances(report)
            result["refused"][label] = refusals(report)
        del report

    ref_sess = sessions["original_off"]
    names = [o.name for o in ref_sess.get_outputs()]
    which = [names.index(n) for n in compare] if compare else list(range(len(names)))
    ref = [ref_sess.run(None, f) for f in feeds]
    for key, s in sessions.items():
        label, exact, rules = meta[key]
        outs = ref if key == "original_off" else [s.run(None, f) for f in feeds]
        diff = 0 if key == "original_off" else diff_count(ref_sess, s, feeds)
        max_abs, max_rel = deviation(ref, outs, which)
        result["rows"][key] = {"config": label, "exact": exact, "diff": diff, "max_abs": max_abs, "max_rel": max_rel,
                               "bytes": sizes[key], "rules": rules}
        if exact and diff:
            result["errors"].append(f"{label}: {diff} output element(s) differ from the original under ORT_DISABLE_ALL")
    t = time_sessions(sessions, feeds[0], args.runs, args.batch_ms)
    result["batch"] = t.pop("batch")
    for key, secs in t.items():
        result["rows"][key]["seconds"] = secs
        result["rows"][key]["speed"] = t["original_on"] / secs
    return result


def decoder_results(args, configs: dict, tmp: Path) -> list[dict]:
    import onnxruntime as ort

    out = []
    for variant in args.variants:
        cfg = replace(decoder.Config(), variant=variant)
        try:
            path = decoder.write(cfg, tmp)
            fusions = decoder.ort_default_fusions(path)
            r = bench_one(cfg.name, path, decoder.feeds(cfg, args.diff_inputs), ["logits"], tmp, configs, args)
        except BenchError as e:
            out.append(failed(cfg.name, str(e)))
            continue
        except Exception as e:  # noqa: BLE001 (ORT's own failures carry their message)
            out.append(failed(cfg.name, f"{type(e).__name__}: {str(e)[:200]}"))
            continue
        r["ort_default_fusions"] = fusions
        r["ort_default_summary"] = f"ORT {ort.__version__} ORT_ENABLE_ALL: {decoder.describe_fusions(fusions)}"
        out.append(r)
    return out


def corpus_results(args, configs: dict, tmp: Path) -> list[dict]:
    import onnxruntime as ort

    manifest = ensure_corpus(args.corpus)
    out = []
    for e in (m for m in manifest["models"] if m["kind"] in KINDS):
        src = args.corpus / e["file"]
        try:
            reference = session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            feeds = seeded_inputs(e["name"], reference, args.diff_inputs)
            out.append(bench_one(e["name"], src, feeds, None, tmp, configs, args))
        except BenchError as err:
            out.append(failed(e["name"], str(err)))
        except Exception as err:  # noqa: BLE001 (ORT's own failures carry their message)
            out.append(failed(e["name"], f"{type(err).__name__}: {str(err)[:200]}"))
    return out


def targets(results: list[dict]) -> list[str]:
    """The issue's acceptance targets on the decoder, where the configurations ran."""
    lines = []
    for r in results:
        if not r["name"].startswith("decoder_"):
            continue
        acc4, acc1 = r["rows"].get("acc4"), r["rows"].get("acc1")
        if acc4 is None and acc1 is None:
            lines.append(f"{r['name']}: acc4/acc1 not measured (this qdqc has no --allow)")
        if acc4 is not None:
            ok = acc4["speed"] >= TARGET_ACC4_SPEED
            lines.append(f"{r['name']}: acc4 {acc4['speed']:.2f}x ORT default (target >= {TARGET_ACC4_SPEED}x: "
                         f"{'met' if ok else 'MISSED'}), logits max rel {acc4['max_rel']:.3g}")
        if acc1 is not None:
            ok = acc1["max_rel"] <= TARGET_ACC1_REL
            lines.append(f"{r['name']}: acc1 logits max rel {acc1['max_rel']:.3g} (target <= {TARGET_ACC1_REL:g}: "
                         f"{'met' if ok else 'MISSED'}), {acc1['speed']:.2f}x ORT default")
    return lines


def print_table(results: list[dict], args) -> None:
    import onnxruntime as ort

    print(f"decode step / inference latency, µs (median of {args.runs} batches, 1 thread, onnxruntime "
          f"{ort.__version__}); speed = t(ORT default) / t; diff = output elements differing from ORT off over "
          f"{args.diff_inputs} inputs; max abs / rel: logits (corpus: all outputs)")
    w = max([len(r["name"]) for r in results] + [5])
    header = (f"{'model':<{w}}  {'config':<11}  {'µs':>9}  {'speed':>7}  {'diff':>8}  {'max abs':>9}  {'max rel':>9}  "
              f"{'size kB':>8}  rules")
    print(header)
    print("-" * len(header))
    for r in results:
        for row in r["rows"].values():
            rules = row["rules"]
            rules = "-" if rules is None else (", ".join(f"{k} {v}" for k, v in rules.items()) or "none fired")
            print(f"{r['name']:<{w}}  {row['config']:<11}  {row['seconds'] * 1e6:>9.1f}  {row['speed']:>6.3f}x  "
                  f"{row['diff']:>8}  {row['max_abs']:>9.3g}  {row['max_rel']:>9.3g}  {row['bytes'] / 1e3:>8.0f}  "
                  f"{rules}")
        for e in r["errors"]:
            print(f"{r['name']:<{w}}  ERROR: {e}")
        if "ort_default_summary" in r:
            print(f"{'':<{w}}  {r['ort_default_summary']}")
    print("-" * len(header))
    for r in results:
        for label, inst in r["instances"].items():
            measured = [m for i in inst for m in measurements(i["deviation"])]
            worst = {k: max((m[k] for m in measured if k in m), default=None) for k in ("max_abs", "max_rel")}
            on = sorted({str(m["inputs"]) for m in measured if "inputs" in m})
            print(f"{r['name']} {label}: {len(inst)} lossy instance(s) in the compile report, largest max abs "
                  f"{fmt(worst['max_abs'])}, max rel {fmt(worst['max_rel'])}; measured on {'; '.join(on) or '-'}")
            for i in inst:
                level = "" if i["accuracy_level"] is None else f" level {i['accuracy_level']}"
                devs = "; ".join(", ".join(f"{k} {fmt(v)}" for k, v in m.items() if k != "inputs")
                                 for m in measurements(i["deviation"]))
                print(f"  {i['rule']} {i['at']}{level}: {devs}")
            for line in r["refused"].get(label, []):
                print(f"  refused {line}")
    for line in targets(results):
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("decoder", "corpus", "both"), default="decoder")
    ap.add_argument("--variants", default=",".join(decoder.VARIANTS), help="decoder variants, comma-separated")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--runs", type=int, default=15, help="timed batches per session (the median is reported)")
    ap.add_argument("--batch-ms", type=float, default=20.0, help="target duration of one timed batch (ms)")
    ap.add_argument("--diff-inputs", type=int, default=4, help="seeded inputs the diffs and deviations run on")
    ap.add_argument("--ort-isa", default="all", help="profiles qdqc's fusions are proven for (qdqc's --ort-isa)")
    ap.add_argument("--corpus", type=Path, default=Path(os.environ.get("QDQC_CORPUS", REPO / "target" / "corpus")))
    ap.add_argument("--qdqc", type=Path, default=Path(os.environ.get("QDQC_BIN", REPO / "target" / "release" / "qdqc")))
    args = ap.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.variants if v not in decoder.VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)} (known: {', '.join(decoder.VARIANTS)})")
    if not args.qdqc.is_file():
        sys.exit(f"qdqc binary not found at {args.qdqc} (cargo build --release, or set QDQC_BIN / --qdqc)")

    import onnxruntime as ort

    configs = configurations(args.qdqc)
    t_start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="qdqc-decode-") as tmp:
        if args.mode in ("decoder", "both"):
            results += decoder_results(args, configs, Path(tmp))
        if args.mode in ("corpus", "both"):
            results += corpus_results(args, configs, Path(tmp))
    any_failed = any(r["errors"] for r in results)
    seconds = time.perf_counter() - t_start
    if args.json:
        meta = {"qdqc": str(args.qdqc), "ort_isa": args.ort_isa,
                "configurations": {k: v[0] for k, v in configs.items()}, "runs": args.runs, "batch_ms": args.batch_ms,
                "diff_inputs": args.diff_inputs, "onnxruntime": ort.__version__, "threads": 1,
                "cpus": os.cpu_count(), "seconds": seconds}
        print(json.dumps({"meta": meta, "results": results, "targets": targets(results)}, indent=2))
    else:
        print_table(results, args)
        print(f"total {seconds:.0f} s")
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
