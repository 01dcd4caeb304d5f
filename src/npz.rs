//! `--inputs FILE.npz`: the arrays `numpy.savez` (or `savez_compressed`) writes, read as f32
//! activations keyed by tensor name. Other element types and Fortran order are refused with the
//! reason.

use npyz::{DType, NpyFile, Order};
use qdqc_lang::{Error, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

pub fn read(path: &Path) -> Result<BTreeMap<String, Vec<f32>>> {
    let file = File::open(path).map_err(|e| Error::bad_input(path, format!("cannot read the inputs archive: {e}")))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(file))
        .map_err(|e| Error::bad_input(path, format!("not an .npz archive (zip: {e})")))?;
    arrays(&mut zip).map_err(|p| Error::bad_input(path, p))
}

fn arrays(zip: &mut zip::ZipArchive<BufReader<File>>) -> Result<BTreeMap<String, Vec<f32>>, String> {
    let f32_le: DType = DType::Plain("<f4".parse().expect("a valid numpy type string"));
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| format!("entry {i}: {e}"))?;
        let name = entry.name().to_string();
        let Some(key) = npyz::npz::array_name_from_file_name(&name).map(str::to_string) else { continue };
        let npy = NpyFile::new(entry).map_err(|e| format!("array '{name}': not an .npy array ({e})"))?;
        if npy.dtype() != f32_le {
            return Err(format!("array '{name}': element type is not float32 ({})", npy.dtype().descr()));
        }
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
