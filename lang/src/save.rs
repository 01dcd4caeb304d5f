//! Writing a model: external data and the model, staged as one transaction (`outputs.rs`), so a
//! failure never leaves a partial file.

use crate::error::{Error, Result};
use crate::load::{Model, walk_tensors};
use crate::onnx::{ModelProto, StringStringEntryProto, TensorProto, tensor_proto::DataLocation};
use crate::outputs::{Outputs, folder};
use crate::tensor::Payload;
use prost::Message;
use std::path::{Path, PathBuf};

/// Protobuf cannot encode a message of 2 GiB or more.
pub const PROTOBUF_LIMIT: u64 = (1 << 31) - 1;
/// Tensors smaller than this stay inline even when a model has to spill to external data.
const SPILL_MIN_BYTES: usize = 1024;

pub struct SaveOptions {
    /// Largest serialized model allowed before tensors spill to external data.
    pub proto_limit: u64,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { proto_limit: PROTOBUF_LIMIT }
    }
}

/// What a save wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    pub model_bytes: u64,
    /// Name (relative to the model's folder) and size of the external data file, when one is written.
    pub external: Option<(String, u64)>,
}

/// Stages `proto` for `out` in `outputs` (written when the caller commits them). Tensors external
/// in `source` stay external, and if the model would exceed `proto_limit` every raw tensor of at
/// least 1 KiB moves out too. All external tensors go, in model order, to one file
/// `<out file name>.data` beside `out`, so the same model always gives the same bytes; it is
/// staged before the model, so it is in place before the model that reads it.
pub fn save(mut proto: ModelProto, source: &Model, out: &Path, options: &SaveOptions, outputs: &mut Outputs) -> Result<Saved> {
    let location = format!("{}.data", file_name(out)?);
    let spill = proto.encoded_len() as u64 > options.proto_limit;

    // Shared handles into the source's payloads (mapped external data is never copied).
    let mut data = Data::default();
    let mut problem = None;
    walk_tensors(&mut proto, &mut |t| {
        if problem.is_none()
            && let Err(p) = externalize(t, source, spill, &location, &mut data)
        {
            problem = Some(p);
        }
    });
    if let Some(p) = problem {
        return Err(Error::compile(out, p));
    }
    let encoded = proto.encode_to_vec();
    if encoded.len() as u64 > PROTOBUF_LIMIT {
        return Err(Error::compile(out, format!("model is {} bytes, over protobuf's 2 GiB limit", encoded.len())));
    }

    let external = if data.len == 0 && !source.has_external_data() {
        None
    } else {
        outputs.stage_parts(&folder(out).join(&location), &data.parts)?;
        Some((location, data.len))
    };
    outputs.stage(out, &encoded)?;
    Ok(Saved { model_bytes: encoded.len() as u64, external })
}

/// The external data file a model saved to `out` may write: `<out>.data` beside it.
pub fn data_path(out: &Path) -> Result<PathBuf> {
    Ok(folder(out).join(format!("{}.data", file_name(out)?)))
}

fn file_name(out: &Path) -> Result<String> {
    Ok(out.file_name().ok_or_else(|| Error::compile(out, "output path has no file name"))?.to_string_lossy().into_owned())
}

/// Moves `t`'s bytes to the external buffer when it is external in the source or must spill.
/// The external data file being assembled: its parts in order and its length.
#[derive(Default)]
struct Data {
    parts: Vec<bytes::Bytes>,
    len: u64,
}

fn externalize(t: &mut TensorProto, source: &Model, spill: bool, location: &str, data: &mut Data) -> Result<(), String> {
    let was_external = t.data_location == Some(DataLocation::External as i32);
    let spills = spill && t.raw_data.as_ref().is_some_and(|r| r.len() >= SPILL_MIN_BYTES);
    if !was_external && !spills {
        return Ok(());
    }
    let bytes = match source.payload(t)? {
        Payload::Raw(b) => b,
        Payload::Typed(_) => return Err(format!("tensor '{}' has no raw bytes to move", crate::tensor::name(t))),
    };
    let offset = data.len;
    data.len += bytes.len() as u64;
    let entry = |k: &str, v: String| StringStringEntryProto { key: Some(k.into()), value: Some(v) };
    t.external_data = vec![entry("location", location.to_string()), entry("offset", offset.to_string()), entry("length", bytes.len().to_string())];
    data.parts.push(bytes);
    t.data_location = Some(DataLocation::External as i32);
    t.raw_data = None;
    Ok(())
}

/// Writes `bytes` to a temporary file in `path`'s folder, then renames it to `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut outputs = Outputs::default();
    outputs.stage(path, bytes)?;
    outputs.commit()
}
