//! u8 × s8 GEMM throughput per kernel path, one thread, medians.
//!
//!     cargo run --release -p qdqc-kernels --example gemm_bench -- [--shape M K N]… [--isa NAME] [--json] [--peak] [--weights uniform|bell]
//!
//! Default shapes: M ∈ {1, 64, 256} × K = N ∈ {1024, 4096}. Per shape and path: the GEMM to i32
//! (`gemm`, what ORT's MatMulInteger computes) and the GEMM plus the certified requantization
//! to u8 (`gemm+rq`, what QLinearMatMul computes; fused per block where the path does it). B is packed once, outside the timing.
//! Before each path's timing, its instruction peak (the tile's multiply-accumulates on registers
//! only, `instruction_peak`; SIMD paths) is measured, so each shape has a peak from the same
//! minutes of this shared host; on the AMX path also its tile steps loading their operands from L1
//! (`loaded_peak`, "L1 steps": the ceiling of any AMX GEMM here). `--peak`: the GEMM on an L1-resident problem (96 × 256 × 64:
//! 40 KiB of operands) only.
//! Weights: uniform over [−127, 127] (the default; the case int16 pairs saturate on), or `bell`:
//! bell-shaped with σ ≈ 36 and |w| ≤ 124, as per-channel weights of real models are, which the
//! AVX2 path from 32 rows splits for `vpmaddubsw` (`split_entries` in the JSON rows: how many
//! weights the split changes; null where it keeps the i16 kernel).
//! Every path's output is compared with the first one's (the run aborts on a difference).
//! `bench/kernels_gemm.py` runs this next to ONNX Runtime and prints the ratios.

use qdqc_kernels::requant::{Certified, Code, Form, Output, Plan, Ratio, requantize};
use qdqc_kernels::{Isa, Kernels, Layout, PackedB, gemm_u8, gemm_u8_requant};
use std::time::Instant;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Median seconds per call: batches of about 40 ms, `reps` batches (3 when one call takes over
/// 0.2 s: the portable path on the large shapes).
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64().max(1e-7);
    let reps = if one > 0.2 { reps.min(3) } else { reps };
    let batch = ((0.04 / one) as usize).max(1);
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.elapsed().as_secs_f64() / batch as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

struct Row {
    isa: Isa,
    shape: (usize, usize, usize),
    gemm: f64,
    gemm_rq: f64,
    /// The path's instruction peak, measured just before (SIMD paths).
    peak: Option<f64>,
    /// The AVX2 path's peak on split weights, where the weights are split.
    split_peak: Option<f64>,
    /// Weights the AVX2 path's pair split changes (`None`: not split).
    split_entries: Option<usize>,
    /// The AMX path's tile steps loading from L1, measured just before (`loaded_peak`).
    loaded_peak: Option<f64>,
}

/// Which peak [`peak_gops`] measures.
#[derive(Clone, Copy)]
enum Peak {
    /// The tile's arithmetic on registers only (`instruction_peak`).
    Registers,
    /// The AVX2 path's on split weights (`split_peak`).
    Split,
    /// The AMX path's tile steps with operands from L1 (`loaded_peak`).
    Loaded,
}

/// GOPS of one of the path's peaks ([`Peak`]), median.
fn peak_gops(kern: Kernels, reps: usize, which: Peak) -> Option<f64> {
    let iterations = 1 << 16;
    let (mut macs, mut sum) = (0u64, 0i32);
    let secs = median_secs(reps, || {
        let (m, s) = match which {
            Peak::Registers => qdqc_kernels::instruction_peak(kern, iterations),
            Peak::Split => qdqc_kernels::split_peak(kern, iterations).unwrap_or((0, 0)),
            Peak::Loaded => qdqc_kernels::loaded_peak(kern, iterations / 8).unwrap_or((0, 0)),
        };
        (macs, sum) = (m, sum.wrapping_add(s));
    });
    // The checksum keeps the work observable.
    std::hint::black_box(sum);
    (macs > 0).then(|| 2.0 * macs as f64 / secs / 1e9)
}

fn run_shape(paths: &[Kernels], (m, k, n): (usize, usize, usize), reps: usize, bell: bool) -> Vec<Row> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (m * 31 + k * 7 + n) as u64);
    let a: Vec<u8> = (0..m * k).map(|_| rng.next() as u8).collect();
    let b: Vec<i8> = if bell {
        // The sum of four uniform draws in [0, 1), centred: about normal, σ = 62/√3 ≈ 36.
        let mut draw = || (rng.next() >> 40) as f64 / (1u64 << 24) as f64;
        (0..k * n).map(|_| ((draw() + draw() + draw() + draw() - 2.0) * 62.0).round() as i8).collect()
    } else {
        // Full-range symmetric weights, as in the ORT comparison (and the case int16 pairs saturate on).
        (0..k * n).map(|_| ((rng.next() % 255) as i32 - 127) as i8).collect()
    };
    let packed = PackedB::from_i8(&b, k, n, Layout::KN, &[0]).expect("pack");
    let za = 3u8;
    let plan = Plan {
        output: Output::new(128, Code::U8).expect("zero point"),
        form: Form::Certified(vec![Certified::new(Ratio::new(0.0213, 0.00391, 0.0517).expect("scales"))]),
    };
    let mut reference: Option<Vec<i32>> = None;
    let mut rows = Vec::new();
    for &kern in paths {
        let mut c = vec![0i32; m * n];
        let mut y = vec![0u8; m * n];
        let peak = peak_gops(kern, reps, Peak::Registers);
        let split_peak = packed.split_entries(m).and_then(|_| peak_gops(kern, reps, Peak::Split));
        let loaded_peak = peak_gops(kern, reps, Peak::Loaded);
        let gemm = median_secs(reps, || gemm_u8(kern, &a, m, za, &packed, &mut c).expect("gemm"));
        if std::env::var_os("GEMM_BENCH_RQ").is_some() {
            let rq = median_secs(reps, || {
                requantize(kern, &plan, &c, n, None, &mut y).expect("requantize");
            });
            eprintln!("{}: requantize alone {:.2} ns/element", kern.path(), rq * 1e9 / (m * n) as f64);
        }
        // The fused form (requantization per finished block on the VNNI path), as the generated code runs it.
        let gemm_rq = median_secs(reps, || {
            gemm_u8_requant(kern, &a, m, za, &packed, &plan, None, &mut c, &mut y).expect("gemm+rq");
        });
        let mut separate = vec![0u8; m * n];
        requantize(kern, &plan, &c, n, None, &mut separate).expect("requantize");
        assert!(separate == y, "{}: fused requantization differs at {m}x{k}x{n}", kern.path());

        match &reference {
            None => reference = Some(c),
            Some(r) => assert!(r == &c, "{} differs from {} at {m}x{k}x{n}", kern.path(), paths[0].path()),
        }
        rows.push(Row { isa: kern.path(), shape: (m, k, n), gemm, gemm_rq, peak, split_peak, split_entries: packed.split_entries(m), loaded_peak });
    }
    rows
}

fn gops((m, k, n): (usize, usize, usize), secs: f64) -> f64 {
    2.0 * (m * k * n) as f64 / secs / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut shapes = Vec::new();
    let (mut json, mut peak, mut isa, mut reps, mut bell) = (false, false, None, 7usize, false);
    let mut i = 0;
    let usage = "usage: gemm_bench [--shape M K N]... [--isa portable|avx2|avx512vnni|avx512amx] [--reps R] [--json] [--peak] [--weights uniform|bell]";
    while i < args.len() {
        match args[i].as_str() {
            "--shape" if i + 3 < args.len() => {
                let p = |s: &String| s.parse::<usize>().unwrap_or_else(|_| panic!("{usage}"));
                shapes.push((p(&args[i + 1]), p(&args[i + 2]), p(&args[i + 3])));
                i += 3;
            }
            "--isa" if i + 1 < args.len() => {
                isa = Some(Isa::parse(&args[i + 1]).unwrap_or_else(|| panic!("{usage}")));
                i += 1;
            }
            "--reps" if i + 1 < args.len() => {
                reps = args[i + 1].parse().unwrap_or_else(|_| panic!("{usage}"));
                i += 1;
            }
            "--weights" if i + 1 < args.len() => {
                bell = match args[i + 1].as_str() {
                    "uniform" => false,
                    "bell" => true,
                    _ => panic!("{usage}"),
                };
                i += 1;
            }
            "--json" => json = true,
            "--peak" => peak = true,
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let paths: Vec<Kernels> = match isa {
        Some(isa) => vec![Kernels::new(isa).unwrap_or_else(|e| {
            eprintln!("gemm_bench: {e}");
            std::process::exit(2)
        })],
        None => Isa::available().into_iter().map(|isa| Kernels::new(isa).expect("available")).collect(),
    };
    if peak {
        shapes = vec![(96, 256, 64)];
    } else if shapes.is_empty() {
        shapes = [1, 64, 256].iter().flat_map(|&m| [1024, 4096].map(|kn| (m, kn, kn))).collect();
    }
    let rows: Vec<Row> = shapes.iter().flat_map(|&s| run_shape(&paths, s, reps, bell)).collect();
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"isa\":\"{}\",\"m\":{},\"k\":{},\"n\":{},\"gemm_s\":{:e},\"gemm_rq_s\":{:e},\"instruction_peak_gops\":{},\"split_entries\":{},\"split_peak_gops\":{},\"loaded_peak_gops\":{}}}",
                    r.isa,
                    r.shape.0,
                    r.shape.1,
                    r.shape.2,
                    r.gemm,
                    r.gemm_rq,
                    r.peak.map_or("null".to_string(), |p| format!("{p:.3}")),
                    r.split_entries.map_or("null".to_string(), |e| e.to_string()),
                    r.split_peak.map_or("null".to_string(), |p| format!("{p:.3}")),
                    r.loaded_peak.map_or("null".to_string(), |p| format!("{p:.3}"))
                )
            })
            .collect();
        println!("{{\"rows\":[{}]}}", items.join(","));
        return;
    }
    println!(
        "{:<11} {:>5} {:>5} {:>5} {:>11} {:>9} {:>11} {:>9} {:>10} {:>10}",
        "path", "M", "K", "N", "gemm ms", "GOPS", "gemm+rq ms", "GOPS", "peak GOPS", "L1 steps"
    );
    for r in &rows {
        println!(
            "{:<11} {:>5} {:>5} {:>5} {:>11.3} {:>9.1} {:>11.3} {:>9.1} {:>10} {:>10}",
            r.isa.name(),
            r.shape.0,
            r.shape.1,
            r.shape.2,
            r.gemm * 1e3,
            gops(r.shape, r.gemm),
            r.gemm_rq * 1e3,
            gops(r.shape, r.gemm_rq),
            r.peak.map_or("-".to_string(), |p| format!("{p:.1}")),
            r.loaded_peak.map_or("-".to_string(), |p| format!("{p:.1}"))
        );
    }
}
