//! `qdqc._qdqc`: the Rust side of the Python package (`python/qdqc/__init__.py` is the API users
//! call). Every function takes paths — the Python side writes bytes and `ModelProto`s to a
//! temporary folder first, so a model's external data is read by qdqc's loader (memory-mapped),
//! never through Python — releases the GIL while qdqc works, and returns JSON text. Errors become
//! the package's `QdqcError` subclasses carrying the CLI's one-line message.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use qdqc::{CompileOptions, Contract, Error, ErrorKind, OrtTarget, RustTarget, Target};
use std::path::PathBuf;

create_exception!(_qdqc, QdqcError, PyException, "Every error qdqc reports: a one-line message naming the file, node and problem.");
create_exception!(_qdqc, BadInputError, QdqcError, "The model (or an argument naming a file) is malformed or unsupported; nothing was written.");
create_exception!(_qdqc, CompileError, QdqcError, "The model is valid but could not be compiled; nothing was written.");
create_exception!(_qdqc, QdqcIOError, QdqcError, "Reading or writing a file failed; nothing was written.");

fn raise(e: Error) -> PyErr {
    let message = e.to_string();
    match e.kind {
        ErrorKind::BadInput => BadInputError::new_err(message),
        ErrorKind::Compile => CompileError::new_err(message),
        ErrorKind::Io => QdqcIOError::new_err(message),
    }
}

fn contract(name: &str) -> PyResult<Contract> {
    match name {
        "exact" => Ok(Contract::Exact),
        "real" => Ok(Contract::Real),
        other => Err(PyValueError::new_err(format!("unknown contract '{other}' (exact or real)"))),
    }
}

fn ort_target(isa: Option<&str>) -> PyResult<OrtTarget> {
    isa.map_or(Ok(OrtTarget::default()), |s| OrtTarget::parse(s).map_err(PyValueError::new_err))
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("qdqc's reports serialize")
}

/// Compiles `input` for ONNX Runtime into `output` (external data beside it when the model has
/// any); returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (input, output, contract="exact", ort_isa=None, allow=Vec::new(), report=None))]
fn compile(
    py: Python<'_>,
    input: PathBuf,
    output: PathBuf,
    contract: &str,
    ort_isa: Option<&str>,
    allow: Vec<String>,
    report: Option<PathBuf>,
) -> PyResult<String> {
    let options = CompileOptions {
        contract: self::contract(contract)?,
        target: ort_target(ort_isa)?.into(),
        allow: qdqc::allow(&allow).map_err(PyValueError::new_err)?,
        ..CompileOptions::default()
    };
    let result = py.detach(|| qdqc::compile_with_report(&input, &output, report.as_deref(), &options));
    result.map(|r| json(&r)).map_err(raise)
}

/// Generates the Rust crate of `input` into the folder `output`; returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (input, output, contract="exact", report=None))]
fn compile_rust(py: Python<'_>, input: PathBuf, output: PathBuf, contract: &str, report: Option<PathBuf>) -> PyResult<String> {
    let options = CompileOptions { contract: self::contract(contract)?, target: Target::from(RustTarget::generic()), ..CompileOptions::default() };
    let result = py.detach(|| qdqc::compile_rust(&input, &output, report.as_deref(), &options));
    result.map(|r| json(&r)).map_err(raise)
}

/// ONNX Runtime's fusions of `input`, proven or refuted per ISA profile, as JSON; with `dot`,
/// also writes the Graphviz picture there.
#[pyfunction]
#[pyo3(signature = (input, ort_isa="all", contract=None, dot=None))]
fn audit(py: Python<'_>, input: PathBuf, ort_isa: &str, contract: Option<&str>, dot: Option<PathBuf>) -> PyResult<String> {
    let target = ort_target(Some(ort_isa))?;
    let contracts = match contract {
        Some(c) => vec![self::contract(c)?],
        None => vec![Contract::Exact, Contract::Real],
    };
    let result = py.detach(|| {
        let audit = qdqc::audit(&input, &target, &contracts)?;
        if let Some(path) = &dot {
            qdqc::write_atomically(path, qdqc::audit_dot(&input, &audit)?.as_bytes())?;
        }
        Ok(json(&audit))
    });
    result.map_err(raise)
}

/// Op counts, Q/DQ counts and QDQ groups of `input`, as JSON; with `dot`, also the picture.
#[pyfunction]
#[pyo3(signature = (input, dot=None))]
fn inspect(py: Python<'_>, input: PathBuf, dot: Option<PathBuf>) -> PyResult<String> {
    let result = py.detach(|| {
        let inspection = qdqc::inspect(&input)?;
        if let Some(path) = &dot {
            qdqc::write_atomically(path, qdqc::inspect_dot(&input, &inspection)?.as_bytes())?;
        }
        Ok(json(&inspection))
    });
    result.map_err(raise)
}

/// The quantization boundaries two models share and where they differ, as JSON.
#[pyfunction]
fn placement(py: Python<'_>, a: PathBuf, b: PathBuf) -> PyResult<String> {
    py.detach(|| qdqc::placement(&a, &b).map(|p| json(&p))).map_err(raise)
}

/// The ISA profile whose kernels ONNX Runtime runs on this machine (`qdqc host`).
#[pyfunction]
fn host() -> PyResult<String> {
    qdqc::Isa::host().map(|i| i.to_string()).map_err(QdqcError::new_err)
}

/// Runs the command line (`python -m qdqc ARGS`); returns its exit code.
#[pyfunction]
fn cli(py: Python<'_>, args: Vec<String>) -> i32 {
    let argv = std::iter::once("qdqc".to_string()).chain(args).map(Into::into).collect::<Vec<std::ffi::OsString>>();
    py.detach(|| qdqc::cli::main(argv))
}

#[pymodule]
fn _qdqc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("QdqcError", py.get_type::<QdqcError>())?;
    m.add("BadInputError", py.get_type::<BadInputError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("QdqcIOError", py.get_type::<QdqcIOError>())?;
    for f in [
        wrap_pyfunction!(compile, m)?,
        wrap_pyfunction!(compile_rust, m)?,
        wrap_pyfunction!(audit, m)?,
        wrap_pyfunction!(inspect, m)?,
        wrap_pyfunction!(placement, m)?,
        wrap_pyfunction!(host, m)?,
        wrap_pyfunction!(cli, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
