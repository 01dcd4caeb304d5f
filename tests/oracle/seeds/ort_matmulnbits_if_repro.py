# Provenance: vendored from the seed material qdqc started from (shared/seeds/, outside this
# repository), unchanged but for these two lines; the repro of onnxruntime PR #33800 (issue #28306).
"""Repro from the seed PR: DQ->MatMul inside both If branches, weights in the outer graph (ORT 1.31.1 fails at session creation unless QDQ fusion is disabled)."""
import numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
K, N = 64, 32
def branch(name):
    dq = h.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], [f"w_{name}"])
    mm = h.make_node("MatMul", ["x", f"w_{name}"], [f"y_{name}"])
    return h.make_graph([dq, mm], name, [], [h.make_tensor_value_info(f"y_{name}", T.FLOAT, None)])
inits = [nh.from_array(np.zeros((K, N), np.uint8), "w_q"), nh.from_array(np.array(0.02, np.float32), "w_scale"),
         nh.from_array(np.array(3, np.uint8), "w_zp")]
g = h.make_graph([h.make_node("If", ["cond"], ["y"], then_branch=branch("then"), else_branch=branch("else"))], "g",
                 [h.make_tensor_value_info("cond", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [1, K])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
import sys; path = sys.argv[1] if len(sys.argv) > 1 else "if_outer_scope.onnx"
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10), path)
for cfg in [None, {"session.disable_quant_qdq":"1"}]:
    so=ort.SessionOptions()
    if cfg:
        for k,v in cfg.items(): so.add_session_config_entry(k,v)
    try:
        s=ort.InferenceSession(path, so); print("ok", cfg, s.run(None, {"cond":np.array(True), "x":np.ones((1,K),np.float32)})[0][0,:3])
    except Exception as e: print("FAIL", cfg, str(e)[:200])
