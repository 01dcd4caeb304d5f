//! A fixed GEMM workload, each call timed alone, for A/B comparisons on a loaded host:
//!
//!     taskset -c 1 target/release/examples/gemm_cycles ISA M K N CALLS [uniform|normal]
//!     taskset -c 1 target/release/examples/gemm_cycles ISA peak ITERATIONS CALLS
//!
//! runs `gemm_u8` CALLS times (B packed once, outside the timing), or the path's instruction peak
//! loop, and prints the GOPS of the fastest call and of the median call, then the 10th–90th
//! percentiles. The weights are uniform over int8 (the default) or `normal`: bell-shaped with
//! |w| ≤ 127 and σ ≈ 36, as per-channel weights of real models are (which the AVX2 path splits for
//! `vpmaddubsw`, `crate::split`; uniform ones break too many pairs for that). On a host shared with other processes most calls are preempted or share the
//! core's caches: the fastest call is the least disturbed one, and alternating two builds run by
//! run compares them in the same minutes. A host whose co-tenants come and go shows two states
//! about 1.5× apart, for seconds at a time, in the GEMM more than in the peak loop.
//! Under `perf stat -e cycles:u` (where the hypervisor exposes the PMU) ops per cycle follow from
//! the difference of two runs with different CALLS.

use qdqc_kernels::{Isa, Kernels, Layout, PackedB, gemm_u8, instruction_peak};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gemm_cycles ISA (M K N CALLS | peak ITERATIONS CALLS)";
    let isa = args.first().and_then(|s| Isa::parse(s)).unwrap_or_else(|| panic!("{usage}"));
    let kern = Kernels::new(isa).unwrap_or_else(|e| panic!("{e}"));
    let p = |i: usize| args.get(i).and_then(|s| s.parse::<usize>().ok()).unwrap_or_else(|| panic!("{usage}"));
    if args.get(1).map(String::as_str) == Some("peak") {
        let mut times = Vec::new();
        let mut ops = 0;
        for _ in 0..p(3) {
            let t = Instant::now();
            let (macs, sum) = instruction_peak(kern, p(2));
            times.push(t.elapsed().as_secs_f64());
            ops = 2 * macs;
            std::hint::black_box(sum);
        }
        report(ops, &mut times);
        return;
    }
    let (m, k, n, calls) = (p(1), p(2), p(3), p(4));
    let a: Vec<u8> = (0..m * k).map(|i| (i * 7 + i / 13) as u8).collect();
    let b: Vec<i8> = match args.get(5).map(String::as_str) {
        None | Some("uniform") => (0..k * n).map(|i| ((i * 11 + i / 17) % 255) as i8).collect(),
        // The sum of four uniform draws (a deterministic LCG), centred and scaled: about normal.
        Some("normal") => {
            let mut x = 0x2545_f491_u64;
            let mut draw = || {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 40) as f64 / (1u64 << 24) as f64
            };
            (0..k * n).map(|_| ((draw() + draw() + draw() + draw() - 2.0) * 62.0).round().clamp(-127.0, 127.0) as i8).collect()
        }
        Some(other) => panic!("weights {other}: uniform or normal"),
    };
    let packed = PackedB::from_i8(&b, k, n, Layout::KN, &[0]).expect("pack");
    let mut c = vec![0i32; m * n];
    let mut times = Vec::new();
    for _ in 0..calls {
        let t = Instant::now();
        gemm_u8(kern, &a, m, 3, &packed, &mut c).expect("gemm");
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(&c);
    }
    report(2 * (m * k * n) as u64, &mut times);
}

/// GOPS of the fastest call (the one least disturbed by other processes) and of the median call.
fn report(ops: u64, times: &mut [f64]) {
    times.sort_by(f64::total_cmp);
    let gops = |t: f64| ops as f64 / t / 1e9;
    println!("{ops} ops per call: fastest {:.1} GOPS, median {:.1} GOPS", gops(times[0]), gops(times[times.len() / 2]));
    let q = |f: f64| gops(times[((times.len() as f64 * f) as usize).min(times.len() - 1)]);
    println!("p10 {:.0} p25 {:.0} p50 {:.0} p75 {:.0} p90 {:.0}", q(0.1), q(0.25), q(0.5), q(0.75), q(0.9));
}
