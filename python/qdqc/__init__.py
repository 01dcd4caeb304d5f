"""qdqc: a compiler for quantized (QDQ) ONNX models whose fusions fire only when proven
rounding-exact for the model's concrete scales, zero points and weights.

    import qdqc
    model, report = qdqc.compile("model.onnx")                  # onnx.ModelProto, dict
    session = onnxruntime.InferenceSession(model.SerializeToString(), qdqc.session_options(report))

Every function accepts a model as a path, as the bytes of a model, or as an ``onnx.ModelProto``
(external data included). Errors raise :class:`QdqcError` subclasses whose message is the one line
the ``qdqc`` command prints.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional, Tuple, Union

from . import _qdqc
from ._qdqc import BadInputError, CompileError, QdqcError, QdqcIOError

if TYPE_CHECKING:
    import onnx
    import onnxruntime

__all__ = [
    "BadInputError",
    "CompileError",
    "QdqcError",
    "QdqcIOError",
    "audit",
    "compile",
    "compile_rust",
    "host",
    "inspect",
    "placement",
    "session_options",
]

#: A model: a path to an ``.onnx`` file, its bytes, or an ``onnx.ModelProto``.
ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, "onnx.ModelProto"]

#: ONNX's protobuf limit: a larger ModelProto is written with its tensors as external data.
_PROTOBUF_LIMIT = 2**31 - 1


class _Sources:
    """A temporary folder for the models given as bytes or ``ModelProto``: each is written there
    (qdqc reads files, external data memory-mapped), and an error naming such a copy names what
    the caller passed instead."""

    def __enter__(self) -> "_Sources":
        self._tmp = tempfile.TemporaryDirectory(prefix="qdqc-")
        self.folder = self._tmp.name
        self._labels: Dict[str, str] = {}
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        self._tmp.cleanup()
        if isinstance(error, QdqcError):
            message = str(error)
            for path, label in self._labels.items():
                message = message.replace(path, label)
            if message != str(error):
                raise type(error)(message) from None

    def path(self, model: ModelLike, name: str = "model.onnx") -> str:
        """A file holding ``model``: the path itself, or a copy written into the folder."""
        if isinstance(model, (str, os.PathLike)):
            return os.fspath(model)
        path = os.path.join(self.folder, name)
        if isinstance(model, (bytes, bytearray, memoryview)):
            with open(path, "wb") as f:
                f.write(model)
            self._labels[path] = "<model bytes>"
            return path
        import onnx

        if isinstance(model, onnx.ModelProto):
            if model.ByteSize() <= _PROTOBUF_LIMIT:
                with open(path, "wb") as f:
                    f.write(model.SerializeToString())
            else:
                onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=name + ".data")
            self._labels[path] = "<onnx.ModelProto>"
            return path
        raise TypeError(f"a model is a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def compile(
    model: ModelLike,
    contract: str = "exact",
    ort_isa: Optional[str] = None,
    allow: Iterable[str] = (),
    *,
    output: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Tuple["onnx.ModelProto", Dict[str, Any]]:
    """Compiles ``model`` for ONNX Runtime: every QDQ group whose fusion is proven under
    ``contract`` ("exact" by default, or "real") on every ISA profile of ``ort_isa`` (ONNX Runtime's
    kernels per CPU: "x86-avx2", "x86-avx512vnni", "host", "all", ...; default all) is fused;
    ``allow`` names lossy rewrites to permit ("matmulnbits=acc4", "ort-float-fusions").

    Returns the compiled model and the report (``qdqc compile --report``'s JSON as a dict). With
    ``output``, the model is written there (external data beside it) and returned without its
    external data loaded, so a 2 GiB+ model never enters Python's memory; without, it is compiled
    in a temporary folder and returned whole. ``report`` also writes the report's JSON to a file.

    Raises :class:`BadInputError` (malformed or unsupported model), :class:`CompileError`,
    :class:`QdqcIOError`; no file is written when it raises.
    """
    import onnx

    with _Sources() as sources:
        source = sources.path(model)
        target = os.fspath(output) if output is not None else os.path.join(sources.folder, "compiled.onnx")
        text = _qdqc.compile(source, target, contract, ort_isa, list(allow), None if report is None else os.fspath(report))
        compiled = onnx.load(target, load_external_data=output is None)
    return compiled, json.loads(text)


def compile_rust(
    model: ModelLike,
    output: Union[str, "os.PathLike[str]"],
    contract: str = "exact",
    *,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Generates the Rust crate of ``model`` into the folder ``output`` (``qdqc compile --target
    rust``): integer kernels for the groups proven under ``contract``; returns the report."""
    with _Sources() as sources:
        text = _qdqc.compile_rust(sources.path(model), os.fspath(output), contract, None if report is None else os.fspath(report))
    return json.loads(text)


def audit(
    model: ModelLike,
    ort_isa: str = "all",
    contract: Optional[str] = None,
    *,
    dot: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Every group ONNX Runtime's own optimizer would fuse in ``model``, with its verdict per ISA
    profile (exact, refuted with a counterexample, unknown with the reason) under ``contract``
    (both when None), and the model's hazards — ``qdqc audit --json``. With ``dot``, also writes
    the Graphviz picture of the graph with every group boxed and coloured by verdict."""
    with _Sources() as sources:
        text = _qdqc.audit(sources.path(model), ort_isa, contract, None if dot is None else os.fspath(dot))
    return json.loads(text)


def inspect(model: ModelLike, *, dot: Optional[Union[str, "os.PathLike[str]"]] = None) -> Dict[str, Any]:
    """Op counts, Q/DQ counts and every QDQ group with its quantization parameters — ``qdqc
    inspect --json``; ``dot`` also writes the picture."""
    with _Sources() as sources:
        text = _qdqc.inspect(sources.path(model), None if dot is None else os.fspath(dot))
    return json.loads(text)


def placement(a: ModelLike, b: ModelLike) -> Dict[str, Any]:
    """The quantization boundaries (DQ-fed consumer inputs) two models share and where they
    differ — ``qdqc placement --json``."""
    with _Sources() as sources:
        text = _qdqc.placement(sources.path(a, "a.onnx"), sources.path(b, "b.onnx"))
    return json.loads(text)


def host() -> str:
    """The ISA profile whose kernels ONNX Runtime runs on this machine (``qdqc host``)."""
    return _qdqc.host()


def session_options(report: Dict[str, Any], graph_optimization_level: str = "ORT_ENABLE_ALL") -> "onnxruntime.SessionOptions":
    """The ``onnxruntime.SessionOptions`` under which the compiled model keeps its guarantee: the
    report's session profile (QDQ re-fusion off, the float passes that change bits off) applied,
    at ``graph_optimization_level`` — any level is safe with those entries; ORT_ENABLE_ALL, the
    fastest, by default. This is the line a user would otherwise copy by hand from the report."""
    import onnxruntime as ort

    profile = report["session_profile"]
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, graph_optimization_level)
    for key, value in profile["config"]:
        options.add_session_config_entry(key, value)
    return options
