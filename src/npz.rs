//! `--inputs FILE.npz`: the arrays `numpy.savez` writes (a zip of `NAME.npy` entries, stored
//! uncompressed), read as f32 activations keyed by tensor name. Compressed archives and other
//! element types are refused with the reason.

use qdqc_lang::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const STORED: u16 = 0;
const ZIP64_EXTRA: u16 = 0x0001;

pub fn read(path: &Path) -> Result<BTreeMap<String, Vec<f32>>> {
    let bytes = std::fs::read(path).map_err(|e| Error::bad_input(path, format!("cannot read the inputs archive: {e}")))?;
    entries(&bytes).map_err(|p| Error::bad_input(path, p))
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]])).ok_or_else(|| "truncated zip archive".to_string())
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).ok_or_else(|| "truncated zip archive".to_string())
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap())).ok_or_else(|| "truncated zip archive".to_string())
}

/// Walks the local file headers from the start (numpy writes them back to back, sizes filled in).
fn entries(b: &[u8]) -> Result<BTreeMap<String, Vec<f32>>, String> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while b.len() >= at + 4 && u32_at(b, at)? == LOCAL_HEADER {
        let method = u16_at(b, at + 8)?;
        let mut size = u64::from(u32_at(b, at + 18)?);
        let name_len = usize::from(u16_at(b, at + 26)?);
        let extra_len = usize::from(u16_at(b, at + 28)?);
        let name_bytes = b.get(at + 30..at + 30 + name_len).ok_or("truncated zip archive")?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = at + 30 + name_len;
        if size == u64::from(u32::MAX) {
            size = zip64_size(b.get(extra..extra + extra_len).ok_or("truncated zip archive")?)?;
        }
        if method != STORED {
            return Err(format!("entry '{name}' is compressed (write the archive with numpy.savez, not savez_compressed)"));
        }
        let data = extra + extra_len;
        let end = data.checked_add(usize::try_from(size).map_err(|_| "entry too large")?).ok_or("entry too large")?;
        let payload = b.get(data..end).ok_or_else(|| format!("entry '{name}' is truncated"))?;
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        out.insert(key, npy_f32(payload).map_err(|p| format!("array '{name}': {p}"))?);
        at = end;
    }
    if out.is_empty() {
        return Err("not an .npz archive (no stored entries)".into());
    }
    Ok(out)
}

/// The uncompressed size from a zip64 extra field (numpy forces zip64 on every entry).
fn zip64_size(extra: &[u8]) -> Result<u64, String> {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let (id, len) = (u16_at(extra, at)?, usize::from(u16_at(extra, at + 2)?));
        if id == ZIP64_EXTRA {
            return u64_at(extra, at + 4);
        }
        at += 4 + len;
    }
    Err("zip64 entry without its sizes".into())
}

/// The values of a little-endian f32, C-order `.npy` array.
fn npy_f32(b: &[u8]) -> Result<Vec<f32>, String> {
    if !b.starts_with(b"\x93NUMPY") || b.len() < 10 {
        return Err("not an .npy array".into());
    }
    let (header_len, start) = match b[6] {
        1 => (usize::from(u16_at(b, 8)?), 10),
        _ => (u32_at(b, 8)? as usize, 12),
    };
    let header = std::str::from_utf8(b.get(start..start + header_len).ok_or("truncated .npy header")?).map_err(|_| "header is not text")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("element type is not float32 ({})", header.trim()));
    }
    if header.contains("'fortran_order': True") {
        return Err("Fortran-ordered arrays are not supported".into());
    }
    let data = &b[start + header_len..];
    if data.len() % 4 != 0 {
        return Err("data is not a whole number of float32 values".into());
    }
    Ok(data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}
