"""`qdqc compile --target rust` on published transformers (issue #13): MiniLM-L3 as shipped
(tests/oracle/real_corpus.py), quantized by quantize_static (u8 activations, s8 per-channel
weights), under `--contract exact` and `--contract real`:

* compiled with its inputs pinned as test_rust_real.py pins them; the generated crate builds
  (debug, `-D warnings`, the shared CARGO_TARGET_DIR of test_rust_real.py);
* its harness runs on N_FEEDS seeded feeds (the manifest's feed spec: token ids over the whole
  vocabulary, the additive mask); the output is compared with ONNX Runtime 1.31.1 ORT_DISABLE_ALL on
  the original model: same shape and dtype, every element finite, the max deviation printed;
* the bound is ORT's own: ORT_ENABLE_ALL (its fused kernels) on the same feeds deviates from
  ORT_DISABLE_ALL by up to a third of the output's magnitude on this model (printed). A quantized encoder
  amplifies one code's difference through every LayerNormalization that follows (one code of the
  normalized input is a large relative change where the row's variance is small), and the
  generated program differs from ORT_DISABLE_ALL where the contract lets it: under `real` each fused
  group is correctly rounded where ORT's float path rounds K times, under `exact` the float ops
  that stay float (Softmax, LayerNormalization, Tanh, Pow) are the kernel crate's fixed orders.
  The program may be no further from ORT_DISABLE_ALL than ORT_ENABLE_ALL is (max over the feeds,
  with MARGIN): a wrong kernel, layout or parameter moves the output by its own magnitude.

No float copy of a quantized constant is made (`groups.json`'s `float_copies` empty: the crate
keeps codes and its kernels decode them). Every fused group of the program, recomputed exactly from its own input codes, is checked by
test_rust_exact_groups.py (TRANSFORMERS).
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

import real_corpus
from oracle_util import REAL_CORPUS_DIR, ort_session
from test_rust_exact_groups import TRANSFORMERS
from test_rust_real import ENTRIES, build, fused, generate, pin, work

CONTRACTS = ["exact", "real"]
N_FEEDS = 4
MARGIN = 1.25


def deviation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("name", TRANSFORMERS)
def test_generated_crate_against_onnx_runtime(name, contract):
    entry = ENTRIES[name]
    label = f"{name}_{contract}"
    tmp = work(label)
    crate = tmp / "crate"
    r, report = generate(pin(entry, tmp, label), crate, contract)
    assert r.returncode == 0, f"{name} --contract {contract}: {r.stderr.strip()}"
    copies = json.loads((crate / "groups.json").read_text())["float_copies"]
    assert not copies, f"{name} {contract}: float copies of quantized constants: {copies}"
    harness = build(crate)
    original = REAL_CORPUS_DIR / entry["file"]
    plain = ort_session(original, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    fast = ort_session(original, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    names = [o.name for o in plain.get_outputs()]
    rust_dev, ort_dev, scale, same = 0.0, 0.0, 0.0, []
    for k, feed in enumerate(real_corpus.feeds(entry["inputs"], real_corpus.name_seed(name), N_FEEDS)):
        inputs, outputs = tmp / f"in{k}.npz", tmp / f"out{k}.npz"
        np.savez(inputs, **feed)
        h = subprocess.run([str(harness), str(inputs), str(outputs)], capture_output=True, text=True)
        assert h.returncode == 0, f"{name}: harness failed: {h.stderr}"
        got = dict(np.load(outputs))
        for o, want, ort_fast in zip(names, plain.run(None, feed), fast.run(None, feed)):
            assert o in got, f"{name}: the harness wrote no output '{o}'"
            b = got[o]
            assert b.shape == want.shape and b.dtype == want.dtype, f"{name}: {o}: ORT {want.dtype}{list(want.shape)} vs Rust {b.dtype}{list(b.shape)}"
            assert np.all(np.isfinite(b)), f"{name}: {o}: non-finite elements"
            rust_dev, ort_dev = max(rust_dev, deviation(b, want)), max(ort_dev, deviation(ort_fast, want))
            scale = max(scale, float(np.max(np.abs(want))))
            same.append(float(np.mean(b == want)))
    print(f"{name} {contract}: {fused(report)} groups fused; max deviation from ORT_DISABLE_ALL over {N_FEEDS} feeds: "
          f"Rust {rust_dev:.3g}, ORT_ENABLE_ALL {ort_dev:.3g} (output max |v| {scale:.3g}); elements identical per feed: "
          f"{', '.join(f'{s:.0%}' for s in same)}")
    assert rust_dev <= MARGIN * ort_dev, f"{name} {contract}: deviation {rust_dev} beyond {MARGIN} x ORT_ENABLE_ALL's own {ort_dev}"
    assert ort_dev < scale, "ORT_ENABLE_ALL's own deviation is the output's magnitude: the bound would say nothing"
