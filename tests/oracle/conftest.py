"""Fixtures shared by the oracle tests (helpers live in oracle_util.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from oracle_util import QDQC_BIN, CompileCache, host_isa, manifest


def pytest_sessionstart(session):
    """Print the host's profile first, also under -q (which hides pytest_report_header)."""
    try:
        line = f"ONNX Runtime host profile: {host_isa()} (`{QDQC_BIN} host`)"
    except Exception as e:  # the tests that need it fail with the same message
        line = f"ONNX Runtime host profile: none: {e}"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


def pytest_generate_tests(metafunc):
    if "entry" in metafunc.fixturenames:
        models = manifest()["models"]
        metafunc.parametrize("entry", models, ids=[m["name"] for m in models])


@pytest.fixture(scope="session")
def corpus_manifest() -> dict:
    return manifest()


@pytest.fixture(scope="session")
def host() -> str:
    """The host's ISA profile (`qdqc host`), or a failure saying why there is none."""
    try:
        return host_isa()
    except Exception as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def qdqc() -> Path:
    if not QDQC_BIN.is_file():
        pytest.fail(
            f"qdqc binary not found at {QDQC_BIN} (set QDQC_BIN, or build it with `cargo build`)", pytrace=False
        )
    if not os.access(QDQC_BIN, os.X_OK):
        pytest.fail(f"qdqc binary at {QDQC_BIN} is not executable", pytrace=False)
    return QDQC_BIN


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> CompileCache:
    return CompileCache(tmp_path_factory.mktemp("qdqc-out"))
