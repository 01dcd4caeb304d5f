//! One error type for the whole pipeline: it names the file, the node and the problem in one line.

use std::fmt;
use std::path::{Path, PathBuf};

/// What went wrong, which decides the CLI's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input model is malformed or unsupported (exit code 2).
    BadInput,
    /// The model is valid but qdqc could not compile it (exit code 1).
    Compile,
    /// Reading or writing a file failed (exit code 1 for output, 2 for input).
    Io,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub file: PathBuf,
    /// `node 'name' (OpType)`, with the enclosing subgraph path when inside one.
    pub node: Option<String>,
    pub problem: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn bad_input(file: &Path, problem: impl Into<String>) -> Self {
        Error { kind: ErrorKind::BadInput, file: file.to_path_buf(), node: None, problem: problem.into() }
    }

    pub fn compile(file: &Path, problem: impl Into<String>) -> Self {
        Error { kind: ErrorKind::Compile, file: file.to_path_buf(), node: None, problem: problem.into() }
    }

    pub fn io(file: &Path, err: &std::io::Error) -> Self {
        Error { kind: ErrorKind::Io, file: file.to_path_buf(), node: None, problem: err.to_string() }
    }

    /// Attaches the node the problem is about.
    pub fn at(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(node) = &self.node {
            write!(f, "{node}: ")?;
        }
        // Keep the error on one line whatever the problem text holds.
        write!(f, "{}", self.problem.replace('\n', " "))
    }
}

impl std::error::Error for Error {}
