//! Lookup tables on codes: every code reads its own entry (i8 codes by bit pattern), on every
//! kernel path the host has (AVX-512 with VBMI looks up 64 codes per step, AVX2 32: lengths around
//! 32 and 64 exercise their tails).

use qdqc_kernels::codes::lut::{apply_lut, tabulate};
use qdqc_kernels::{Isa, Kernels};

#[test]
fn every_code_reads_its_entry_on_every_path() {
    for isa in Isa::available() {
        let k = Kernels::new(isa).unwrap();
        for len in [1, 31, 32, 33, 63, 64, 65, 256, 1000] {
            let x: Vec<i8> = (0..len).map(|i| (127 - (i * 37) % 256) as i8).collect();
            let table = tabulate::<i8, i8>(|v| v.wrapping_mul(3).wrapping_sub(1));
            let mut out = vec![0i8; x.len()];
            apply_lut(k, &table, &x, &mut out).unwrap();
            for (&v, &y) in x.iter().zip(&out) {
                assert_eq!(y, v.wrapping_mul(3).wrapping_sub(1), "{isa:?}, length {len}, code {v}");
            }
            assert_eq!(table[255], -4, "-1i8 is entry 255");
            let xu: Vec<u8> = (0..len).map(|i| (i * 101 % 256) as u8).collect();
            let tu = tabulate::<u8, u8>(|v| v.wrapping_mul(7));
            let mut outu = vec![0u8; xu.len()];
            apply_lut(k, &tu, &xu, &mut outu).unwrap();
            assert!(xu.iter().zip(&outu).all(|(&v, &y)| y == v.wrapping_mul(7)), "{isa:?}, length {len}");
        }
        let mut short = [0u8; 10];
        assert!(apply_lut(k, &[0u8; 256], &[0u8; 11], &mut short).is_err(), "length mismatch refused");
    }
}
