//! The instruction peak of each path's exact arithmetic: the tile's multiply-accumulate
//! instructions on registers only (no loads, independent accumulators), for the benchmark's
//! "share of the host's exact peak". Not used by the kernels.

use crate::isa::{Isa, Kernels};

/// Runs `iterations` rounds of the path's tile arithmetic on registers; returns the number of
/// multiply-accumulates done (u8×i8 products) and a checksum that keeps the work alive.
pub fn instruction_peak(kernels: Kernels, iterations: usize) -> (u64, i32) {
    match kernels.path() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI.
        Isa::Avx512Vnni => (iterations as u64 * 24 * 64, unsafe { vnni(iterations) }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX-512 VNNI and the AMX tiles were checked.
        Isa::Avx512Amx => (iterations as u64 * 4 * 16 * 16 * 64, unsafe { super::amx::peak(iterations) }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => (iterations as u64 * 12 * 16, unsafe { avx2(iterations) }),
        _ => (0, 0),
    }
}

/// The AMX path's tile steps with their operands loaded from L1 (`amx::loaded_peak`: the
/// GEMM's 2 × 2 step, nothing from L2, no sums leaving the tiles): the most any AMX GEMM can
/// reach on this host; `None` on other paths.
pub fn loaded_peak(kernels: Kernels, iterations: usize) -> Option<(u64, i32)> {
    match kernels.path() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked the AMX tiles.
        Isa::Avx512Amx => Some((iterations as u64 * 8 * 4 * 16 * 16 * 64, unsafe { super::amx::loaded_peak(iterations) })),
        _ => None,
    }
}

/// The AVX2 path's peak on split weights (`crate::split`): `vpmaddubsw`, `vpmaddwd` by ones and
/// `vpaddd` per 32 products, as its tile runs them; `None` on other paths.
pub fn split_peak(kernels: Kernels, iterations: usize) -> Option<(u64, i32)> {
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX2.
        Isa::Avx2 => Some((iterations as u64 * 10 * 32, unsafe { avx2_bytes(iterations) })),
        _ => None,
    }
}

/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_bytes(iterations: usize) -> i32 {
    use std::arch::x86_64::*;
    let mut acc = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(|i| _mm256_set1_epi32(std::hint::black_box(0x0001_0001 + i)));
    let b = [0, 1].map(|i| _mm256_set1_epi32(std::hint::black_box(0x0102_0304 + i)));
    let ones = _mm256_set1_epi16(1);
    for _ in 0..iterations {
        for (i, acc) in acc.iter_mut().enumerate() {
            // As in `avx2`: each product reads its own accumulator (as bytes), 10 chains.
            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(_mm256_maddubs_epi16(*acc, b[i % 2]), ones));
        }
    }
    checksum(&acc)
}

/// # Safety
/// AVX-512 F/BW/VNNI present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni(iterations: usize) -> i32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 24];
    let a = _mm512_set1_epi32(std::hint::black_box(0x0101_0101));
    let b = [0, 1, 2, 3].map(|i| _mm512_set1_epi32(std::hint::black_box(0x0102_0304 + i)));
    for _ in 0..iterations {
        for (i, acc) in acc.iter_mut().enumerate() {
            *acc = _mm512_dpbusd_epi32(*acc, a, b[i % 4]);
        }
    }
    acc.iter().fold(0, |s, v| s.wrapping_add(_mm512_reduce_add_epi32(*v)))
}

/// # Safety
/// AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(iterations: usize) -> i32 {
    use std::arch::x86_64::*;
    let mut acc = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11].map(|i| _mm256_set1_epi32(std::hint::black_box(0x0001_0001 + i)));
    let b = [0, 1].map(|i| _mm256_set1_epi32(std::hint::black_box(0x0002_0003 + i)));
    for _ in 0..iterations {
        for (i, acc) in acc.iter_mut().enumerate() {
            // Each product reads its own accumulator, so none is loop-invariant or shared (the
            // compiler would hoist or merge them); 12 chains cover `vpmaddwd`'s latency.
            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(*acc, b[i % 2]));
        }
    }
    checksum(&acc)
}

/// The wrapping sum of every lane of `acc`: keeps the loops' work observable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn checksum(acc: &[std::arch::x86_64::__m256i]) -> i32 {
    let mut lanes = [0i32; 8];
    acc.iter().fold(0, |s, v| {
        // SAFETY: `lanes` holds 8 i32, one ymm.
        unsafe { std::arch::x86_64::_mm256_storeu_si256(lanes.as_mut_ptr().cast(), *v) };
        lanes.iter().fold(s, |s, &l| s.wrapping_add(l))
    })
}
