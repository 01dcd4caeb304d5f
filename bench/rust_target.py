#!/usr/bin/env python3
"""`qdqc compile --target rust` on the CNN corpus against ONNX Runtime, same run (issue 12).

    export QDQC_PYTHON=/work/main/target/venv/bin/python   # or PY=$(bash tests/oracle/setup.sh | tail -n1)
    cargo build --bin qdqc
    "$QDQC_PYTHON" bench/rust_target.py [--contracts real,exact] [--models a,b] [--rounds 5] [--isa avx2] [--json]

Models: the synthetic CNN corpus (target/corpus or $QDQC_CORPUS: cnn_residual and dwsep_net, the
`_pow2` variants and the quantize_static ones) and the published CNNs the Rust target compiles
(target/real-corpus or $QDQC_REAL_CORPUS: RivaGAN dec/enc, PP-OCR cls/rec, YOLOv8n, u8s8_pc each,
pinned to the manifest's input shapes as tests/oracle/test_rust_real.py pins them). A model the
Rust target does not compile is listed with qdqc's one-line error, never silently dropped.
Geomeans are printed per contract over all models, the synthetic corpus and the published CNNs.

Per model and contract: `qdqc compile --target rust --contract C`, then the generated crate built
once in release (`CARGO_TARGET_DIR=target/rust-bench-build`, shared, so the kernel crate and the
harness' dependencies are built once before the first measured build; `RUSTFLAGS=-D warnings`),
timed with `/usr/bin/time -v`: wall seconds and the peak RSS of the largest process (rustc).
Latency, 1 thread, interleaved per round: the generated harness with `--bench N` (the median of N
`Model::run_with` calls on one workspace, after one untimed run), then ONNX Runtime 1.31.1 on the
original model with ORT_ENABLE_ALL and with ORT_DISABLE_ALL (intra_op_num_threads=1, sequential; the
median of N timed `run` calls after one untimed). Reported: medians over rounds, the ratios
t_ORT / t_Rust (above 1: the generated code is faster) per model and their geometric mean per
contract, and the largest |Rust − ORT_DISABLE_ALL| over the outputs (a sanity check, not the bit
check: that is tests/rust_codegen.rs).
Memory, the same way for both: a fresh process loads the model and runs it once. Rust: the harness'
peak RSS (ru_maxrss of the child, the whole process). ORT: a fresh Python process imports
onnxruntime and numpy and reads the inputs, resets its peak RSS (/proc/self/clear_refs 5), creates
an ORT_ENABLE_ALL session and runs once; its increase is VmHWM after − VmRSS before. Ratio Rust/ORT
(the target is ≤ 0.5).
Inputs: the real-corpus manifest's shapes and fills (seed 0); for target/corpus, uniform [-1, 1)
float (symbolic dims 1). The host is shared: load averages are printed before and after.
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
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "target" / "rust-bench"
BUILD = REPO / "target" / "rust-bench-build"
CORPUS = Path(os.environ.get("QDQC_CORPUS", REPO / "target" / "corpus"))
REAL = Path(os.environ.get("QDQC_REAL_CORPUS", REPO / "target" / "real-corpus"))
SYNTH_FAMILIES = ("cnn_residual", "dwsep_net")
SYNTH_CONFIGS = ("u8u8_pt_pow2", "u8s8_pc_asym_pow2", "s8s8_pc_pow2", "u8u8_pt", "u8s8_pc_asym", "s8s8_pc")
# The published CNNs the Rust target compiles (tests/oracle/test_rust_real.py MODELS: one
# configuration per family, ORT's recommended u8s8_pc), pinned to the manifest's feed shapes as
# that test does; the others are refused by the generator (listed there).
REAL_MODELS = ("rivagan_dec_u8s8_pc", "rivagan_enc_u8s8_pc", "ocr_cls_u8s8_pc", "ocr_rec_u8s8_pc", "yolov8n_u8s8_pc")

ORT_MEMORY = r"""
import sys, numpy as np, onnxruntime as ort
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
feeds = dict(np.load(sys.argv[2]))
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
o = ort.SessionOptions()
o.intra_op_num_threads = 1
o.inter_op_num_threads = 1
o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
s.run(None, feeds)
print(status("VmHWM:") - before)
"""


def models(selected: set[str] | None) -> list[tuple[str, Path, list[dict] | None]]:
    """(name, path, manifest inputs or None) for every CNN corpus model present."""
    out = []
    for fam in SYNTH_FAMILIES:
        for cfg in SYNTH_CONFIGS:
            p = CORPUS / f"{fam}_{cfg}.onnx"
            if p.exists():
                out.append((p.stem, p, None))
    manifest = json.loads((REAL / "manifest.json").read_text())
    for m in manifest["models"]:
        if m["name"] in REAL_MODELS:
            out.append((m["name"], REAL / m["file"], m["inputs"]))
    return [x for x in out if selected is None or x[0] in selected]


def make_inputs(path: Path, spec: list[dict] | None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if spec is not None:
        feeds = {}
        for i in spec:
            fill, shape, dt = i["fill"], i["shape"], np.dtype(i["dtype"])
            if "normal" in fill:
                v = rng.normal(0, fill["normal"], shape)
            elif "int" in fill:
                v = rng.integers(fill["int"][0], fill["int"][1], shape)
            else:
                v = np.full(shape, fill["const"])
            feeds[i["name"]] = np.asarray(v).astype(dt)
        return feeds
    import onnx
    g = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    feeds = {}
    for i in g.input:
        if i.name in inits:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return feeds


def prepare(path: Path, spec: list[dict] | None, label: str) -> Path:
    """A copy named LABEL (the generated crate's name, distinct per model and contract, so that the
    shared target directory never takes one crate's harness for another's), its graph inputs
    pinned to the manifest's feed shapes with ONNX shape inference re-run (real-corpus models,
    as tests/oracle/test_rust_real.py prepares them). ORT runs the same copy."""
    import onnx
    m = onnx.load(str(path))
    if spec is not None:
        shapes = {i["name"]: i["shape"] for i in spec}
        for v in m.graph.input:
            if v.name in shapes:
                for d, n in zip(v.type.tensor_type.shape.dim, shapes[v.name]):
                    d.Clear()
                    d.dim_value = n
        del m.graph.value_info[:]
        m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    out = WORK / f"{label}.onnx"
    onnx.save(m, str(out))
    return out


def compile_crate(qdqc: Path, model: Path, contract: str, out: Path) -> str | None:
    """qdqc's error line, or None when the crate was written."""
    r = subprocess.run([str(qdqc), "compile", str(model), "--target", "rust", "--contract", contract, "-o", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    return None


def cargo_build(crate: Path) -> tuple[float, int, str | None]:
    """Release build of the generated crate: wall seconds, peak RSS bytes, error."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(BUILD), RUSTFLAGS="-D warnings")
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", "cargo", "build", "--release", "--offline", "--quiet"], cwd=crate, env=env,
                       capture_output=True, text=True)
    secs = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) * 1024
    if r.returncode != 0:
        return secs, rss, next((l for l in r.stderr.splitlines() if l.startswith("error")), r.stderr.strip()[:200])
    return secs, rss, None


def crate_name(crate: Path) -> str:
    toml = (crate / "Cargo.toml").read_text()
    return next(l for l in toml.splitlines() if l.startswith('name = "')).split('"')[1]


def rust_bench(harness: Path, inputs: Path, out: Path, runs: int) -> float:
    r = subprocess.run([str(harness), str(inputs), str(out), "--bench", str(runs)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return float(re.search(r"median_s=(\S+)", r.stdout).group(1))


def ort_session(path: Path, level):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.graph_optimization_level = level
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def ort_bench(sess, feeds, runs: int) -> float:
    sess.run(None, feeds)
    secs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def peak_rss_child(cmd: list[str]) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of one fresh process, by `/usr/bin/time -v` (a child forked
    from this Python process would report Python's RSS at fork time as its ru_maxrss)."""
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return r.returncode, int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) * 1024


def fmt(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qdqc", default=str(REPO / "target" / "debug" / "qdqc"))
    ap.add_argument("--contracts", default="real,exact")
    ap.add_argument("--models", default=None, help="comma-separated model names (default: every CNN corpus model)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.2, help="seconds per timed batch (sets N per model)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="also write the JSON report here (rewritten after every model)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep a crate and harness an earlier run built (no compile, no build: build figures left out)")
    ap.add_argument("--isa", default=None, choices=["portable", "avx2", "avx512vnni", "avx512amx"],
                    help="the generated code's kernel path (QDQC_KERNELS_ISA; default: the host's best). ORT still picks "
                         "its own by CPUID: `--isa avx2` on a VNNI host sets qdqc's AVX2 path against ORT's VNNI kernels")
    args = ap.parse_args()
    if args.isa:
        os.environ["QDQC_KERNELS_ISA"] = args.isa
    import onnxruntime as ort
    qdqc = Path(args.qdqc)
    contracts = args.contracts.split(",")
    chosen = models(set(args.models.split(",")) if args.models else None)
    load_before = os.getloadavg()
    WORK.mkdir(parents=True, exist_ok=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    rows, refused = [], []
    warmed = False
    for name, path, spec in chosen:
        feeds = make_inputs(path, spec)
        real = spec is not None
        inputs = WORK / f"{name}.in.npz"
        np.savez(inputs, **feeds)
        sessions = None
        for contract in contracts:
            crate = WORK / f"{name}.{contract}"
            reused = args.reuse and (crate / "Cargo.toml").exists() and (BUILD / "release" / crate_name(crate)).exists()
            model = WORK / f"{name}_{contract}.onnx" if reused else prepare(path, spec, f"{name}_{contract}")
            err = None if reused else compile_crate(qdqc, model, contract, crate)
            if err:
                refused.append({"model": name, "contract": contract, "stage": "compile", "error": err})
                print(f"{name} [{contract}]: not compiled: {err}", file=sys.stderr)
                continue
            if not warmed and not reused:
                # The shared dependencies (qdqc-kernels, npyz, zip) once, outside the measured builds.
                _, _, err = cargo_build(crate)
                (crate / "src" / "lib.rs").touch()
                (crate / "src" / "main.rs").touch()
                warmed = err is None
            secs, rss, err = (None, None, None) if reused else cargo_build(crate)
            if err:
                refused.append({"model": name, "contract": contract, "stage": "build", "error": err})
                print(f"{name} [{contract}]: crate does not build: {err}", file=sys.stderr)
                continue
            harness = BUILD / "release" / crate_name(crate)
            out = WORK / f"{name}.{contract}.out.npz"
            if sessions is None:
                sessions = {lvl: ort_session(model, getattr(ort.GraphOptimizationLevel, lvl)) for lvl in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL")}
            try:
                t1 = rust_bench(harness, inputs, out, 3)
            except RuntimeError as e:
                refused.append({"model": name, "contract": contract, "stage": "run", "error": str(e)})
                print(f"{name} [{contract}]: harness fails: {e}", file=sys.stderr)
                continue
            t_ort = ort_bench(sessions["ORT_DISABLE_ALL"], feeds, 3)
            runs_rust = max(5, min(5000, int(args.budget / max(t1, 1e-7))))
            runs_ort = max(5, min(5000, int(args.budget / max(t_ort, 1e-7))))
            samples = {"rust": [], "ORT_ENABLE_ALL": [], "ORT_DISABLE_ALL": []}
            for _ in range(args.rounds):
                samples["rust"].append(rust_bench(harness, inputs, out, runs_rust))
                for lvl, sess in sessions.items():
                    samples[lvl].append(ort_bench(sess, feeds, runs_ort))
            med = {k: statistics.median(v) for k, v in samples.items()}
            ref = sessions["ORT_DISABLE_ALL"].run(None, feeds)
            got = np.load(out)
            names = [o.name for o in sessions["ORT_DISABLE_ALL"].get_outputs()]
            dev = max(float(np.max(np.abs(got[n].astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0
                      for n, r in zip(names, ref))
            code, rust_rss = peak_rss_child([str(harness), str(inputs), str(out)])
            if code != 0:
                raise RuntimeError(f"{name} [{contract}]: the harness exits {code} on its memory run")
            r = subprocess.run([sys.executable, "-c", ORT_MEMORY, str(model), str(inputs)], capture_output=True, text=True, check=True)
            ort_rss = int(r.stdout.strip())
            row = {"model": name, "contract": contract, "real": real, "build_s": secs, "build_rss": rss,
                   "rust_s": med["rust"], "ort_enable_s": med["ORT_ENABLE_ALL"], "ort_disable_s": med["ORT_DISABLE_ALL"],
                   "vs_enable": med["ORT_ENABLE_ALL"] / med["rust"], "vs_disable": med["ORT_DISABLE_ALL"] / med["rust"],
                   "max_dev_vs_disable": dev, "rust_peak_rss": rust_rss, "ort_rss_increase": ort_rss,
                   "rss_ratio": rust_rss / ort_rss, "runs": [runs_rust, runs_ort]}
            rows.append(row)
            print(f"{name} [{contract}]: rust {row['rust_s'] * 1e3:.3f} ms, ENABLE_ALL ×{row['vs_enable']:.2f}, "
                  f"DISABLE_ALL ×{row['vs_disable']:.2f}, RSS ratio {row['rss_ratio']:.2f}", file=sys.stderr)
            if args.out:
                Path(args.out).write_text(json.dumps({"rows": rows, "not_compiled": refused}, indent=2))
    load_after = os.getloadavg()
    def summarize(sel):
        return {"models": len(sel), "geomean_vs_enable": geomean([r["vs_enable"] for r in sel]),
                "geomean_vs_disable": geomean([r["vs_disable"] for r in sel]), "geomean_rss_ratio": geomean([r["rss_ratio"] for r in sel])}
    # Per contract: every model, then the synthetic corpus alone and the published CNNs alone.
    summary = {}
    for c in contracts:
        for part, keep in (("all", lambda r: True), ("synthetic", lambda r: not r["real"]), ("published", lambda r: r["real"])):
            sel = [r for r in rows if r["contract"] == c and keep(r)]
            if sel:
                summary[f"{c} {part}"] = summarize(sel)
    report = {"kernel_path": args.isa or "host best", "onnxruntime": ort.__version__, "rounds": args.rounds, "load_before": load_before, "load_after": load_after,
              "rows": rows, "not_compiled": refused, "summary": summary}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"qdqc kernel path {args.isa or 'host best'}; "
          f"onnxruntime {ort.__version__}, 1 thread, medians of {args.rounds} interleaved rounds; "
          f"load average {load_before[0]:.1f} → {load_after[0]:.1f}")
    print(f"{'model':<28} {'contract':<8} {'rust ms':>9} {'ENABLE ms':>9} {'DISABLE ms':>10} {'×ENABLE':>8} {'×DISABLE':>8} "
          f"{'max|dev|':>8} {'rust RSS MB':>11} {'ORT +RSS MB':>11} {'RSS ratio':>9} {'build s':>7} {'rustc MB':>8}")
    for r in rows:
        print(f"{r['model']:<28} {r['contract']:<8} {r['rust_s'] * 1e3:>9.3f} {r['ort_enable_s'] * 1e3:>9.3f} {r['ort_disable_s'] * 1e3:>10.3f} "
              f"{r['vs_enable']:>8.2f} {r['vs_disable']:>8.2f} {r['max_dev_vs_disable']:>8.3g} {r['rust_peak_rss'] / 2**20:>11.1f} "
              f"{r['ort_rss_increase'] / 2**20:>11.1f} {r['rss_ratio']:>9.2f} {fmt(r['build_s'], 1):>7} {fmt(r['build_rss'] and r['build_rss'] / 2**20, 0):>8}")
    for c, s in summary.items():
        print(f"geomean [{c}] over {s['models']} models: ×{s['geomean_vs_enable']:.2f} vs ORT_ENABLE_ALL, "
              f"×{s['geomean_vs_disable']:.2f} vs ORT_DISABLE_ALL, RSS ratio {s['geomean_rss_ratio']:.2f}")
    for f in refused:
        print(f"not measured: {f['model']} [{f['contract']}] ({f['stage']}): {f['error']}")


if __name__ == "__main__":
    main()
