//! A 256-entry table of codes mapped over a tensor of codes on a kernel path:
//! `y[k] = table[x[k].index()]`. Every path copies the very table entry the index names, so the
//! paths give identical bits; they differ in speed only. On AVX-512 with VBMI (checked here by
//! CPUID: the [`Isa::Avx512Vnni`] path does not imply it) two `vpermi2b` over the table's four
//! 64-byte quarters and a blend on the index's top bit look up 64 codes at once; on AVX2,
//! sixteen `vpshufb` over the table's 16-byte rows (by the low nibble), narrowed by a tree of
//! blends on the high nibble's bits, look up 32 codes; elsewhere a scalar loop.
//!
//! | condition | why |
//! |---|---|
//! | `X`, `Y` one byte each, `X::index` the bit pattern read as u8 (the [`QCode`] contract; u8 and i8) | the vector path reads `x` as bytes and writes table bytes into `y` |
//! | `x.len() == y.len()` | caller's obligation (asserted) |

use super::QCode;
use crate::isa::{Isa, Kernels};

/// `y[k] = table[x[k].index()]` on `kernels`' path.
pub(crate) fn map_codes<X: QCode, Y: QCode>(kernels: Kernels, table: &[Y; 256], x: &[X], y: &mut [Y]) {
    assert_eq!(x.len(), y.len(), "lookup lengths");
    #[cfg(target_arch = "x86_64")]
    if kernels.isa() == Isa::Avx512Vnni && std::arch::is_x86_feature_detected!("avx512vbmi") {
        const { assert!(size_of::<X>() == 1 && size_of::<Y>() == 1) };
        // SAFETY: AVX-512 F/BW were checked by `Kernels::new`/`detect` (the Avx512Vnni path), VBMI
        // just above. `X` and `Y` are one-byte codes (u8, i8: every bit pattern valid) and the
        // lengths are equal; the function reads `x.len()` bytes and writes as many, each a
        // byte of an entry of `table`, i.e. a valid `Y`.
        unsafe { map_vbmi(table.as_ptr().cast(), x.as_ptr().cast(), y.as_mut_ptr().cast(), x.len()) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernels.isa() != Isa::Portable && std::arch::is_x86_feature_detected!("avx2") {
        const { assert!(size_of::<X>() == 1 && size_of::<Y>() == 1) };
        // SAFETY: AVX2 was checked just above (the portable path stays scalar: it is the
        // reference path for every CPU). `X` and `Y` are one-byte codes (u8, i8: every bit pattern valid) and the lengths are
        // equal; the function reads `x.len()` bytes and writes as many, each a byte of an entry
        // of `table`, i.e. a valid `Y`.
        unsafe { map_avx2(table.as_ptr().cast(), x.as_ptr().cast(), y.as_mut_ptr().cast(), x.len()) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernels;
    scalar(table, x, y);
}

/// `y[k] = table[x[k].index()]`, element by element.
#[inline(always)]
fn scalar<X: QCode, Y: QCode>(table: &[Y; 256], x: &[X], y: &mut [Y]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = table[x.index()];
    }
}

/// 32 codes per step: row `h` of the table (entries `16h..16h + 16`, in both lanes) looked up by
/// the low nibbles (`vpshufb`: the index's top bit is clear, so no byte is zeroed), then the 16
/// lookups narrowed to the one of each byte's high nibble by a tree of `vpblendvb` on its bits
/// 4, 5, 6, 7 in turn (each moved to the byte's top bit, which the blend reads, by a 16-bit
/// shift: a byte's top bit receives nothing from its neighbour): 15 blends of depth 4, where a
/// compare and a blend per row, each blend on the last, made a chain of 16. The tail (fewer than
/// 32) goes through a 32-byte copy, its spare bytes never stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2(table: *const u8, x: *const u8, y: *mut u8, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY (whole body): `table` has 256 readable bytes, `x` n readable, `y` n writable
    // (caller); the tail is copied through stack buffers of 32 bytes, `n − k` of them.
    unsafe {
        let rows: [__m256i; 16] = std::array::from_fn(|h| _mm256_broadcastsi128_si256(_mm_loadu_si128(table.add(16 * h).cast())));
        let look = |v: __m256i| {
            let lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
            // Bit 4 + j of each code in its byte's top bit.
            let bit = [_mm256_slli_epi16::<3>(v), _mm256_slli_epi16::<2>(v), _mm256_slli_epi16::<1>(v), v];
            let pick = |h: usize| _mm256_shuffle_epi8(rows[h], lo);
            // Rows 2i and 2i + 1 by bit 4, then pairs of those by bit 5, and so on.
            let b0 = |i: usize| _mm256_blendv_epi8(pick(2 * i), pick(2 * i + 1), bit[0]);
            let b1 = |i: usize| _mm256_blendv_epi8(b0(2 * i), b0(2 * i + 1), bit[1]);
            let b2 = |i: usize| _mm256_blendv_epi8(b1(2 * i), b1(2 * i + 1), bit[2]);
            _mm256_blendv_epi8(b2(0), b2(1), bit[3])
        };
        let mut k = 0;
        while k + 32 <= n {
            _mm256_storeu_si256(y.add(k).cast(), look(_mm256_loadu_si256(x.add(k).cast())));
            k += 32;
        }
        if k < n {
            let (mut src, mut dst) = ([0u8; 32], [0u8; 32]);
            std::ptr::copy_nonoverlapping(x.add(k), src.as_mut_ptr(), n - k);
            _mm256_storeu_si256(dst.as_mut_ptr().cast(), look(_mm256_loadu_si256(src.as_ptr().cast())));
            std::ptr::copy_nonoverlapping(dst.as_ptr(), y.add(k), n - k);
        }
    }
}

/// 64 codes per step: `vpermi2b` looks up the low 7 bits in the table's lower and upper halves,
/// the index's top bit picks between them; the tail under a mask.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn map_vbmi(table: *const u8, x: *const u8, y: *mut u8, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY (whole body): `table` has 256 readable bytes, `x` n readable, `y` n writable
    // (caller); the tail's masked load and store touch only the first `n − k` bytes.
    unsafe {
        let t = [0, 1, 2, 3].map(|i| _mm512_loadu_si512(table.add(64 * i).cast()));
        let mut k = 0;
        while k + 64 <= n {
            let v = look(&t, _mm512_loadu_si512(x.add(k).cast()));
            _mm512_storeu_si512(y.add(k).cast(), v);
            k += 64;
        }
        if k < n {
            let m: __mmask64 = (1u64 << (n - k)) - 1;
            let v = look(&t, _mm512_maskz_loadu_epi8(m, x.add(k).cast()));
            _mm512_mask_storeu_epi8(y.add(k).cast(), m, v);
        }
    }
}

/// The table entries of 64 indices (`t` the table's four 64-byte quarters). A function, not a
/// closure, so that it is compiled with the features.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
fn look(t: &[std::arch::x86_64::__m512i; 4], idx: std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let lo = _mm512_permutex2var_epi8(t[0], idx, t[1]);
    let hi = _mm512_permutex2var_epi8(t[2], idx, t[3]);
    _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi)
}
