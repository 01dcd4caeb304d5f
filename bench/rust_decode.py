#!/usr/bin/env python3
"""One decode step of bench/decoder.py's model, `qdqc compile --target rust` against ONNX Runtime,
same run (issue 13).

    export QDQC_PYTHON=/work/main/target/venv/bin/python
    cargo build --bin qdqc
    "$QDQC_PYTHON" bench/rust_decode.py [--variants int4,int8] [--contracts real,exact] [--rounds 5]
                                        [--layers 6 --hidden 512 --vocab 32000 --past 64] [--json]

Per variant: the model built by bench/decoder.py (default: 6 blocks, hidden 512, vocab 32000, past
64, batch 1), then per contract `qdqc compile --target rust`, the crate built in release
(bench/rust_target.py's shared CARGO_TARGET_DIR). The generated program is a conforming f32
evaluation in a fixed order whose weight-only MatMuls decode 4/8-bit codes in the GEMV
(`float::weight_only`): nothing is quantized. ORT's default (ORT_ENABLE_ALL) fuses 36 of the 37
weight MatMuls into MatMulNBits at accuracy_level 4 (it quantizes the activations to int8) and
dequantizes the whole tied table twice per step; ORT_DISABLE_ALL runs the graph as written.
Latency, 1 thread, interleaved per round: the harness with `--bench N` (median of N runs), ORT
ORT_ENABLE_ALL and ORT_DISABLE_ALL (intra_op_num_threads=1, sequential, median of N runs); medians
over rounds; ratios t_ORT / t_Rust (above 1: the generated code is faster). Memory as
bench/rust_target.py measures it: the harness' peak RSS in a fresh process (loads, runs once) vs
ORT's RSS increase (VmHWM after a session of ORT_ENABLE_ALL and one run − VmRSS before); ratio
Rust/ORT (target ≤ 0.5). Also printed: the max |Rust − ORT_DISABLE_ALL| over the outputs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import rust_target as rt  # noqa: E402


def load_decoder():
    spec = importlib.util.spec_from_file_location("bench_decoder", HERE / "decoder.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_decoder"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="int4,int8")
    ap.add_argument("--contracts", default="real,exact")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per measurement")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--past", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import onnxruntime as ort

    decoder = load_decoder()
    qdqc = Path(os.environ.get("QDQC_BIN", rt.REPO / "target" / "debug" / "qdqc"))
    work = rt.REPO / "target" / "rust-decode"
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    rows = []
    for variant in args.variants.split(","):
        cfg = replace(decoder.Config(), variant=variant, layers=args.layers, hidden=args.hidden, vocab=args.vocab, past=args.past)
        model = decoder.write(cfg, work)
        feeds = decoder.feeds(cfg, 1)[0]
        inputs = work / f"{cfg.name}.in.npz"
        np.savez(inputs, **feeds)
        sessions = {lvl: rt.ort_session(model, getattr(ort.GraphOptimizationLevel, lvl)) for lvl in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL")}
        ref = sessions["ORT_DISABLE_ALL"].run(None, feeds)
        names = [o.name for o in sessions["ORT_DISABLE_ALL"].get_outputs()]
        r = subprocess.run([sys.executable, "-c", rt.ORT_MEMORY, str(model), str(inputs)], capture_output=True, text=True, check=True)
        ort_rss = int(r.stdout.strip())
        for contract in args.contracts.split(","):
            crate = work / f"{cfg.name}.{contract}"
            err = rt.compile_crate(qdqc, model, contract, crate)
            if err:
                print(f"{cfg.name} [{contract}]: qdqc refuses: {err}", file=sys.stderr)
                return 1
            copies = json.loads((crate / "groups.json").read_text())["float_copies"]
            secs, build_rss, err = rt.cargo_build(crate)
            if err:
                print(f"{cfg.name} [{contract}]: crate does not build: {err}", file=sys.stderr)
                return 1
            harness = rt.BUILD / "release" / rt.crate_name(crate)
            out = work / f"{cfg.name}.{contract}.out.npz"
            samples = {"rust": [], "ORT_ENABLE_ALL": [], "ORT_DISABLE_ALL": []}
            rt.rust_bench(harness, inputs, out, 2)
            for _ in range(args.rounds):
                samples["rust"].append(rt.rust_bench(harness, inputs, out, args.runs))
                for lvl, sess in sessions.items():
                    samples[lvl].append(rt.ort_bench(sess, feeds, args.runs))
            med = {k: statistics.median(v) for k, v in samples.items()}
            got = np.load(out)
            dev = {n: float(np.max(np.abs(got[n].astype(np.float64) - v.astype(np.float64)))) for n, v in zip(names, ref)}
            code, rust_rss = rt.peak_rss_child([str(harness), str(inputs), str(out)])
            if code != 0:
                raise RuntimeError(f"{cfg.name} [{contract}]: the harness exits {code} on its memory run")
            row = {"model": cfg.name, "contract": contract, "rust_ms": 1e3 * med["rust"], "ort_enable_ms": 1e3 * med["ORT_ENABLE_ALL"],
                   "ort_disable_ms": 1e3 * med["ORT_DISABLE_ALL"], "vs_enable": med["ORT_ENABLE_ALL"] / med["rust"],
                   "vs_disable": med["ORT_DISABLE_ALL"] / med["rust"], "max_dev_logits": dev["logits"], "max_dev_any": max(dev.values()),
                   "rust_peak_rss_mb": rust_rss / 2**20, "ort_rss_increase_mb": ort_rss / 2**20, "rss_ratio": rust_rss / ort_rss,
                   "float_copies": copies, "build_s": secs}
            rows.append(row)
            print(f"{cfg.name} [{contract}]: Rust {row['rust_ms']:.2f} ms, ORT_ENABLE_ALL {row['ort_enable_ms']:.2f} ms "
                  f"(x{row['vs_enable']:.2f}), ORT_DISABLE_ALL {row['ort_disable_ms']:.2f} ms (x{row['vs_disable']:.2f}); "
                  f"peak RSS {row['rust_peak_rss_mb']:.1f} MB vs ORT increase {row['ort_rss_increase_mb']:.1f} MB "
                  f"(ratio {row['rss_ratio']:.2f}); max |Rust - ORT_DISABLE_ALL| logits {dev['logits']:.3g}, any output "
                  f"{row['max_dev_any']:.3g}; float copies {len(copies)}", file=sys.stderr)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'model':<14} {'contract':<8} {'rust ms':>8} {'ENABLE':>8} {'DISABLE':>8} {'xENABLE':>8} {'xDISABLE':>8} "
              f"{'RSS MB':>7} {'ORT+MB':>7} {'RSS x':>6} {'dev':>9}")
        for r in rows:
            print(f"{r['model']:<14} {r['contract']:<8} {r['rust_ms']:>8.2f} {r['ort_enable_ms']:>8.2f} {r['ort_disable_ms']:>8.2f} "
                  f"{r['vs_enable']:>8.2f} {r['vs_disable']:>8.2f} {r['rust_peak_rss_mb']:>7.1f} {r['ort_rss_increase_mb']:>7.1f} "
                  f"{r['rss_ratio']:>6.2f} {r['max_dev_any']:>9.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
