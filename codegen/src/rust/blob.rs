//! The weight blob: every constant the generated code reads, little-endian, each entry at a
//! 64-byte aligned offset, in the order the generator asks for them (so the same model gives the
//! same bytes). Embedded with `include_bytes!` into a 64-byte aligned static.

/// Alignment of every entry.
pub const ALIGN: usize = 64;

#[derive(Default)]
pub struct Blob {
    pub bytes: Vec<u8>,
}

impl Blob {
    /// Appends an entry; returns its offset.
    pub fn add(&mut self, bytes: &[u8]) -> usize {
        let offset = self.bytes.len().next_multiple_of(ALIGN);
        self.bytes.resize(offset, 0);
        self.bytes.extend_from_slice(bytes);
        offset
    }
}
