//! AMX (Intel Sapphire Rapids and later): `tdpbusd` multiplies a tile of A (up to 16 rows of 64
//! u8) by a tile of B (16 groups of 4 k × 16 columns of i8) and adds the exact products to a
//! 16 × 16 tile of i32 sums, wrapping: the same integers as `vpdpbusd` and every other path.
//!
//! A [`PackedB`] panel is already a column of B tiles: its rows are groups of 4 k across 16
//! columns, 64 bytes each, so a tile is 16 consecutive rows at stride 64, read in place. A is
//! copied per block of rows into tile order (each tile's 16 rows of 64 bytes one after the other),
//! zero past K. The K tail (K/4 not a multiple of 16) then multiplies those zeros by the groups
//! after the panel's last one — the next panels' first rows, which add nothing — and only the
//! last panels, whose tail tile would end past the packed data, take it from a zero-padded copy.
//!
//! Tile: 2 tiles of A (32 rows) × 2 of B (32 columns) into 4 tiles of sums, the 8 tile registers;
//! K runs whole inside the tile (the sums stay in their tiles). Rows come in blocks that stay in
//! L2 while every group of 8 panels streams past; the corrections `+ K·za·zb[n] − za·Σ_k b[k][n]
//! − zb[n]·Σ_k a[m][k]` are applied to each finished 32 × 32 tile on its way to C, and the
//! caller's epilogue sees each 32 × 128 block of C as soon as its 4 tiles are in.
//!
//! The tile registers are usable only after the process asked Linux for them
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), which [`permitted`] does once.

use super::{Corrections, Epilogue};
use crate::pack::{KR, NR, PackedB};
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Groups of 4 k per tile of B (its rows), 64 k per tile step.
const GROUPS: usize = 16;
/// Rows of a tile of A and of sums.
const ROWS: usize = 16;
/// Products with fewer rows than this, or a K shorter than [`MIN_K`], run on the VNNI tile (see
/// [`crate::gemm`]): there the tile's fixed costs (configuration, A's copy, sums stored through
/// memory) outweigh it (measured on Sapphire Rapids: 400 × 144 × 48 took 0.011 ms on AMX, 0.009
/// on VNNI; 128 × 576 × 64 0.010 and 0.013; 8 × 256 × 256 0.002 on both).
pub const MIN_ROWS: usize = 8;
/// The shortest K run on tiles (four tile steps); see [`MIN_ROWS`].
pub const MIN_K: usize = 256;
/// Panels per block the caller's epilogue sees (32 rows × 128 columns): its per-row costs paid
/// once per 128 columns rather than per tile's 32 (64 × 1024 × 1024 requantized: 0.126 → 0.109
/// ms; 4 panels 0.121, 16 panels 0.107 but slower at K = 4096, the 16 panels' B no longer in L2).
const WIDE: usize = 8;
/// Bytes of A per block of rows (as the VNNI path: the block stays in L2 while the panels pass).
const A_BLOCK: usize = 512 * 1024;

/// Whether this process may use AMX int8 tiles: CPUID says AMX-TILE and AMX-INT8, and Linux
/// granted the tile data state (asked once per process; any other OS: no).
pub fn permitted() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| {
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 25 & 1 == 1);
        tile && int8 && request_tiles()
    })
}

#[cfg(target_os = "linux")]
fn request_tiles() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_GET_XCOMP_PERM: i64 = 0x1022;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let syscall = |code: i64, arg: i64| -> i64 {
        let ret: i64;
        // SAFETY: arch_prctl with these codes reads `arg` as a value (REQ) or writes one u64 to
        // the address `arg` (GET, given a live local below); it touches no other memory.
        unsafe {
            asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => ret, in("rdi") code, in("rsi") arg,
                 lateout("rcx") _, lateout("r11") _, options(nostack));
        }
        ret
    };
    if syscall(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 {
        return false;
    }
    let mut features = 0u64;
    syscall(ARCH_GET_XCOMP_PERM, std::ptr::addr_of_mut!(features) as i64) == 0 && features >> XFEATURE_XTILEDATA & 1 == 1
}

#[cfg(not(target_os = "linux"))]
fn request_tiles() -> bool {
    false
}

/// The 64-byte tile configuration (palette 1): tiles 0–1 of A (`rows.0`, `rows.1` rows of 64
/// bytes), 2–3 of B (16 rows of 64 bytes), 4–7 of sums (sums of A tile 0: 4 and 5; of A tile 1:
/// 6 and 7; 16 i32 per row).
#[repr(C, align(64))]
struct Config([u8; 64]);

impl Config {
    fn new(rows: (usize, usize)) -> Config {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut set = |t: usize, r: usize| {
            if r > 0 {
                c[16 + 2 * t] = 64;
                c[48 + t] = r as u8;
            }
        };
        for (t, r) in [(0, rows.0), (1, rows.1), (2, GROUPS), (3, GROUPS), (4, rows.0), (5, rows.0), (6, rows.1), (7, rows.1)] {
            set(t, r);
        }
        Config(c)
    }
}

/// `iterations` rounds of 4 `tdpbusd` on full tiles (registers only, 4 independent sums), for
/// [`super::peak`]; returns a checksum of the sums.
///
/// # Safety
/// As [`gemm`].
pub unsafe fn peak(iterations: usize) -> i32 {
    let ones = [1u8; ROWS * 64];
    let mut sums = [0i32; ROWS * NR];
    // SAFETY: tiles configured full; the loads and the store stay inside `ones` and `sums`.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) Config::new((ROWS, ROWS)).0.as_ptr(), options(nostack, readonly));
        asm!("tileloadd tmm0, [{p} + {s}*1]", "tileloadd tmm1, [{p} + {s}*1]", "tileloadd tmm2, [{p} + {s}*1]", "tileloadd tmm3, [{p} + {s}*1]",
             "tilezero tmm4", "tilezero tmm5", "tilezero tmm6", "tilezero tmm7", p = in(reg) ones.as_ptr(), s = in(reg) 64usize, options(nostack, readonly));
        for _ in 0..iterations {
            asm!(
                "tdpbusd tmm4, tmm0, tmm2",
                "tdpbusd tmm5, tmm0, tmm3",
                "tdpbusd tmm6, tmm1, tmm2",
                "tdpbusd tmm7, tmm1, tmm3",
                options(nostack, nomem, preserves_flags)
            );
        }
        asm!("tilestored [{p} + {s}*1], tmm4", "tilerelease", p = in(reg) sums.as_mut_ptr(), s = in(reg) 64usize, options(nostack));
    }
    sums.iter().fold(0i32, |a, &v| a.wrapping_add(v))
}

/// `c = (a − za)·(b − zb)` for `m` rows of `a` (`m × k` u8, row-major) into `c` (`m × n`), then
/// `epilogue` on each finished block.
///
/// # Safety
/// The host has AVX-512 F/BW/VNNI and [`permitted`] returned true (a [`crate::Kernels`] of the
/// AMX path proves both).
pub unsafe fn gemm(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32], epilogue: &mut Epilogue) {
    let (k, n, k4) = (b.k(), b.n(), b.k4());
    assert!(a.len() == m * k && c.len() == m * n && b.col_sums().len() == n && b.zero_points().len() == n);
    let steps = k4.div_ceil(GROUPS);
    let lda = steps * GROUPS * KR;
    let rowsums: Vec<i32> = if b.zero_points().iter().any(|&z| z != 0) { a.chunks_exact(k).map(crate::gemm::row_sum).collect() } else { Vec::new() };
    let (colfix, zb) = crate::gemm::column_corrections(za, b);
    let panels = b.panels();
    let pstride = b.panel_stride();
    // The last tile step of the panels whose 16 groups from there would read past the packed
    // data (the last one, and more when a panel is shorter than a tile): copies zero past their
    // groups. Every other panel's tail reads on into the panels after it.
    let tile_bytes = GROUPS * NR * KR;
    let last_step = (steps - 1) * GROUPS;
    let data = b.data();
    let first_copied = (0..panels).find(|p| p * pstride + last_step * NR * KR + tile_bytes > data.len()).unwrap_or(panels);
    let mut tails = vec![0i8; (panels - first_copied) * tile_bytes];
    for (p, tail) in (first_copied..panels).zip(tails.chunks_exact_mut(tile_bytes)) {
        let groups = (k4 - last_step) * NR * KR;
        tail[..groups].copy_from_slice(&data[p * pstride + last_step * NR * KR..][..groups]);
    }
    let tile_b = |p: usize, s: usize| -> *const i8 {
        if p >= first_copied && s + 1 == steps { tails[(p - first_copied) * tile_bytes..].as_ptr() } else { data[p * pstride + s * tile_bytes..].as_ptr() }
    };
    let mut scratch = [0i32; 4 * ROWS * NR];
    let mc = ((A_BLOCK / lda).max(2 * ROWS)).div_ceil(2 * ROWS) * 2 * ROWS;
    let mut packed = vec![0u8; mc.min(m.next_multiple_of(2 * ROWS)) * lda];
    let mut config = (0, 0);
    let mut m0 = 0;
    while m0 < m {
        let mb = mc.min(m - m0);
        pack_a(&a[m0 * k..(m0 + mb) * k], k, steps, &mut packed);
        for e0 in (0..panels).step_by(WIDE) {
            let ep = WIDE.min(panels - e0);
            for r0 in (m0..m0 + mb).step_by(2 * ROWS) {
                let mr = (2 * ROWS).min(m0 + mb - r0);
                let rows = (mr.min(ROWS), mr.saturating_sub(ROWS));
                if rows != config {
                    // SAFETY: the caller guarantees AMX is usable; the configuration is valid.
                    unsafe { asm!("ldtilecfg [{}]", in(reg) Config::new(rows).0.as_ptr(), options(nostack, readonly)) };
                    config = rows;
                }
                let a0 = packed[(r0 - m0) * lda..].as_ptr();
                for p0 in (e0..e0 + ep).step_by(2) {
                    let np = 2.min(e0 + ep - p0);
                    let cols = (n - p0 * NR).min(np * NR);
                    // SAFETY: tiles 0–7 are configured for `rows`; every tile of A reads `rows.0`
                    // (then `rows.1`) rows of 64 bytes at stride 64 inside the block's packed
                    // rows (steps tiles of 32 rows); every tile of B 16 rows of 64 bytes inside
                    // the packed data (a panel's tail reads the next panels' first rows, the last
                    // panels' a zero-padded copy).
                    unsafe {
                        match (rows.1 > 0, np == 2) {
                            (true, true) => block::<true, true>(a0, steps, &tile_b, p0),
                            (true, false) => block::<true, false>(a0, steps, &tile_b, p0),
                            (false, true) => block::<false, true>(a0, steps, &tile_b, p0),
                            (false, false) => block::<false, false>(a0, steps, &tile_b, p0),
                        }
                        store(rows.1 > 0, np == 2, &mut scratch);
                    }
                    let fix = Corrections { colfix: &colfix[p0 * NR..], zb: &zb[p0 * NR..], rowsums: (!rowsums.is_empty()).then(|| &rowsums[r0..r0 + mr]) };
                    // SAFETY: the caller guarantees AVX-512 F.
                    unsafe { finish(&scratch, mr, cols, &fix, &mut c[r0 * n + p0 * NR..], n) };
                }
                epilogue(c, r0, mr, e0 * NR, (n - e0 * NR).min(ep * NR));
            }
        }
        m0 += mb;
    }
    // SAFETY: as above; the tile state goes back to its initial (unused) state.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Rows of A (`k` bytes each) as tiles: per 32 rows, per step of 64 k, the 32 rows' 64 bytes one
/// after the other (a tile of A is then 16 rows at stride 64, whatever K is: read in place, rows
/// 4 KiB apart would all fall in one L1 set), zero past K. Rows past the block's last are left
/// as they are: the last tiles are configured with only the block's rows.
fn pack_a(a: &[u8], k: usize, steps: usize, packed: &mut [u8]) {
    let step = GROUPS * KR;
    for (r, row) in a.chunks_exact(k).enumerate() {
        let (block, lane) = (r / (2 * ROWS), r % (2 * ROWS));
        let base = block * steps * 2 * ROWS * step + lane * step;
        for (s, part) in row.chunks(step).enumerate() {
            let dst = &mut packed[base + s * 2 * ROWS * step..][..step];
            dst[..part.len()].copy_from_slice(part);
            dst[part.len()..].fill(0);
        }
        for s in row.len().div_ceil(step)..steps {
            packed[base + s * 2 * ROWS * step..][..step].fill(0);
        }
    }
}

/// The sums of one block: tiles 4–7 zeroed, then every tile step of K.
///
/// # Safety
/// As in [`gemm`]'s block: tiles configured for the block's rows, every pointer inside its data.
#[inline(always)]
unsafe fn block<const TWO_ROWS: bool, const TWO_PANELS: bool>(a0: *const u8, steps: usize, tile_b: &impl Fn(usize, usize) -> *const i8, p0: usize) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // Only configured tiles may be named: tiles 5 and 7 exist with two panels, 6 and 7 with
        // two tiles of rows.
        asm!("tilezero tmm4", options(nostack, nomem, preserves_flags));
        if TWO_PANELS {
            asm!("tilezero tmm5", options(nostack, nomem, preserves_flags));
        }
        if TWO_ROWS {
            asm!("tilezero tmm6", options(nostack, nomem, preserves_flags));
        }
        if TWO_ROWS && TWO_PANELS {
            asm!("tilezero tmm7", options(nostack, nomem, preserves_flags));
        }
        let lda = GROUPS * KR;
        for s in 0..steps {
            let (b0, b1) = (tile_b(p0, s), if TWO_PANELS { tile_b(p0 + 1, s) } else { std::ptr::null() });
            let x0 = a0.add(s * 2 * ROWS * lda);
            let x1 = x0.add(ROWS * lda);
            // In the order of the full 2 × 2 step: each tile of sums as soon as its operands are in.
            asm!("tileloadd tmm2, [{b0} + {ldb}*1]", "tileloadd tmm0, [{x0} + {lda}*1]", "tdpbusd tmm4, tmm0, tmm2",
                 b0 = in(reg) b0, x0 = in(reg) x0, lda = in(reg) lda, ldb = in(reg) NR * KR, options(nostack, readonly, preserves_flags));
            if TWO_PANELS {
                asm!("tileloadd tmm3, [{b1} + {ldb}*1]", "tdpbusd tmm5, tmm0, tmm3",
                     b1 = in(reg) b1, ldb = in(reg) NR * KR, options(nostack, readonly, preserves_flags));
            }
            if TWO_ROWS {
                asm!("tileloadd tmm1, [{x1} + {lda}*1]", "tdpbusd tmm6, tmm1, tmm2",
                     x1 = in(reg) x1, lda = in(reg) lda, options(nostack, readonly, preserves_flags));
            }
            if TWO_ROWS && TWO_PANELS {
                asm!("tdpbusd tmm7, tmm1, tmm3", options(nostack, nomem, preserves_flags));
            }
        }
    }
}

/// Tiles 4–7 (those the block uses) to `scratch`: rows 0–15 then 16–31, 32 i32 per row.
///
/// # Safety
/// Tiles configured as for the block just computed.
unsafe fn store(two_rows: bool, two_panels: bool, scratch: &mut [i32; 4 * ROWS * NR]) {
    let s = scratch.as_mut_ptr();
    let ld = 2 * NR * 4;
    // SAFETY: each tile writes at most 16 rows of 64 bytes at stride 128 inside `scratch`
    // (tiles 6–7 from row 16).
    unsafe {
        asm!("tilestored [{s} + {ld}*1], tmm4", s = in(reg) s, ld = in(reg) ld, options(nostack, preserves_flags));
        if two_panels {
            asm!("tilestored [{s} + {ld}*1], tmm5", s = in(reg) s.add(NR), ld = in(reg) ld, options(nostack, preserves_flags));
        }
        if two_rows {
            asm!("tilestored [{s} + {ld}*1], tmm6", s = in(reg) s.add(ROWS * 2 * NR), ld = in(reg) ld, options(nostack, preserves_flags));
            if two_panels {
                asm!("tilestored [{s} + {ld}*1], tmm7", s = in(reg) s.add(ROWS * 2 * NR + NR), ld = in(reg) ld, options(nostack, preserves_flags));
            }
        }
    }
}

/// `c[r][j] = sums[r][j] + colfix[j] − zb[j]·rowsum[r]` (wrapping) for the block's `mr` rows and
/// `cols` columns, `c` rows `ldc` apart.
///
/// # Safety
/// AVX-512 F present.
#[target_feature(enable = "avx512f")]
unsafe fn finish(sums: &[i32; 4 * ROWS * NR], mr: usize, cols: usize, fix: &Corrections, c: &mut [i32], ldc: usize) {
    assert!(mr <= 2 * ROWS && cols <= 2 * NR && fix.colfix.len() >= cols && fix.zb.len() >= cols && fix.rowsums.is_none_or(|r| r.len() >= mr));
    assert!(mr == 0 || c.len() >= (mr - 1) * ldc + cols);
    for p in 0..cols.div_ceil(NR) {
        let lanes = (cols - p * NR).min(NR);
        let mask: __mmask16 = if lanes == NR { 0xffff } else { (1u16 << lanes) - 1 };
        // SAFETY: the asserts keep every masked lane inside `colfix`, `zb`, the scratch rows
        // and `c`'s rows.
        unsafe {
            let col = _mm512_maskz_loadu_epi32(mask, fix.colfix.as_ptr().add(p * NR));
            let zb = _mm512_maskz_loadu_epi32(mask, fix.zb.as_ptr().add(p * NR));
            for r in 0..mr {
                let mut v = _mm512_add_epi32(_mm512_loadu_si512(sums.as_ptr().add(r * 2 * NR + p * NR).cast()), col);
                if let Some(rows) = fix.rowsums {
                    v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zb, _mm512_set1_epi32(rows[r])));
                }
                _mm512_mask_storeu_epi32(c.as_mut_ptr().add(r * ldc + p * NR), mask, v);
            }
        }
    }
}
