//! The dynamic group's epilogues on 10^6 rows each, against the exact definitions, with the
//! fallback's hit rate and cost (one thread, this host's path):
//!
//!     cargo run --release -p qdqc-kernels --example dynamic_rows -- [ROWS]
//!
//! 1. The whole group (`DynamicMatMul`, per-token quantization, K = 64, N = 16) on ROWS random
//!    activation rows, `Real` and `Codes` epilogues: every element against the exact value of an
//!    i64 accumulator recomputed from the row's codes.
//! 2. The float epilogue on ROWS adversarial rows (`tests/common/adversarial.rs`: run-time scales
//!    over the f32 range, exact f32 midpoints, products that round in f64 onto a midpoint,
//!    subnormal and overflow boundaries), N = 16: `certified_f32` against `exact_f32`.
//! 3. The codes epilogue on ROWS adversarial rows (exact ties, near ties, saturation edges,
//!    `sx = 0`), N = 16, u8 and i8 in turn: `codes_row` against `requant_exact`.
//!
//! Each part prints its mismatches (the run exits 1 on any), its fallbacks, and the epilogue's
//! cost per element (median of batches of 10^4 rows) certified and with the exact definition
//! alone; part 1's epilogue times are those of rows without near ties.

#[path = "../tests/common/mod.rs"]
mod common;

use common::Rng;
use common::adversarial::{codes_row, float_row};
use qdqc_kernels::dynamic::{DynamicMatMul, Epilogue, Granularity, certified_f32, exact_f32};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_kernels::{Kernels, Layout, PackedB};
use std::time::Instant;

const N: usize = 16;
const BATCH: usize = 10_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Part {
    name: &'static str,
    elements: u64,
    mismatches: u64,
    fallbacks: u64,
    certified_ns: Vec<f64>,
    exact_ns: Vec<f64>,
}

impl Part {
    fn new(name: &'static str) -> Part {
        Part { name, elements: 0, mismatches: 0, fallbacks: 0, certified_ns: Vec::new(), exact_ns: Vec::new() }
    }

    fn print(&self) {
        println!(
            "{}: {} elements, {} mismatches, {} fallbacks ({:.4} %), {:.2} ns/element certified, {:.2} ns/element exact only",
            self.name,
            self.elements,
            self.mismatches,
            self.fallbacks,
            100.0 * self.fallbacks as f64 / self.elements as f64,
            median(self.certified_ns.clone()),
            median(self.exact_ns.clone())
        );
    }
}

fn group(kern: Kernels, rows: usize) -> [Part; 2] {
    let k = 64;
    let mut rng = Rng::new(7);
    let w = rng.i8s(k * N);
    let zw: Vec<i8> = (0..N).map(|_| rng.below(9) as i8 - 4).collect();
    let sw: Vec<f32> = (0..N).map(|_| rng.f32_in(0.002, 0.02)).collect();
    let packed = PackedB::from_i8(&w, k, N, Layout::KN, &zw).expect("weights");
    let (sy, output) = (0.05f32, Output::new(-3, Code::I8).expect("output"));
    let real = DynamicMatMul::new(&packed, &sw, Granularity::Row, Epilogue::Real).expect("group");
    let codes = DynamicMatMul::new(&packed, &sw, Granularity::Row, Epilogue::Codes { sy, output }).expect("group");
    let (mut pf, mut pq) = (Part::new("group, real f32"), Part::new("group, codes i8"));
    let (mut q, mut c, mut yf, mut yq) = (vec![0u8; BATCH * k], vec![0i32; BATCH * N], vec![0f32; N], vec![0i8; N]);
    for start in (0..rows).step_by(BATCH) {
        let m = BATCH.min(rows - start);
        let x: Vec<f32> = (0..m * k).map(|i| rng.f32_in(-2.0, 1.0 + (i / k % 7) as f32)).collect();
        let params = real.quantize(&x, k, &mut q[..m * k]).expect("quantize");
        real.accumulate(kern, &q[..m * k], m, &params, &packed, &mut c[..m * N]).expect("gemm");
        // The accumulators against i64 dot products of the codes.
        for r in 0..m {
            for col in 0..N {
                let want: i64 = (0..k).map(|kk| (i64::from(q[r * k + kk]) - i64::from(params[r].1)) * (i64::from(w[kk * N + col]) - i64::from(zw[col]))).sum();
                pf.mismatches += u64::from(i64::from(c[r * N + col]) != want);
            }
        }
        let t = Instant::now();
        for (r, acc) in c[..m * N].chunks_exact(N).enumerate() {
            pf.fallbacks += real.float_row(params[r].0, acc, &mut yf);
            std::hint::black_box(&yf);
        }
        pf.certified_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        let t = Instant::now();
        for (r, acc) in c[..m * N].chunks_exact(N).enumerate() {
            for ((&a, y), &s) in acc.iter().zip(&mut yf).zip(&sw) {
                *y = exact_f32(a, params[r].0, s);
            }
            std::hint::black_box(&yf);
        }
        pf.exact_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        let t = Instant::now();
        for (r, acc) in c[..m * N].chunks_exact(N).enumerate() {
            pq.fallbacks += codes.codes_row(kern, params[r].0, acc, &mut yq).expect("codes");
            std::hint::black_box(&yq);
        }
        pq.certified_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        let t = Instant::now();
        for (r, acc) in c[..m * N].chunks_exact(N).enumerate() {
            for ((&a, y), &s) in acc.iter().zip(&mut yq).zip(&sw) {
                *y = requant_exact(a, 0, &Ratio::new(params[r].0, s, sy).expect("ratio"), output) as i8;
            }
            std::hint::black_box(&yq);
        }
        pq.exact_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        // Correctness of both epilogues, outside the timing.
        for (r, acc) in c[..m * N].chunks_exact(N).enumerate() {
            real.float_row(params[r].0, acc, &mut yf);
            codes.codes_row(kern, params[r].0, acc, &mut yq).expect("codes");
            for col in 0..N {
                pf.mismatches += u64::from(yf[col].to_bits() != exact_f32(acc[col], params[r].0, sw[col]).to_bits());
                let want = requant_exact(acc[col], 0, &Ratio::new(params[r].0, sw[col], sy).expect("ratio"), output);
                pq.mismatches += u64::from(i32::from(yq[col]) != want);
            }
        }
        pf.elements += (m * N) as u64;
        pq.elements += (m * N) as u64;
    }
    [pf, pq]
}

fn float_adversarial(rows: usize) -> Part {
    let mut rng = Rng::new(11);
    let mut p = Part::new("adversarial, real f32");
    let mut y = vec![0f32; BATCH * N];
    for start in (0..rows).step_by(BATCH) {
        let m = BATCH.min(rows - start);
        let batch: Vec<_> = (0..m).map(|i| float_row(&mut rng, (start + i) as u64, N)).collect();
        let t = Instant::now();
        for (row, y) in batch.iter().zip(y.chunks_exact_mut(N)) {
            let sx = f64::from(row.sx);
            for ((&c, &sw), y) in row.acc.iter().zip(&row.sw).zip(y) {
                let (v, fell) = certified_f32(c, sx * f64::from(sw), row.sx, sw);
                *y = v;
                p.fallbacks += u64::from(fell);
            }
        }
        std::hint::black_box(&y);
        p.certified_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        let t = Instant::now();
        let want: Vec<f32> = batch.iter().flat_map(|row| row.acc.iter().zip(&row.sw).map(|(&c, &sw)| exact_f32(c, row.sx, sw))).collect();
        p.exact_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        p.mismatches += y.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count() as u64;
        p.elements += (m * N) as u64;
    }
    p
}

fn codes_adversarial(kern: Kernels, rows: usize) -> Part {
    let mut rng = Rng::new(13);
    let mut p = Part::new("adversarial, codes u8/i8");
    for start in (0..rows).step_by(BATCH) {
        let m = BATCH.min(rows - start);
        let (code, zy) = if (start / BATCH).is_multiple_of(2) { (Code::U8, rng.below(256) as i32) } else { (Code::I8, rng.below(256) as i32 - 128) };
        let output = Output::new(zy, code).expect("output");
        let batch: Vec<_> = (0..m).map(|i| codes_row(&mut rng, (start + i) as u64, N, (zy, code.min(), code.max()))).collect();
        let mut got = vec![0i32; m * N];
        let t = Instant::now();
        if code == Code::U8 {
            let mut y = vec![0u8; m * N];
            for (row, y) in batch.iter().zip(y.chunks_exact_mut(N)) {
                p.fallbacks += qdqc_kernels::dynamic::codes_row(kern, row.sx, &row.sw, row.sy, output, &row.acc, y).expect("codes");
            }
            p.certified_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
            got.iter_mut().zip(y).for_each(|(g, y)| *g = i32::from(y));
        } else {
            let mut y = vec![0i8; m * N];
            for (row, y) in batch.iter().zip(y.chunks_exact_mut(N)) {
                p.fallbacks += qdqc_kernels::dynamic::codes_row(kern, row.sx, &row.sw, row.sy, output, &row.acc, y).expect("codes");
            }
            p.certified_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
            got.iter_mut().zip(y).for_each(|(g, y)| *g = i32::from(y));
        }
        let t = Instant::now();
        let want: Vec<i32> = batch
            .iter()
            .flat_map(|row| {
                row.acc.iter().zip(&row.sw).map(
                    move |(&c, &sw)| {
                        if row.sx == 0.0 { zy } else { requant_exact(c, 0, &Ratio::new(row.sx, sw, row.sy).expect("ratio"), output) }
                    },
                )
            })
            .collect();
        p.exact_ns.push(t.elapsed().as_nanos() as f64 / (m * N) as f64);
        p.mismatches += got.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
        p.elements += (m * N) as u64;
    }
    p
}

fn main() {
    let rows: usize = std::env::args().nth(1).map_or(1_000_000, |a| a.parse().expect("ROWS: a number"));
    let kern = Kernels::detect();
    println!("path {}, {rows} rows per part, N = {N}", kern.path());
    let start = Instant::now();
    let [pf, pq] = group(kern, rows);
    let parts = [pf, pq, float_adversarial(rows), codes_adversarial(kern, rows)];
    for p in &parts {
        p.print();
    }
    println!("total {:.1} s", start.elapsed().as_secs_f64());
    if parts.iter().any(|p| p.mismatches > 0) {
        std::process::exit(1);
    }
}
