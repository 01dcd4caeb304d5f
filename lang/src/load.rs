//! Loading a model: mmap, protobuf decode, external data resolution, tensor payload checks.

use crate::analysis::Dim;
use crate::error::{Error, Result};
use crate::onnx::{self, ModelProto, TensorProto, tensor_proto::DataLocation};
use crate::tensor::{self, Payload};
use crate::{ir, opset, shapes};
use bytes::Bytes;
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

/// A loaded, validated model. External data files stay mapped for the model's lifetime.
///
/// Cloning is cheap where the data is large: tensor bytes (embedded `raw_data` and mapped
/// external files) are shared, reference-counted.
#[derive(Clone)]
pub struct Model {
    pub path: PathBuf,
    pub proto: ModelProto,
    /// The validated graph structure of `proto.graph`, with its subgraphs.
    pub graph: ir::Graph,
    /// Shapes of the main graph's values, declared or inferred ([`shapes::infer`]); a value
    /// absent from the map has an unknown shape.
    pub shapes: HashMap<String, Vec<Dim>>,
    /// External data files by their `location`, mapped once.
    external: BTreeMap<String, Bytes>,
}

impl Model {
    /// Reads, decodes and validates `path`. Every problem is a [`ErrorKind::BadInput`] error
    /// naming the file (and the node, when there is one).
    ///
    /// [`ErrorKind::BadInput`]: crate::ErrorKind::BadInput
    pub fn load(path: &Path) -> Result<Model> {
        let bytes = map_file(path, "an ONNX model")?;
        if bytes.is_empty() {
            return Err(Error::bad_input(path, "empty file, not an ONNX model"));
        }
        let mut proto =
            ModelProto::decode(bytes).map_err(|e| Error::bad_input(path, format!("not an ONNX model (protobuf decoding failed: {})", decode_reason(&e))))?;
        check_header(&proto).map_err(|p| Error::bad_input(path, p))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let external = map_external(&mut proto, &dir).map_err(|p| Error::bad_input(path, p))?;
        let mut model = Model { path: path.to_path_buf(), proto, graph: ir::Graph::default(), shapes: HashMap::new(), external };
        model.check_tensors()?;
        model.graph = ir::Graph::build_main(&model)?;
        // Inference reads the validated graph: payloads checked, producers known, no cycle.
        model.shapes = shapes::infer(&model);
        Ok(model)
    }

    /// The main graph's protobuf. Loading refuses a model without one (`check_header`), so the
    /// accessor cannot fail on a loaded model.
    pub fn main_graph(&self) -> &onnx::GraphProto {
        self.proto.graph.as_ref().expect("checked at load: a model has a main graph")
    }

    /// The main graph's protobuf, for a pass that edits it in place (then [`Model::rebuild`]).
    pub fn main_graph_mut(&mut self) -> &mut onnx::GraphProto {
        self.proto.graph.as_mut().expect("checked at load: a model has a main graph")
    }

    /// Re-validates the graph and re-infers shapes after a pass edited `proto` in place.
    pub fn rebuild(&mut self) -> Result<()> {
        self.check_tensors()?;
        self.graph = ir::Graph::build_main(self)?;
        self.shapes = shapes::infer(self);
        Ok(())
    }

    /// Where the elements of `t` are, external data resolved.
    pub fn payload<'a>(&self, t: &'a TensorProto) -> Result<Payload<'a>, String> {
        if t.data_location == Some(DataLocation::External as i32) {
            let ext = ExternalRef::parse(t)?;
            let file = &self.external[&ext.location];
            let end = ext.offset + ext.length.unwrap_or(file.len() as u64 - ext.offset);
            return Ok(Payload::Raw(file.slice(ext.offset as usize..end as usize)));
        }
        Ok(match &t.raw_data {
            Some(raw) => Payload::Raw(raw.clone()),
            None => Payload::Typed(t),
        })
    }

    /// The external data files the model reads, as paths.
    pub fn external_files(&self) -> Vec<PathBuf> {
        let dir = crate::outputs::folder(&self.path);
        self.external.keys().map(|location| dir.join(location)).collect()
    }

    /// Bytes of the external data files the model reads.
    pub fn external_bytes(&self) -> u64 {
        self.external.values().map(|b| b.len() as u64).sum()
    }

    /// Whether any tensor of the model keeps its data in an external file.
    pub fn has_external_data(&self) -> bool {
        !self.external.is_empty()
    }

    fn check_tensors(&mut self) -> Result<()> {
        let mut proto = std::mem::take(&mut self.proto);
        let mut result = Ok(());
        walk_tensors(&mut proto, &mut |t| {
            if result.is_ok() {
                result = tensor::data_type(t).and_then(|dt| if dt == onnx::DataType::String { Ok(()) } else { self.check_one(t, dt) });
            }
        });
        self.proto = proto;
        result.map_err(|p| Error::bad_input(&self.path, p))
    }

    fn check_one(&self, t: &TensorProto, dt: onnx::DataType) -> Result<(), String> {
        tensor::check_payload(t, dt, &self.payload(t)?)
    }
}

/// Maps `path`, which must be a regular file (`what` it should be, for the message): a FIFO would
/// block the open until a writer comes, a device never ends, a directory is not data.
fn map_file(path: &Path, what: &str) -> Result<Bytes> {
    let unreadable = |e: std::io::Error| Error::bad_input(path, format!("cannot read: {e}"));
    let kind = std::fs::metadata(path).map_err(unreadable)?.file_type();
    if !kind.is_file() {
        return Err(Error::bad_input(path, format!("is {}, not {what}", file_kind(kind))));
    }
    let file = File::open(path).map_err(unreadable)?;
    // SAFETY: the mapping is read-only; qdqc never writes to its inputs. A concurrent external
    // writer could change the bytes under us, which is the usual contract of mmap-based loaders.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(unreadable)?;
    Ok(Bytes::from_owner(map))
}

/// prost's decode error names every message on the path to the fault ("ModelProto.graph:
/// GraphProto.node: NodeProto.attribute: …"), kilobytes of it for a deeply nested model: the
/// reason and the depth of the path.
fn decode_reason(e: &prost::DecodeError) -> String {
    let text = e.to_string();
    let parts: Vec<&str> = text.split(": ").collect();
    match parts.as_slice() {
        [_, path @ .., reason] if path.len() > 2 => format!("{reason}, {} fields deep", path.len()),
        [_, rest @ ..] if !rest.is_empty() => rest.join(": "),
        _ => text,
    }
}

/// What a path that is not a regular file is, in words.
fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_dir() { "a directory" } else { "something other than a regular file" }
}

fn check_header(proto: &ModelProto) -> Result<(), String> {
    let ir = proto.ir_version.ok_or("model has no ir_version")?;
    if !(1..=onnx::MAX_IR_VERSION).contains(&ir) {
        return Err(format!("unsupported IR version {ir} (qdqc's schema knows 1 to {}; newer fields would be lost)", onnx::MAX_IR_VERSION));
    }
    if proto.graph.is_none() {
        return Err("model has no graph".into());
    }
    opset::check_imports(proto)
}

/// The `external_data` entries of one tensor.
pub struct ExternalRef {
    pub location: String,
    pub offset: u64,
    pub length: Option<u64>,
}

impl ExternalRef {
    pub fn parse(t: &TensorProto) -> Result<Self, String> {
        let name = tensor::name(t);
        let mut location = None;
        let (mut offset, mut length) = (0, None);
        for entry in &t.external_data {
            let value = entry.value.as_deref().unwrap_or("");
            let number = || value.parse::<u64>().map_err(|_| format!("tensor '{name}': external data field has bad number {value:?}"));
            match entry.key.as_deref().unwrap_or("") {
                "location" => location = Some(value.to_string()),
                "offset" => offset = number()?,
                "length" => length = Some(number()?),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| format!("tensor '{name}' is external but names no location"))?;
        Ok(ExternalRef { location, offset, length })
    }
}

/// Maps every external data file once, refusing locations that escape the model's folder.
fn map_external(proto: &mut ModelProto, dir: &Path) -> Result<BTreeMap<String, Bytes>, String> {
    let mut files = BTreeMap::new();
    let mut result = Ok(());
    walk_tensors(proto, &mut |t| {
        if result.is_ok() && t.data_location == Some(DataLocation::External as i32) {
            result = map_one(t, dir, &mut files);
        }
    });
    result.map(|()| files)
}

fn map_one(t: &TensorProto, dir: &Path, files: &mut BTreeMap<String, Bytes>) -> Result<(), String> {
    let ext = ExternalRef::parse(t)?;
    let name = tensor::name(t);
    if !files.contains_key(&ext.location) {
        let path = confined(dir, &ext.location).map_err(|why| format!("tensor '{name}': external data location {:?} {why}", ext.location))?;
        let bytes = map_file(&path, "an external data file").map_err(|e| format!("tensor '{name}': external data: {}", e.problem))?;
        files.insert(ext.location.clone(), bytes);
    }
    let len = files[&ext.location].len() as u64;
    let end = ext.length.map_or(Some(len), |l| ext.offset.checked_add(l));
    match end {
        Some(end) if ext.offset <= len && end <= len => Ok(()),
        _ => {
            let length = ext.length.map_or("to the end".to_string(), |l| format!("length {l}"));
            Err(format!("tensor '{name}': external data range offset {} {length} exceeds '{}' ({len} bytes)", ext.offset, ext.location))
        }
    }
}

/// Resolves `location` inside `dir`: relative, no `..`, and no symlink leading out of `dir`.
fn confined(dir: &Path, location: &str) -> Result<PathBuf, &'static str> {
    let rel = Path::new(location);
    if location.is_empty() {
        return Err("is empty");
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err("escapes the model's folder (absolute or '..')");
    }
    let base = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let base = base.canonicalize().map_err(|_| "cannot resolve the model's folder")?;
    let full = base.join(rel).canonicalize().map_err(|_| "does not exist")?;
    if !full.starts_with(&base) {
        return Err("escapes the model's folder through a symbolic link");
    }
    Ok(full)
}

/// Visits every tensor a model holds: initializers, sparse initializers, Constant-style tensor
/// attributes, in the main graph, every subgraph, model-local functions and training graphs.
pub fn walk_tensors(model: &mut ModelProto, f: &mut dyn FnMut(&mut TensorProto)) {
    if let Some(g) = model.graph.as_mut() {
        walk_graph(g, f);
    }
    for func in &mut model.functions {
        for node in &mut func.node {
            walk_attrs(node, f);
        }
    }
    for info in &mut model.training_info {
        for g in [info.initialization.as_mut(), info.algorithm.as_mut()].into_iter().flatten() {
            walk_graph(g, f);
        }
    }
}

fn walk_graph(g: &mut onnx::GraphProto, f: &mut dyn FnMut(&mut TensorProto)) {
    g.initializer.iter_mut().for_each(&mut *f);
    for sparse in &mut g.sparse_initializer {
        sparse.values.iter_mut().chain(sparse.indices.iter_mut()).for_each(&mut *f);
    }
    for node in &mut g.node {
        walk_attrs(node, f);
    }
}

fn walk_attrs(node: &mut onnx::NodeProto, f: &mut dyn FnMut(&mut TensorProto)) {
    for attr in &mut node.attribute {
        attr.t.iter_mut().chain(attr.tensors.iter_mut()).for_each(&mut *f);
        for sparse in attr.sparse_tensor.iter_mut().chain(attr.sparse_tensors.iter_mut()) {
            sparse.values.iter_mut().chain(sparse.indices.iter_mut()).for_each(&mut *f);
        }
        for g in attr.g.iter_mut().chain(attr.graphs.iter_mut()) {
            walk_graph(g, f);
        }
    }
}
