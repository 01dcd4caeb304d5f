//! Microkernels: the raw sums `Σ_k a[m][k]·b[k][n]` (u8 × i8, i32 wrapping) of one tile, one file
//! per path. They read A as rows of `k4·4` bytes (zero-padded past K; the AMX tiles copy it into
//! tile order) and B as packed by [`crate::PackedB`]; the zero-point corrections are applied
//! afterwards by [`crate::gemm`], or by the kernel itself: in the tile's registers on the VNNI
//! path and on the AVX2 one from 32 rows, on each finished block of the AMX tiles.

/// What the caller does with each finished block of C.
pub type Epilogue<'a> = dyn FnMut(Finished<'_>) + 'a;

/// A finished block of C: rows `r0..r0 + mr`, columns `c0..c0 + cols`; row `r0 + i`, column
/// `c0 + j` at `acc[i·ld + j]` — in C itself ([`Finished::of`]) or in a kernel's own buffer (the
/// AMX path's, when C is only the caller's scratch).
pub struct Finished<'a> {
    pub acc: &'a [i32],
    pub ld: usize,
    pub r0: usize,
    pub mr: usize,
    pub c0: usize,
    pub cols: usize,
}

impl Finished<'_> {
    /// The block of the row-major `· × n` C at row `r0`, column `c0`.
    pub fn of(c: &[i32], n: usize, r0: usize, mr: usize, c0: usize, cols: usize) -> Finished<'_> {
        Finished { acc: &c[r0 * n + c0..], ld: n, r0, mr, c0, cols }
    }

    /// The block's rows, `r0..r0 + mr`.
    pub fn rows(&self) -> std::ops::Range<usize> {
        self.r0..self.r0 + self.mr
    }

    /// Row `r` of the block (`r` in [`Finished::rows`]): its `cols` accumulators.
    pub fn row(&self, r: usize) -> &[i32] {
        &self.acc[(r - self.r0) * self.ld..][..self.cols]
    }
}

/// The zero-point corrections of a tile's last K block, at its first column and row (the VNNI
/// and AVX2 tiles add them in registers).
#[cfg(target_arch = "x86_64")]
struct Fix {
    /// `K·za·zb[n] − za·Σ_k b[k][n]` per column, padded to whole panels.
    colfix: *const i32,
    /// `zb[n]`, padded likewise.
    zb: *const i32,
    /// `Σ_k a[m][k]` per row, or null when every `zb[n]` is 0 (the term vanishes).
    rowsums: *const i32,
}

/// The zero-point corrections of one product (`crate::gemm`'s `correct_zero_points`, by parts):
/// per column, padded with zeros to whole panels, `K·za·zb − za·Σ_k b` and `zb`; per row `Σ_k a`,
/// given only where some `zb` is nonzero (the AVX2 and AMX tiles; as slices of the product's
/// columns or of a block's).
#[cfg(target_arch = "x86_64")]
pub struct Corrections<'a> {
    pub colfix: &'a [i32],
    pub zb: &'a [i32],
    pub rowsums: Option<&'a [i32]>,
}

#[cfg(target_arch = "x86_64")]
pub mod amx;
#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx2_split;
#[cfg(target_arch = "x86_64")]
pub mod conv_avx2;
#[cfg(target_arch = "x86_64")]
pub mod conv_vnni;
pub mod peak;
pub mod portable;
#[cfg(target_arch = "x86_64")]
pub mod vnni;
