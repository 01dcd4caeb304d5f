//! Lookup tables on codes: every code reads its own entry (i8 codes by bit pattern).

use qdqc_kernels::codes::lut::{apply_lut, tabulate};

#[test]
fn every_code_reads_its_entry() {
    let x: Vec<i8> = (-128..=127).rev().collect();
    let table = tabulate::<i8, i16>(|v| i16::from(v) * 3 - 1);
    let mut out = vec![0i16; x.len()];
    apply_lut(&table, &x, &mut out).unwrap();
    for (&v, &y) in x.iter().zip(&out) {
        assert_eq!(y, i16::from(v) * 3 - 1, "code {v}");
    }
    assert_eq!(table[255], -4, "-1i8 is entry 255");
    let xu: Vec<u8> = (0..=255).collect();
    let tu = tabulate::<u8, u8>(|v| v.wrapping_mul(7));
    let mut outu = vec![0u8; 256];
    apply_lut(&tu, &xu, &mut outu).unwrap();
    assert!(xu.iter().zip(&outu).all(|(&v, &y)| y == v.wrapping_mul(7)));
    assert!(apply_lut(&tu, &xu, &mut outu[..10]).is_err(), "length mismatch refused");
}
