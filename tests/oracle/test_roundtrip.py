"""Differential oracle: qdqc vs ONNX Runtime on the corpus built by corpus.py.

Run with the venv from setup.sh:

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" -m pytest -p no:cacheprovider tests/oracle -q

Environment:
    QDQC_BIN     qdqc binary (default <repo>/target/debug/qdqc)
    QDQC_CORPUS  corpus directory (default <repo>/target/corpus); built with corpus.py when its
                 manifest is missing or was written by a different corpus.py

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
N_INPUTS = 8
TIMEOUT = 300  # seconds for one qdqc invocation

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


def ensure_corpus() -> dict:
    """Return the manifest, building the corpus first when it is missing or stale."""
    manifest_path = CORPUS_DIR / "manifest.json"
    manifest = None
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        stale = (
            manifest.get("generator") == "tests/oracle/corpus.py"
            and manifest.get("generator_sha256") != corpus.generator_fingerprint()
        )
        if stale:
            manifest = None
    if manifest is None:
        r = subprocess.run(
            [sys.executable, str(HERE / "corpus.py"), str(CORPUS_DIR)], capture_output=True, text=True
        )
        if r.returncode != 0 or not manifest_path.is_file():
            raise RuntimeError(
                f"building the corpus failed: {sys.executable} {HERE / 'corpus.py'} {CORPUS_DIR} "
                f"exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
            )
        manifest = json.loads(manifest_path.read_text())
    return manifest


_MANIFEST: dict | None = None


def manifest() -> dict:
    global _MANIFEST
    if _MANIFEST is None:
        _MANIFEST = ensure_corpus()
    return _MANIFEST


def pytest_generate_tests(metafunc):
    if "entry" in metafunc.fixturenames:
        models = manifest()["models"]
        metafunc.parametrize("entry", models, ids=[m["name"] for m in models])


@pytest.fixture(scope="session")
def corpus_manifest() -> dict:
    return manifest()


# ----------------------------------------------------------------------------------------------
# qdqc invocation


@pytest.fixture(scope="session")
def qdqc() -> Path:
    if not QDQC_BIN.is_file():
        pytest.fail(
            f"qdqc binary not found at {QDQC_BIN} (set QDQC_BIN, or build it with `cargo build`)", pytrace=False
        )
    if not os.access(QDQC_BIN, os.X_OK):
        pytest.fail(f"qdqc binary at {QDQC_BIN} is not executable", pytrace=False)
    return QDQC_BIN


def run_qdqc(qdqc: Path, *args) -> subprocess.CompletedProcess:
    cmd = [str(qdqc), *map(str, args)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {TIMEOUT}s: {' '.join(cmd)}", pytrace=False)


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


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> CompileCache:
    return CompileCache(tmp_path_factory.mktemp("qdqc-out"))


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


def ort_session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


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


# ----------------------------------------------------------------------------------------------
# tests


def test_manifest_matches_corpus_script(corpus_manifest):
    names = [m["name"] for m in corpus_manifest["models"]]
    assert len(names) == len(set(names)), f"duplicate names in manifest: {names}"
    kinds = {m["kind"] for m in corpus_manifest["models"]}
    assert kinds == {"qdq", "float", "seed", "external"}, f"unexpected kinds {kinds}"
    for m in corpus_manifest["models"]:
        assert set(m) >= {"name", "file", "kind", "description", "full_check"}, m
        assert (CORPUS_DIR / m["file"]).is_file(), f"{m['file']} listed but missing in {CORPUS_DIR}"
        for d in m.get("data_files", []):
            assert (CORPUS_DIR / d).is_file(), f"external data {d} listed but missing in {CORPUS_DIR}"


def test_compile_succeeds_and_checks(qdqc, compiled, entry):
    src = model_path(entry)
    out = compiled.first(qdqc, entry)
    for loc in external_locations(out):
        assert (out.parent / loc).is_file(), f"compiled model references external data {loc} not written beside it"
    in_err = full_check_error(src)
    assert (in_err is None) == entry["full_check"], (
        f"manifest full_check={entry['full_check']} but onnx.checker says: {in_err or 'passes'}"
    )
    if in_err is None:
        out_err = full_check_error(out)
        assert out_err is None, f"input passes onnx.checker full_check but qdqc output does not: {out_err}"


def test_ort_outputs_byte_identical(qdqc, compiled, entry):
    src = model_path(entry)
    out = compiled.first(qdqc, entry)
    try:
        s_ref = ort_session(src)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"ORT (ORT_DISABLE_ALL) cannot load the corpus model {src}: {e}", pytrace=False)
    try:
        s_out = ort_session(out)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"ORT (ORT_DISABLE_ALL) cannot load the compiled model {out}: {e}", pytrace=False)

    ins = session_inputs(s_ref)
    ins_out = session_inputs(s_out)
    assert [(n, t) for n, t, _ in ins_out] == [(n, t) for n, t, _ in ins], (
        f"compiled model inputs differ: {ins_out} vs {ins}"
    )
    names = [o.name for o in s_ref.get_outputs()]
    names_out = [o.name for o in s_out.get_outputs()]
    assert names_out == names, f"compiled model outputs differ: {names_out} vs {names}"

    bools = [n for n, t, _ in ins if t is np.bool_]
    feeds = random_inputs(entry["name"], ins, N_INPUTS)
    for k, feed in enumerate(feeds):
        ref = s_ref.run(None, feed)
        got = s_out.run(None, feed)
        for name, a, b in zip(names, ref, got):
            a, b = np.asarray(a), np.asarray(b)
            where = f"input #{k} (bools: { {n: feed[n].tolist() for n in bools} }), output {name!r}"
            assert a.dtype == b.dtype, f"{where}: dtype {b.dtype} != {a.dtype}"
            assert a.shape == b.shape, f"{where}: shape {b.shape} != {a.shape}"
            if a.tobytes() != b.tobytes():
                if np.issubdtype(a.dtype, np.number):
                    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
                    detail = f"max |diff| {float(np.nanmax(d)):.6g}, {int((a != b).sum())} of {a.size} elements differ"
                else:
                    detail = f"{int((a != b).sum())} of {a.size} elements differ"
                pytest.fail(f"{where}: outputs not byte-identical: {detail}", pytrace=False)


def test_compile_deterministic(qdqc, compiled, entry, tmp_path):
    first = compiled.first(qdqc, entry)
    second = compile_to(qdqc, model_path(entry), tmp_path / "second")
    assert_same_dirs(first.parent, second.parent, "compiling the same model twice")


def test_compile_idempotent(qdqc, compiled, entry, tmp_path):
    first = compiled.first(qdqc, entry)
    again = compile_to(qdqc, first, tmp_path / "again")
    assert_same_dirs(first.parent, again.parent, "compiling qdqc's own output")


def test_inspect_counts(qdqc, entry):
    src = model_path(entry)
    r = run_qdqc(qdqc, "inspect", src, "--json")
    assert r.returncode == 0, f"qdqc inspect failed\n{describe(r)}"
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        pytest.fail(f"qdqc inspect --json printed invalid JSON ({e})\n{describe(r)}", pytrace=False)
    m = onnx.load_model(str(src), load_external_data=False)
    want = corpus.count_qdq(m)
    counts = report.get("counts") if isinstance(report, dict) else None
    assert isinstance(counts, dict), f"no top-level 'counts' object in inspect JSON: {r.stdout[:2000]}"
    got = {k: counts.get(k) for k in ("quantize_linear", "dequantize_linear")}
    expected = {k: want[k] for k in ("quantize_linear", "dequantize_linear")}
    assert got == expected, (
        f"qdqc inspect counts {got} != onnx counts {expected} (all graphs; main graph only: "
        f"Q={want['main_quantize_linear']}, DQ={want['main_dequantize_linear']})"
    )


def test_report_is_json(qdqc, corpus_manifest, tmp_path):
    entry = next(m for m in corpus_manifest["models"] if m["kind"] == "qdq")
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    r = run_qdqc(qdqc, "compile", model_path(entry), "-o", out, "--no-fuse", "--report", rep)
    assert r.returncode == 0, f"qdqc compile --report failed\n{describe(r)}"
    assert rep.is_file(), f"--report {rep} was not written\n{describe(r)}"
    try:
        json.loads(rep.read_text())
    except json.JSONDecodeError as e:
        pytest.fail(f"--report wrote invalid JSON ({e}): {rep.read_text()[:2000]}", pytrace=False)


def test_bad_input_exits_2(qdqc, tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"\xff\xff\xff\xff this is not an ONNX protobuf \x00\x01")
    r = run_qdqc(qdqc, "compile", bad, "-o", tmp_path / "out.onnx", "--no-fuse")
    assert r.returncode == 2, f"expected exit 2 on a non-ONNX input\n{describe(r)}"
