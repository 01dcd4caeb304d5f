//! The weight blob: every constant the generated code reads, little-endian, each entry at a
//! 64-byte aligned offset, in the order the generator asks for them (so the same model gives the
//! same bytes). Embedded with `include_bytes!` into a 64-byte aligned static. Two sections after
//! the first hold the two forms of the convolution weights one kernel path reads in place of the
//! other ([`Section`]): apart from each other and from what every host reads at load, a host
//! maps the pages of the form it reads only (the kernel maps the pages around a touched one
//! too, 64 KiB on Linux).

/// Alignment of every entry.
pub const ALIGN: usize = 64;

/// A section after the first.
#[derive(Clone, Copy)]
pub enum Section {
    /// The AVX2 path's pair-safe convolution rows and their excess.
    SplitRows = 0,
    /// The weights of those convolutions, which the other paths read.
    SplitWeights = 1,
}

impl Section {
    /// The generated code's constant holding the section's start.
    pub fn name(self) -> &'static str {
        match self {
            Section::SplitRows => "SPLIT_ROWS",
            Section::SplitWeights => "SPLIT_WEIGHTS",
        }
    }
}

#[derive(Default)]
pub struct Blob {
    bytes: Vec<u8>,
    sections: [Vec<u8>; 2],
}

/// Appends `bytes` to `v` at an aligned offset; returns it.
fn append(v: &mut Vec<u8>, bytes: &[u8]) -> usize {
    let offset = v.len().next_multiple_of(ALIGN);
    v.resize(offset, 0);
    v.extend_from_slice(bytes);
    offset
}

impl Blob {
    /// Appends an entry; returns its offset.
    pub fn add(&mut self, bytes: &[u8]) -> usize {
        append(&mut self.bytes, bytes)
    }

    /// Appends an entry to a section after the first; returns its offset there.
    pub fn add_to(&mut self, section: Section, bytes: &[u8]) -> usize {
        append(&mut self.sections[section as usize], bytes)
    }

    /// The bytes, and each nonempty section's constant and start in them.
    pub fn finish(mut self) -> (Vec<u8>, Vec<(&'static str, usize)>) {
        let mut starts = Vec::new();
        for (section, bytes) in [Section::SplitRows, Section::SplitWeights].into_iter().zip(std::mem::take(&mut self.sections)) {
            if !bytes.is_empty() {
                starts.push((section.name(), append(&mut self.bytes, &bytes)));
            }
        }
        (self.bytes, starts)
    }
}
