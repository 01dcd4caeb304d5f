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

import json

import numpy as np
import onnx
import pytest

import corpus
from oracle_util import (
    CORPUS_DIR,
    N_INPUTS,
    assert_same_dirs,
    compile_to,
    describe,
    external_locations,
    full_check_error,
    model_path,
    ort_session,
    random_inputs,
    run_qdqc,
    session_inputs,
)


# ----------------------------------------------------------------------------------------------
# tests


def test_manifest_matches_corpus_script(corpus_manifest):
    names = [m["name"] for m in corpus_manifest["models"]]
    assert len(names) == len(set(names)), f"duplicate names in manifest: {names}"
    kinds = {m["kind"] for m in corpus_manifest["models"]}
    assert kinds == {"qdq", "pow2", "float", "seed", "external"}, f"unexpected kinds {kinds}"
    for m in corpus_manifest["models"]:
        assert set(m) >= {"name", "file", "kind", "description", "full_check"}, m
        assert (CORPUS_DIR / m["file"]).is_file(), f"{m['file']} listed but missing in {CORPUS_DIR}"
        for d in m.get("data_files", []):
            assert (CORPUS_DIR / d).is_file(), f"external data {d} listed but missing in {CORPUS_DIR}"


def test_pow2_variants(corpus_manifest):
    """Every qdq model has a `<name>_pow2` twin whose Q/DQ scales are all powers of two, whose int32
    bias scales are fl(x_scale·w_scale) bitwise, and whose other initializers are the source's."""
    from onnx import numpy_helper

    models = {m["name"]: m for m in corpus_manifest["models"]}
    qdq = [m for m in corpus_manifest["models"] if m["kind"] == "qdq"]
    assert qdq, "the corpus has no qdq models"
    for src in qdq:
        twin = models.get(f"{src['name']}_pow2")
        assert twin is not None and twin["kind"] == "pow2", f"{src['name']} has no pow2 variant"
        a, b = onnx.load(str(model_path(src))), onnx.load(str(model_path(twin)))
        ia = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
        ib = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
        assert ia.keys() == ib.keys(), f"{twin['name']}: initializer names differ from {src['name']}"
        producer = {o: n for n in b.graph.node for o in n.output}
        touched = set()
        for n in b.graph.node:
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                continue
            s = ib[n.input[1]]
            mant, _ = np.frexp(s.astype(np.float64))
            assert np.all(mant == 0.5), f"{twin['name']}: scale {n.input[1]} of {n.name} is not a power of two: {s}"
            touched.add(n.input[1])
            is_bias = n.op_type == "DequantizeLinear" and n.input[0] in ib and ib[n.input[0]].dtype == np.int32
            if is_bias:
                user = next(u for u in b.graph.node if n.output[0] in u.input)
                sx, sw = (ib[producer[i].input[1]] for i in user.input[:2])
                want = (sx * sw).astype(np.float32)
                assert np.array_equal(np.broadcast_to(want.ravel() if want.size > 1 else want, s.shape), s), (
                    f"{twin['name']}: bias scale {n.input[1]} is not fl(x_scale·w_scale) of {user.name}")
                touched.add(n.input[0])
        for name, arr in ia.items():
            if name not in touched:
                assert arr.dtype == ib[name].dtype and np.array_equal(arr, ib[name]), (
                    f"{twin['name']}: initializer {name} differs from {src['name']}")


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


def test_reports_and_audits_are_byte_identical_across_runs(qdqc, entry, tmp_path):
    """Issue #10: no timing or other run-dependent field in `compile --report` or `audit --json`."""
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    runs = []
    for _ in range(2):
        r = run_qdqc(qdqc, "compile", model_path(entry), "-o", out, "--report", report)
        assert r.returncode == 0, describe(r)
        a = run_qdqc(qdqc, "audit", model_path(entry), "--json")
        assert a.returncode == 0, describe(a)
        runs.append((report.read_bytes(), a.stdout))
    assert runs[0][0] == runs[1][0], "two compile reports differ"
    assert runs[0][1] == runs[1][1], "two audit --json outputs differ"
    timed = run_qdqc(qdqc, "compile", model_path(entry), "-o", out, "--report", report, "--timings")
    assert timed.returncode == 0 and "total_micros" in json.loads(report.read_text())["timings"], describe(timed)


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


def test_domain_used_without_import_is_accepted_as_ort_accepts_it(qdqc, tmp_path):
    """NNCF writes com.microsoft nodes without importing the domain; ONNX Runtime imports every
    domain it registers implicitly, so qdqc loads such a model, warns, and keeps it as authored."""
    inits = [
        onnx.helper.make_tensor("sa", onnx.TensorProto.FLOAT, [], [0.05]),
        onnx.helper.make_tensor("za", onnx.TensorProto.UINT8, [], [128]),
        onnx.helper.make_tensor("sc", onnx.TensorProto.FLOAT, [], [0.1]),
        onnx.helper.make_tensor("zc", onnx.TensorProto.UINT8, [], [120]),
    ]
    node = onnx.helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sa", "za", "sc", "zc"], ["c"], domain="com.microsoft", name="qadd")
    vi = lambda n: onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UINT8, [4])
    graph = onnx.helper.make_graph([node], "g", [vi("a"), vi("b")], [vi("c")], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    src, out, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save_model(model, str(src))
    feed = {"a": np.array([1, 2, 200, 255], np.uint8), "b": np.array([3, 4, 5, 6], np.uint8)}
    (want,) = ort_session(src).run(None, feed)  # the premise: ORT loads and runs it
    for extra in ([], ["--no-fuse"]):
        r = run_qdqc(qdqc, "compile", src, "-o", out, "--report", report, *extra)
        assert r.returncode == 0, describe(r)
        assert "uses domain 'com.microsoft', which the model does not import" in r.stderr, describe(r)
        warnings = json.loads(report.read_text())["warnings"]
        assert len(warnings) == 1 and "node 'qadd' (QLinearAdd)" in warnings[0], warnings
        assert [o.domain for o in onnx.load(str(out)).opset_import] == [""], "imports are kept as authored"
        (got,) = ort_session(out).run(None, feed)
        assert want.tobytes() == got.tobytes()
    assert run_qdqc(qdqc, "audit", src).returncode == 0
