//! Convolution throughput per kernel path, one thread, the fastest of several batches in CPU time: the fused convolution and
//! requantization to u8 (`PackedConv::run_requant`, what QLinearConv computes) on yolov8n-like
//! shapes, in GOPS (2 × the real multiply-accumulates per second) and as a share of the path's
//! instruction peak (`instruction_peak`, measured just before each path's timings).
//!
//!     cargo run --release -p qdqc-kernels --example conv_bench -- [--isa NAME] [--reps N] [--only SUBSTRING] [--weights uniform|bell]
//!
//! Shapes: 3×3 stride 1 (the shifted lowering), 3×3 stride 2 (the shifted lowering over two
//! column phases; the 3-channel first layer keeps the direct gathers), 1×1 (the shifted lowering
//! as one line), at the channel counts and resolutions
//! of yolov8n's stages at 640×640 and at the 64×64 of `bench/rust_target.py`.
//! Weights: uniform over the int8 range (the default; the AVX2 path keeps its i16 tile), or
//! `bell`: bell-shaped with σ ≈ 36, as per-channel weights of real models are, which the AVX2
//! path splits for `vpmaddubsw` (`split` after the shape: how many weights the split changes).
//! Each shape prints a checksum of its codes: the same on every path.

use qdqc_kernels::conv::{ConvParams, ConvRequant, PackedConv, Scratch};
use qdqc_kernels::requant::{Certified, Code, Output, Ratio};
use qdqc_kernels::{Isa, Kernels};
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

/// Seconds this thread has run on a CPU (`/proc/thread-self/schedstat`): on a shared host the
/// time slices other processes take are not counted, as wall time would count them.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("/proc/thread-self/schedstat (Linux)");
    stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).expect("schedstat: run time in ns") as f64 * 1e-9
}

/// The fastest of `reps` batches of about 100 ms (sized by wall time: the CPU time a running
/// thread reports advances in scheduler ticks), CPU seconds per call.
fn min_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64().max(1e-7);
    let batch = ((0.1 / one) as usize).max(1);
    (0..reps)
        .map(|_| {
            let t = cpu_secs();
            for _ in 0..batch {
                f();
            }
            (cpu_secs() - t) / batch as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// (name, Cin, Cout, kernel, stride, pad, input side).
const SHAPES: [(&str, usize, usize, usize, usize, usize, usize); 10] = [
    ("3x3 s1 16->16 @160", 16, 16, 3, 1, 1, 160),
    ("3x3 s1 32->32 @80", 32, 32, 3, 1, 1, 80),
    ("3x3 s1 64->64 @40", 64, 64, 3, 1, 1, 40),
    ("3x3 s2 16->32 @160", 16, 32, 3, 2, 1, 160),
    ("3x3 s2 64->128 @40", 64, 128, 3, 2, 1, 40),
    ("1x1 64->64 @80", 64, 64, 1, 1, 0, 80),
    ("1x1 256->128 @20", 256, 128, 1, 1, 0, 20),
    ("3x3 s2 3->16 @640", 3, 16, 3, 2, 1, 640),
    // The 64×64 input `bench/rust_target.py` feeds yolov8n: lines of 8 positions and fewer.
    ("3x3 s1 64->64 @8", 64, 64, 3, 1, 1, 8),
    ("3x3 s2 32->64 @16", 32, 64, 3, 2, 1, 16),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let reps: usize = value("--reps").map_or(7, |v| v.parse().expect("--reps N"));
    let only = value("--only");
    let bell = match value("--weights").as_deref() {
        None | Some("uniform") => false,
        Some("bell") => true,
        Some(other) => panic!("--weights uniform|bell, not {other}"),
    };
    let paths: Vec<Kernels> = match value("--isa") {
        Some(name) => vec![Kernels::new(Isa::parse(&name).expect("--isa NAME")).expect("ISA on this host")],
        None => Isa::available().into_iter().rev().filter_map(|isa| Kernels::new(isa).ok()).collect(),
    };
    for kern in paths {
        let (mut macs, mut check) = (0u64, 0i32);
        let secs = min_secs(reps, || {
            let (m, s) = qdqc_kernels::instruction_peak(kern, 1 << 16);
            (macs, check) = (m, check.wrapping_add(s));
        });
        std::hint::black_box(check);
        let peak = (macs > 0).then(|| 2.0 * macs as f64 / secs / 1e9);
        println!("{}: instruction peak {}", kern.path().name(), peak.map_or("-".into(), |p| format!("{p:.1} GOPS")));
        for &(name, cin, cout, k, stride, pad, side) in SHAPES.iter().filter(|s| only.as_ref().is_none_or(|o| s.0.contains(o.as_str()))) {
            let p = ConvParams {
                in_channels: cin,
                out_channels: cout,
                groups: 1,
                kernel: vec![k, k],
                strides: vec![stride; 2],
                dilations: vec![1; 2],
                pads_begin: vec![pad; 2],
                pads_end: vec![pad; 2],
            };
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (cin * 31 + cout * 7 + side) as u64);
            let x: Vec<u8> = (0..cin * side * side).map(|_| rng.next() as u8).collect();
            let w: Vec<i8> = if bell {
                // The sum of four uniform draws in [0, 1), centred: about normal, σ = 62/√3 ≈ 36.
                let mut draw = || (rng.next() >> 40) as f64 / (1u64 << 24) as f64;
                (0..cout * cin * k * k).map(|_| ((draw() + draw() + draw() + draw() - 2.0) * 62.0).round() as i8).collect()
            } else {
                (0..cout * cin * k * k).map(|_| rng.next() as i8).collect()
            };
            let conv = PackedConv::from_i8(p.clone(), &w, &[0]).expect("pack");
            let out_sp: usize = p.output(&[side, side]).expect("output").iter().product();
            let rq = ConvRequant {
                forms: vec![Certified::new(Ratio::new(0.02, 0.003, 0.05).expect("ratio"))],
                bias: (0..cout).map(|c| c as i32 * 17 - 300).collect(),
                output: Output::new(3, Code::U8).expect("output"),
            };
            let mut out = vec![0u8; cout * out_sp];
            let mut s = Scratch::default();
            let t = min_secs(reps, || {
                conv.run_requant(kern, &x, 1, &[side, side], 7, &rq, &mut out, &mut s).expect("run");
            });
            let gops = 2.0 * (cout * cin * k * k * out_sp) as f64 / t / 1e9;
            let share = peak.map_or(String::new(), |p| format!(" ({:.0} % of peak)", 100.0 * gops / p));
            let split = conv.split_entries(kern).map_or(String::new(), |e| format!("  split {e}"));
            println!("  {name:<22} {:>9.1} us {gops:>7.1} GOPS{share}  checksum {}{split}", t * 1e6, out.iter().map(|&v| u64::from(v)).sum::<u64>());
        }
    }
}
