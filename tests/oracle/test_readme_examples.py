"""The README's copy-paste examples are the ones the tests run:

- `<!-- build-rs-example -->` is `examples/embed-onnx/build.rs`, which test_embed.py builds and runs;
- `<!-- audit-example -->` runs here, line by line, from the repository root (`cargo run --release --`
  is the qdqc binary under test, `target/` a temporary folder), and its picture renders;
- `<!-- python-example -->` runs in test_python_package.py.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from oracle_util import QDQC_BIN

REPO = Path(__file__).resolve().parents[2]


def block(marker: str, lang: str) -> str:
    m = re.search(rf"<!-- {marker} -->\s*```{lang}\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert m, f"README.md has no {marker} block"
    return m.group(1)


def test_the_build_rs_example_is_the_embed_examples_build_script():
    assert block("build-rs-example", "rust") == (REPO / "examples" / "embed-onnx" / "build.rs").read_text()


def test_the_audit_example_runs_and_its_picture_renders(tmp_path):
    lines = [l for l in block("audit-example", "sh").splitlines() if l.strip()]
    assert lines and lines[0].startswith("cargo run --release -- audit ")
    outputs = []
    for line in lines:
        args = shlex.split(line.replace("target/", f"{tmp_path}/").replace("cargo run --release --", str(QDQC_BIN)))
        r = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, f"{line}: {r.stderr}"
        outputs.append(r.stdout)
    assert "group(s) ONNX Runtime would rewrite" in outputs[0]
    svg = (tmp_path / "audit.svg").read_text()
    assert svg.count('class="cluster"') >= 5 and "#fadcdc" in svg, "the picture boxes the groups, the refused one red"
