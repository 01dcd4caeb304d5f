//! The weight operand of a GEMM, packed once: panels of 16 columns, K in groups of 4.
//!
//! Layout `[panel][k / 4][16 columns][4 k]` of i8: one 64-byte row of a panel is what one
//! `vpdpbusd` on a zmm register multiplies (16 columns × 4 products each), and the AVX2 and
//! portable paths read the same bytes, so one packing serves every path. K is padded to a multiple
//! of 4 and N to a multiple of 16 with zero weights, which add nothing to any sum.
//!
//! The bytes start on a 64-byte boundary (each packed row one cache line, not two), and panels
//! whose size is a multiple of 4 KiB are followed by one unused row: the microkernels read
//! several panels at the same depth at once, and rows exactly 4 KiB apart would compete for the
//! same L1 sets.
//!
//! uint8 weights are stored shifted to int8 (`b − 128`) with their zero points shifted the same
//! way: `(a − za)(b − zb) = (a − za)((b − 128) − (zb − 128))`, the same integer, so u8×u8 runs
//! on the u8×i8 kernels exactly.

use crate::split::PairSplit;
use std::fmt;
use std::sync::OnceLock;

/// Columns per panel.
pub const NR: usize = 16;
/// Products per column per packed group (the depth of one `vpdpbusd`).
pub const KR: usize = 4;

/// How the caller's weight matrix is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Row-major `[K][N]`: MatMul's B.
    KN,
    /// Row-major `[N][K]`: a convolution's `[Cout][Cin·kernel]`, Gemm's B with `transB`.
    NK,
}

/// A weight operand that cannot be packed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackError {
    /// `b.len() != k·n`.
    Length { expected: usize, got: usize },
    /// The zero points are neither one nor one per column.
    ZeroPoints { columns: usize, got: usize },
    /// K is 0 or so large that `K·255·128` overflows i32 bookkeeping.
    Depth(usize),
    /// Bytes packed ahead that do not start on a 64-byte boundary.
    Unaligned,
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::Length { expected, got } => {
                write!(f, "weights: {got} codes, expected {expected}")
            }
            PackError::ZeroPoints { columns, got } => {
                write!(f, "weight zero points: {got}, expected 1 or {columns}")
            }
            PackError::Depth(k) => write!(f, "reduction depth {k} outside 1..=2^24"),
            PackError::Unaligned => write!(f, "packed weights not on a 64-byte boundary"),
        }
    }
}

impl std::error::Error for PackError {}

/// Packed weights with their column sums and zero points (shifted to the int8 domain).
#[derive(Debug)]
pub struct PackedB {
    k: usize,
    n: usize,
    bytes: Bytes,
    col_sums: Vec<i32>,
    zero_points: Vec<i32>,
    /// The pair split for `vpmaddubsw` ([`PairSplit`]), made from the bytes on first use.
    split: OnceLock<Option<PairSplit>>,
}

/// Where the packed bytes live.
#[derive(Debug)]
enum Bytes {
    /// Packed at load: the bytes from `start` on (`start` aligns them to 64 bytes).
    Owned { data: Vec<i8>, start: usize },
    /// Packed at compile time ([`PackedB::from_packed`]): borrowed from a generated crate's
    /// weight blob, never copied, so a page is resident only once a kernel reads it.
    Borrowed(&'static [i8]),
}

impl PackedB {
    /// int8 weights, zero points one per tensor or one per column.
    pub fn from_i8(b: &[i8], k: usize, n: usize, layout: Layout, zero_points: &[i8]) -> Result<PackedB, PackError> {
        let zp: Vec<i32> = zero_points.iter().map(|&z| i32::from(z)).collect();
        PackedB::pack(b.len(), k, n, layout, &zp, |i| b[i])
    }

    /// uint8 weights (stored as `b − 128`), zero points one per tensor or one per column.
    pub fn from_u8(b: &[u8], k: usize, n: usize, layout: Layout, zero_points: &[u8]) -> Result<PackedB, PackError> {
        let zp: Vec<i32> = zero_points.iter().map(|&z| i32::from(z) - 128).collect();
        PackedB::pack(b.len(), k, n, layout, &zp, |i| (i32::from(b[i]) - 128) as i8)
    }

    fn pack(len: usize, k: usize, n: usize, layout: Layout, zp: &[i32], get: impl Fn(usize) -> i8) -> Result<PackedB, PackError> {
        if k == 0 || k > 1 << 24 {
            return Err(PackError::Depth(k));
        }
        if len != k * n {
            return Err(PackError::Length { expected: k * n, got: len });
        }
        if zp.len() != 1 && zp.len() != n {
            return Err(PackError::ZeroPoints { columns: n, got: zp.len() });
        }
        let k4 = k.div_ceil(KR);
        let panels = n.div_ceil(NR);
        let stride = stride(k4);
        let (mut data, start) = aligned(panels * stride);
        let packed = &mut data[start..];
        let mut col_sums = vec![0i32; n];
        for (col, sum) in col_sums.iter_mut().enumerate() {
            let (panel, lane) = (col / NR, col % NR);
            for row in 0..k {
                let v = get(match layout {
                    Layout::KN => row * n + col,
                    Layout::NK => col * k + row,
                });
                packed[panel * stride + ((row / KR) * NR + lane) * KR + row % KR] = v;
                // |Σ| ≤ 2^24 · 128: no overflow.
                *sum += i32::from(v);
            }
        }
        let zero_points = (0..n).map(|c| zp[if zp.len() == 1 { 0 } else { c }]).collect();
        Ok(PackedB { k, n, bytes: Bytes::Owned { data, start }, col_sums, zero_points, split: OnceLock::new() })
    }

    /// Weights packed ahead (a generated crate's blob holds [`Self::data`], [`Self::col_sums`]
    /// and [`Self::zero_points`] of the `PackedB` the compiler built with [`Self::from_i8`] or
    /// [`Self::from_u8`]), borrowed as they are. The layout is checked (length, 64-byte
    /// alignment, one column sum and zero point per column); the bytes are not read here.
    pub fn from_packed(data: &'static [i8], k: usize, n: usize, col_sums: Vec<i32>, zero_points: Vec<i32>) -> Result<PackedB, PackError> {
        if k == 0 || k > 1 << 24 {
            return Err(PackError::Depth(k));
        }
        let expected = n.div_ceil(NR) * stride(k.div_ceil(KR));
        if data.len() != expected {
            return Err(PackError::Length { expected, got: data.len() });
        }
        if data.as_ptr().align_offset(64) != 0 {
            return Err(PackError::Unaligned);
        }
        if col_sums.len() != n || zero_points.len() != n {
            return Err(PackError::ZeroPoints { columns: n, got: col_sums.len().min(zero_points.len()) });
        }
        Ok(PackedB { k, n, bytes: Bytes::Borrowed(data), col_sums, zero_points, split: OnceLock::new() })
    }

    /// Reduction depth K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Output columns N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// K rounded up to a multiple of [`KR`], divided by it.
    pub fn k4(&self) -> usize {
        self.k.div_ceil(KR)
    }

    /// Number of 16-column panels.
    pub fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// The packed bytes, `[panel][k4][NR][KR]`, panel `p` at `p·`[`Self::panel_stride`].
    pub fn data(&self) -> &[i8] {
        let len = self.panels() * self.panel_stride();
        match &self.bytes {
            Bytes::Owned { data, start } => &data[*start..][..len],
            Bytes::Borrowed(data) => &data[..len],
        }
    }

    /// Bytes from one panel to the next: `k4·64`, plus one row when that is a multiple of 4 KiB.
    pub fn panel_stride(&self) -> usize {
        stride(self.k4())
    }

    /// `Σ_k b[k][n]` in the int8 domain.
    pub fn col_sums(&self) -> &[i32] {
        &self.col_sums
    }

    /// Weight zero point of each column, in the int8 domain.
    pub fn zero_points(&self) -> &[i32] {
        &self.zero_points
    }

    /// The split of the bytes into a pair-safe part and an excess ([`PairSplit::of`]), computed
    /// once (the first product that can use it reads every byte once more).
    pub(crate) fn pair_split(&self) -> Option<&PairSplit> {
        self.split.get_or_init(|| PairSplit::of(self)).as_ref()
    }

    /// How many weights the AVX2 path's pair split for `vpmaddubsw` changes (`crate::split`) in a
    /// product of `m` rows, or `None` where that path keeps its i16 kernel: too many broken pairs,
    /// fewer than 32 rows, or copies of the activations that would not fit in L2.
    pub fn split_entries(&self, m: usize) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        let runs = m >= crate::micro::avx2::WIDE_ROWS && crate::micro::avx2_split::fits(m, self);
        #[cfg(not(target_arch = "x86_64"))]
        let runs = false;
        runs.then(|| self.pair_split()).flatten().map(PairSplit::len)
    }
}

impl Clone for PackedB {
    /// A copy with its own alignment (a derived clone would keep the original's offset).
    fn clone(&self) -> PackedB {
        let bytes = match &self.bytes {
            Bytes::Owned { .. } => {
                let packed = self.data();
                let (mut data, start) = aligned(packed.len());
                data[start..][..packed.len()].copy_from_slice(packed);
                Bytes::Owned { data, start }
            }
            Bytes::Borrowed(data) => Bytes::Borrowed(data),
        };
        PackedB { k: self.k, n: self.n, bytes, col_sums: self.col_sums.clone(), zero_points: self.zero_points.clone(), split: self.split.clone() }
    }
}

/// Bytes per panel for `k4` groups (see the module's header).
fn stride(k4: usize) -> usize {
    let bytes = k4 * NR * KR;
    if bytes.is_multiple_of(4096) { bytes + NR * KR } else { bytes }
}

/// Packed weights from this size on start on a 2 MiB boundary with transparent huge pages
/// requested (Linux): a GEMM reads every row tile's panels from a window of up to 256 KiB,
/// 64 pages of 4 KiB, and over 16 MiB of weights (K = N = 4096) the GEMM ran 6–10 % faster with
/// them on a Zen 4 host (`examples/gemm_cycles`, binaries alternated run by run).
const HUGE: usize = 2 << 20;

/// `len` zero bytes from a 64-byte boundary (a 2 MiB one from [`HUGE`] bytes on): the buffer
/// and the offset of that boundary. The zeros come from `calloc` (fresh pages for large sizes),
/// so the advice is given before any page is touched.
fn aligned(len: usize) -> (Vec<i8>, usize) {
    let align = if len >= HUGE { HUGE } else { 64 };
    let data = vec![0i8; len + align - 1];
    let start = data.as_ptr().align_offset(align).min(align - 1);
    if align == HUGE {
        advise_huge(&data[start..][..len]);
    }
    (data, start)
}

/// Asks for transparent huge pages over `bytes` (2 MiB aligned). Advice only: where the kernel
/// has them off (or on other systems) nothing changes.
fn advise_huge(bytes: &[i8]) {
    #[cfg(target_os = "linux")]
    {
        use std::os::raw::{c_int, c_void};
        unsafe extern "C" {
            fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
        }
        const MADV_HUGEPAGE: c_int = 14;
        // SAFETY: the range lies inside a live allocation of ours, page aligned; the advice
        // changes no content (an error, e.g. THP not built in, leaves the pages as they are).
        let _ = unsafe { madvise(bytes.as_ptr().cast_mut().cast(), bytes.len(), MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Isa, Kernels, gemm_u8};

    /// Bytes leaked at a 64-byte boundary (+ `shift`), as a generated crate's static blob holds them.
    fn leak(bytes: &[i8], shift: usize) -> &'static [i8] {
        let (mut data, start) = aligned(bytes.len() + shift);
        data[start + shift..][..bytes.len()].copy_from_slice(bytes);
        &Vec::leak(data)[start + shift..][..bytes.len()]
    }

    /// A weight operand packed ahead and borrowed gives the sums of the one packed at load, on
    /// every path, for u8 and i8 weights, both layouts and a K whose panels get the spare row.
    #[test]
    fn packed_ahead_is_packed_at_load() {
        for (k, n, layout) in [(37, 21, Layout::KN), (1024, 17, Layout::NK), (5, 3, Layout::NK)] {
            let b: Vec<i8> = (0..k * n).map(|i| ((i * 73 + 11) % 251) as i8).collect();
            let u: Vec<u8> = b.iter().map(|&v| v as u8).collect();
            let zps: Vec<i8> = (0..n).map(|c| ((c * 7) % 100) as i8 - 9).collect();
            let uzps: Vec<u8> = zps.iter().map(|&z| z as u8).collect();
            let a: Vec<u8> = (0..3 * k).map(|i| ((i * 31 + 5) % 256) as u8).collect();
            for load in [PackedB::from_i8(&b, k, n, layout, &zps).unwrap(), PackedB::from_u8(&u, k, n, layout, &uzps).unwrap()] {
                let ahead = PackedB::from_packed(leak(load.data(), 0), k, n, load.col_sums().to_vec(), load.zero_points().to_vec()).unwrap();
                assert_eq!(ahead.data(), load.data());
                for kernels in Isa::available().into_iter().map(|isa| Kernels::new(isa).unwrap()) {
                    let (mut want, mut got) = (vec![0i32; 3 * n], vec![0i32; 3 * n]);
                    gemm_u8(kernels, &a, 3, 17, &load, &mut want).unwrap();
                    gemm_u8(kernels, &a, 3, 17, &ahead, &mut got).unwrap();
                    assert_eq!(got, want, "{kernels:?} k={k} n={n}");
                    gemm_u8(kernels, &a, 3, 17, &ahead.clone(), &mut got).unwrap();
                    assert_eq!(got, want, "{kernels:?} k={k} n={n}: a clone");
                }
            }
        }
    }

    #[test]
    fn packed_ahead_with_another_layout_is_refused() {
        let load = PackedB::from_i8(&[1; 40 * 5], 40, 5, Layout::KN, &[0]).unwrap();
        let (sums, zps) = (load.col_sums().to_vec(), load.zero_points().to_vec());
        let bytes = load.data();
        assert!(matches!(PackedB::from_packed(leak(&bytes[1..], 0), 40, 5, sums.clone(), zps.clone()), Err(PackError::Length { .. })));
        assert!(matches!(PackedB::from_packed(leak(bytes, 0), 41, 5, sums.clone(), zps.clone()), Err(PackError::Length { .. })));
        assert!(matches!(PackedB::from_packed(leak(bytes, 1), 40, 5, sums.clone(), zps.clone()), Err(PackError::Unaligned)));
        assert!(matches!(PackedB::from_packed(leak(bytes, 0), 40, 5, sums[1..].to_vec(), zps.clone()), Err(PackError::ZeroPoints { .. })));
        assert!(matches!(PackedB::from_packed(leak(bytes, 0), 40, 5, sums.clone(), vec![0]), Err(PackError::ZeroPoints { .. })));
        assert!(matches!(PackedB::from_packed(leak(bytes, 0), 0, 5, sums, zps), Err(PackError::Depth(0))));
    }
}
