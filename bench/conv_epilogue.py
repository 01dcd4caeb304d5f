"""Latency of an exact requantization epilogue outside ORT's fused kernels (issue 9, real contract).

For QDQ Conv / Gemm groups of a quantize_static model (u8 activations, s8 per-channel weights, i32
bias) this builds one-group models and times, 1 thread, medians of interleaved runs:

  a_qdq   DQ->Conv->Q float path, ORT_ENABLE_ALL with session.disable_quant_qdq=1
  a_off   the same model, ORT_DISABLE_ALL
  b       the same model, ORT_ENABLE_ALL: ORT fuses it into QLinearConv / QGemm (f32 epilogue)
  c       ConvInteger -> Cast(double) -> Mul(M[c]) -> Add(B[c]) -> Round -> Clip -> Cast(u8)
          M = sx*sw/sy and B = b*sb/sy + zy, both rounded once to double
  c_lit   ConvInteger -> Add(i32 bias) -> Cast(double) -> Mul(M) -> Round -> Add(zy) -> Clip -> Cast
          (the form named in the brief; exact only where sb == sx*sw as reals)
  d       c with float instead of double (reference: cheaper, not exact)
  e       ConvInteger -> Max(lo[c]) -> Min(hi[c]) -> Cast(i64) -> Mul(m[c]) -> Add(k[c]) -> Div(2^s)
          -> Cast(u8): a fixed-point multiplier, the accumulator clamped to the channel's unsaturated
          window first so that m can have ~40 bits
ConvInteger's weights: ORT runs W as GEMM operand A, and s8 x u8 (S8U8) has a vectorised MLAS
kernel only with AVX-VNNI-INT8; elsewhere it falls to the generic C++ GEMM. So c and e are built
twice: `*_s8` with the model's s8 codes, `*_u8` with codes+128 and weight zero point 128 (U8U8).
Gemm groups use MatMulInteger (A = activations, B = s8 weights: the U8S8 kernel), no u8 form.

Verification (every layer, before timing): the accumulator is recomputed in numpy int64; the exact
output sat(rne(v/sy)+zy) of the real value v = acc*sx*sw + b*sb (spec section 2, `real`) is computed
with Python integers (float64 where the value is farther than 1e-6 from a rounding boundary, exact
integers otherwise; a sample is re-checked with fractions.Fraction). c, c_lit, d, e and b are
compared with it on the layer's real activations; c and e are also checked exhaustively over each
channel's unsaturated accumulator window against a bit-exact numpy emulation of their arithmetic;
b's differences are checked against ORT's kernel model sat(rne(fl(f32(acc+bias)*fl(fl(sx*sw)/sy)))+zy).

Usage: target/venv/bin/python bench/conv_epilogue.py --model PATH [--shape 1x3x320x320]
       [--layers p2o.Conv.0,...|all] [--runs 11] [--whole]
"""
import argparse
import math
import sys
import time
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper as nh

DEFAULT_LAYERS = "p2o.Conv.0,p2o.Conv.1,p2o.Conv.12,p2o.Conv.25,p2o.Conv.32,p2o.Conv.49"
DEFAULT_GEMMS = "Gemm_1,Gemm_8,Gemm_9"
SLACK = 1e-6  # float64 distance to a rounding boundary under which the exact path decides


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class Group:
    """One DQ(x), DQ(w), DQ(b) -> Conv|Gemm -> Q group with constant weights and bias."""

    def __init__(self, model, node):
        g = model.graph
        inits = {i.name: nh.to_array(i) for i in g.initializer}
        prod = {o: n for n in g.node for o in n.output}
        cons = {}
        for n in g.node:
            for i in n.input:
                cons.setdefault(i, []).append(n)
        self.name, self.kind, self.node = node.name, node.op_type, node
        dqx, dqw = prod[node.input[0]], prod[node.input[1]]
        dqb = prod[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        (q,) = cons[node.output[0]]
        if q.op_type != "QuantizeLinear" or (dqb is not None and dqb.op_type != "DequantizeLinear"):
            raise ValueError(f"{node.name}: not a Conv->Q group with a quantized bias")
        self.dqx, self.dqw, self.dqb, self.q = dqx, dqw, dqb, q
        self.x_name = dqx.input[0]
        self.sx = np.float32(inits[dqx.input[1]])
        self.zx = int(inits[dqx.input[2]])
        self.w = inits[dqw.input[0]]
        sw, zw = inits[dqw.input[1]], inits[dqw.input[2]]
        if dqb is not None:
            self.b = inits[dqb.input[0]].astype(np.int64)
            self.sb = inits[dqb.input[1]].astype(np.float32)
        else:  # no bias: b = 0 (its scale is then irrelevant)
            self.b, self.sb = np.zeros(1, np.int64), np.float32(self.sx * sw).reshape(-1)
        self.sy = np.float32(inits[q.input[1]])
        self.zy = int(inits[q.input[2]])
        if inits[q.input[2]].dtype != np.uint8 or inits[dqx.input[2]].dtype != np.uint8:
            raise ValueError(f"{node.name}: activations are not uint8")
        if np.any(zw != 0) or (dqb is not None and np.any(inits[dqb.input[2]] != 0)):
            raise ValueError(f"{node.name}: nonzero weight or bias zero point")
        self.attrs = attrs(node)
        if self.kind == "Gemm":
            a = self.attrs
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise ValueError(f"{node.name}: Gemm with transA/alpha/beta")
            if a.get("transB", 0):
                self.w = self.w.T.copy()  # always [K, N]
        self.C = self.w.shape[0] if self.kind == "Conv" else self.w.shape[1]
        self.sw = np.broadcast_to(sw.astype(np.float32), (self.C,)).copy()
        self.sb = np.broadcast_to(self.sb, (self.C,)).copy()
        self.b = np.broadcast_to(self.b, (self.C,)).copy()
        # exact rationals per channel: v/sy = acc*alpha + beta
        fx, fy = Fraction(float(self.sx)), Fraction(float(self.sy))
        self.alpha = [fx * Fraction(float(s)) / fy for s in self.sw]
        self.beta = [int(b) * Fraction(float(s)) / fy for b, s in zip(self.b, self.sb)]
        self.bias_scale_exact = all(Fraction(float(s)) == fx * Fraction(float(w))
                                    for s, w in zip(self.sb, self.sw))

    # ---- shapes -------------------------------------------------------------------------------
    def cshape(self, v):
        """A per-channel constant shaped to broadcast against the op's output."""
        return v.reshape(1, self.C, 1, 1) if self.kind == "Conv" else v.reshape(self.C)

    # ---- exact reference ----------------------------------------------------------------------
    def exact_codes(self, acc, ch):
        """sat(rne(acc*alpha+beta)+zy) for an int64 array acc of channel ch, exactly."""
        al, be = self.alpha[ch], self.beta[ch]
        u = acc.astype(np.float64) * float(al) + float(be)
        r = np.round(u)
        near = np.abs(np.abs(u - np.floor(u)) - 0.5) < SLACK
        for i in np.flatnonzero(near):
            r[i] = rne_fraction(int(acc[i]) * al + be)
        return np.clip(r + self.zy, 0, 255).astype(np.int64)

    def reach(self, ch):
        """Reachable accumulator interval of channel ch over all u8 inputs (padding adds 0)."""
        w = (self.w[ch].ravel() if self.kind == "Conv" else self.w[:, ch]).astype(np.int64)
        lo_x, hi_x = -self.zx, 255 - self.zx
        return int(np.minimum(w * lo_x, w * hi_x).sum()), int(np.maximum(w * lo_x, w * hi_x).sum())

    def window(self, ch):
        """[lo, hi]: the unsaturated accumulators of channel ch, cut to the reachable interval.
        Exact output 0 at lo and 255 at hi unless the cut moved them; monotone in between."""
        al, be = self.alpha[ch], self.beta[ch]
        rl, rh = self.reach(ch)
        lo = math.floor((Fraction(1, 2) - self.zy - be) / al) - 2  # exact output 0 below
        hi = math.ceil((Fraction(509, 2) - self.zy - be) / al) + 2  # 255 above
        if lo < rl:
            lo = rl
        else:
            while self.exact_codes(np.array([lo + 1]), ch)[0] == 0:
                lo += 1
        if hi > rh:
            hi = rh
        else:
            while self.exact_codes(np.array([hi - 1]), ch)[0] == 255:
                hi -= 1
        return lo, hi  # exact output 0 at lo, 255 at hi, monotone in between

    # ---- accumulator ---------------------------------------------------------------------------
    def accumulate(self, x):
        if self.kind == "Gemm":
            return (x.astype(np.int64) - self.zx) @ self.w.astype(np.int64)
        a = self.attrs
        grp = a.get("group", 1)
        st = a.get("strides", [1, 1])
        dl = a.get("dilations", [1, 1])
        if dl != [1, 1]:
            raise ValueError(f"{self.name}: dilations")
        kh, kw = self.w.shape[2:]
        p = a.get("pads", [0, 0, 0, 0])
        xi = np.pad(x.astype(np.int64) - self.zx, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
        win = np.lib.stride_tricks.sliding_window_view(xi, (kh, kw), axis=(2, 3))
        win = win[:, :, ::st[0], ::st[1]]  # N, Cin, Ho, Wo, kh, kw
        N, Cin, Ho, Wo = win.shape[:4]
        cg, og = Cin // grp, self.C // grp
        out = np.empty((N, self.C, Ho, Wo), np.int64)
        w = self.w.astype(np.int64)
        for gi in range(grp):
            out[:, gi * og:(gi + 1) * og] = np.einsum(
                "nchwij,ocij->nohw", win[:, gi * cg:(gi + 1) * cg], w[gi * og:(gi + 1) * og])
        return out


def rne_fraction(f):
    fl = f.numerator // f.denominator
    rem = f - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2):
        fl += 1
    return fl


# ---- arithmetic emulations of the candidate forms (numpy, bit-exact by IEEE / int64) --------------
def c_consts(g, dtype):
    M = np.array([float(a) for a in g.alpha], dtype=np.float64).astype(dtype)
    B = np.array([float(b + g.zy) for b in g.beta], dtype=np.float64).astype(dtype)
    return M, B


def emulate_c(acc, M, B):
    r = np.round(acc.astype(M.dtype) * M + B)  # Cast, Mul, Add, Round (half to even)
    return np.clip(r, 0, 255).astype(np.int64)


def e_consts(g):
    """Per channel: clamp window, multiplier m, offset k, shift s with m*|acc|+k < 2^62."""
    lo, hi, m, k, s = [], [], [], [], []
    for ch in range(g.C):
        l, h = g.window(ch)  # clamping where no accumulator reaches changes nothing
        h = max(h, l)
        amax = max(abs(l), abs(h), 1)
        al, be = g.alpha[ch], g.beta[ch]
        sh = 0
        while (al * amax + abs(be) + 300) * 2 ** (sh + 1) < 2 ** 62:
            sh += 1
        mm = rne_fraction(al * 2 ** sh)
        kk = rne_fraction((be + g.zy + Fraction(1, 2)) * 2 ** sh)
        lo.append(l); hi.append(h); m.append(mm); k.append(kk); s.append(sh)
    smin = min(s)  # one divisor per layer keeps Div a scalar; re-derive m, k at the common shift
    m = [rne_fraction(g.alpha[c] * 2 ** smin) for c in range(g.C)]
    k = [rne_fraction((g.beta[c] + g.zy + Fraction(1, 2)) * 2 ** smin) for c in range(g.C)]
    return (np.array(lo, np.int64), np.array(hi, np.int64), np.array(m, np.int64),
            np.array(k, np.int64), smin)


def emulate_e(acc, lo, hi, m, k, s):
    a = np.minimum(np.maximum(acc, lo), hi)
    n = a * m + k
    q = np.abs(n) >> s  # ONNX/ORT int64 Div truncates toward zero
    return np.where(n < 0, -q, q)


def ort_kernel_model(acc, chs, g):
    """QLinearConv / QGemm requantization: sat(rne(fl(f32(acc+bias)*M)) + zy)."""
    M = ((g.sx * g.sw).astype(np.float32) / g.sy).astype(np.float32)[chs]
    v = (acc + g.b[chs]).astype(np.float32) * M
    return np.clip(np.round(v).astype(np.int64) + g.zy, 0, 255)


# ---- one-group models ---------------------------------------------------------------------------
def const(name, arr):
    return nh.from_array(np.asarray(arr), name)


def build(g, xshape, form):
    """A model with input x (u8 codes) and output y (u8 codes) computing the group as `form`."""
    nodes, inits = [], []
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, None if xshape is None else list(xshape))
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    cattrs = {k: v for k, v in g.attrs.items()} if g.kind == "Conv" else {}
    inits += [const("zx", np.uint8(g.zx))]
    if form == "qdq":
        inits += [const("sx", g.sx), const("w", g.w), const("sw", g.sw), const("zw", np.zeros(g.C, np.int8)),
                  const("b", g.b.astype(np.int32)), const("sb", g.sb), const("zb", np.zeros(g.C, np.int32)),
                  const("sy", g.sy), const("zy", np.uint8(g.zy))]
        axis = 0 if g.kind == "Conv" else 1
        nodes += [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
                  helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=axis),
                  helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0),
                  helper.make_node(g.kind, ["xf", "wf", "bf" if g.dqb is not None else ""], ["yf"], **cattrs),
                  helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    else:
        variant, wt = (form.split("_") + ["s8"])[:2]
        if g.kind == "Gemm":
            inits += [const("w", g.w), const("zw", np.int8(0))]
            nodes.append(helper.make_node("MatMulInteger", ["x", "w", "zx", "zw"], ["acc"]))
        else:
            if wt == "u8":
                inits += [const("w", (g.w.astype(np.int16) + 128).astype(np.uint8)), const("zw", np.uint8(128))]
            else:
                inits += [const("w", g.w), const("zw", np.int8(0))]
            ca = {k: v for k, v in cattrs.items() if k in ("dilations", "group", "kernel_shape", "pads", "strides")}
            nodes.append(helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["acc"], **ca))
        if variant in ("c", "d"):
            dt = np.float64 if variant == "c" else np.float32
            M, B = c_consts(g, dt)
            to = TensorProto.DOUBLE if variant == "c" else TensorProto.FLOAT
            inits += [const("M", g.cshape(M)), const("B", g.cshape(B)), const("lo", dt(0)), const("hi", dt(255))]
            nodes += [helper.make_node("Cast", ["acc"], ["af"], to=to),
                      helper.make_node("Mul", ["af", "M"], ["am"]),
                      helper.make_node("Add", ["am", "B"], ["ab"]),
                      helper.make_node("Round", ["ab"], ["ar"]),
                      helper.make_node("Clip", ["ar", "lo", "hi"], ["ac"]),
                      helper.make_node("Cast", ["ac"], ["y"], to=TensorProto.UINT8)]
        elif variant == "clit":
            M, _ = c_consts(g, np.float64)
            inits += [const("bias", g.cshape(g.b.astype(np.int32))), const("M", g.cshape(M)),
                      const("zyd", np.float64(g.zy)), const("lo", np.float64(0)), const("hi", np.float64(255))]
            nodes += [helper.make_node("Add", ["acc", "bias"], ["ai"]),
                      helper.make_node("Cast", ["ai"], ["af"], to=TensorProto.DOUBLE),
                      helper.make_node("Mul", ["af", "M"], ["am"]),
                      helper.make_node("Round", ["am"], ["ar"]),
                      helper.make_node("Add", ["ar", "zyd"], ["az"]),
                      helper.make_node("Clip", ["az", "lo", "hi"], ["ac"]),
                      helper.make_node("Cast", ["ac"], ["y"], to=TensorProto.UINT8)]
        elif variant == "e":
            lo, hi, m, k, s = g.e
            inits += [const("elo", g.cshape(lo.astype(np.int32))), const("ehi", g.cshape(hi.astype(np.int32))),
                      const("m", g.cshape(m)), const("k", g.cshape(k)), const("d", np.int64(2 ** s))]
            nodes += [helper.make_node("Max", ["acc", "elo"], ["a1"]),
                      helper.make_node("Min", ["a1", "ehi"], ["a2"]),
                      helper.make_node("Cast", ["a2"], ["a3"], to=TensorProto.INT64),
                      helper.make_node("Mul", ["a3", "m"], ["a4"]),
                      helper.make_node("Add", ["a4", "k"], ["a5"]),
                      helper.make_node("Div", ["a5", "d"], ["a6"]),
                      helper.make_node("Cast", ["a6"], ["y"], to=TensorProto.UINT8)]
        else:
            raise ValueError(form)
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def session(model, level, disable_qdq=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = level
    if disable_qdq:
        so.add_session_config_entry("session.disable_quant_qdq", "1")
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


E_ALL, E_OFF = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def layer_sessions(g, xshape, conv_u8=True):
    qdq = build(g, xshape, "qdq")
    s = {"a_qdq": session(qdq, E_ALL, True), "a_off": session(qdq, E_OFF), "b": session(qdq, E_ALL)}
    forms = ["c", "clit", "d", "e"]
    for f in forms:
        s[f"{f}_s8"] = session(build(g, xshape, f"{f}_s8"), E_ALL)
        if g.kind == "Conv" and conv_u8:
            s[f"{f}_u8"] = session(build(g, xshape, f"{f}_u8"), E_ALL)
    return s


def time_sessions(sessions, feeds, runs, target=0.02):
    """Median seconds per inference, variants interleaved within each of `runs` rounds."""
    reps = {}
    f = feeds
    for k, s in sessions.items():
        s.run(None, f)
        t0 = time.perf_counter(); s.run(None, f); dt = time.perf_counter() - t0
        reps[k] = max(1, int(target / max(dt, 1e-6)))
    samples = {k: [] for k in sessions}
    for _ in range(runs):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for _ in range(reps[k]):
                s.run(None, f)
            samples[k].append((time.perf_counter() - t0) / reps[k])
    return {k: float(np.median(v)) for k, v in samples.items()}


# ---- verification -------------------------------------------------------------------------------
def per_channel(acc, g):
    """(channel index array, flat acc) for an accumulator tensor."""
    if g.kind == "Conv":
        ch = np.broadcast_to(np.arange(g.C).reshape(1, g.C, 1, 1), acc.shape)
    else:
        ch = np.broadcast_to(np.arange(g.C), acc.shape)
    return ch.ravel(), acc.ravel()


def verify(g, x, outs, rng):
    acc = g.accumulate(x)
    chs, flat = per_channel(acc, g)
    exact = np.empty_like(flat)
    for c in range(g.C):
        sel = chs == c
        exact[sel] = g.exact_codes(flat[sel], c)
    # fractions cross-check of the integer/float64 reference on a sample
    for i in rng.choice(flat.size, size=min(300, flat.size), replace=False):
        c = int(chs[i])
        v = int(flat[i]) * g.alpha[c] + g.beta[c]
        assert exact[i] == min(255, max(0, rne_fraction(v) + g.zy)), "reference disagrees with Fraction"
    rep = {"outputs": flat.size}
    for k, y in outs.items():
        rep[k] = int(np.count_nonzero(y.ravel().astype(np.int64) != exact))
    # b's differences must be those of ORT's kernel model
    kb = ort_kernel_model(flat, chs, g)
    rep["b_model_mismatch"] = int(np.count_nonzero(outs["b"].ravel().astype(np.int64) != kb))
    rep["b_model_vs_exact"] = int(np.count_nonzero(kb != exact))
    return rep


def prove_windows(g, budget):
    """c (double) and e over every reachable accumulator of each channel's unsaturated window
    (channels in order until `budget` accumulators have been checked)."""
    Md, Bd = c_consts(g, np.float64)
    lo, hi, m, k, s = g.e
    bad_c = bad_e = npts = 0
    for c in range(g.C):
        if npts > budget:
            return npts, bad_c, bad_e, c
        rl, rh = g.reach(c)
        a = np.arange(max(lo[c] - 1, rl), min(hi[c] + 1, rh) + 1, dtype=np.int64)
        npts += a.size
        ex = g.exact_codes(a, c)
        bad_c += int(np.count_nonzero(emulate_c(a, Md[c], Bd[c]) != ex))
        bad_e += int(np.count_nonzero(emulate_e(a, lo[c], hi[c], m[c], k[c], s) != ex))
    return npts, bad_c, bad_e, g.C


# ---- whole model ----------------------------------------------------------------------------------
def rewrite_model(model, groups, form):
    """Every group of `groups` replaced by `form` (c_u8, e_u8, ...) in a copy of the model."""
    m = onnx.ModelProto(); m.CopyFrom(model)
    g = m.graph
    drop = set()
    new_nodes, new_inits = {}, []
    users = {}
    for n in g.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    for gr in groups:
        sub = build(gr, None, form)
        pre = gr.name + "/" + form + "/"
        ren = lambda t: gr.x_name if t == "x" else gr.q.output[0] if t == "y" else pre + t
        nodes = []
        for n in sub.graph.node:
            nn = onnx.NodeProto(); nn.CopyFrom(n)
            nn.name = pre + n.op_type + str(len(nodes))
            del nn.input[:]; nn.input.extend(ren(t) for t in n.input)
            del nn.output[:]; nn.output.extend(ren(t) for t in n.output)
            nodes.append(nn)
        for t in sub.graph.initializer:
            tt = onnx.TensorProto(); tt.CopyFrom(t); tt.name = pre + t.name
            new_inits.append(tt)
        # nodes by their output name: gr's nodes belong to the original model, not this copy
        drop |= {gr.node.output[0], gr.dqw.output[0]} | ({gr.dqb.output[0]} if gr.dqb is not None else set())
        if users.get(gr.dqx.output[0], 0) == 1:
            drop.add(gr.dqx.output[0])
        new_nodes[gr.q.output[0]] = nodes
    out = []
    for n in g.node:
        if n.output[0] in new_nodes:
            out.extend(new_nodes[n.output[0]])
        elif n.output[0] not in drop:
            out.append(n)
    del g.node[:]; g.node.extend(out)
    g.initializer.extend(new_inits)
    onnx.checker.check_model(m)
    return m


def capture(model, groups, feed):
    """Activation codes entering each group, from one DISABLE_ALL run of the model."""
    m = onnx.ModelProto(); m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for gr in groups:
        if gr.x_name not in have:
            m.graph.output.append(helper.make_tensor_value_info(gr.x_name, TensorProto.UINT8, None))
            have.add(gr.x_name)
    s = session(m, E_OFF)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feed)))


def model_feed(model, shape, rng):
    feed = {}
    for i in model.graph.input:
        et = i.type.tensor_type.elem_type
        dd = i.type.tensor_type.shape.dim
        dims = [d.dim_value for d in dd] if all(d.dim_value for d in dd) else shape
        if "mask" in i.name:
            feed[i.name] = np.ones(dims, np.float32 if et == TensorProto.FLOAT else np.int64)
        elif et == TensorProto.FLOAT:
            feed[i.name] = rng.random(dims, dtype=np.float32)
        elif et == TensorProto.INT64:
            feed[i.name] = rng.integers(1000, 20000, dims).astype(np.int64)
        else:
            raise ValueError(f"input {i.name}: element type {et}")
    return feed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", default="1x3x320x320", help="shape of inputs with symbolic dimensions")
    ap.add_argument("--layers", default=None, help="comma-separated node names, or 'all' (default: a sample)")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--whole", action="store_true", help="also time the whole model with every group rewritten")
    ap.add_argument("--no-prove", action="store_true", help="skip the exhaustive window check")
    ap.add_argument("--prove-budget", type=float, default=3e7, help="accumulators per layer for it")
    args = ap.parse_args()
    rng = np.random.default_rng(9)
    model = onnx.load(args.model)
    shape = [int(v) for v in args.shape.split("x")]
    groups = []
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm"):
            try:
                groups.append(Group(model, n))
            except (ValueError, KeyError) as err:
                print(f"# skipped {n.name}: {err}", file=sys.stderr)
    feed = model_feed(model, shape, rng)
    acts = capture(model, groups, feed)
    if args.layers == "all":
        chosen = groups
    else:
        want = (args.layers or (DEFAULT_LAYERS if groups[0].kind == "Conv" else DEFAULT_GEMMS)).split(",")
        chosen = [gr for gr in groups if gr.name in want]
    print(f"# {args.model}: {len(groups)} groups, ORT {ort.__version__}, 1 thread, medians of {args.runs}")
    heads = ["a_qdq", "a_off", "b", "c", "c_lit", "d", "e", "c (s8 w)", "e (s8 w)"]
    print("| layer | shape | " + " | ".join(heads) + " | c/b | c/a_qdq | e/b | check |")
    print("|" + "---|" * (len(heads) + 6))
    for gr in chosen:
        gr.e = e_consts(gr)
        x = acts[gr.x_name]
        sess = layer_sessions(gr, x.shape)
        outs = {k: s.run(None, {"x": x})[0] for k, s in sess.items()}
        rep = verify(gr, x, outs, rng)
        check = f"{rep['outputs']} outputs; differ from exact: " + (", ".join(
            f"{k} {rep[k]}" for k in outs if rep[k]) or "none")
        check += f"; b = kernel model except {rep['b_model_mismatch']}"
        if not args.no_prove:
            npts, bad_c, bad_e, nch = prove_windows(gr, args.prove_budget)
            check += f"; windows of {nch}/{gr.C} channels, {npts} accs: c wrong {bad_c}, e wrong {bad_e}"
        if not gr.bias_scale_exact:
            check += "; sb != sx*sw"
        t = time_sessions(sess, {"x": x}, args.runs)
        tb = t["b"]
        w8 = "u8" if "c_u8" in t else "s8"  # ConvInteger: u8 weights; MatMulInteger: s8 weights
        cc, ee = "c_" + w8, "e_" + w8
        cols = ["a_qdq", "a_off", "b", cc, "clit_" + w8, "d_" + w8, ee] + (
            ["c_s8", "e_s8"] if w8 == "u8" else ["", ""])
        w = gr.w.shape
        desc = f"{list(x.shape)} w{list(w)} g{gr.attrs.get('group', 1)} s{gr.attrs.get('strides', [1])[0]}" \
            if gr.kind == "Conv" else f"{list(x.shape)} x {list(w)}"
        print(f"| {gr.name} | {desc} | " + " | ".join(
            f"{t[c] * 1e3:.3f}" if c in t else "—" for c in cols)
            + f" | {t[cc] / tb:.2f} | {t[cc] / t['a_qdq']:.2f} | {t[ee] / tb:.2f} | {check} |", flush=True)
    if args.whole:
        variants = {"b (ENABLE_ALL)": session(model, E_ALL),
                    "a_qdq (disable_quant_qdq)": session(model, E_ALL, True),
                    "a_off (DISABLE_ALL)": session(model, E_OFF)}
        for form in ("c_u8", "c_s8", "d_u8"):  # e: not for degenerate channels (|bias/scale| > 2^62)
            if groups[0].kind == "Gemm" and form.endswith("u8"):
                form = form[:-2] + "s8"
            variants[f"{form}, all {len(groups)} groups"] = session(rewrite_model(model, groups, form), E_ALL)
        t = time_sessions(variants, feed, args.runs, target=0.2)
        base = variants["b (ENABLE_ALL)"].run(None, feed)[0]
        print(f"\n| whole model ({args.shape if groups[0].kind == 'Conv' else 'model inputs'}) | ms | / b | max |out - b| |")
        print("|---|---|---|---|")
        for k, s in variants.items():
            o = s.run(None, feed)[0]
            print(f"| {k} | {t[k] * 1e3:.2f} | {t[k] / t['b (ENABLE_ALL)']:.2f} | "
                  f"{float(np.max(np.abs(o.astype(np.float64) - base))):.3g} |", flush=True)


if __name__ == "__main__":
    main()
