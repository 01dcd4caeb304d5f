"""ONNX Runtime's side of tests/rust_codegen.rs.

    ort_run.py MODEL SEED INPUTS.npz ORT.npz      seeded inputs (uniform in [-1, 1) for float,
                                                  full code range for u8/i8) and ORT_DISABLE_ALL's
                                                  outputs plus every QuantizeLinear output
    ort_run.py --compare ORT.npz RUST.npz         one JSON line per tensor both hold: elements,
                                                  byte-identical elements, max |deviation|
"""
import json
import sys

import numpy as np


def run(model_path, seed, inputs_path, out_path):
    import onnx
    import onnxruntime as ort

    model = onnx.load(model_path)
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    outputs = [o.name for o in model.graph.output]
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] not in outputs and n.output[0] in infos:
            model.graph.output.append(infos[n.output[0]])
            outputs.append(n.output[0])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in i.shape]
        if i.type == "tensor(float)":
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        elif i.type == "tensor(uint8)":
            feeds[i.name] = rng.integers(0, 256, shape, dtype=np.uint8)
        else:
            feeds[i.name] = rng.integers(-128, 128, shape, dtype=np.int8)
    np.savez(inputs_path, **feeds)
    results = sess.run(outputs, feeds)
    np.savez(out_path, **dict(zip(outputs, results)))


def compare(ort_path, rust_path):
    a, b = np.load(ort_path), np.load(rust_path)
    for name in sorted(set(a.files) & set(b.files)):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            print(json.dumps({"tensor": name, "error": f"ORT {x.dtype}{list(x.shape)} vs Rust {y.dtype}{list(y.shape)}"}))
            continue
        same = int(np.sum(x.view(np.uint8).reshape(x.size, -1) == y.view(np.uint8).reshape(y.size, -1), axis=None) // max(x.itemsize, 1)) if x.itemsize == 1 else int(np.sum(x.view(np.uint32) == y.view(np.uint32)))
        dev = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
        print(json.dumps({"tensor": name, "dtype": str(x.dtype), "elements": int(x.size), "identical": same, "max_deviation": dev}))


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
