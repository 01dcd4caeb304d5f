//! `equal_as_f32` (ONNX Equal then Cast to FLOAT) and `select_equal` (Where(Equal(p, q), a, b)) against a coordinate-by-coordinate evaluation of
//! the definition with numpy broadcasting, on random shapes and i32 / i64 / u8 elements; bad
//! operands are errors.

mod common;

use common::Rng;
use qdqc_kernels::codes::compare::{equal_as_f32, select_equal};
use qdqc_kernels::codes::{broadcast_shape, numel};

/// Output coordinate `c` read in an operand of shape `s` (right-aligned, extent 1 stretched).
fn at(c: &[usize], s: &[usize]) -> usize {
    let lead = c.len() - s.len();
    s.iter().enumerate().fold(0, |acc, (i, &d)| acc * d + if d == 1 { 0 } else { c[lead + i] })
}

fn reference<T: PartialEq + Copy>(a: &[T], sa: &[usize], b: &[T], sb: &[usize]) -> Vec<f32> {
    let shape = broadcast_shape(sa, sb).unwrap();
    (0..numel(&shape))
        .map(|mut flat| {
            let mut c = vec![0; shape.len()];
            for k in (0..shape.len()).rev() {
                c[k] = flat % shape[k];
                flat /= shape[k];
            }
            if a[at(&c, sa)] == b[at(&c, sb)] { 1.0 } else { 0.0 }
        })
        .collect()
}

#[test]
fn equal_is_the_broadcast_definition() {
    let mut rng = Rng::new(5);
    for _ in 0..200 {
        let full: Vec<usize> = (0..rng.below(4) + 1).map(|_| rng.below(4) as usize + 1).collect();
        // Each operand: a suffix of the full shape with some extents set to 1.
        let operand = |rng: &mut Rng| -> Vec<usize> {
            let drop = rng.below(full.len() as u64 + 1) as usize;
            full[drop..].iter().map(|&d| if rng.below(3) == 0 { 1 } else { d }).collect()
        };
        let (sa, sb) = (operand(&mut rng), operand(&mut rng));
        let a: Vec<i64> = (0..numel(&sa)).map(|_| rng.below(3) as i64 - 1).collect();
        let b: Vec<i64> = (0..numel(&sb)).map(|_| rng.below(3) as i64 - 1).collect();
        let shape = broadcast_shape(&sa, &sb).unwrap();
        let mut y = vec![f32::NAN; numel(&shape)];
        equal_as_f32(&a, &sa, &b, &sb, &mut y).unwrap();
        assert_eq!(y, reference(&a, &sa, &b, &sb), "{sa:?} vs {sb:?}");
        let (a32, b32): (Vec<i32>, Vec<i32>) = (a.iter().map(|&v| v as i32).collect(), b.iter().map(|&v| v as i32).collect());
        let mut y32 = vec![f32::NAN; numel(&shape)];
        equal_as_f32(&a32, &sa, &b32, &sb, &mut y32).unwrap();
        assert_eq!(y32, y);
    }
}

#[test]
fn one_hot_of_bytes() {
    // magika's pattern: bytes [1, 4, 1] against 0..257 [257] gives [1, 4, 257], one 1 per row.
    let bytes = [0i32, 255, 256, 7];
    let iota: Vec<i32> = (0..257).collect();
    let mut y = vec![0f32; 4 * 257];
    equal_as_f32(&bytes, &[1, 4, 1], &iota, &[257], &mut y).unwrap();
    for (row, &v) in y.chunks(257).zip(&bytes) {
        assert_eq!(row.iter().sum::<f32>(), 1.0);
        assert_eq!(row[v as usize], 1.0);
    }
}

#[test]
fn bad_operands_are_errors() {
    let mut y = vec![0f32; 6];
    assert!(equal_as_f32(&[1u8, 2, 3], &[3], &[1u8, 2], &[2], &mut y[..3]).is_err(), "shapes that do not broadcast");
    assert!(equal_as_f32(&[1u8, 2, 3], &[3], &[1u8], &[1], &mut y).is_err(), "output of another size");
    assert!(equal_as_f32(&[1u8, 2], &[3], &[1u8], &[1], &mut y[..3]).is_err(), "input shorter than its shape");
}

#[test]
fn select_equal_is_where_of_equal() {
    let mut rng = Rng::new(6);
    for _ in 0..100 {
        let full: Vec<usize> = (0..rng.below(4) + 1).map(|_| rng.below(3) as usize + 1).collect();
        let operand = |rng: &mut Rng| -> Vec<usize> {
            let drop = rng.below(full.len() as u64 + 1) as usize;
            full[drop..].iter().map(|&d| if rng.below(3) == 0 { 1 } else { d }).collect()
        };
        let shapes: Vec<Vec<usize>> = (0..4).map(|_| operand(&mut rng)).collect();
        // p, q: f32 with zeros of both signs and a NaN now and then; a, b: distinct values.
        let pick = [0.0f32, -0.0, 1.0, f32::NAN];
        let p: Vec<f32> = (0..numel(&shapes[0])).map(|_| pick[rng.below(4) as usize]).collect();
        let q: Vec<f32> = (0..numel(&shapes[1])).map(|_| pick[rng.below(3) as usize]).collect();
        let a: Vec<f32> = (0..numel(&shapes[2])).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..numel(&shapes[3])).map(|i| -(i as f32) - 1.0).collect();
        let mut shape = Vec::new();
        for s in &shapes {
            shape = broadcast_shape(&shape, s).unwrap();
        }
        let mut y = vec![f32::NAN; numel(&shape)];
        select_equal((&p, &shapes[0]), (&q, &shapes[1]), (&a, &shapes[2]), (&b, &shapes[3]), &mut y).unwrap();
        // Reference: the condition by equal_as_f32's definition, then the choice per coordinate.
        let cond = reference(&p, &shapes[0], &q, &shapes[1]);
        let cond_shape = broadcast_shape(&shapes[0], &shapes[1]).unwrap();
        for (flat, &v) in y.iter().enumerate() {
            let mut c = vec![0; shape.len()];
            let mut rest = flat;
            for k in (0..shape.len()).rev() {
                c[k] = rest % shape[k];
                rest /= shape[k];
            }
            let want = if cond[at(&c, &cond_shape)] == 1.0 { a[at(&c, &shapes[2])] } else { b[at(&c, &shapes[3])] };
            assert_eq!(v.to_bits(), want.to_bits(), "{shapes:?} at {c:?}");
        }
    }
    let mut y = vec![0f32; 2];
    assert!(select_equal((&[0f32, 1.0], &[2]), (&[0f32], &[1]), (&[1f32, 2.0, 3.0], &[3]), (&[0f32], &[1]), &mut y).is_err(), "shapes that do not broadcast");
}
