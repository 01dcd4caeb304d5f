//! A generated crate's weights read from a file beside it rather than embedded (models whose
//! weights are too large for `include_bytes!`: rustc holds about 12 times the bytes it embeds,
//! 3.2 GB for 256 MiB). The file is mapped read-only, once per process and path, and lives as
//! long as the process: the kernels borrow their operands in place (`&'static`), as they borrow
//! the embedded blob, so only the pages a kernel reads become resident, shared with the page
//! cache. The file starts with a 64-byte header that names the compile it belongs to; the
//! weights follow, so their 64-byte alignment is the mapping's (a page).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes before the weights: the magic, the weights' length and their FNV-1a 64 hash.
pub const HEADER: usize = 64;
const MAGIC: &[u8; 16] = b"qdqc weights v1\0";

/// A weights file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightsError {
    /// The file cannot be opened, read or mapped.
    Io { path: PathBuf, message: String },
    /// The file is not the one this code was generated with.
    Mismatch { path: PathBuf, expected: (usize, u64), found: Option<(usize, u64)> },
}

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightsError::Io { path, message } => write!(f, "weights file {}: {message}", path.display()),
            WeightsError::Mismatch { path, expected, found } => {
                let found = found.map_or("no qdqc weights header".to_string(), |(l, h)| format!("{l} bytes, hash {h:016x}"));
                write!(f, "weights file {}: {found}, but this code was generated with {} bytes, hash {:016x}", path.display(), expected.0, expected.1)
            }
        }
    }
}

impl std::error::Error for WeightsError {}

/// The version of the layouts qdqc packs weights in at compile time (`PackedB::from_packed`,
/// `crate::conv::PackedConv::from_packed` borrow them as they are). A layout can change without
/// changing its length (strided convolutions over column phases did), and a generated crate
/// depends on this crate by path: rebuilt against a newer one, it would run on weights in the
/// wrong order. The generated `Model::new()` passes the version it was packed for to
/// [`check_layout`]. Bump it with every change of a packed layout.
pub const PACKED_LAYOUT: u32 = 2;

/// Refuses weights packed for another [`PACKED_LAYOUT`] than this crate's.
pub fn check_layout(packed_for: u32) -> Result<(), String> {
    if packed_for == PACKED_LAYOUT {
        return Ok(());
    }
    Err(format!(
        "the weights were packed for qdqc-kernels layout {packed_for}, and this qdqc-kernels reads layout {PACKED_LAYOUT}: regenerate the crate with the qdqc whose kernel crate it builds against"
    ))
}

/// FNV-1a 64 of `bytes`: names a compile's weights in the header and in the generated code.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The file's bytes: the header for `weights`, then `weights`.
pub fn file_bytes(weights: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + weights.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(weights.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a(weights).to_le_bytes());
    out.resize(HEADER, 0);
    out.extend_from_slice(weights);
    out
}

/// The weights in the file at `path`, checked against the `(length, hash)` the generated code
/// holds (its header is read; the weights are not hashed again at load).
pub fn open(path: &Path, expected: (usize, u64)) -> Result<&'static [u8], WeightsError> {
    let bytes = mapped(path)?;
    let found = (bytes.len() >= HEADER && &bytes[..16] == MAGIC).then(|| {
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        (word(16) as usize, word(24))
    });
    if found != Some(expected) || bytes.len() != HEADER + expected.0 {
        return Err(WeightsError::Mismatch { path: path.to_path_buf(), expected, found });
    }
    Ok(&bytes[HEADER..])
}

/// The whole file, mapped once per process and path (a second `Model::new` shares the mapping).
fn mapped(path: &Path) -> Result<&'static [u8], WeightsError> {
    static MAPS: Mutex<BTreeMap<PathBuf, &'static [u8]>> = Mutex::new(BTreeMap::new());
    let io = |e: std::io::Error| WeightsError::Io { path: path.to_path_buf(), message: e.to_string() };
    let key = path.canonicalize().map_err(io)?;
    let mut maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&bytes) = maps.get(&key) {
        return Ok(bytes);
    }
    let file = std::fs::File::open(&key).map_err(io)?;
    let bytes = map(&file).map_err(io)?;
    maps.insert(key, bytes);
    Ok(bytes)
}

#[cfg(unix)]
fn map(file: &std::fs::File) -> std::io::Result<&'static [u8]> {
    use std::os::fd::AsRawFd;
    use std::os::raw::{c_int, c_long, c_void};
    unsafe extern "C" {
        fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: c_long) -> *mut c_void;
    }
    const PROT_READ: c_int = 1;
    const MAP_PRIVATE: c_int = 2;
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| std::io::Error::other("larger than the address space"))?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: a fresh read-only private mapping of an open file (the descriptor may close after
    // the call; the mapping stays). It is never unmapped, so the slice is valid for the process.
    // A file truncated by someone else while mapped faults on access, as any mapped file does.
    let p = unsafe { mmap(std::ptr::null_mut(), len, PROT_READ, MAP_PRIVATE, file.as_raw_fd(), 0) };
    if p as isize == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `p` maps `len` readable bytes for the rest of the process.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Elsewhere: read into a leaked buffer aligned like a page (the kernels need 64 bytes).
#[cfg(not(unix))]
fn map(file: &std::fs::File) -> std::io::Result<&'static [u8]> {
    use std::io::Read;
    #[repr(C, align(4096))]
    #[derive(Clone, Copy)]
    struct Page([u8; 4096]);
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| std::io::Error::other("larger than the address space"))?;
    let pages: &'static mut [Page] = Vec::leak(vec![Page([0; 4096]); len.div_ceil(4096)]);
    // SAFETY: the pages are plain bytes, `len` of them inside the allocation.
    let bytes: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast::<u8>(), len) };
    (&*file).read_exact(bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_packed_for_another_layout_are_refused() {
        assert_eq!(check_layout(PACKED_LAYOUT), Ok(()));
        let err = check_layout(PACKED_LAYOUT - 1).unwrap_err();
        assert!(err.contains(&format!("packed for qdqc-kernels layout {}", PACKED_LAYOUT - 1)) && err.contains("regenerate"), "{err}");
    }

    #[test]
    fn a_file_round_trips_and_a_foreign_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("qdqc-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let weights: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let path = dir.join("w.bin");
        std::fs::write(&path, file_bytes(&weights)).unwrap();
        let expected = (weights.len(), fnv1a(&weights));
        let got = open(&path, expected).unwrap();
        assert_eq!(got, &weights[..]);
        assert_eq!(got.as_ptr() as usize % 64, 0, "the weights keep 64-byte alignment");
        assert!(std::ptr::eq(open(&path, expected).unwrap(), got), "one mapping per path");
        let other = dir.join("other.bin");
        std::fs::write(&other, file_bytes(&weights[1..])).unwrap();
        let err = open(&other, expected).unwrap_err().to_string();
        assert!(err.contains("this code was generated with 10000 bytes"), "{err}");
        std::fs::write(dir.join("raw.bin"), &weights).unwrap();
        assert!(open(&dir.join("raw.bin"), expected).unwrap_err().to_string().contains("no qdqc weights header"));
        assert!(matches!(open(&dir.join("missing.bin"), expected), Err(WeightsError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
