#!/usr/bin/env python3
"""qdqc-kernels' u8×s8 GEMM against ONNX Runtime's MatMulInteger and QLinearMatMul, same run.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" bench/kernels_gemm.py [--rounds 3] [--reps 7] [--json] [--paths avx2,avx512vnni] [--weights uniform|bell]

Shapes M ∈ {1, 64, 256} × K = N ∈ {1024, 4096}; A uniform u8 (zero point 3), B constant s8 in
[−127, 127] (zero point 0; `--weights bell`: bell-shaped, σ 36, |w| ≤ 127, as per-channel weights
of real models are — the AVX2 path then runs `vpmaddubsw` on the weights split pair-safe, and
its share is against that instruction's peak too, measured here at 196 GOPS on Zen 3), scales 0.0213 · 0.00391 → 0.0517 (zero point 128). One thread
everywhere. Per round and shape, the Rust binary (codegen/kernels/examples/gemm_bench.rs, every
kernel path the host has, B packed once outside the timing) runs first, then ORT's two sessions
(ORT_ENABLE_ALL, B a constant initializer); before each path's timing the Rust binary measures
the path's instruction peak (its tile's exact multiply-accumulate instructions on registers only:
`tdpbusd` on 4 tiles for avx512amx, `vpdpbusd` for avx512vnni, `vpmaddwd`+`vpaddd` for avx2; on
avx512amx also its GEMM's tile steps loading A and B from L1, the most a GEMM can reach there),
and per round the GEMM on an L1-resident 96×256×64 problem.
Reported: medians of the round medians, GOPS (2·M·K·N / time), speed ratios t_ORT / t_Rust of
the fastest Rust path (above 1: Rust faster) — `gemm` (i32 out) against MatMulInteger,
`gemm+rq` (GEMM plus the certified requantization to u8) against QLinearMatMul — and the
fastest path's share of the host's exact peak (per round, the highest instruction peak measured
beside that shape; median over rounds). ORT's MatMulInteger outputs are checked against numpy's int64 product (count of wrong
int32 outputs: nonzero where ORT's kernel saturates int16 pairs, i.e. on AVX2 hosts without VNNI).
The host is shared: load averages are printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "oracle"))
import oracle_util  # noqa: E402

SHAPES = [(m, kn, kn) for m in (1, 64, 256) for kn in (1024, 4096)]
SX, SW, SY, ZX, ZY = 0.0213, 0.00391, 0.0517, 3, 128
BENCH = REPO / "target" / "release" / "examples" / "gemm_bench"


def models(k: int, n: int, rng, bell: bool):
    if bell:
        b = np.clip(np.round(rng.normal(0.0, 36.0, size=(k, n))), -127, 127).astype(np.int8)
    else:
        b = rng.integers(-127, 128, size=(k, n), dtype=np.int64).astype(np.int8)
    consts = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(ZX, np.uint8), "za"),
              numpy_helper.from_array(np.array(0, np.int8), "zb"), numpy_helper.from_array(np.array(SX, np.float32), "sa"),
              numpy_helper.from_array(np.array(SW, np.float32), "sb"), numpy_helper.from_array(np.array(SY, np.float32), "sy"),
              numpy_helper.from_array(np.array(ZY, np.uint8), "zy")]
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, None)
    mmi = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])], "mmi", [a],
                            [helper.make_tensor_value_info("y", TensorProto.INT32, None)], consts)
    qlm = helper.make_graph([helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])], "qlm",
                            [a], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], consts)
    mk = lambda g: helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)  # noqa: E731
    return b, mk(mmi), mk(qlm)


def median_secs(run, reps: int) -> float:
    run()
    t0 = time.perf_counter()
    run()
    batch = max(1, int(0.04 / max(time.perf_counter() - t0, 1e-7)))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            run()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples)


def rust(args: list[str], reps: int, paths: list[str] | None = None) -> dict:
    """The binary's rows: every path the host has, or one run per path of `paths`, in that order."""
    if paths:
        return {"rows": [row for p in paths for row in rust([*args, "--isa", p], reps)["rows"]]}
    out = subprocess.run([str(BENCH), *args, "--json", "--reps", str(reps)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="use the existing target/release/examples/gemm_bench")
    ap.add_argument("--weights", choices=("uniform", "bell"), default="uniform")
    ap.add_argument("--paths", help="comma-separated kernel paths to run (default: every path the host has), e.g. avx2,avx512vnni")
    args = ap.parse_args()
    paths = args.paths.split(",") if args.paths else None
    import onnxruntime as ort
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "qdqc-kernels", "--example", "gemm_bench"], cwd=REPO, check=True)
    load_before = os.getloadavg()
    rng = np.random.default_rng(0)
    sessions, feeds, wrong = {}, {}, {}
    for (m, k, n) in SHAPES:
        b, mmi, qlm = models(k, n, rng, args.weights == "bell")
        a = rng.integers(0, 256, size=(m, k), dtype=np.uint8)
        level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions[(m, k, n)] = {"MatMulInteger": oracle_util.ort_session(mmi, level), "QLinearMatMul": oracle_util.ort_session(qlm, level)}
        feeds[(m, k, n)] = {"a": a}
        got = sessions[(m, k, n)]["MatMulInteger"].run(None, {"a": a})[0]
        exact = (a.astype(np.int64) - ZX) @ b.astype(np.int64)
        wrong[(m, k, n)] = int(np.count_nonzero(got.astype(np.int64) != exact))
    rounds = {s: {"rust": [], "ort": {"MatMulInteger": [], "QLinearMatMul": []}} for s in SHAPES}
    peaks: dict[str, list[float]] = {}
    loaded: dict[str, list[float]] = {}
    l1: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for row in rust(["--peak"], args.reps, paths)["rows"]:
            l1.setdefault(row["isa"], []).append(2 * row["m"] * row["k"] * row["n"] / row["gemm_s"] / 1e9)
        for s in SHAPES:
            m, k, n = s
            rounds[s]["rust"].append(rust(["--shape", str(m), str(k), str(n), "--weights", args.weights], args.reps, paths)["rows"])
            for name, sess in sessions[s].items():
                feed = feeds[s]
                rounds[s]["ort"][name].append(median_secs(lambda: sess.run(None, feed), args.reps))
    load_after = os.getloadavg()
    gops = lambda s, t: 2 * s[0] * s[1] * s[2] / t / 1e9  # noqa: E731
    for s in SHAPES:
        for rr in rounds[s]["rust"]:
            for r in rr:
                if r["instruction_peak_gops"] is not None:
                    peaks.setdefault(r["isa"], []).append(r["instruction_peak_gops"])
                if r.get("loaded_peak_gops") is not None:
                    loaded.setdefault(r["isa"], []).append(r["loaded_peak_gops"] / r["instruction_peak_gops"])
    peak = {isa: statistics.median(v) for isa, v in peaks.items()}
    l1_gops = {isa: statistics.median(v) for isa, v in l1.items()}
    loaded_share = {isa: statistics.median(v) for isa, v in loaded.items()}
    host_peak = max(peak.values())

    def share(s, isa):
        """Median over rounds of the path's GOPS over the host's exact peak measured beside it."""
        ratios = []
        for rr in rounds[s]["rust"]:
            row = next(r for r in rr if r["isa"] == isa)
            # The peak of the instructions that ran: on split weights, `vpmaddubsw`'s (AVX2).
            ratios.append(gops(s, row["gemm_s"]) / max(max(r["instruction_peak_gops"] or 0, r.get("split_peak_gops") or 0) for r in rr))
        return statistics.median(ratios)
    rows = []
    for s in SHAPES:
        isas = [r["isa"] for r in rounds[s]["rust"][0]]
        rust_t = {isa: {key: statistics.median(rr[i][key] for rr in rounds[s]["rust"]) for key in ("gemm_s", "gemm_rq_s")}
                  for i, isa in enumerate(isas)}
        ort_t = {name: statistics.median(v) for name, v in rounds[s]["ort"].items()}
        best = min(isas, key=lambda isa: rust_t[isa]["gemm_s"])
        best_rq = min(isas, key=lambda isa: rust_t[isa]["gemm_rq_s"])
        rows.append({
            "m": s[0], "k": s[1], "n": s[2],
            "rust_gops": {isa: gops(s, t["gemm_s"]) for isa, t in rust_t.items()},
            "rust_rq_gops": {isa: gops(s, t["gemm_rq_s"]) for isa, t in rust_t.items()},
            "ort_gops": {name: gops(s, t) for name, t in ort_t.items()},
            "best": best,
            "gemm_vs_matmulinteger": ort_t["MatMulInteger"] / rust_t[best]["gemm_s"],
            "gemm_rq_vs_qlinearmatmul": ort_t["QLinearMatMul"] / rust_t[best_rq]["gemm_rq_s"],
            "share_of_exact_peak": share(s, best),
            "ort_matmulinteger_wrong": wrong[s], "outputs": s[0] * s[2],
            "split_entries": rounds[s]["rust"][0][isas.index(best)].get("split_entries"),
        })
    report = {"onnxruntime": ort.__version__, "weights": args.weights, "rounds": args.rounds, "load_before": load_before, "load_after": load_after,
              "instruction_peak_gops": peak, "loaded_steps_share": loaded_share, "l1_gemm_gops": l1_gops, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"onnxruntime {ort.__version__}, 1 thread, medians of {args.rounds} rounds, {args.weights} weights; load average {load_before[0]:.1f} → {load_after[0]:.1f}")
    print("exact instruction peak per path (registers only, medians of the measurements beside each shape): "
          + ", ".join(f"{isa} {g:.0f} GOPS" for isa, g in peak.items()) + f"; host exact peak {host_peak:.0f} GOPS")
    print("GEMM on L1-resident 96×256×64: " + ", ".join(f"{isa} {g:.0f} GOPS" for isa, g in l1_gops.items()))
    for isa, v in loaded_share.items():
        print(f"{isa} tile steps loading A and B from L1, nothing else (the ceiling of a GEMM on that path): {100 * v:.0f}% of its instruction peak")
    isas = list(rows[0]["rust_gops"])
    head = " ".join(f"{isa:>10}" for isa in isas)
    print(f"{'M':>4} {'K=N':>5} | GEMM i32 GOPS: {head} {'ORT MMI':>8} {'×MMI':>6} {'%peak':>6} | +requant u8 GOPS: {head} {'ORT QLMM':>8} {'×QLMM':>6} | ORT MMI wrong")
    for r in rows:
        g = " ".join(f"{r['rust_gops'][i]:>10.1f}" for i in isas)
        q = " ".join(f"{r['rust_rq_gops'][i]:>10.1f}" for i in isas)
        print(f"{r['m']:>4} {r['k']:>5} | {'':>14}{g} {r['ort_gops']['MatMulInteger']:>8.1f} {r['gemm_vs_matmulinteger']:>6.2f} "
              f"{100 * r['share_of_exact_peak']:>5.0f}% | {'':>17}{q} {r['ort_gops']['QLinearMatMul']:>8.1f} {r['gemm_rq_vs_qlinearmatmul']:>6.2f} | "
              f"{r['ort_matmulinteger_wrong']}/{r['outputs']}" + (f" | split: {r['split_entries']} weights" if r.get("split_entries") else ""))


if __name__ == "__main__":
    main()
