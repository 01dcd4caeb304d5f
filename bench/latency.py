#!/usr/bin/env python3
"""Inference latency of qdqc-compiled models vs the original in ONNX Runtime, per corpus model.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --release
    "$PY" bench/latency.py [--json] [--runs 15] [--ort-isa all|x86-avx512vnni|host] [--corpus DIR] [--qdqc BIN]
                           [--models DIR] [--float-fusions]

For every qdq and pow2 corpus model, in one run:

original   ORT_DISABLE_ALL (the unfused reference) and ORT_ENABLE_ALL (ORT's own QDQ fusions),
           with `ort diff`: output elements where ENABLE_ALL differs from DISABLE_ALL.
exact      `qdqc compile --contract exact`, run under ORT_ENABLE_ALL with the session profile
           qdqc prints (parsed from its stdout, docs/session-profile.md); `diff` against the
           original under ORT_DISABLE_ALL must be 0, else the row is marked FAIL.
real       `qdqc compile --contract real`, same profile; its diff is expected, not a failure.
real+ff    with --float-fusions: `qdqc compile --contract real --allow ort-float-fusions`, run under the
           (lossy) profile it prints: ORT_ENABLE_ALL with ORT's float fusions on. Its float deviation is
           not measured by qdqc; this prints its max abs and max rel (max |Δ| / max |reference|) over
           every output against the original under ORT_DISABLE_ALL.

--models DIR benchmarks every DIR/*.onnx instead of the generated corpus (real published models
quantized by quantize_static, e.g.); DIR/shapes.json may give {model stem: {input name: shape}} for
inputs with symbolic dims (others get 1).

Latency: one fixed seeded input per model; every session runs single-threaded (1 intra-op and
1 inter-op thread) after warm-up; a timed run is a batch of B inferences, B chosen so that a batch
of the original under ORT_ENABLE_ALL takes about --batch-ms; the sessions take turns batch by
batch (so drift hits all alike) and each reports the median over --runs batches, per inference.
The Python call overhead of InferenceSession.run is in every number alike.
Speed is relative to the original under ORT_ENABLE_ALL: t(original, ENABLE_ALL) / t(x), so above
1 is faster; the geomeans are also printed against ORT's own exact mode, ORT_ENABLE_ALL with
session.x64quantprecision=1 (on x86 without VNNI ORT's default u8s8 kernels saturate; elsewhere the
key changes nothing). Targets, printed next to the geomeans: exact >= 0.8x, real >= 1.0x, and both >= 0.95x
on the power-of-two models.

Diffs are counted over --diff-inputs seeded inputs (the seeds of tests/oracle). Exit status 1 if
any `exact` model differs from its original, or a compile or session fails; 0 otherwise (missed
speed targets are reported, not fatal).

Defaults: $QDQC_BIN or <repo>/target/release/qdqc; $QDQC_CORPUS or <repo>/target/corpus (built
with tests/oracle/corpus.py when its manifest is missing or stale).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_vs_ort import CORPUS_SCRIPT, ensure_corpus  # noqa: E402

sys.path.insert(0, str(CORPUS_SCRIPT.parent))
import corpus  # noqa: E402
import oracle_util  # noqa: E402

KINDS = ("qdq", "pow2")
TARGETS = {"exact": 0.8, "real": 1.0, "pow2": 0.95, "real_ff": 1.2}
GEMM_OPS = ("QLinearConv", "QLinearMatMul", "com.microsoft.QGemm")
WARMUP = 5
ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(bool)": np.bool_, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
}
PROFILE_RE = re.compile(r"or any level with ((?:\S+=\S+ ?)+)\s*$", re.MULTILINE)


class BenchError(Exception):
    pass


def compile_model(qdqc: Path, src: Path, out: Path, contract: str, isa: str = "all",
                  extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """`qdqc compile SRC -o OUT --contract C --ort-isa I --report [EXTRA]`; returns (report, printed session profile)."""
    report = out.with_suffix(".report.json")
    cmd = [str(qdqc), "compile", str(src), "-o", str(out), "--contract", contract, "--ort-isa", isa, "--report",
           str(report), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or [""])[-1]
        raise BenchError(f"qdqc compile --contract {contract} {' '.join(extra)} exited {r.returncode}: {err}")
    m = PROFILE_RE.search(r.stdout)
    if m is None:
        raise BenchError(f"no session profile ('or any level with k=v ...') in qdqc's stdout: {r.stdout.strip()[:300]!r}")
    profile = dict(kv.split("=", 1) for kv in m.group(1).split())
    return json.loads(report.read_text()), profile


def session(path: Path, level, config: dict | None = None):
    """The oracle's single-threaded session (tests/oracle/oracle_util.ort_session), failures as BenchError."""
    try:
        return oracle_util.ort_session(path, level, config)
    except Exception as e:  # noqa: BLE001
        raise BenchError(f"ORT session for {path.name} failed: {str(e).strip().splitlines()[0][:160]}") from e


def seeded_inputs(name: str, sess, n: int, shapes: dict | None = None):
    """The oracle's seeded inputs (tests/oracle/oracle_util.random_inputs); `shapes` overrides by input name."""
    ins = []
    for i in sess.get_inputs():
        if i.type not in ORT_TYPES:
            raise BenchError(f"input {i.name} has unsupported type {i.type}")
        shape = (shapes or {}).get(i.name) or [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]
        ins.append((i.name, np.dtype(ORT_TYPES[i.type]).type, shape))
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return [corpus.random_feed(ins, rng, k) for k in range(n)]


def diff_count(ref, other, feeds) -> int:
    """Output elements (all outputs, all feeds) where OTHER's bits differ from REF's."""
    n = 0
    for feed in feeds:
        for a, b in zip(ref.run(None, feed), other.run(None, feed)):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise BenchError(f"output {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
            if a.size:  # compare bits (NaN payloads and signed zeros count), element by element
                ua = np.ascontiguousarray(a).view(f"u{a.itemsize}")
                n += int(np.sum(ua != np.ascontiguousarray(b).view(f"u{b.itemsize}")))
    return n


def deviation(ref, other, feeds) -> tuple[float, float]:
    """Max abs and max rel (max |Δ| / max |reference|) of OTHER against REF over float outputs."""
    abs_, ref_max = 0.0, 0.0
    for feed in feeds:
        for a, b in zip(ref.run(None, feed), other.run(None, feed)):
            if a.dtype.kind == "f" and a.size:
                abs_ = max(abs_, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
                ref_max = max(ref_max, float(np.max(np.abs(a))))
    return abs_, (abs_ / ref_max if ref_max else 0.0)


def time_sessions(sessions: dict, feed: dict, runs: int, batch_ms: float) -> dict:
    """Median seconds per inference for each session, batches taken in turn."""
    for s in sessions.values():
        for _ in range(WARMUP):
            s.run(None, feed)
    ref = sessions["original_on"]
    t0 = time.perf_counter()
    ref.run(None, feed)
    one = max(time.perf_counter() - t0, 1e-6)
    batch = max(1, min(10000, int(batch_ms * 1e-3 / one)))
    samples = {k: [] for k in sessions}
    for _ in range(runs):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                s.run(None, feed)
            samples[k].append((time.perf_counter() - t0) / batch)
    return {k: statistics.median(v) for k, v in samples.items()} | {"batch": batch}


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def bench_model(qdqc: Path, corpus_dir: Path, entry: dict, tmp: Path, args) -> dict:
    import onnxruntime as ort

    src = corpus_dir / entry["file"]
    if not src.is_file():
        raise BenchError(f"corpus file {src} is missing")
    row = {"name": entry["name"], "kind": entry["kind"]}
    paths, profiles = {}, {}
    variants = [("exact", "exact", ()), ("real", "real", ())]
    if args.float_fusions:
        variants.append(("real_ff", "real", ("--allow", "ort-float-fusions")))
    for key, contract, extra in variants:
        out = tmp / f"{entry['name']}.{key}.onnx"
        report, profiles[key] = compile_model(qdqc, src, out, contract, args.ort_isa, extra)
        paths[key] = out
        # Fused in the output: proven and picked by the cost model.
        row[f"{key}_fused"] = sum(1 for d in report["decisions"] if d["fired"] and not d.get("kept_unfused"))
        gemm = [d for d in report["decisions"] if d["fused_op"] in GEMM_OPS]
        row[f"{key}_gemm"] = (sum(1 for d in gemm if d["fired"] and not d.get("kept_unfused")), len(gemm))
    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = {
        "original_off": session(src, off),
        "original_on": session(src, on),
        # ORT's own exact mode on x86 without VNNI (Avx2WeightS8ToU8Transformer); the same as
        # original_on where MLAS reports no u8s8 overflow (VNNI hosts).
        "original_x64": session(src, on, {"session.x64quantprecision": "1"}),
        "exact": session(paths["exact"], on, profiles["exact"]),
        "real": session(paths["real"], on, profiles["real"]),
    }
    if args.float_fusions:
        sessions["real_ff"] = session(paths["real_ff"], on, profiles["real_ff"])
    feeds = seeded_inputs(entry["name"], sessions["original_off"], args.diff_inputs, entry.get("shapes"))
    ref = sessions["original_off"]
    row["ort_diff"] = diff_count(ref, sessions["original_on"], feeds)
    row["exact_diff"] = diff_count(ref, sessions["exact"], feeds)
    row["real_diff"] = diff_count(ref, sessions["real"], feeds)
    row["exact_fail"] = row["exact_diff"] != 0
    t = time_sessions(sessions, feeds[0], args.runs, args.batch_ms)
    row["batch"] = t.pop("batch")
    for k, v in t.items():
        row[f"{k}_s"] = v
    base = t["original_on"]
    row["original_off_speed"] = base / t["original_off"]
    for k in ("exact", "real", "real_ff"):
        if k in t:
            row[f"{k}_speed_x64"] = t["original_x64"] / t[k]
    row["exact_speed"] = base / t["exact"]
    row["real_speed"] = base / t["real"]
    if args.float_fusions:
        row["real_ff_diff"] = diff_count(ref, sessions["real_ff"], feeds)
        row["real_ff_max_abs"], row["real_ff_max_rel"] = deviation(ref, sessions["real_ff"], feeds)
        row["real_ff_speed"] = base / t["real_ff"]
    row["profile"] = profiles["exact"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--runs", type=int, default=15, help="timed batches per session (the median is reported)")
    ap.add_argument("--batch-ms", type=float, default=20.0, help="target duration of one timed batch (ms)")
    ap.add_argument("--diff-inputs", type=int, default=4, help="seeded inputs the diff counts run on")
    ap.add_argument("--ort-isa", default="all",
                    help="profiles the fusions are proven for (qdqc's --ort-isa); x86-avx512vnni is this kind of "
                         "machine, and x86-only lists also re-sign int8 activations to uint8")
    ap.add_argument("--corpus", type=Path, default=Path(os.environ.get("QDQC_CORPUS", REPO / "target" / "corpus")))
    ap.add_argument("--models", type=Path, help="benchmark every DIR/*.onnx (with DIR/shapes.json) instead of the corpus")
    ap.add_argument("--float-fusions", action="store_true", help="also `real --allow ort-float-fusions`")
    ap.add_argument("--qdqc", type=Path, default=Path(os.environ.get("QDQC_BIN", REPO / "target" / "release" / "qdqc")))
    args = ap.parse_args()

    if not args.qdqc.is_file():
        sys.exit(f"qdqc binary not found at {args.qdqc} (cargo build --release, or set QDQC_BIN / --qdqc)")
    if args.models:
        shapes_file = args.models / "shapes.json"
        shapes = json.loads(shapes_file.read_text()) if shapes_file.is_file() else {}
        entries = [{"name": p.stem, "kind": "real", "file": p.name, "shapes": shapes.get(p.stem)}
                   for p in sorted(args.models.glob("*.onnx"))]
        args.corpus = args.models
        if not entries:
            sys.exit(f"no *.onnx in {args.models}")
    else:
        manifest = ensure_corpus(args.corpus)
        entries = [m for m in manifest["models"] if m["kind"] in KINDS]
        if not entries:
            sys.exit(f"no {'/'.join(KINDS)} models in {args.corpus}/manifest.json")

    import onnxruntime as ort

    t_start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="qdqc-latency-") as tmp:
        for e in entries:
            try:
                rows.append(bench_model(args.qdqc, args.corpus, e, Path(tmp), args))
            except BenchError as err:
                rows.append({"name": e["name"], "kind": e["kind"], "error": str(err)})
    ok = [r for r in rows if "error" not in r]
    pow2 = [r for r in ok if r["kind"] == "pow2"]
    summary = {
        "models": len(rows),
        "measured": len(ok),
        "exact_failures": [r["name"] for r in ok if r["exact_fail"]],
        "errors": [r["name"] for r in rows if "error" in r],
        "geomean_original_off_speed": geomean([r["original_off_speed"] for r in ok]),
        "geomean_exact_speed": geomean([r["exact_speed"] for r in ok]),
        "geomean_real_speed": geomean([r["real_speed"] for r in ok]),
        "geomean_real_ff_speed": geomean([r.get("real_ff_speed") for r in ok]),
        **{f"geomean_{k}_speed_x64": geomean([r.get(f"{k}_speed_x64") for r in ok]) for k in ("exact", "real", "real_ff")},
        "geomean_pow2_exact_speed": geomean([r["exact_speed"] for r in pow2]),
        "geomean_pow2_real_speed": geomean([r["real_speed"] for r in pow2]),
        "targets": {"exact": TARGETS["exact"], "real": TARGETS["real"], "pow2_exact": TARGETS["pow2"],
                    "pow2_real": TARGETS["pow2"], **({"real_ff": TARGETS["real_ff"]} if args.float_fusions else {})},
        "seconds": time.perf_counter() - t_start,
    }
    summary["targets_met"] = {
        k: (summary[f"geomean_{k}_speed"] is not None and summary[f"geomean_{k}_speed"] >= v)
        for k, v in summary["targets"].items()
    }
    meta = {"qdqc": str(args.qdqc), "corpus": str(args.corpus), "ort_isa": args.ort_isa, "runs": args.runs, "batch_ms": args.batch_ms,
            "diff_inputs": args.diff_inputs, "onnxruntime": ort.__version__, "threads": 1, "cpus": os.cpu_count()}
    failed = bool(summary["exact_failures"] or summary["errors"])

    if args.json:
        print(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=2))
        return 1 if failed else 0

    us = lambda s: f"{s * 1e6:.1f}"  # noqa: E731
    sp = lambda x: "-" if x is None else f"{x:.3f}x"  # noqa: E731
    w = max(len(r["name"]) for r in rows + [{"name": "geomean (pow2)"}])
    print(f"inference latency, µs per inference (median of {args.runs} batches, 1 thread, onnxruntime "
          f"{ort.__version__}; compiled with --ort-isa {args.ort_isa}); speed = t(original ENABLE_ALL) / t; diff = output elements differing from "
          f"the original under ORT_DISABLE_ALL over {args.diff_inputs} inputs")
    header = (f"{'model':<{w}}  {'kind':<4}  {'orig off':>9}  {'orig on':>9}  {'ort diff':>8}  {'exact':>9}  "
              f"{'diff':>5}  {'speed':>7}  {'fused':>5}  {'real':>9}  {'diff':>5}  {'speed':>7}  {'fused':>5}  note")
    print(header)
    print("-" * len(header))
    gemm = lambda r, k: "{}/{}".format(*r[f"{k}_gemm"])  # noqa: E731
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<{w}}  {r['kind']:<4}  ERROR: {r['error']}")
            continue
        note = "FAIL: exact differs from the original" if r["exact_fail"] else ""
        print(f"{r['name']:<{w}}  {r['kind']:<4}  {us(r['original_off_s']):>9}  {us(r['original_on_s']):>9}  "
              f"{r['ort_diff']:>8}  {us(r['exact_s']):>9}  {r['exact_diff']:>5}  {sp(r['exact_speed']):>7}  "
              f"{r['exact_fused']:>5}  {us(r['real_s']):>9}  {r['real_diff']:>5}  {sp(r['real_speed']):>7}  "
              f"{r['real_fused']:>5}  {note}")
        line = f"{'':<{w}}  Conv/MatMul/Gemm fused: exact {gemm(r, 'exact')}, real {gemm(r, 'real')}"
        if args.float_fusions:
            line += (f"; real+ff {us(r['real_ff_s'])} µs, speed {sp(r['real_ff_speed'])}, diff {r['real_ff_diff']}, "
                     f"max abs {r['real_ff_max_abs']:.3e}, max rel {r['real_ff_max_rel']:.3e}")
        print(line)
    print("-" * len(header))
    g = summary
    met = lambda k: "met" if g["targets_met"][k] else "MISSED"  # noqa: E731
    print(f"{'geomean':<{w}}  {'':<4}  speed of ORT_DISABLE_ALL {sp(g['geomean_original_off_speed'])}; "
          f"exact {sp(g['geomean_exact_speed'])} (target >= {TARGETS['exact']}x: {met('exact')}); "
          f"real {sp(g['geomean_real_speed'])} (target >= {TARGETS['real']}x: {met('real')})  over {len(ok)} models")
    print(f"{'geomean':<{w}}  {'':<4}  against ORT's exact mode (ORT_ENABLE_ALL, session.x64quantprecision=1): "
          f"exact {sp(g['geomean_exact_speed_x64'])}, real {sp(g['geomean_real_speed_x64'])}"
          + (f", real+ff {sp(g['geomean_real_ff_speed_x64'])}" if args.float_fusions else ""))
    if args.float_fusions:
        print(f"{'geomean':<{w}}  {'':<4}  real --allow ort-float-fusions {sp(g['geomean_real_ff_speed'])} "
              f"(target >= {TARGETS['real_ff']}x: {met('real_ff')})")
    print(f"{'geomean (pow2)':<{w}}  {'':<4}  exact {sp(g['geomean_pow2_exact_speed'])} (target >= {TARGETS['pow2']}x: "
          f"{met('pow2_exact')}); real {sp(g['geomean_pow2_real_speed'])} (target >= {TARGETS['pow2']}x: "
          f"{met('pow2_real')})  over {len(pow2)} models")
    if g["exact_failures"]:
        print(f"FAIL: {len(g['exact_failures'])} model(s) compiled under `exact` differ from the original under "
              f"ORT_DISABLE_ALL: {', '.join(g['exact_failures'])}")
    if g["errors"]:
        print(f"ERROR: {len(g['errors'])} model(s) could not be measured: {', '.join(g['errors'])}")
    print(f"total {g['seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
