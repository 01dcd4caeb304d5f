"""Expected bytes for tests/codes_movement.rs and tests/codes_pool.rs from ONNX Runtime
(ORT_DISABLE_ALL, 1 thread, opset 19), on u8 codes:

- resize_ort.bin: Resize (mode nearest) of codes 0, 1, 2, ... for every coordinate transform and
  nearest mode, by scales and by sizes, up- and downsampling with non-integer factors. Record
  (little-endian): u8 transform, u8 nearest mode, u8 by_sizes, u8 rank, rank u32 input dims,
  rank f32 scales, rank u32 output dims (ORT's), then the output codes.
- pad_ort.bin: Pad constant (value 7) / edge / reflect with positive and negative pads. Record:
  u8 mode, u8 rank, rank u32 dims, 2·rank i32 pads, rank u32 output dims, input codes, output codes.
- maxpool_ort.bin: MaxPool on u8 with random 1-3-D geometries (pads < kernel as ORT requires),
  strides, dilations, ceil_mode. Record: u8 spatial rank d, u8 ceil_mode, (d+2) u32 dims,
  d u32 kernel, d u32 strides, d u32 dilations, 2d u32 pads, (d+2) u32 output dims, input, output.

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" codegen/kernels/tests/movement_ort.py codegen/kernels/tests/data
"""
import os
import struct
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

TRANSFORMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def session(node, x, inits, opset=19):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def run(x, scales, sizes, transform, mode):
    inputs = ["x", "", "s"] if sizes is None else ["x", "", "", "z"]
    inits = []
    if sizes is None:
        inits.append(helper.make_tensor("s", TensorProto.FLOAT, [len(scales)], scales))
    else:
        inits.append(helper.make_tensor("z", TensorProto.INT64, [len(sizes)], sizes))
    node = helper.make_node("Resize", inputs, ["y"], mode="nearest", coordinate_transformation_mode=transform, nearest_mode=mode)
    return session(node, x, inits)


def resize(path):
    geometries = [
        ([1, 1, 5, 7], [1.0, 1.0, 2.0, 0.5], None),
        ([1, 1, 6, 4], [1.0, 1.0, 1.5, 2.5], None),
        ([1, 2, 9, 10], [1.0, 1.0, 0.34, 0.73], None),
        ([1, 1, 3, 3], [1.0, 1.0, 3.3, 1.7], None),
        ([7, 5], [0.6, 1.9], None),
        ([1, 1, 5, 7], None, [1, 1, 8, 3]),
        ([1, 1, 6, 4], None, [1, 1, 1, 9]),
        ([2, 3, 5], None, [2, 3, 13]),
        ([1, 1, 10, 10], None, [1, 1, 3, 7]),
        # align_corners, (21·3)/21 = 3 but 21·fl(3/21) > 3 (ceil differs); 37·fl(3/37) < 3 (floor differs)
        ([1, 1, 4, 4], None, [1, 1, 22, 38]),
        ([1, 1, 4, 4], [1.0, 1.0, 5.5, 9.5], None),
    ]
    out = bytearray()
    n = 0
    for shape, scales, sizes in geometries:
        x = (np.arange(int(np.prod(shape))) % 256).astype(np.uint8).reshape(shape)
        for ti, t in enumerate(TRANSFORMS):
            for mi, m in enumerate(MODES):
                y = run(x, scales, sizes, t, m)
                sc = scales if scales is not None else [np.float32(o) / np.float32(i) for o, i in zip(sizes, shape)]
                out += struct.pack("<BBBB", ti, mi, int(sizes is not None), len(shape))
                out += struct.pack(f"<{len(shape)}I", *shape) + np.array(sc, np.float32).tobytes()
                out += struct.pack(f"<{len(shape)}I", *y.shape) + y.tobytes()
                n += 1
    with open(path, "wb") as f:
        f.write(out)
    print(f"{n} cases, {len(out)} bytes -> {path} (onnxruntime {ort.__version__})")


def pad(path, rng):
    out = bytearray()
    n = 0
    for mode_i, mode in enumerate(["constant", "edge", "reflect"]):
        for _ in range(40):
            rank = int(rng.integers(1, 4))
            shape = [int(v) for v in rng.integers(1, 6, rank)]
            pads = [int(v) for v in rng.integers(-2, 5, 2 * rank)]
            for a in range(rank):
                for p in (a, a + rank):
                    if mode == "reflect":
                        pads[p] = min(max(pads[p], 0), shape[a] - 1)
                    pads[p] = max(pads[p], -(shape[a] // 2))
            x = rng.integers(0, 256, shape).astype(np.uint8)
            inits = [helper.make_tensor("p", TensorProto.INT64, [2 * rank], pads), helper.make_tensor("c", TensorProto.UINT8, [], [7])]
            y = session(helper.make_node("Pad", ["x", "p", "c"], ["y"], mode=mode), x, inits)
            out += struct.pack("<BB", mode_i, rank) + struct.pack(f"<{rank}I", *shape) + struct.pack(f"<{2 * rank}i", *pads)
            out += struct.pack(f"<{rank}I", *y.shape) + x.tobytes() + y.tobytes()
            n += 1
    with open(path, "wb") as f:
        f.write(out)
    print(f"{n} cases, {len(out)} bytes -> {path}")


def maxpool(path, rng):
    out = bytearray()
    n = 0
    while n < 150:
        d = int(rng.integers(1, 4))
        shape = [1, int(rng.integers(1, 3))] + [int(v) for v in rng.integers(1, 9 if d < 3 else 6, d)]
        kernel = [int(v) for v in rng.integers(1, 4, d)]
        strides = [int(v) for v in rng.integers(1, 4, d)]
        dil = [int(v) for v in rng.integers(1, 3, d)]
        pads = [int(rng.integers(0, kernel[a % d])) for a in range(2 * d)]
        ceil = int(rng.integers(0, 2))
        if any(shape[a + 2] + pads[a] + pads[a + d] < dil[a] * (kernel[a] - 1) + 1 for a in range(d)):
            continue
        x = rng.integers(0, 256, shape).astype(np.uint8)
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides, dilations=dil, pads=pads, ceil_mode=ceil)
        y = session(node, x, [])
        out += struct.pack("<BB", d, ceil) + struct.pack(f"<{d + 2}I", *shape)
        out += struct.pack(f"<{5 * d}I", *kernel, *strides, *dil, *pads) + struct.pack(f"<{d + 2}I", *y.shape)
        out += x.tobytes() + y.tobytes()
        n += 1
    with open(path, "wb") as f:
        f.write(out)
    print(f"{n} cases, {len(out)} bytes -> {path}")


if __name__ == "__main__":
    rng = np.random.default_rng(20261202)
    resize(os.path.join(sys.argv[1], "resize_ort.bin"))
    pad(os.path.join(sys.argv[1], "pad_ort.bin"), rng)
    maxpool(os.path.join(sys.argv[1], "maxpool_ort.bin"), rng)
