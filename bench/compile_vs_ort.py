#!/usr/bin/env python3
"""qdqc compile time vs ONNX Runtime session-creation time, per corpus model.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release
    "$PY" bench/compile_vs_ort.py [--json] [--runs 5] [--corpus DIR] [--qdqc BIN]

qdqc:  wall clock of the whole qdqc process (median of N runs) for `compile --no-fuse`, `compile`
       (proof-gated fusion on every ISA profile) and `audit --json`.
ORT:   wall clock of onnxruntime.InferenceSession(IN) with ORT_ENABLE_ALL on CPUExecutionProvider
       (median of N runs, in this process, after one untimed warm-up session).
ratio: qdqc / ORT (below 1 means qdqc compiles faster than ORT prepares the model).
The geomean row covers the models where both sides succeeded.

Defaults: $QDQC_BIN or <repo>/target/release/qdqc; $QDQC_CORPUS or <repo>/target/corpus
(built with tests/oracle/corpus.py when its manifest is missing).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS_SCRIPT = REPO / "tests" / "oracle" / "corpus.py"


def ensure_corpus(corpus_dir: Path) -> dict:
    """Build the corpus with tests/oracle/corpus.py when its manifest is missing or stale."""
    sys.path.insert(0, str(CORPUS_SCRIPT.parent))
    import corpus  # noqa: PLC0415

    manifest = corpus_dir / "manifest.json"
    stale = False
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        stale = m.get("generator") == "tests/oracle/corpus.py" and m.get(
            "generator_sha256"
        ) != corpus.generator_fingerprint()
    if stale or not manifest.is_file():
        r = subprocess.run([sys.executable, str(CORPUS_SCRIPT), str(corpus_dir)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"building the corpus failed:\n{r.stdout}\n{r.stderr}")
    return json.loads(manifest.read_text())


# The qdqc commands timed: lift/extract only, compile with proof-gated fusion, audit.
COMMANDS = {
    "no_fuse": lambda src, out: ["compile", src, "-o", out, "--no-fuse"],
    "compile": lambda src, out: ["compile", src, "-o", out],
    "audit": lambda src, out: ["audit", src, "--json"],
}


def time_qdqc(qdqc: Path, src: Path, runs: int, command: str = "no_fuse"):
    times = []
    with tempfile.TemporaryDirectory(prefix="qdqc-bench-") as tmp:
        out = Path(tmp) / "out.onnx"
        for _ in range(runs):
            t0 = time.perf_counter()
            r = subprocess.run([str(qdqc), *map(str, COMMANDS[command](src, out))], capture_output=True)
            dt = time.perf_counter() - t0
            if r.returncode != 0:
                err = r.stderr.decode(errors="replace").strip().splitlines()
                return None, f"exit {r.returncode}: {err[-1] if err else ''}"
            times.append(dt)
    return statistics.median(times), None


def time_ort(src: Path, runs: int):
    import onnxruntime as ort

    def create():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 4
        return ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])

    try:
        create()  # warm-up (first-touch costs of the library, page cache)
    except Exception as e:  # noqa: BLE001
        return None, str(e).strip().splitlines()[0][:120]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        create()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), None


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt_ms(x):
    return "-" if x is None else f"{x * 1e3:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per measurement (median is reported)")
    ap.add_argument("--corpus", type=Path, default=Path(os.environ.get("QDQC_CORPUS", REPO / "target" / "corpus")))
    ap.add_argument("--qdqc", type=Path, default=Path(os.environ.get("QDQC_BIN", REPO / "target" / "release" / "qdqc")))
    args = ap.parse_args()

    if not args.qdqc.is_file():
        sys.exit(f"qdqc binary not found at {args.qdqc} (cargo build --release, or set QDQC_BIN / --qdqc)")
    manifest = ensure_corpus(args.corpus)

    import onnxruntime as ort

    rows = []
    for m in manifest["models"]:
        src = args.corpus / m["file"]
        q, q_err = time_qdqc(args.qdqc, src, args.runs)
        f, f_err = time_qdqc(args.qdqc, src, args.runs, "compile")
        a, a_err = time_qdqc(args.qdqc, src, args.runs, "audit")
        o, o_err = time_ort(src, args.runs)
        both = o is not None
        rows.append(
            {
                "name": m["name"],
                "kind": m["kind"],
                "qdqc_compile_s": q,
                "qdqc_fuse_s": f,
                "qdqc_audit_s": a,
                "ort_session_s": o,
                "ratio": (q / o) if q is not None and both else None,
                "fuse_ratio": (f / o) if f is not None and both else None,
                "audit_ratio": (a / o) if a is not None and both else None,
                "qdqc_error": q_err or f_err or a_err,
                "ort_error": o_err,
            }
        )
    ok = [r for r in rows if r["ratio"] is not None]
    summary = {
        "models": len(rows),
        "measured": len(ok),
        "geomean_qdqc_compile_s": geomean([r["qdqc_compile_s"] for r in ok]),
        "geomean_ort_session_s": geomean([r["ort_session_s"] for r in ok]),
        "geomean_ratio": geomean([r["ratio"] for r in ok]),
        "geomean_qdqc_fuse_s": geomean([r["qdqc_fuse_s"] for r in ok]),
        "geomean_fuse_ratio": geomean([r["fuse_ratio"] for r in ok]),
        "geomean_qdqc_audit_s": geomean([r["qdqc_audit_s"] for r in ok]),
        "geomean_audit_ratio": geomean([r["audit_ratio"] for r in ok]),
    }
    meta = {
        "qdqc": str(args.qdqc),
        "corpus": str(args.corpus),
        "runs": args.runs,
        "onnxruntime": ort.__version__,
        "ort_level": "ORT_ENABLE_ALL",
        "cpus": os.cpu_count(),
    }

    if args.json:
        print(json.dumps({"meta": meta, "rows": rows, "geomean": summary}, indent=2))
        return 0

    w = max(len(r["name"]) for r in rows + [{"name": "geomean"}])
    print(
        f"qdqc (--no-fuse, compile with fusion, audit) vs ORT session creation (ORT_ENABLE_ALL, onnxruntime "
        f"{ort.__version__}); median of {args.runs}, milliseconds; ratios are qdqc/ORT"
    )
    header = (f"{'model':<{w}}  {'kind':<8}  {'no-fuse':>8}  {'compile':>8}  {'audit':>8}  {'ORT':>8}  "
              f"{'nf/ORT':>7}  {'cmp/ORT':>7}  {'aud/ORT':>7}  note")
    print(header)
    print("-" * len(header))
    ratio = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for r in rows:
        note = "; ".join(x for x in (r["qdqc_error"] and f"qdqc: {r['qdqc_error']}",
                                       r["ort_error"] and f"ORT: {r['ort_error']}") if x)
        print(f"{r['name']:<{w}}  {r['kind']:<8}  {fmt_ms(r['qdqc_compile_s']):>8}  {fmt_ms(r['qdqc_fuse_s']):>8}  "
              f"{fmt_ms(r['qdqc_audit_s']):>8}  {fmt_ms(r['ort_session_s']):>8}  {ratio(r['ratio']):>7}  "
              f"{ratio(r['fuse_ratio']):>7}  {ratio(r['audit_ratio']):>7}  {note}")
    print("-" * len(header))
    g = summary
    print(f"{'geomean':<{w}}  {'':<8}  {fmt_ms(g['geomean_qdqc_compile_s']):>8}  {fmt_ms(g['geomean_qdqc_fuse_s']):>8}  "
          f"{fmt_ms(g['geomean_qdqc_audit_s']):>8}  {fmt_ms(g['geomean_ort_session_s']):>8}  {ratio(g['geomean_ratio']):>7}  "
          f"{ratio(g['geomean_fuse_ratio']):>7}  {ratio(g['geomean_audit_ratio']):>7}  over {g['measured']} of {g['models']} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
