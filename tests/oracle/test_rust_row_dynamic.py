"""Issue 13 build item 2, the per-row form: per-token dynamic quantization written out in ONNX ops
(`rewrites/src/rules/row_dynamic.rs`, docs/row-dynamic-quantization.md): each row's scale and zero
point made by ReduceMin/ReduceMax and elementwise ops over the last axis, QuantizeLinear →
DequantizeLinear with those run-time parameters (opset 21, blocked along the last axis with a block
of K; or rank 2 per axis 0), → MatMul by a constant int8 per-column weight's DequantizeLinear.

Models are built here, one per accepted form: asymmetric u8 and i8 (ONNX's DynamicQuantizeLinear
function body per row), symmetric i8 (max|x| / 127 as ReduceMax(Abs(x)), and ONNX Runtime's own int8
recipe Max(Abs(ReduceMin), Abs(ReduceMax)) / 127.5; SmoothQuant's Max(max|x|, 1e-5) / 127), rank 2 and
rank 3 activations, rank 2 also per axis 0 (keepdims = 0). Each is compiled
with `qdqc compile --target rust --contract real`; rule `row-dynamic-matmul` must fire, the crate is
built (debug, `-D warnings`, shared target/rust-real-build) and run on 3 seeded activations, and
every output must be the correctly rounded f32 of `Σ_k (x_q − z)(w − zw)·s·sw`, with `x_q`, `s`, `z`
ONNX Runtime's own (ORT_DISABLE_ALL, exposed as graph outputs of a copy) in exact rationals — so the
Rust program's per-row parameters and codes are ORT's bit for bit (a different code or scale on any
row would change that row's outputs). ORT's float MatMul (one rounding per product and partial sum)
is compared for the record. The rank-3 symmetric form also compiles with a symbolic batch (one
crate run on batches 1 and 3).

Under `exact` (the default) the rule refuses every one of these groups (the DQ → MatMul float output
is deterministic only where P2 holds, which depends on a scale made at run time), and the model
compiles as float evaluation: every op as authored — the reductions and the parameter chain as f32
ops, Round, the Cast f32 → u8/i8, QuantizeLinear and DequantizeLinear with run-time parameters in
ONNX Runtime's arithmetic (`codes::qdq::quantize_by`, `float::dq::dequantize_by`), the float MatMul
in the kernel crate's documented order. Checked on the same seeds: the codes (x_q, and z where the
graph makes one) byte-identical to ORT_DISABLE_ALL's (the harness's `--intermediates`), and every
output `y` equal bit for bit to that documented evaluation (`s = +0; s = s + a·b` for k in order, no
FMA) of ORT's own x_dq and w_dq — so the per-row scales are ORT's too. ORT's MatMul (MLAS, FMA,
blocked K) is another rounding of the same sum: the outputs where it differs are counted, not hidden.

Refused near-misses (reasons checked in rewrites/tests/families.rs): the reduction over the wrong
axis (axis 0: a scale per column of K, not per row) under both contracts; the Rust target then meets
its QuantizeLinear blocked along axis 0 with elements after it (ORT's `opNotLastAxis`, not MLAS's
arithmetic): exit 2, one line, nothing written. An all-zero row (scale 0/0: the graph's codes are
undefined) is a run-time error of the crate naming the node, not a guess: under `real` the fused
group's, under `exact` the Cast of the NaN zero point.
"""
from __future__ import annotations

import json
import subprocess
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from oracle_util import QDQC_BIN, ort_session
from test_rust_a8w8 import BUILD_DIR, build_crate, f32_rne, work

K, N = 48, 24
# name: (activation shape, recipe, codes, reduction axis)
CASES = {
    "row_asym_u8_rank3": ([2, 5, K], "asym", TensorProto.UINT8, -1),
    "row_asym_i8_rank2": ([7, K], "asym", TensorProto.INT8, -1),
    "row_sym_i8_rank3": ([2, 4, K], "absmax", TensorProto.INT8, -1),
    "row_sym_ort_i8_rank2": ([6, K], "ort_int8", TensorProto.INT8, 1),
    "row_sym_floor_i8_rank3": ([3, 4, K], "absmax_floor", TensorProto.INT8, -1),
    "row_asym_u8_axis0_rank2": ([5, K], "asym_axis0", TensorProto.UINT8, -1),
}
REFUSED = {
    # Reduced over axis 0: one parameter per column of K, which weights products inside the sum.
    "row_wrong_axis": ([6, K], "asym", TensorProto.UINT8, 0),
}


def c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype), name)


def model(shape, recipe, code, axis) -> onnx.ModelProto:
    """x → per-row (s, z) → Q → DQ → MatMul(·, DQ(W int8 per column)) → y."""
    rank = len(shape)
    qmin, qmax = (0, 255) if code == TensorProto.UINT8 else (-128, 127)
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (K, N)).astype(np.int8)
    sw = (rng.uniform(0.5, 2.0, N) * 2.0 ** -8).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(sw, "sw"), c("zw", np.zeros(N), np.int8), c("zero", 0.0),
             c("axes", [axis], np.int64)]
    nodes = []
    keep = 0 if recipe == "asym_axis0" else 1
    red = dict(keepdims=keep)
    if recipe.startswith("asym"):
        inits += [c("range", float(qmax - qmin)), c("qmin", float(qmin)), c("lo", float(qmin)), c("hi", float(qmax))]
        nodes += [
            helper.make_node("ReduceMin", ["x", "axes"], ["rmin"], **red),
            helper.make_node("ReduceMax", ["x", "axes"], ["rmax"], **red),
            helper.make_node("Min", ["rmin", "zero"], ["mn"]),
            helper.make_node("Max", ["rmax", "zero"], ["mx"]),
            helper.make_node("Sub", ["mx", "mn"], ["r"]),
            helper.make_node("Div", ["r", "range"], ["s"]),
            helper.make_node("Div", ["mn", "s"], ["mns"]),
            helper.make_node("Sub", ["qmin", "mns"], ["zf"]),
            helper.make_node("Clip", ["zf", "lo", "hi"], ["zc"]),
            helper.make_node("Round", ["zc"], ["zr"]),
            helper.make_node("Cast", ["zr"], ["z"], to=code),
        ]
        qz = ["x", "s", "z"]
    elif recipe.startswith("absmax"):
        inits += [c("d", 127.0), c("eps", 1e-5)]
        nodes += [helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("ReduceMax", ["ax", "axes"], ["amax"], **red)]
        if recipe == "absmax_floor":  # SmoothQuant's clamp(min=1e-5)
            nodes += [helper.make_node("Max", ["amax", "eps"], ["amaxf"]), helper.make_node("Div", ["amaxf", "d"], ["s"])]
        else:
            nodes += [helper.make_node("Div", ["amax", "d"], ["s"])]
        qz = ["x", "s"]
    else:  # ONNX Runtime's quantize_dynamic int8 recipe, with its reductions per row
        inits += [c("d", 127.5)]
        nodes += [helper.make_node("ReduceMin", ["x", "axes"], ["rmin"], **red), helper.make_node("ReduceMax", ["x", "axes"], ["rmax"], **red),
                  helper.make_node("Abs", ["rmin"], ["amin"]), helper.make_node("Abs", ["rmax"], ["amx"]),
                  helper.make_node("Max", ["amin", "amx"], ["amax"]), helper.make_node("Div", ["amax", "d"], ["s"])]
        qz = ["x", "s"]
    if axis == 0:  # the near-miss: one parameter per column of K, blocked along M
        qattrs = dict(axis=0, block_size=shape[0])
    elif keep:
        qattrs = dict(axis=rank - 1, block_size=K)
    else:
        qattrs = dict(axis=0)
    out_dtype = {} if len(qz) == 3 else dict(output_dtype=code)
    nodes += [
        helper.make_node("QuantizeLinear", qz, ["x_q"], **qattrs, **out_dtype),
        helper.make_node("DequantizeLinear", ["x_q", *qz[1:]], ["x_dq"], **qattrs),
        helper.make_node("DequantizeLinear", ["W", "sw", "zw"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"]),
    ]
    g = helper.make_graph(nodes, "row_dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-1] + [N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def compile_rust(name: str, spec, contract: str):
    label = f"{name}_{contract}"
    d = work(label)
    m = model(*spec)
    onnx.save(m, d / f"{label}.onnx")
    crate, report = d / label, d / "report.json"
    r = subprocess.run([str(QDQC_BIN), "compile", str(d / f"{label}.onnx"), "--target", "rust", "--contract", contract, "-o", str(crate),
                        "--report", str(report)], capture_output=True, text=True, timeout=600)
    return m, d, crate, report, r


def ort_codes(m: onnx.ModelProto, x: np.ndarray, code: int):
    """ORT's own x_q, s and z (ORT_DISABLE_ALL), exposed as graph outputs of a copy."""
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear")
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    names = [n for n in q.input[1:] if n] + ["x_q"]
    for o in names:
        copy.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT if o == q.input[1] else code, None))
    got = dict(zip(names, ort_session(copy).run(names, {"x": x})))
    return got["x_q"], got[q.input[1]], got.get(q.input[2]) if len(q.input) > 2 else None


def exact_outputs(m: onnx.ModelProto, x: np.ndarray, code: int, shape) -> np.ndarray:
    """The correctly rounded f32 of Σ_k (x_q − z)(w − zw)·s·sw per output, from ORT's own x_q, s, z,
    in exact rationals."""
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    w = inits["W"].astype(np.int64)
    fsw = [Fraction(float(v)) for v in inits["sw"]]
    xq, s, z = ort_codes(m, x, code)
    rows = xq.reshape(-1, K).astype(np.int64)
    s = s.reshape(-1)
    z = np.zeros(rows.shape[0], np.int64) if z is None else z.reshape(-1).astype(np.int64)
    acc = (rows - z[:, None]) @ w
    want = np.array([[f32_rne(int(acc[i, j]) * Fraction(float(s[i])) * fsw[j]) for j in range(N)] for i in range(rows.shape[0])], np.float32)
    return want.reshape(shape)


def seeded(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(200 + seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(1 + 3 * seed)
    if seed == 1:
        x = np.abs(x)  # min > 0: Min(ReduceMin, 0) clamps to 0
    if seed == 2:
        x = x * rng.uniform(0.001, 100.0, shape[:-1] + [1]).astype(np.float32)  # rows at very different scales
        x.reshape(-1, shape[-1])[-1] *= np.float32(1e-9)  # a row below the symmetric floor (1e-5)
    return x


@pytest.mark.parametrize("name", list(CASES))
def test_fused_group_is_the_correctly_rounded_exact_value(name):
    m, d, crate, report, r = compile_rust(name, CASES[name], "real")
    assert r.returncode == 0, r.stderr
    decisions = [x for x in json.loads(report.read_text())["decisions"] if x["rule"] == "row-dynamic-matmul"]
    assert len(decisions) == 1 and decisions[0]["fired"], decisions
    lib = (crate / "src" / "lib.rs").read_text()
    assert "Granularity::RowBy" in lib and "Epilogue::Real" in lib, "the generated code does not run the fused group"
    build_crate(crate)
    shape = [dim.dim_value for dim in m.graph.input[0].type.tensor_type.shape.dim]
    ort_differs, total = 0, 0
    for seed in range(3):
        x = seeded(shape, seed)
        np.savez(d / "in.npz", x=x)
        h = subprocess.run([str(BUILD_DIR / "debug" / crate.name), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        got = np.load(d / "out.npz")["y"]
        want = exact_outputs(m, x, CASES[name][2], got.shape)
        bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        assert bad == 0, f"{name} seed {seed}: {bad} of {want.size} outputs are not the correctly rounded exact value"
        ort_d = ort_session(m).run(["y"], {"x": x})[0]
        ort_differs += int(np.count_nonzero(ort_d.view(np.uint32) != want.view(np.uint32)))
        total += want.size
        # ORT_ENABLE_ALL: a u8 activation's DQ → MatMul becomes MatMulIntegerToFloat, which rejects
        # the per-row zero point at run time; otherwise the float path stays, the same bits.
        enable_all = ort_session(m, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        if CASES[name][2] == TensorProto.UINT8:
            with pytest.raises(Exception, match="Per-Channel is not supported yet"):
                enable_all.run(["y"], {"x": x})
        else:
            assert enable_all.run(["y"], {"x": x})[0].tobytes() == ort_d.tobytes()
    print(f"{name}: 3 seeds × {got.size} f32 outputs equal the exact value; ORT's float MatMul differs on {ort_differs} of {total}")


def test_symbolic_batch():
    """The rank-3 symmetric form with its batch dim symbolic: one crate, batches 1 and 3, every
    output the exact value."""
    name = "row_sym_floor_i8_rank3"
    label = "row_sym_batch"
    d = work(label)
    m = model(*CASES[name])
    for io in (m.graph.input[0], m.graph.output[0]):
        io.type.tensor_type.shape.dim[0].dim_param = "B"
    onnx.save(m, d / f"{label}.onnx")
    r = subprocess.run([str(QDQC_BIN), "compile", str(d / f"{label}.onnx"), "--target", "rust", "--contract", "real", "-o", str(d / label)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    build_crate(d / label)
    for batch in (1, 3):
        x = seeded([batch] + CASES[name][0][1:], batch)
        np.savez(d / "in.npz", x=x)
        h = subprocess.run([str(BUILD_DIR / "debug" / label), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        got = np.load(d / "out.npz")["y"]
        want = exact_outputs(m, x, CASES[name][2], got.shape)
        assert got.shape == (batch, 4, N) and got.tobytes() == want.tobytes(), f"batch {batch}"


@pytest.mark.parametrize("contract", ["real", "exact"])
def test_all_zero_row_is_a_runtime_error(contract):
    """An all-zero row has no scale: under `real` the kernel refuses it; under `exact` its zero point
    is `Cast(Round(Clip(0 − 0/0)))`, a Cast of NaN, undefined in ONNX Runtime, and the crate stops
    there, naming the node."""
    name = "row_asym_u8_rank3"
    m, d, crate, report, r = compile_rust(name, CASES[name], contract)
    assert r.returncode == 0, r.stderr
    build_crate(crate)
    x = seeded(CASES[name][0], 0)
    x[1, 2, :] = 0.0
    np.savez(d / "in.npz", x=x)
    h = subprocess.run([str(BUILD_DIR / "debug" / crate.name), str(d / "in.npz"), str(d / "out.npz")], capture_output=True, text=True)
    assert h.returncode != 0 and "undefined" in h.stderr, (h.returncode, h.stderr)
    if contract == "exact":
        assert "Cast" in h.stderr, h.stderr


@pytest.mark.parametrize("name,contract", [("row_wrong_axis", "real"), ("row_wrong_axis", "exact")])
def test_near_miss_is_refused_and_not_compiled(name, contract):
    """The rule refuses it (reason checked in rewrites/tests/families.rs,
    `rust_row_dynamic_refuses_*`); the Rust target then meets the QuantizeLinear blocked along
    axis 0 it does not run: exit 2, one line naming it, nothing written. ORT_DISABLE_ALL runs the
    authored model."""
    spec = REFUSED[name]
    m, d, crate, report, r = compile_rust(name, spec, contract)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "QuantizeLinear" in lines[0] and "not supported by the Rust target" in lines[0], r.stderr
    assert not crate.exists() and not report.exists(), "no partial output"
    assert ort_session(m).run(["y"], {"x": seeded(spec[0], 0)})[0].shape == tuple(spec[0][:-1] + [N])


def ort_float_path(m: onnx.ModelProto, x: np.ndarray, code: int) -> dict:
    """ORT_DISABLE_ALL's x_q, z (if the graph makes one), x_dq, w_dq and y, exposed as graph outputs
    of a copy."""
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    names = ["x_q", "x_dq", "w_dq"] + (["z"] if any(n.output[0] == "z" for n in m.graph.node) else [])
    for o in names:
        copy.graph.output.append(helper.make_tensor_value_info(o, code if o in ("x_q", "z") else TensorProto.FLOAT, None))
    names.append("y")
    return dict(zip(names, ort_session(copy).run(names, {"x": x})))


def sequential_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The kernel crate's float MatMul order (`float::gemm`): `s = +0`, then `s = s + a[.., k]·b[k]`
    for k in order, each product and sum one f32 rounding (numpy's f32 ufuncs: no FMA)."""
    rows = a.reshape(-1, a.shape[-1])
    s = np.zeros((rows.shape[0], b.shape[1]), np.float32)
    for k in range(rows.shape[1]):
        s = s + rows[:, k:k + 1] * b[k:k + 1, :]
    return s.reshape(a.shape[:-1] + (b.shape[1],))


@pytest.mark.parametrize("name", list(CASES))
def test_exact_refuses_the_group_and_evaluates_in_float(name):
    m, d, crate, report, r = compile_rust(name, CASES[name], "exact")
    assert r.returncode == 0, r.stderr
    decisions = [x for x in json.loads(report.read_text())["decisions"] if x["rule"] == "row-dynamic-matmul"]
    assert len(decisions) == 1 and not decisions[0]["fired"] and decisions[0]["reason"], decisions
    lib = (crate / "src" / "lib.rs").read_text()
    assert "Granularity::RowBy" not in lib and "entry::quantize_by_" in lib and "float::dq::dequantize_by" in lib, "not the float evaluation"
    build_crate(crate)
    code = CASES[name][2]
    shape = CASES[name][0]
    ort_differs, total = 0, 0
    for seed in range(3):
        x = seeded(shape, seed)
        np.savez(d / "in.npz", x=x)
        h = subprocess.run([str(BUILD_DIR / "debug" / crate.name), str(d / "in.npz"), str(d / "out.npz"), "--intermediates"],
                           capture_output=True, text=True)
        assert h.returncode == 0, h.stderr
        rust = dict(np.load(d / "out.npz"))
        ort = ort_float_path(m, x, code)
        for t in [k for k in ("x_q", "z") if k in ort]:
            assert t in rust, f"{name}: the harness wrote no intermediate '{t}'"
            assert rust[t].dtype == ort[t].dtype and rust[t].tobytes() == ort[t].tobytes(), f"{name} seed {seed}: {t} differs from ORT_DISABLE_ALL"
        want = sequential_matmul(ort["x_dq"], ort["w_dq"])
        got = rust["y"]
        assert got.shape == want.shape and got.dtype == np.float32
        bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        assert bad == 0, f"{name} seed {seed}: {bad} of {want.size} outputs are not the documented evaluation of ORT's x_dq and w_dq"
        ort_differs += int(np.count_nonzero(ort["y"].view(np.uint32) != got.view(np.uint32)))
        total += got.size
    print(f"{name} exact: 3 seeds: codes byte-identical to ORT_DISABLE_ALL, {total} outputs the documented float MatMul of ORT's "
          f"x_dq and w_dq; ORT's MatMul (MLAS) rounds {ort_differs} of them differently")


