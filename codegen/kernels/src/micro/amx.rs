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
//! Tile: 2 tiles of A (32 rows) × 2 of B (32 columns) into 4 tiles of sums, the 8 tile registers.
//! Rows come in blocks that stay in L2 while every group of 8 panels streams past; per 32 rows,
//! K runs in blocks of [`KC`] tile steps whose A stays in L1 while each pair of panels' rows
//! passes, the sums parked between blocks in a 32 × 128 buffer of the kernel's. The corrections
//! `+ K·za·zb[n] − za·Σ_k b[k][n] − zb[n]·Σ_k a[m][k]`: without the row term (every `zb` zero)
//! the tiles of a pair of whole panels start from the column term (one row per panel loaded at
//! stride 0); otherwise vector code adds them, one pair behind the tiles so that it overlaps
//! them. The caller's epilogue then sees each finished 32 × 128 block: in C when C is wanted
//! (`gemm_u8`; tiles of whole panels stored straight into it), else in the kernel's buffer, C
//! never written (the requantizing GEMM, whose C is only scratch).
//!
//! Every buffer of ours a tile reads or writes is on a cache line's boundary: a tile row across
//! two lines costs two accesses (the tile steps alone measured 0.25 of the instruction peak from
//! 16-byte aligned buffers, 0.55–0.65 from aligned ones).
//!
//! The tile registers are usable only after the process asked Linux for them
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), which [`permitted`] does once.

use super::{Corrections, Epilogue, Finished};
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
/// Tile steps of K per block (512 k): 32 rows of A for them (16 KiB) stay in L1 while the
/// panels' rows stream from L2 (measured with the other changes of this layout, 64 × 1024 × 1024
/// to i32: K whole 1.74 TOPS, 16 steps 1.78, 8 steps 2.16, 4 steps 1.96).
const KC: usize = 8;

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

/// `iterations` rounds of 8 tile steps of the GEMM's 2 × 2 block, each loading its 2 tiles of A
/// and 2 of B from L1 (16 KiB of each, on cache lines' boundaries) as [`block`] does, the sums
/// never leaving their tiles: what the tile steps can reach when nothing waits on L2 or on C,
/// for [`super::peak`]; returns a checksum of the sums.
///
/// # Safety
/// As [`gemm`].
pub unsafe fn loaded_peak(iterations: usize) -> i32 {
    #[repr(C, align(64))]
    struct Operands([u8; 2 * 8 * 2 * ROWS * 64]);
    let operands = Box::new(Operands([1u8; 2 * 8 * 2 * ROWS * 64]));
    let (a, b) = operands.0.split_at(8 * 2 * ROWS * 64);
    let mut sums = [0i32; ROWS * NR];
    // SAFETY: tiles configured full; every load reads 16 rows of 64 bytes inside `a` or `b`, the
    // store writes inside `sums`.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) Config::new((ROWS, ROWS)).0.as_ptr(), options(nostack, readonly));
        asm!("tilezero tmm4", "tilezero tmm5", "tilezero tmm6", "tilezero tmm7", options(nostack, nomem));
        for _ in 0..iterations {
            for s in 0..8 {
                let (x0, b0) = (a.as_ptr().add(s * 2 * ROWS * 64), b.as_ptr().add(s * 2 * ROWS * 64));
                asm!("tileloadd tmm2, [{b0} + {ld}*1]", "tileloadd tmm0, [{x0} + {ld}*1]", "tdpbusd tmm4, tmm0, tmm2",
                     "tileloadd tmm3, [{b1} + {ld}*1]", "tdpbusd tmm5, tmm0, tmm3",
                     "tileloadd tmm1, [{x1} + {ld}*1]", "tdpbusd tmm6, tmm1, tmm2", "tdpbusd tmm7, tmm1, tmm3",
                     b0 = in(reg) b0, b1 = in(reg) b0.add(ROWS * 64), x0 = in(reg) x0, x1 = in(reg) x0.add(ROWS * 64), ld = in(reg) 64usize,
                     options(nostack, readonly, preserves_flags));
            }
        }
        asm!("tilestored [{p} + {s}*1], tmm4", "tilerelease", p = in(reg) sums.as_mut_ptr(), s = in(reg) 64usize, options(nostack));
    }
    sums.iter().fold(0i32, |a, &v| a.wrapping_add(v))
}

/// `c = (a − za)·(b − zb)` for `m` rows of `a` (`m × k` u8, row-major), then `epilogue` on each
/// finished 32 × 128 block: of `c` (`m × n`) with `fill_c`, else of the kernel's own buffer (`c`
/// is then left as it was).
///
/// # Safety
/// The host has AVX-512 F/BW/VNNI and [`permitted`] returned true (a [`crate::Kernels`] of the
/// AMX path proves both).
pub unsafe fn gemm(a: &[u8], m: usize, za: u8, b: &PackedB, c: &mut [i32], fill_c: bool, epilogue: &mut Epilogue) {
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
    let mut wide = Box::new(Wide([0i32; 2 * ROWS * WIDE * NR]));
    let colrows: Vec<Row> = colfix.chunks_exact(NR).map(|r| Row(r.try_into().expect("16 columns per panel"))).collect();
    let mc = ((A_BLOCK / lda).max(2 * ROWS)).div_ceil(2 * ROWS) * 2 * ROWS;
    let len = mc.min(m.next_multiple_of(2 * ROWS)) * lda;
    let mut buffer = vec![0u8; len + 63];
    let start = buffer.as_ptr().align_offset(64).min(63);
    let packed = &mut buffer[start..start + len];
    let mut config = (0, 0);
    let mut m0 = 0;
    while m0 < m {
        let mb = mc.min(m - m0);
        pack_a(&a[m0 * k..(m0 + mb) * k], k, steps, packed);
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
                // K in blocks of `KC` steps: the block's 32 rows of A stay in L1 while each
                // pair of panels' rows for it stream in from L2, the sums parked in `wide` (pair
                // i at column 32·i) between blocks. Without row corrections a pair of whole
                // panels starts from its column corrections, and with `fill_c` its tiles go
                // straight to C; any other pair is finished by vector code (into C with
                // `fill_c`, in place otherwise) after the next pair's tile steps were issued:
                // the vector work then overlaps the tiles', and no load waits on the tile store
                // just made.
                let pairs = ep.div_ceil(2);
                let direct = |i: usize| rowsums.is_empty() && (e0 + (2 * i + 2).min(ep)) * NR <= n;
                let buf = wide.0.as_mut_ptr();
                let cptr = c.as_mut_ptr();
                // SAFETY (of the pointers below): pair i < WIDE / 2 lies inside `wide`; C's rows
                // r0..r0 + mr and columns e0·16.. inside `c`.
                let parked = |i: usize| Place { at: unsafe { buf.add(2 * NR * i) }, ld: WIDE * NR * 4, lower: ROWS * WIDE * NR };
                let in_c = |i: usize| Place { at: unsafe { cptr.add(r0 * n + (e0 + 2 * i) * NR) }, ld: n * 4, lower: ROWS * n };
                let finish_pair = |i: usize| {
                    let p0 = e0 + 2 * i;
                    let cols = (n - p0 * NR).min(2 * NR);
                    let fix = Corrections { colfix: &colfix[p0 * NR..], zb: &zb[p0 * NR..], rowsums: (!rowsums.is_empty()).then(|| &rowsums[r0..r0 + mr]) };
                    let (from, to) = (parked(i), if fill_c { in_c(i) } else { parked(i) });
                    // SAFETY: the caller guarantees AVX-512 F; both places hold `mr` rows of
                    // `cols` columns, and no tile works on pair i any more.
                    unsafe { finish(from.at, from.ld / 4, mr, cols, &fix, to.at, to.ld / 4) };
                };
                for s0 in (0..steps).step_by(KC) {
                    let (count, last) = (KC.min(steps - s0), s0 + KC >= steps);
                    for i in 0..pairs {
                        let p0 = e0 + 2 * i;
                        let np = 2.min(e0 + ep - p0);
                        let from = match (s0, direct(i)) {
                            (0, true) => Some(Place { at: colrows[p0].0.as_ptr().cast_mut(), ld: 0, lower: 0 }),
                            (0, false) => None,
                            _ => Some(parked(i)),
                        };
                        let to = if last && fill_c && direct(i) { in_c(i) } else { parked(i) };
                        // SAFETY: tiles 0–7 are configured for `rows`; every tile of A reads
                        // `rows.0` (then `rows.1`) rows of 64 bytes at stride 64 inside the
                        // block's packed rows (steps tiles of 32 rows); every tile of B 16 rows
                        // of 64 bytes inside the packed data (a panel's tail reads the next
                        // panels' first rows, the last panels' a zero-padded copy); the tiles
                        // of sums read pair i's place in `wide` or its column corrections (one
                        // row per panel, `colrows`, read at stride 0) and write that place or
                        // C's rows r0.. and columns p0·16.. of whole panels, all inside C.
                        unsafe {
                            match (rows.1 > 0, np == 2) {
                                (true, true) => block::<true, true>(a0, s0..s0 + count, &tile_b, p0, from, to),
                                (true, false) => block::<true, false>(a0, s0..s0 + count, &tile_b, p0, from, to),
                                (false, true) => block::<false, true>(a0, s0..s0 + count, &tile_b, p0, from, to),
                                (false, false) => block::<false, false>(a0, s0..s0 + count, &tile_b, p0, from, to),
                            }
                        }
                        if last && i > 0 && !direct(i - 1) {
                            finish_pair(i - 1);
                        }
                    }
                }
                if !direct(pairs - 1) {
                    finish_pair(pairs - 1);
                }
                let cols = (n - e0 * NR).min(ep * NR);
                epilogue(if fill_c { Finished::of(c, n, r0, mr, e0 * NR, cols) } else { Finished { acc: &wide.0, ld: WIDE * NR, r0, mr, c0: e0 * NR, cols } });
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

/// The sums of one 32 × 128 block (4 pairs of panels, pair i at column 32·i; 128 i32 per row)
/// between blocks of K and for the epilogue, on a cache line's boundary.
#[repr(C, align(64))]
struct Wide([i32; 2 * ROWS * WIDE * NR]);

/// One panel's 16 column corrections, a tile row: the tiles of sums start from it (read at
/// stride 0) when nothing else is added.
#[repr(C, align(64))]
struct Row([i32; NR]);

/// Where a block's tiles of sums are read or written: tile 4 at `at`, 5 (the second panel) 16
/// i32 further, 6 and 7 (rows 16–31) `lower` i32 further; rows `ld` bytes apart.
#[derive(Clone, Copy)]
struct Place {
    at: *mut i32,
    ld: usize,
    lower: usize,
}

/// The sums of one 32 × 32 block over the tile steps `steps` of K: tiles 4–7 zeroed (or loaded
/// from `from`), the steps, then the tiles stored to `to`.
///
/// # Safety
/// As in [`gemm`]'s block: tiles configured for the block's rows, every pointer inside its data,
/// `from` and `to` valid for the configured tiles' rows.
#[inline(always)]
unsafe fn block<const TWO_ROWS: bool, const TWO_PANELS: bool>(
    a0: *const u8,
    steps: std::ops::Range<usize>,
    tile_b: &impl Fn(usize, usize) -> *const i8,
    p0: usize,
    from: Option<Place>,
    to: Place,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // Only configured tiles may be named: tiles 5 and 7 exist with two panels, 6 and 7 with
        // two tiles of rows.
        if let Some(f) = from {
            asm!("tileloadd tmm4, [{s} + {ld}*1]", s = in(reg) f.at, ld = in(reg) f.ld, options(nostack, readonly, preserves_flags));
            if TWO_PANELS {
                asm!("tileloadd tmm5, [{s} + {ld}*1]", s = in(reg) f.at.add(NR), ld = in(reg) f.ld, options(nostack, readonly, preserves_flags));
            }
            if TWO_ROWS {
                asm!("tileloadd tmm6, [{s} + {ld}*1]", s = in(reg) f.at.add(f.lower), ld = in(reg) f.ld, options(nostack, readonly, preserves_flags));
            }
            if TWO_ROWS && TWO_PANELS {
                asm!("tileloadd tmm7, [{s} + {ld}*1]", s = in(reg) f.at.add(f.lower + NR), ld = in(reg) f.ld, options(nostack, readonly, preserves_flags));
            }
        } else {
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
        }
        let lda = GROUPS * KR;
        for s in steps {
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
        asm!("tilestored [{s} + {ld}*1], tmm4", s = in(reg) to.at, ld = in(reg) to.ld, options(nostack, preserves_flags));
        if TWO_PANELS {
            asm!("tilestored [{s} + {ld}*1], tmm5", s = in(reg) to.at.add(NR), ld = in(reg) to.ld, options(nostack, preserves_flags));
        }
        if TWO_ROWS {
            asm!("tilestored [{s} + {ld}*1], tmm6", s = in(reg) to.at.add(to.lower), ld = in(reg) to.ld, options(nostack, preserves_flags));
        }
        if TWO_ROWS && TWO_PANELS {
            asm!("tilestored [{s} + {ld}*1], tmm7", s = in(reg) to.at.add(to.lower + NR), ld = in(reg) to.ld, options(nostack, preserves_flags));
        }
    }
}

/// `dst[r][j] = src[r][j] + colfix[j] − zb[j]·rowsum[r]` (wrapping) for the block's `mr` rows and
/// `cols` columns, rows `src_ld` and `dst_ld` i32 apart (`dst` may be `src`).
///
/// # Safety
/// AVX-512 F present; `src` and `dst` valid for `mr` rows of `cols` i32 at their strides.
#[target_feature(enable = "avx512f")]
unsafe fn finish(src: *const i32, src_ld: usize, mr: usize, cols: usize, fix: &Corrections, dst: *mut i32, dst_ld: usize) {
    assert!(mr <= 2 * ROWS && cols <= 2 * NR && fix.colfix.len() >= cols && fix.zb.len() >= cols && fix.rowsums.is_none_or(|r| r.len() >= mr));
    for p in 0..cols.div_ceil(NR) {
        let lanes = (cols - p * NR).min(NR);
        let mask: __mmask16 = if lanes == NR { 0xffff } else { (1u16 << lanes) - 1 };
        // SAFETY: the assert keeps every masked lane inside `colfix` and `zb`, the caller's
        // guarantee inside `src`'s and `dst`'s rows.
        unsafe {
            let col = _mm512_maskz_loadu_epi32(mask, fix.colfix.as_ptr().add(p * NR));
            let zb = _mm512_maskz_loadu_epi32(mask, fix.zb.as_ptr().add(p * NR));
            for r in 0..mr {
                let mut v = _mm512_add_epi32(_mm512_maskz_loadu_epi32(mask, src.add(r * src_ld + p * NR)), col);
                if let Some(rows) = fix.rowsums {
                    v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zb, _mm512_set1_epi32(rows[r])));
                }
                _mm512_mask_storeu_epi32(dst.add(r * dst_ld + p * NR), mask, v);
            }
        }
    }
}
