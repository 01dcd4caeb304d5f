//! Throughput of the f32 GEMM and convolution (`float::gemm::sgemm`, `float::conv::conv`), one
//! thread, medians of repeated runs: `cargo run --release -p qdqc-kernels --example float_bench`.
//! Prints GFLOPS (2 flops per multiply-add), and nanoseconds per element for the library functions
//! and the softmax on codes (three kernels against the fused one); no comparison with other libraries here.

use qdqc_kernels::codes::qdq;
use qdqc_kernels::codes::softmax::SoftmaxCodes;
use qdqc_kernels::conv::ConvParams;
use qdqc_kernels::float::conv::conv;
use qdqc_kernels::float::gemm::sgemm;
use qdqc_kernels::float::softmax::softmax;
use qdqc_kernels::float::unary::{self, Function};
use qdqc_kernels::{Isa, Kernels};
use std::time::Instant;

fn median_seconds(mut run: impl FnMut()) -> f64 {
    run();
    let mut times: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[3]
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1u32 << 24) as f32 - 0.5).collect()
}

fn main() {
    for isa in Isa::available() {
        println!("path {isa}");
        run(Kernels::new(isa).expect("available"));
    }
}

fn run(kernels: Kernels) {
    // Library functions: nanoseconds per element over [-6, 6).
    let x: Vec<f32> = values(1 << 20, 5).iter().map(|v| 12.0 * v).collect();
    let mut y = vec![0f32; x.len()];
    for f in [Function::Sigmoid, Function::Tanh, Function::Exp, Function::Erf, Function::Gelu, Function::GeluTanh, Function::Softplus, Function::Silu] {
        let s = median_seconds(|| unary::map(kernels, f, &x, &mut y).unwrap());
        println!("{f:<10?} {:6.2} ns/element", s * 1e9 / x.len() as f64);
    }
    // MiniLM's attention softmax on codes, [1, 12, 64, 64]: DequantizeLinear, Softmax and
    // QuantizeLinear as three kernels, and as one (`codes::softmax`).
    let shape = [1, 12, 64, 64];
    let codes: Vec<u8> = values(12 * 64 * 64, 6).iter().map(|v| (128.0 + 200.0 * v) as u8).collect();
    let (mut f, mut p, mut q) = (vec![0f32; codes.len()], vec![0f32; codes.len()], vec![0u8; codes.len()]);
    let unfused = median_seconds(|| {
        qdq::dequantize_linear(&codes, &shape, 0, &[0.12], &[132], &mut f).unwrap();
        softmax(kernels, &f, &shape, -1, &mut p).unwrap();
        qdq::quantize_linear(&p, &shape, 0, &[1.0 / 255.0], &[0], &mut q).unwrap();
    });
    let table = SoftmaxCodes::<u8>::new(0.12, 132, 1.0 / 255.0, 0).unwrap();
    let fused = median_seconds(|| table.run(kernels, &codes, &shape, &mut q).unwrap());
    println!("softmax on codes [1, 12, 64, 64]: unfused {:6.2} ns/element, fused {:6.2}", unfused * 1e9 / q.len() as f64, fused * 1e9 / q.len() as f64);
    for (m, n, k) in [(1, 1000, 1024), (64, 3136, 576), (256, 784, 1152), (512, 512, 512)] {
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let mut c = vec![0f32; m * n];
        let s = median_seconds(|| sgemm(kernels, m, n, k, &a, &b, &mut c).unwrap());
        println!("sgemm m={m:<4} n={n:<5} k={k:<5} {:7.2} GFLOPS", 2.0 * (m * n * k) as f64 / s / 1e9);
    }
    let cases = [("3x3 64→64 56x56", 64, 64, 1, 3, 56), ("1x1 128→256 28x28", 128, 256, 1, 1, 28), ("dw3x3 256 28x28", 256, 256, 256, 3, 28)];
    for (name, cin, cout, groups, k, hw) in cases {
        let pad = k / 2;
        let p = ConvParams {
            in_channels: cin,
            out_channels: cout,
            groups,
            kernel: vec![k, k],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads_begin: vec![pad, pad],
            pads_end: vec![pad, pad],
        };
        let (x, w) = (values(cin * hw * hw, 3), values(cout * cin / groups * k * k, 4));
        let mut y = vec![0f32; cout * hw * hw];
        let s = median_seconds(|| conv(kernels, &p, &x, 1, &[hw, hw], &w, None, &mut y).unwrap());
        let flops = 2.0 * (cout * hw * hw * cin / groups * k * k) as f64;
        println!("conv {name:<20} {:7.2} GFLOPS ({:.2} ms)", flops / s / 1e9, s * 1e3);
    }
}
