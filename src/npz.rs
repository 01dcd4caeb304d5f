//! `--inputs FILE.npz`: the arrays `numpy.savez` (or `savez_compressed`) writes, read as f32
//! activations keyed by tensor name. Other element types and Fortran order are refused with the
//! reason. An archive inflates to at most [`MAX_BYTES`]: the bound is checked on each entry's
//! declared size and on each array's shape before anything is inflated, and every read is capped,
//! so a zip bomb costs nothing. (Activations have dynamic dims, so the model's declared shapes
//! cannot bound them.)

use npyz::{DType, NpyFile, Order};
use qdqc_lang::{Error, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// The most an `--inputs` archive may inflate to: 1 GiB, 2^28 f32 values.
pub const MAX_BYTES: u64 = 1 << 30;

pub fn read(path: &Path) -> Result<BTreeMap<String, Vec<f32>>> {
    let file = File::open(path).map_err(|e| Error::bad_input(path, format!("cannot read the inputs archive: {e}")))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(file)).map_err(|e| Error::bad_input(path, format!("not an .npz archive (zip: {e})")))?;
    arrays(&mut zip).map_err(|p| Error::bad_input(path, p))
}

fn arrays(zip: &mut zip::ZipArchive<BufReader<File>>) -> Result<BTreeMap<String, Vec<f32>>, String> {
    let f32_le: DType = DType::Plain("<f4".parse().expect("a valid numpy type string"));
    let mut out = BTreeMap::new();
    let mut left = MAX_BYTES;
    let over = |name: &str, bytes: u64| format!("array '{name}': {bytes} bytes inflated, over the {MAX_BYTES}-byte bound of --inputs");
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| format!("entry {i}: {e}"))?;
        let name = entry.name().to_string();
        let Some(key) = npyz::npz::array_name_from_file_name(&name).map(str::to_string) else { continue };
        if entry.size() > left {
            return Err(over(&name, entry.size()));
        }
        // The declared size may lie: the stream is cut at the bound whatever it claims.
        let npy = NpyFile::new(entry.take(left)).map_err(|e| format!("array '{name}': not an .npy array ({e})"))?;
        if npy.dtype() != f32_le {
            return Err(format!("array '{name}': element type is not float32 ({})", npy.dtype().descr()));
        }
        let bytes = npy.shape().iter().try_fold(4u64, |acc, &d| acc.checked_mul(d)).unwrap_or(u64::MAX);
        if bytes > left {
            return Err(over(&name, bytes));
        }
        left -= bytes;
        if npy.order() == Order::Fortran && npy.shape().iter().filter(|&&d| d > 1).count() > 1 {
            return Err(format!("array '{name}': Fortran-ordered arrays are not supported"));
        }
        out.insert(key, npy.into_vec::<f32>().map_err(|e| format!("array '{name}': {e}"))?);
    }
    if out.is_empty() {
        return Err("not an .npz archive (no .npy arrays in it)".into());
    }
    Ok(out)
}
