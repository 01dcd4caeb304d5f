//! What bounds a GEMM on AMX tiles on this host: the AMX path's 2 × 2 tile step (2 tiles of A,
//! 2 of B, 4 `tdpbusd` into 4 tiles of sums, as `micro::amx` runs it) under one condition at a
//! time, each as a share of `tdpbusd` on registers only (`instruction_peak`), the two measured
//! alternately, medians of 7.
//!
//!     cargo run --release -p qdqc-kernels --example amx_limits
//!
//! Conditions: both operands in L1; vector stores among the steps (into L1, or streaming through
//! 1 MiB); the 4 tiles of sums stored and reloaded every few steps (what a K block or a finished
//! block costs); B, or A and B, streaming from L2; B streaming from memory; operands on 16-byte
//! rather than 64-byte boundaries.
//! docs/rust-target-bench.md (session 21) reads them. Exits 2 on a host without AMX.

use qdqc_kernels::{Isa, Kernels, instruction_peak};
use std::arch::asm;
use std::arch::x86_64::*;
use std::time::Instant;

/// One condition: A and B cycled through `a_span` / `b_span` bytes (2 KiB per step each),
/// `stores` 64-byte vector stores per step cycled through `store_span` bytes, and with `park`
/// > 0 the sums stored to and reloaded from `parked` every `park` steps.
struct Case {
    name: String,
    a: *const u8,
    a_span: usize,
    b: *const u8,
    b_span: usize,
    stores: usize,
    store_at: *mut u8,
    store_span: usize,
    park: usize,
    parked: *mut u8,
}

#[repr(C, align(64))]
struct Config([u8; 64]);

/// `steps` tile steps under `case`, the tiles configured full first (`instruction_peak` releases
/// them).
///
/// # Safety
/// AVX-512 F and the AMX tiles granted (a `Kernels` of the AMX path); every span inside its
/// buffer (2 KiB per step read from `a` and `b`, 64 bytes per store, 4 KiB at `parked`).
#[target_feature(enable = "avx512f")]
unsafe fn run(case: &Case, config: &Config, steps: usize) {
    // SAFETY: a valid configuration (8 tiles of 16 rows × 64 bytes).
    unsafe {
        asm!("ldtilecfg [{}]", "tilezero tmm4", "tilezero tmm5", "tilezero tmm6", "tilezero tmm7", in(reg) config.0.as_ptr(), options(nostack, readonly))
    };
    let v = _mm512_set1_epi32(1);
    let (mut ao, mut bo, mut so) = (0, 0, 0);
    for s in 0..steps {
        // SAFETY: the caller's spans bound every access.
        unsafe {
            let (x0, b0) = (case.a.add(ao), case.b.add(bo));
            asm!("tileloadd tmm2, [{b0} + {ld}*1]", "tileloadd tmm0, [{x0} + {ld}*1]", "tdpbusd tmm4, tmm0, tmm2",
                 "tileloadd tmm3, [{b1} + {ld}*1]", "tdpbusd tmm5, tmm0, tmm3",
                 "tileloadd tmm1, [{x1} + {ld}*1]", "tdpbusd tmm6, tmm1, tmm2", "tdpbusd tmm7, tmm1, tmm3",
                 b0 = in(reg) b0, b1 = in(reg) b0.add(1024), x0 = in(reg) x0, x1 = in(reg) x0.add(1024), ld = in(reg) 64usize,
                 options(nostack, readonly, preserves_flags));
            for _ in 0..case.stores {
                _mm512_store_si512(case.store_at.add(so).cast(), v);
                so = (so + 64) % case.store_span;
            }
            if case.park > 0 && (s + 1) % case.park == 0 {
                let p = case.parked;
                asm!("tilestored [{p} + {ld}*1], tmm4", "tilestored [{p1} + {ld}*1], tmm5", "tilestored [{p2} + {ld}*1], tmm6", "tilestored [{p3} + {ld}*1], tmm7",
                     "tileloadd tmm4, [{p} + {ld}*1]", "tileloadd tmm5, [{p1} + {ld}*1]", "tileloadd tmm6, [{p2} + {ld}*1]", "tileloadd tmm7, [{p3} + {ld}*1]",
                     p = in(reg) p, p1 = in(reg) p.add(64), p2 = in(reg) p.add(2048), p3 = in(reg) p.add(2112), ld = in(reg) 128usize,
                     options(nostack, preserves_flags));
            }
        }
        (ao, bo) = ((ao + 2048) % case.a_span, (bo + 2048) % case.b_span);
    }
}

fn main() {
    let kern = match Kernels::new(Isa::Avx512Amx) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("amx_limits: {e}");
            std::process::exit(2)
        }
    };
    // One buffer on a page boundary: A at 0 (16 KiB), B at 32 KiB (16 KiB), the sums at 64 KiB,
    // stores into L1 at 96 KiB, B streamed from 1 MiB (or 8 MiB, 24 MiB of it), A from 2 MiB,
    // streamed stores from 4 MiB.
    let mut buffer = vec![1u8; 33 << 20];
    let base = buffer.as_mut_ptr();
    let at = |offset: usize| base.wrapping_add(base.align_offset(4096) + offset);
    let case = |name: &str| Case {
        name: name.to_string(),
        a: at(0),
        a_span: 16 << 10,
        b: at(32 << 10),
        b_span: 16 << 10,
        stores: 0,
        store_at: at(96 << 10),
        store_span: 4 << 10,
        park: 0,
        parked: at(64 << 10),
    };
    let mut cases = vec![case("A and B in L1 (16 KiB each)")];
    for stores in [1, 4, 16] {
        cases.push(Case { stores, ..case(&format!("… + {stores} vector stores per step into L1")) });
        cases.push(Case { stores, store_at: at(4 << 20), store_span: 1 << 20, ..case(&format!("… + {stores} vector stores per step through 1 MiB")) });
    }
    for park in [4, 8, 16] {
        cases.push(Case { park, ..case(&format!("… sums stored and reloaded every {park} steps")) });
    }
    cases.push(Case { b: at(1 << 20), b_span: 512 << 10, ..case("A in L1, B streaming from L2 (512 KiB)") });
    cases.push(Case { a: at(2 << 20), a_span: 512 << 10, b: at(1 << 20), b_span: 512 << 10, ..case("A and B streaming from L2 (512 KiB each)") });
    cases.push(Case { b: at(8 << 20), b_span: 24 << 20, ..case("A in L1, B streaming from memory (24 MiB)") });
    cases.push(Case { a: at(16), b: at((32 << 10) + 16), ..case("A and B in L1, 16-byte aligned") });
    let mut config = Config([0; 64]);
    config.0[0] = 1;
    for t in 0..8 {
        config.0[16 + 2 * t] = 64;
        config.0[48 + t] = 16;
    }
    let steps = 1 << 16;
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    println!("AMX 2 × 2 tile step, {steps} steps per measurement; share of `tdpbusd` on registers only");
    for c in &cases {
        let mut shares: Vec<f64> = (0..7)
            .map(|_| {
                // `instruction_peak` runs 4 `tdpbusd` per iteration, as one step does.
                let registers = time(&|| {
                    std::hint::black_box(instruction_peak(kern, steps));
                });
                // SAFETY: `kern` proves the AMX tiles granted and AVX-512 F; the spans above lie
                // inside `buffer` (33 MiB).
                let step = time(&|| unsafe { run(c, &config, steps) });
                registers / step
            })
            .collect();
        shares.sort_by(f64::total_cmp);
        println!("{:<52} {:.2}", c.name, shares[3]);
    }
    // SAFETY: the tile state back to its initial state.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}
