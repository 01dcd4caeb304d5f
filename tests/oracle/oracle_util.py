"""Shared helpers of the oracle tests: the corpus, the qdqc binary, ONNX Runtime sessions.

Environment:
    QDQC_BIN     qdqc binary (default <repo>/target/debug/qdqc)
    QDQC_CORPUS  corpus directory (default <repo>/target/corpus); built with corpus.py when its
                 manifest is missing or was written by a different corpus.py
    QDQC_REAL_CORPUS  real-model corpus directory (default <repo>/target/real-corpus); built with
                 real_corpus.py the same way (its wheels are cached in <repo>/target/wheels)
    QDQC_TIMEOUT seconds allowed for one qdqc invocation (default 300; emulated hosts need more)

Nothing is skipped: a missing binary, corpus or seed fails with a message saying what is missing.
"""
from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402

QDQC_BIN = Path(os.environ.get("QDQC_BIN", REPO / "target" / "debug" / "qdqc"))
CORPUS_DIR = Path(os.environ.get("QDQC_CORPUS", REPO / "target" / "corpus"))
REAL_CORPUS_DIR = Path(os.environ.get("QDQC_REAL_CORPUS", REPO / "target" / "real-corpus"))
N_INPUTS = 8
TIMEOUT = int(os.environ.get("QDQC_TIMEOUT", "300"))  # seconds for one qdqc invocation

ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bool)": np.bool_,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
}


# ----------------------------------------------------------------------------------------------
# corpus


def _ensure(directory: Path, script: str, fingerprint) -> dict:
    """The manifest in DIRECTORY, (re)built first by `python SCRIPT DIRECTORY` when it is missing or
    was written by another version of SCRIPT (its generator_sha256 differs from FINGERPRINT())."""
    manifest_path = directory / "manifest.json"
    manifest = None
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        stale = (
            manifest.get("generator") == f"tests/oracle/{script}"
            and manifest.get("generator_sha256") != fingerprint()
        )
        if stale:
            manifest = None
    if manifest is None:
        r = subprocess.run(
            [sys.executable, str(HERE / script), str(directory)], capture_output=True, text=True
        )
        if r.returncode != 0 or not manifest_path.is_file():
            raise RuntimeError(
                f"building the corpus failed: {sys.executable} {HERE / script} {directory} "
                f"exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr[-6000:]}"
            )
        manifest = json.loads(manifest_path.read_text())
    return manifest


def ensure_corpus() -> dict:
    """Return the manifest, building the corpus first when it is missing or stale."""
    return _ensure(CORPUS_DIR, "corpus.py", corpus.generator_fingerprint)


def ensure_real_corpus() -> dict:
    """The real-model corpus's manifest (tests/oracle/real_corpus.py), built first when missing or stale."""
    import real_corpus

    return _ensure(REAL_CORPUS_DIR, "real_corpus.py", real_corpus.generator_fingerprint)


_MANIFEST: dict | None = None


def manifest() -> dict:
    global _MANIFEST
    if _MANIFEST is None:
        _MANIFEST = ensure_corpus()
    return _MANIFEST


_HOST_ISA: str | None = None


def host_isa() -> str:
    """The ISA profile whose kernels ONNX Runtime runs on this machine, as `qdqc host` prints it
    (CPUID read as MLAS reads it; QDQC_BIN's, so an emulating wrapper sees the emulated CPU). Every
    test that compares ORT with a kernel model, or compiles for one profile and runs the result
    in ORT, uses this one."""
    global _HOST_ISA
    if _HOST_ISA is None:
        r = subprocess.run([str(QDQC_BIN), "host"], capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0 or not r.stdout.strip():
            raise RuntimeError(f"`{QDQC_BIN} host` found no ISA profile for this machine: exit {r.returncode}: {r.stderr.strip()}")
        _HOST_ISA = r.stdout.strip()
    return _HOST_ISA


def run_qdqc(qdqc: Path, *args) -> subprocess.CompletedProcess:
    cmd = [str(qdqc), *map(str, args)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {TIMEOUT}s: {' '.join(cmd)}", pytrace=False)


def compile_with_report(qdqc: Path, src: Path, out_dir: Path, *args) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """`qdqc compile SRC -o OUT_DIR/out.onnx --report OUT_DIR/report.json ARGS...`, asserted to
    succeed; returns the output path, the parsed report and the process (for its stdout)."""
    out, report = out_dir / "out.onnx", out_dir / "report.json"
    r = run_qdqc(qdqc, "compile", src, "-o", out, "--report", report, *args)
    assert r.returncode == 0, describe(r)
    return out, json.loads(report.read_text()), r


def describe(r: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(r.args)}\nexit {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"


def compile_to(qdqc: Path, src: Path, out_dir: Path) -> Path:
    """`qdqc compile SRC -o OUT_DIR/out.onnx --no-fuse`; fails the test unless it exits 0 and writes OUT."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "out.onnx"
    r = run_qdqc(qdqc, "compile", src, "-o", out, "--no-fuse")
    if r.returncode != 0:
        pytest.fail(f"qdqc compile failed\n{describe(r)}", pytrace=False)
    if not out.is_file():
        pytest.fail(f"qdqc compile exited 0 but wrote no {out}\n{describe(r)}", pytrace=False)
    return out


class CompileCache:
    """First compile of each model (to <tmp>/<name>/first/out.onnx), shared by the tests."""

    def __init__(self, root: Path):
        self.root = root
        self.done: dict[str, Path] = {}

    def first(self, qdqc: Path, entry: dict) -> Path:
        name = entry["name"]
        if name not in self.done:
            self.done[name] = compile_to(qdqc, CORPUS_DIR / entry["file"], self.root / name / "first")
        return self.done[name]


def model_path(entry: dict) -> Path:
    p = CORPUS_DIR / entry["file"]
    assert p.is_file(), f"corpus file {p} is missing (delete {CORPUS_DIR / 'manifest.json'} to rebuild)"
    return p


def full_check_error(path: Path) -> str | None:
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def external_locations(path: Path) -> list[str]:
    """Locations of the external data files referenced by the model at PATH (all graphs)."""
    m = onnx.load_model(str(path), load_external_data=False)
    locs = set()
    for g in corpus.iter_graphs(m.graph):
        tensors = list(g.initializer) + [s.values for s in g.sparse_initializer] + [
            s.indices for s in g.sparse_initializer
        ]
        for t in tensors:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                for kv in t.external_data:
                    if kv.key == "location":
                        locs.add(kv.value)
    return sorted(locs)


def assert_same_dirs(a: Path, b: Path, what: str):
    """Every file in directory A and B is byte-identical (model + external data), same file set."""
    fa = sorted(p.name for p in a.iterdir())
    fb = sorted(p.name for p in b.iterdir())
    assert fa == fb, f"{what}: different files written: {fa} vs {fb}"
    diff = []
    for name in fa:
        if not filecmp.cmp(a / name, b / name, shallow=False):
            sa, sb = (a / name).stat().st_size, (b / name).stat().st_size
            diff.append(f"{name} ({sa} B vs {sb} B)")
    assert not diff, f"{what}: files differ: {', '.join(diff)}"


# ----------------------------------------------------------------------------------------------
# ORT


def ort_session(model, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL, config: dict | None = None) -> ort.InferenceSession:
    """A single-threaded CPU session of `model` (a path or an onnx.ModelProto) at `level`, with
    session config entries `config` (e.g. the profile qdqc prints)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def session_inputs(sess: ort.InferenceSession):
    ins = []
    for i in sess.get_inputs():
        if i.type not in ORT_TYPES:
            raise AssertionError(f"input {i.name} has unsupported type {i.type}")
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]  # symbolic / unknown -> 1
        ins.append((i.name, np.dtype(ORT_TYPES[i.type]).type, shape))
    return ins


def random_inputs(name: str, ins, n: int):
    """N seeded input dicts; bool inputs are all-True in the first, all-False in the second, then random."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return [corpus.random_feed(ins, rng, k) for k in range(n)]
