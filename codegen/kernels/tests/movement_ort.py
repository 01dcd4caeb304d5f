"""Expected bytes for tests/codes_movement.rs: ONNX Runtime's Resize (mode nearest) on u8 codes
0, 1, 2, ... for every coordinate transform and nearest mode, by scales and by sizes, up- and
downsampling with non-integer factors (ORT_DISABLE_ALL, 1 thread, opset 19).

    PY=$(bash tests/oracle/setup.sh | tail -n1)
    "$PY" codegen/kernels/tests/movement_ort.py codegen/kernels/tests/data/resize_ort.bin

Record (little-endian): u8 transform, u8 nearest mode, u8 by_sizes, u8 rank, rank u32 input dims,
rank f32 scales, rank u32 output dims (ORT's), then the output codes.
"""
import struct
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

TRANSFORMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def run(x, scales, sizes, transform, mode):
    inputs = ["x", "", "s"] if sizes is None else ["x", "", "", "z"]
    inits = []
    if sizes is None:
        inits.append(helper.make_tensor("s", TensorProto.FLOAT, [len(scales)], scales))
    else:
        inits.append(helper.make_tensor("z", TensorProto.INT64, [len(sizes)], sizes))
    node = helper.make_node("Resize", inputs, ["y"], mode="nearest", coordinate_transformation_mode=transform, nearest_mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def main(path):
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


if __name__ == "__main__":
    main(sys.argv[1])
