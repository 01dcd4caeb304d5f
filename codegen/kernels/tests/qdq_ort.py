"""Expected bytes for tests/codes_qdq.rs: ONNX Runtime's QuantizeLinear / DequantizeLinear
(ORT_DISABLE_ALL, 1 thread) on adversarial inputs, per tensor and per axis, u8 and i8.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" codegen/kernels/tests/qdq_ort.py codegen/kernels/tests/data/qdq_ort.bin

File format (little-endian), one record per case:
    u8 kind (0 Q->u8, 1 Q->i8, 2 DQ u8, 3 DQ i8), u32 channels C (1 = per tensor), u32 n,
    C f32 scales, C i32 zero points, n inputs (f32, or 1-byte codes), n outputs (1-byte codes, or f32).
Per-axis cases have shape [2, C, n / (2C)] and axis 1; per-tensor cases shape [n].
"""
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

rng = np.random.default_rng(20261201)
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def run(op, x, scale, zp, axis, code_type):
    t = ONNX_TYPE[code_type]
    xin = TensorProto.FLOAT if op == "QuantizeLinear" else t
    yout = t if op == "QuantizeLinear" else TensorProto.FLOAT
    inits = [
        helper.make_tensor("s", TensorProto.FLOAT, [len(scale)] if len(scale) > 1 else [], scale.tolist()),
        helper.make_tensor("z", t, [len(zp)] if len(zp) > 1 else [], zp.tolist()),
    ]
    node = helper.make_node(op, ["x", "s", "z"], ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", xin, list(x.shape))],
                              [helper.make_tensor_value_info("y", yout, list(x.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def adversarial_floats(scale, zp, n):
    """Exact ties k + 1/2 of x/s, their f32 neighbours, specials, and random values."""
    s = np.float32(scale)
    k = rng.integers(-300, 300, n // 4).astype(np.float32)
    ties = (k + np.float32(0.5)) * s
    up = np.nextafter(ties, np.float32(np.inf))
    down = np.nextafter(ties, np.float32(-np.inf))
    rand = (rng.standard_normal(n - 3 * (n // 4)) * 200 * s).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32)
    x = np.concatenate([ties, up, down, rand])
    x[: len(special)] = special
    return x.astype(np.float32)


def main(path):
    out = bytearray()
    cases = 0
    for code_type, kind_q, kind_dq in [(np.uint8, 0, 2), (np.int8, 1, 3)]:
        info = np.iinfo(code_type)
        scale_sets = [[0.1], [1 / 3], [0.0078125], [1e-30], [2.5e-3], [3.0, 0.05, 1 / 7]]
        for scales in scale_sets:
            c = len(scales)
            scale = np.array(scales, np.float32)
            zp = rng.integers(info.min, info.max + 1, c).astype(code_type)
            n = 2 * c * 240
            xs = np.concatenate([adversarial_floats(scale[i], int(zp[i]), n // c) for i in range(c)])
            shape = [2, c, n // (2 * c)] if c > 1 else [n]
            if c > 1:
                # Channel i's adversarial values go to channel i (both outer blocks).
                xs = xs.reshape(c, 2, n // (2 * c)).transpose(1, 0, 2).copy()
            x = xs.reshape(shape).astype(np.float32)
            y = run("QuantizeLinear", x, scale, zp, 1 if c > 1 else 0, code_type)
            out += struct.pack("<BII", kind_q, c, n) + scale.tobytes() + zp.astype(np.int32).tobytes()
            out += x.tobytes() + y.astype(code_type).tobytes()
            q = rng.integers(info.min, info.max + 1, n).astype(code_type).reshape(shape)
            d = run("DequantizeLinear", q, scale, zp, 1 if c > 1 else 0, code_type)
            out += struct.pack("<BII", kind_dq, c, n) + scale.tobytes() + zp.astype(np.int32).tobytes()
            out += q.tobytes() + d.astype(np.float32).tobytes()
            cases += 2
    with open(path, "wb") as f:
        f.write(out)
    print(f"{cases} cases, {len(out)} bytes -> {path} (onnxruntime {ort.__version__})")


if __name__ == "__main__":
    main(sys.argv[1])
