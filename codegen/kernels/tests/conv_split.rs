//! The AVX2 path's pair split for convolutions (`src/split.rs` `RowSplit`, the shifted lowering's
//! `vpmaddubsw` tile in `src/micro/conv_avx2.rs`): weights as real models have them — most pairs
//! of adjacent input channels safe, a few broken, some at the extremes — are split, and every path
//! gives the i64 definition's accumulators, with activations that saturate every broken pair
//! (255), zero points on both sides, grouped rows (the split's rows are the convolution's), channel
//! counts that pad a group of 4, lines of 8 positions or fewer (half tiles), strides of 2 (column
//! phases), 1-D and 3-D; requantized as `requant_exact` of the definition. The same with the split
//! stored ahead as a generated crate stores it (`PackedConv::split_ahead`, `with_split`), whose
//! shape is checked when it is read back.

mod common;

use common::{Rng, conv_params as params, conv_reference, kernels};
use qdqc_kernels::Isa;
use qdqc_kernels::conv::{ConvParams, ConvRequant, PackedConv, Scratch};
use qdqc_kernels::requant::{Certified, Code, Output, Ratio, requant_exact};

/// Broken pairs (the second weight beyond what `vpmaddubsw` sums exactly with the first), each at
/// the edge of a bound or at the extremes.
const BROKEN: [(i8, i8); 6] = [(127, 127), (-128, -128), (127, 2), (-128, -1), (100, 29), (-100, -29)];

/// ONNX weights `[Cout][Cin/groups][taps]`, mostly |w| ≤ 40, and a broken pair of channels
/// (2c, 2c + 1: a pair of the shifted rows) at one tap in about `every`.
fn weights(rng: &mut Rng, p: &ConvParams, every: u64) -> Vec<i8> {
    let (cig, taps) = (p.in_channels / p.groups, p.kernel.iter().product::<usize>());
    let mut w: Vec<i8> = (0..p.out_channels * cig * taps).map(|_| (rng.below(81) as i32 - 40) as i8).collect();
    for co in 0..p.out_channels {
        for c in (0..cig - 1).step_by(2) {
            for t in 0..taps {
                if rng.below(every) == 0 {
                    let (w0, w1) = BROKEN[rng.below(BROKEN.len() as u64) as usize];
                    w[(co * cig + c) * taps + t] = w0;
                    w[(co * cig + c + 1) * taps + t] = w1;
                }
            }
        }
    }
    w
}

/// One convolution on `isa`: the accumulators and the requantized codes against the definition;
/// on AVX2 the split must be taken.
fn case(isa: Isa, rng: &mut Rng, p: ConvParams, input: &[usize]) {
    let Some(kern) = kernels(isa) else { return };
    let batch = 2;
    let x: Vec<u8> = (0..batch * p.in_channels * input.iter().product::<usize>()).map(|_| if rng.below(2) == 0 { 255 } else { rng.next() as u8 }).collect();
    let w = weights(rng, &p, 24);
    let zw: Vec<i8> = (0..p.out_channels).map(|_| (rng.below(9) as i32 - 4) as i8).collect();
    let zx = rng.next() as u8;
    let conv = PackedConv::from_i8(p.clone(), &w, &zw).unwrap();
    let entries = conv.split_entries(kern);
    assert_eq!(entries.is_some_and(|e| e > 0), cfg!(target_arch = "x86_64") && isa == Isa::Avx2, "{isa}: {p:?}: split {entries:?}");
    let plane: usize = p.output(input).unwrap().iter().product();
    let mut acc = vec![0i32; batch * p.out_channels * plane];
    conv.run(kern, &x, batch, input, zx, &mut acc).unwrap();
    let wi: Vec<i64> = w.iter().map(|&v| i64::from(v)).collect();
    let zi: Vec<i64> = zw.iter().map(|&v| i64::from(v)).collect();
    let want = conv_reference(&p, &x, batch, input, i64::from(zx), &wi, &zi);
    for (i, (&got, &want)) in acc.iter().zip(&want).enumerate() {
        assert_eq!(
            i64::from(got),
            want,
            "{isa}: {p:?} input {input:?} ({entries:?} split entries): image {} channel {} position {}",
            i / plane / p.out_channels,
            i / plane % p.out_channels,
            i % plane
        );
    }
    let ratios: Vec<Ratio> = (0..p.out_channels).map(|c| Ratio::new(0.0213, 0.0039 * (1.0 + (c % 7) as f32 / 6.0), 0.517).unwrap()).collect();
    let bias: Vec<i32> = (0..p.out_channels).map(|c| (c as i32 * 7919) % 4001 - 2000).collect();
    let output = Output::new(128, Code::U8).unwrap();
    let rq = ConvRequant { forms: ratios.iter().map(|&r| Certified::new(r)).collect(), bias: bias.clone(), output };
    let mut got = vec![0u8; acc.len()];
    conv.run_requant(kern, &x, batch, input, zx, &rq, &mut got, &mut Scratch::default()).unwrap();
    let expected: Vec<u8> = want
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let co = i / plane % p.out_channels;
            requant_exact(v as i32, bias[co], &ratios[co], output) as u8
        })
        .collect();
    assert!(got == expected, "{isa}: {p:?} input {input:?}: requantized");
    // The split stored ahead, the weights borrowed as a generated crate's blob holds them: the
    // same accumulators and codes, the same split on AVX2.
    let (safe, starts, words) = conv.split_ahead().expect("weights with few broken pairs split ahead on every host");
    let stored = PackedConv::from_packed(p.clone(), aligned(conv.data()), conv.sums().to_vec(), conv.zero_points().to_vec())
        .and_then(|c| c.with_split(aligned(&safe), &starts, &words))
        .unwrap();
    assert_eq!(stored.split_entries(kern), entries, "{isa}: {p:?}: the stored split");
    let mut acc_stored = vec![0i32; acc.len()];
    stored.run(kern, &x, batch, input, zx, &mut acc_stored).unwrap();
    assert!(acc_stored == acc, "{isa}: {p:?} input {input:?}: accumulators with the split stored ahead");
    let mut got = vec![0u8; acc.len()];
    stored.run_requant(kern, &x, batch, input, zx, &rq, &mut got, &mut Scratch::default()).unwrap();
    assert!(got == expected, "{isa}: {p:?} input {input:?}: requantized with the split stored ahead");
}

/// `bytes` leaked at a 64-byte boundary, as a generated crate's static blob holds them.
fn aligned(bytes: &[i8]) -> &'static [i8] {
    let data = Vec::leak(vec![0i8; bytes.len() + 64]);
    let start = data.as_ptr().align_offset(64);
    data[start..][..bytes.len()].copy_from_slice(bytes);
    &data[start..][..bytes.len()]
}

fn suite(isa: Isa) {
    let mut rng = Rng::new(23);
    // 3×3 stride 1 over lines of 11 (a partial panel), 24 rows (tiles of 8 and register tiles of 6 + 2).
    case(isa, &mut rng, params(16, 24, 1, &[3, 3], &[1, 1], &[1, 1]), &[9, 11]);
    // Stride 2 (two column phases), 13 rows.
    case(isa, &mut rng, params(8, 13, 1, &[3, 3], &[2, 2], &[1, 1]), &[12, 12]);
    // Pointwise (one line), 20 rows over 35 positions.
    case(isa, &mut rng, params(32, 20, 1, &[1, 1], &[1, 1], &[0, 0]), &[5, 7]);
    // 6 channels (a group of 4 padded), lines of 6 (half tiles).
    case(isa, &mut rng, params(6, 7, 1, &[3, 3], &[1, 1], &[1, 1]), &[6, 6]);
    // Two groups: the second group's rows are the split's rows 6..12.
    case(isa, &mut rng, params(16, 12, 2, &[3, 3], &[1, 1], &[1, 1]), &[7, 9]);
    // 1-D and 3-D.
    case(isa, &mut rng, params(12, 9, 1, &[5], &[1], &[2]), &[40]);
    case(isa, &mut rng, params(8, 5, 1, &[2, 3, 3], &[1, 1, 1], &[0, 1, 1]), &[4, 6, 7]);
    // Short lines run as one flat line over the framed plane (the frame's positions dropped): a
    // tile of 48 positions starting in the frame (48 mod 7 = 6 ≥ 5), and a vertical stride of 2,
    // which keeps a panel per line.
    case(isa, &mut rng, params(8, 6, 1, &[3, 3], &[1, 1], &[1, 1]), &[9, 5]);
    case(isa, &mut rng, params(8, 6, 1, &[3, 3], &[2, 1], &[1, 1]), &[13, 5]);
    // A deep row (K = 576), lines of 20.
    case(isa, &mut rng, params(64, 10, 1, &[3, 3], &[1, 1], &[1, 1]), &[5, 20]);
}

#[test]
fn portable() {
    suite(Isa::Portable);
}

#[test]
fn avx2() {
    suite(Isa::Avx2);
}

#[test]
fn avx512vnni() {
    suite(Isa::Avx512Vnni);
}

/// Uniform int8 weights break about a quarter of their pairs: no split (the AVX2 path keeps its
/// i16 tile, whose sums the other suites check).
#[test]
fn uniform_weights_are_not_split() {
    let Some(kern) = kernels(Isa::Avx2) else { return };
    let mut rng = Rng::new(5);
    let p = params(16, 8, 1, &[3, 3], &[1, 1], &[1, 1]);
    let conv = PackedConv::from_i8(p, &rng.i8s(8 * 16 * 9), &[0]).unwrap();
    assert_eq!(conv.split_entries(kern), None);
}

/// A split read back from a blob is checked before any kernel trusts it: the safe rows' length,
/// the rows' starts, and each entry (a step of the row, in increasing order, its excess at the
/// second weight of a pair only); only the shifted lowering has one.
#[test]
fn stored_splits_are_checked() {
    let mut rng = Rng::new(9);
    let p = params(16, 4, 1, &[3, 3], &[1, 1], &[1, 1]);
    let conv = PackedConv::from_i8(p.clone(), &weights(&mut rng, &p, 24), &[0]).unwrap();
    let (safe, starts, words) = conv.split_ahead().unwrap();
    let stored = |safe: &[i8], starts: &[i32], words: &[i32]| {
        PackedConv::from_packed(p.clone(), aligned(conv.data()), conv.sums().to_vec(), conv.zero_points().to_vec()).unwrap().with_split(
            aligned(safe),
            starts,
            words,
        )
    };
    assert!(stored(&safe, &starts, &words).is_ok());
    let first = starts.windows(2).position(|w| w[1] > w[0]).expect("a row with an excess");
    // The row's last entry: a later step keeps the row's steps increasing.
    let at = 2 * (starts[first + 1] as usize - 1);
    // (what is wrong, safe rows, starts, entry words)
    type Stored = (&'static str, Vec<i8>, Vec<i32>, Vec<i32>);
    let mut cases: Vec<Stored> = vec![
        ("short rows", safe[1..].to_vec(), starts.clone(), words.clone()),
        ("a start missing", safe.clone(), starts[1..].to_vec(), words.clone()),
        ("an odd word", safe.clone(), starts.clone(), words[1..].to_vec()),
    ];
    let mut edit = |what, f: &dyn Fn(&mut Vec<i32>, &mut Vec<i32>)| {
        let (mut s, mut w) = (starts.clone(), words.clone());
        f(&mut s, &mut w);
        cases.push((what, safe.clone(), s, w));
    };
    edit("starts past the entries", &|s, _| *s.last_mut().unwrap() += 1);
    edit("starts not from 0", &|s, _| s[0] = 1);
    edit("decreasing starts", &|s, _| s[first + 1] = s[first] - 1);
    edit("a step past the row", &|_, w| w[at] = 3 * 16 * 9 / 4 * 2);
    edit("an excess at a first weight", &|_, w| w[at + 1] |= 1);
    edit("an empty excess", &|_, w| w[at + 1] = 0);
    for (what, safe, starts, words) in &cases {
        assert!(stored(safe, starts, words).is_err(), "{what}: accepted");
    }
    let depthwise = params(8, 8, 8, &[3, 3], &[1, 1], &[1, 1]);
    let dw = PackedConv::from_i8(depthwise.clone(), &rng.i8s(8 * 9), &[0]).unwrap();
    assert_eq!(dw.split_ahead(), None, "depthwise rows are not split");
    let dw = PackedConv::from_packed(depthwise, aligned(dw.data()), dw.sums().to_vec(), dw.zero_points().to_vec()).unwrap();
    // A split of the right shape for 8 rows of 9 bytes, without an entry: refused for the lowering alone.
    assert!(dw.with_split(aligned(&safe[..72]), &[0; 9], &[]).is_err(), "a split for the depthwise lowering");
}
