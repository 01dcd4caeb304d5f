"""The Python package (python/): built by maturin into a wheel, installed into a fresh venv with
the pinned onnxruntime, onnx and numpy, and used there as a user would:

- the README's Python example (the block after `<!-- python-example -->`) runs: its compiled
  model, run with `qdqc.session_options(report)` under ORT_ENABLE_ALL, is byte-identical to the
  original under ORT_DISABLE_ALL (the example asserts it);
- a path, the bytes and an `onnx.ModelProto` (external data included) compile to the same model
  and report;
- a corrupt model raises `qdqc.BadInputError` (a `qdqc.QdqcError`) with the CLI's one-line
  message naming what was passed, and leaves no output file;
- `python -m qdqc` is the CLI: the same output and exit codes as the binary;
- `qdqc.session_options` applies every config entry of the report's session profile.

The wheel is built with `--profile dev` (the workspace's dev profile optimizes the proof crates;
the test reuses target/debug); `pip install ./python` builds the release one.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oracle_util import QDQC_BIN

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "examples" / "models" / "cnn_residual_qdq.onnx"


def pinned(name: str) -> str:
    """`name==version` as tests/oracle/requirements.txt pins it."""
    for line in (REPO / "tests" / "oracle" / "requirements.txt").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    raise AssertionError(f"{name} is not pinned in tests/oracle/requirements.txt")


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """A fresh venv's interpreter with the wheel and the pinned runtime installed."""
    wheels = tmp_path_factory.mktemp("wheels")
    build = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--profile", "dev", "--manifest-path", str(REPO / "python" / "Cargo.toml"), "-o", str(wheels)],
        capture_output=True, text=True,
    )
    assert build.returncode == 0, f"maturin build failed:\n{build.stderr[-4000:]}"
    wheel = next(wheels.glob("qdqc-*.whl"))
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), pinned("onnxruntime"), pinned("onnx"), pinned("numpy")],
        capture_output=True, text=True,
    )
    assert pip.returncode == 0, f"pip install of the wheel failed:\n{pip.stderr[-4000:]}"
    return py


def run(python: Path, code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True)


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- python-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md has no python-example block"
    return m.group(1)


def test_the_readme_example_runs_in_a_fresh_venv(python):
    r = subprocess.run([str(python), "-c", readme_example()], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, f"the README's Python example failed:\n{r.stdout}\n{r.stderr}"
    assert "byte for byte" in r.stdout, r.stdout
    # The audit's rows: one per group the CLI's audit lists on this host.
    cli = subprocess.run([str(QDQC_BIN), "audit", str(SHIPPED), "--ort-isa", "host", "--json"], capture_output=True, text=True, check=True)
    import json

    assert len(r.stdout.strip().splitlines()) - 1 == len(json.loads(cli.stdout)["groups"]), r.stdout


def test_a_path_bytes_and_a_model_proto_compile_alike(python, tmp_path):
    r = run(python, f"""
        import json, onnx, qdqc
        from onnx.external_data_helper import convert_model_to_external_data
        path = {str(SHIPPED)!r}
        a, ra = qdqc.compile(path)
        b, rb = qdqc.compile(open(path, "rb").read())
        c, rc = qdqc.compile(onnx.load(path))
        # A ModelProto whose initializers live in external data, loaded back with them.
        m = onnx.load(path)
        convert_model_to_external_data(m, all_tensors_to_one_file=True, location="w.data", size_threshold=0)
        onnx.save(m, {str(tmp_path / "ext.onnx")!r})
        d, rd = qdqc.compile(onnx.load({str(tmp_path / "ext.onnx")!r}))
        e, re_ = qdqc.compile({str(tmp_path / "ext.onnx")!r})
        # The external-data copy stores its tensors as raw data: compare it with its own path's compile.
        same = [b.SerializeToString() == a.SerializeToString(), c.SerializeToString() == a.SerializeToString(), d.SerializeToString() == e.SerializeToString()]
        strip = lambda r: {{k: v for k, v in r.items() if k not in ("input", "output", "model_size", "model_bytes")}}
        print(json.dumps([same, strip(ra) == strip(rb) == strip(rc), ra["fused"], rd["fused"] == re_["fused"] == ra["fused"]]))
    """)
    assert r.returncode == 0, r.stderr
    same, reports, fused, ext = eval(r.stdout.strip().replace("true", "True").replace("false", "False"))
    assert same == [True, True, True], "bytes and a ModelProto compile to the path's model; a ModelProto loaded from external data to its path's"
    assert reports and fused > 0 and ext


def test_a_corrupt_model_raises_bad_input_and_writes_nothing(python, tmp_path):
    out = tmp_path / "out.onnx"
    r = run(python, f"""
        import os, qdqc
        assert issubclass(qdqc.BadInputError, qdqc.QdqcError) and issubclass(qdqc.CompileError, qdqc.QdqcError)
        try:
            qdqc.compile(b"not a model", output={str(out)!r})
        except qdqc.BadInputError as e:
            print(str(e))
        else:
            raise SystemExit("no exception")
        try:
            qdqc.audit({str(tmp_path / "missing.onnx")!r})
        except qdqc.QdqcError as e:
            print(type(e).__name__, str(e))
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2, r.stdout
    assert lines[0].startswith("<model bytes>: not an ONNX model"), lines[0]
    assert "missing.onnx" in lines[1], lines[1]
    assert not out.exists(), "a failed compile wrote its output"
    assert [p.name for p in tmp_path.iterdir()] == [], f"files left behind: {list(tmp_path.iterdir())}"


def test_python_m_qdqc_is_the_cli(python, tmp_path):
    for args in (["inspect", str(SHIPPED), "--json"], ["audit", str(SHIPPED), "--ort-isa", "host", "--json"], ["compile", str(tmp_path / "none.onnx"), "-o", str(tmp_path / "o.onnx")], ["--version"]):
        mine = subprocess.run([str(python), "-m", "qdqc", *args], cwd=REPO, capture_output=True, text=True)
        theirs = subprocess.run([str(QDQC_BIN), *args], cwd=REPO, capture_output=True, text=True)
        assert (mine.returncode, mine.stdout, mine.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr), args


def test_session_options_apply_the_reports_profile(python):
    r = run(python, f"""
        import qdqc, onnxruntime as ort
        _, report = qdqc.compile({str(SHIPPED)!r})
        so = qdqc.session_options(report)
        assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        for key, value in report["session_profile"]["config"]:
            assert so.get_session_config_entry(key) == value, key
        so = qdqc.session_options(report, "ORT_DISABLE_ALL")
        assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        print(len(report["session_profile"]["config"]))
    """)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 3
