//! The pooling geometry the rule tests, the kernel-model tests and the broken twins share: one
//! file, a module of `tests/common`, included by `tests/broken` and `rewrites/tests/families.rs`.

use qdqc_ort::pool::PoolGeometry;

/// 3×3 windows, stride 1, pad 1, padding excluded, over a 5×5 image: windows of 4, 6 and 9.
pub fn pool_geometry_5x5() -> PoolGeometry {
    PoolGeometry {
        input: vec![5, 5],
        kernel: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![1; 4],
        dilations: vec![1, 1],
        ceil_mode: false,
        count_include_pad: false,
    }
}
