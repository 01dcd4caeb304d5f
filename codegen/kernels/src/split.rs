//! Weights split for `vpmaddubsw`: a pair-safe part and a sparse excess.
//!
//! `vpmaddubsw` (AVX2's u8 × i8 multiply) sums each two adjacent products into an i16 that
//! *saturates*: with full-range int8 weights some pairs overflow (ONNX Runtime's AVX2 kernel is
//! wrong there). Here each packed weight `b` is `s + e`, where `s` is pair-safe and the excess
//! `e` is zero except at a few listed entries:
//!
//! | condition | why |
//! |---|---|
//! | every pair `(s0, s1)` (bytes 2j, 2j + 1 of one column's reordered group of 4 k) has `max(s0,0) + max(s1,0) ≤ 128` | for u8 activations `a0·s0 + a1·s1 ≤ 255·128 = 32640 ≤ 32767`: never saturates up |
//! | and `min(s0,0) + min(s1,0) ≥ −128` | `a0·s0 + a1·s1 ≥ −32640 ≥ −32768`: never saturates down |
//! | `s + e = b` entry by entry | `Σ a·s + Σ a·e = Σ a·b`, all in i32 wrapping: the same integers as every other path |
//!
//! Only the second weight of a pair that breaks a bound is changed: `s1 = 128 − s0` (both
//! positive) or `−128 − s0` (both negative), so `e = b1 − s1` lies in `[−128, 126]`; a pair of
//! mixed signs is always safe (`255·127`, `255·−128`). The activations are u8 codes on every path,
//! so the bounds hold for every input, whatever its zero point.
//!
//! Which two k of a group of 4 form a pair is chosen per group and panel ([`ORDERS`]: the 16
//! columns' weights and the activations are reordered alike, which changes no sum): of the three
//! pairings the one with the fewest broken pairs (MiniLM's weights: 1.7 % of pairs as packed,
//! 0.56 % so).
//!
//! Real weights (quantize_static, per channel) break 1–4 % of their pairs, uniform random ones
//! about a quarter: [`PairSplit::of`] gives none where the excess would cost more than the faster
//! instruction saves ([`MAX_EXCESS_SHARE`]), and the AVX2 path then keeps its i16 kernel.
//!
//! A convolution's shifted rows ([`RowSplit`]) are split by the same rule with one pairing, the
//! stored one (channels `2c`, `2c + 1` of a tap): their activations are interleaved once per image
//! for every row. The non-depthwise int8 convolutions of the corpus' published CNNs break 0.9 %
//! (ocr_rec, yolov8n) to 1.5 % (RivaGAN) of their pairs; ocr_cls 7.8 % (no split).

use crate::pack::{KR, NR, PackedB};

/// Most excess entries per pair of weights for which the split is used (1 in 16): each entry costs
/// a few instructions per 8 rows against the pairs' share of the faster product. Not tuned: real
/// weights lie far below it (0.2–2.2 % after the pairings), uniform ones far above (about 25 %).
const MAX_EXCESS_SHARE: usize = 16;

/// The three pairings of a group's 4 k: byte `i` of a reordered group holds k `ORDERS[p][i]`, and
/// bytes (0, 1) and (2, 3) are the pairs.
pub const ORDERS: [[usize; KR]; 3] = [[0, 1, 2, 3], [0, 2, 1, 3], [0, 3, 1, 2]];

/// One excess entry: the reordered panel's byte `at` (weight `(k, col)`) is `s + e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Excess {
    /// Depth (row of B, in the original order).
    pub k: u32,
    /// Byte within the reordered panel (`[k4][16][4]`).
    pub at: u32,
    /// `b − s`, nonzero.
    pub e: i8,
}

impl Excess {
    /// Column within the panel (`< 16`), from the byte's place.
    pub fn col(&self) -> usize {
        self.at as usize / KR % NR
    }
}

/// The excess entries of a packed weight operand and the pairing of each group, panel by panel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairSplit {
    k4: usize,
    /// Panel `p`'s entries are `entries[starts[p]..starts[p + 1]]`.
    starts: Vec<usize>,
    entries: Vec<Excess>,
    /// Per panel and group, the index into [`ORDERS`].
    orders: Vec<u8>,
}

impl PairSplit {
    /// The split of `b`'s packed bytes, or `None` when more than one pair in
    /// [`MAX_EXCESS_SHARE`] needs an excess entry.
    pub fn of(b: &PackedB) -> Option<PairSplit> {
        let (k4, stride, data) = (b.k4(), b.panel_stride(), b.data());
        let budget = (b.panels() * NR * k4 * 2) / MAX_EXCESS_SHARE;
        let mut starts = vec![0];
        let mut entries = Vec::new();
        let mut orders = Vec::with_capacity(b.panels() * k4);
        for panel in 0..b.panels() {
            let p = &data[panel * stride..][..k4 * NR * KR];
            for (q, group) in p.chunks_exact(NR * KR).enumerate() {
                let broken = |o: &[usize; KR]| -> usize {
                    group.chunks_exact(KR).map(|w| usize::from(!pair_safe(w[o[0]], w[o[1]])) + usize::from(!pair_safe(w[o[2]], w[o[3]]))).sum()
                };
                // The first of the fewest (deterministic).
                let best = (0..ORDERS.len()).min_by_key(|&i| (broken(&ORDERS[i]), i)).unwrap_or(0);
                orders.push(best as u8);
                let o = &ORDERS[best];
                for (col, w) in group.chunks_exact(KR).enumerate() {
                    for half in 0..2 {
                        if let Some(s1) = safe_second(w[o[2 * half]], w[o[2 * half + 1]]) {
                            let e = (i32::from(w[o[2 * half + 1]]) - i32::from(s1)) as i8;
                            let at = ((q * NR + col) * KR + 2 * half + 1) as u32;
                            entries.push(Excess { k: (q * KR + o[2 * half + 1]) as u32, at, e });
                            if entries.len() > budget {
                                return None;
                            }
                        }
                    }
                }
            }
            starts.push(entries.len());
        }
        Some(PairSplit { k4, starts, entries, orders })
    }

    /// Panel `p`'s entries, by increasing group.
    pub fn panel(&self, p: usize) -> &[Excess] {
        &self.entries[self.starts[p]..self.starts[p + 1]]
    }

    /// Panel `p`'s pairing per group (indices into [`ORDERS`]).
    pub fn orders(&self, p: usize) -> &[u8] {
        &self.orders[p * self.k4..][..self.k4]
    }

    /// Whether any entry exists (otherwise the activations' transposed copy is not needed).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries (weights changed) there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One step of a weight row whose pairs break a bound: the step's four weights minus their safe
/// ones (zero but at the second weight of a broken pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepExcess {
    /// The step (the row's group of 4 weights).
    pub q: u32,
    /// `b − s` per byte of the step.
    pub word: [i8; KR],
}

/// The split of weight rows whose pairs are the bytes `(4q, 4q + 1)`, `(4q + 2, 4q + 3)` as
/// stored: the convolution's shifted rows (`crate::conv::shifted`), one pairing for every row, as
/// the activations are interleaved once per image in channel order. The rule is
/// [`PairSplit`]'s (the second weight of a broken pair moved to the bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSplit {
    /// Row `r`'s steps are `entries[starts[r]..starts[r + 1]]`, by increasing step.
    starts: Vec<usize>,
    entries: Vec<StepExcess>,
    /// Weights changed.
    changed: usize,
}

impl RowSplit {
    /// The split of `w`'s rows of `ldw` bytes (a multiple of 4), or `None` when more than one pair
    /// in [`MAX_EXCESS_SHARE`] breaks a bound.
    pub fn of(w: &[i8], ldw: usize) -> Option<RowSplit> {
        assert!(ldw > 0 && ldw.is_multiple_of(KR) && w.len().is_multiple_of(ldw), "rows of whole groups of 4");
        let budget = w.len() / 2 / MAX_EXCESS_SHARE;
        let (mut starts, mut entries, mut changed) = (vec![0], Vec::new(), 0);
        for row in w.chunks_exact(ldw) {
            for (q, b) in row.chunks_exact(KR).enumerate() {
                let mut word = [0i8; KR];
                for half in 0..2 {
                    if let Some(s1) = safe_second(b[2 * half], b[2 * half + 1]) {
                        word[2 * half + 1] = (i32::from(b[2 * half + 1]) - i32::from(s1)) as i8;
                        changed += 1;
                    }
                }
                if word != [0; KR] {
                    entries.push(StepExcess { q: q as u32, word });
                }
                if changed > budget {
                    return None;
                }
            }
            starts.push(entries.len());
        }
        Some(RowSplit { starts, entries, changed })
    }

    /// The split as i32 words, for a compiler to store it with the weights: the rows' starts
    /// (`rows + 1` of them), then per entry its step and its excess bytes (little-endian).
    pub fn to_words(&self) -> (Vec<i32>, Vec<i32>) {
        let starts = self.starts.iter().map(|&s| s as i32).collect();
        let entries = self.entries.iter().flat_map(|e| [e.q as i32, i32::from_le_bytes(e.word.map(|v| v as u8))]).collect();
        (starts, entries)
    }

    /// The split [`RowSplit::to_words`] wrote, for `rows` rows of `steps` steps, its shape
    /// checked: starts from 0, increasing, ending at the entry count; each row's steps
    /// increasing and below `steps`; each excess at the second weight of a pair only (the tile
    /// multiplies it in pairs with a zero, which cannot saturate).
    pub fn from_words(starts: &[i32], entries: &[i32], rows: usize, steps: usize) -> Result<RowSplit, String> {
        let n = entries.len() / 2;
        let ok_starts = starts.len() == rows + 1
            && starts.first() == Some(&0)
            && starts.windows(2).all(|w| w[0] <= w[1])
            && starts.last().is_some_and(|&l| usize::try_from(l).is_ok_and(|l| l == n) && entries.len() == 2 * n);
        if !ok_starts {
            return Err(format!("pair split: {} row starts and {} entry words for {rows} rows", starts.len(), entries.len()));
        }
        let entries: Vec<StepExcess> = entries.chunks_exact(2).map(|e| StepExcess { q: e[0] as u32, word: e[1].to_le_bytes().map(|v| v as i8) }).collect();
        let starts: Vec<usize> = starts.iter().map(|&s| s as usize).collect();
        for (r, row) in starts.windows(2).map(|w| &entries[w[0]..w[1]]).enumerate() {
            let steps_ok = row.iter().all(|e| (e.q as usize) < steps) && row.windows(2).all(|w| w[0].q < w[1].q);
            if !steps_ok || row.iter().any(|e| e.word[0] != 0 || e.word[2] != 0 || e.word == [0; KR]) {
                return Err(format!("pair split: row {r}'s excess is not one of increasing steps below {steps} at second weights"));
            }
        }
        let changed = entries.iter().map(|e| e.word.iter().filter(|&&v| v != 0).count()).sum();
        Ok(RowSplit { starts, entries, changed })
    }

    /// Row `r`'s steps with an excess.
    pub fn row(&self, r: usize) -> &[StepExcess] {
        &self.entries[self.starts[r]..self.starts[r + 1]]
    }

    /// How many weights the split changes.
    pub fn len(&self) -> usize {
        self.changed
    }
}

/// Rows `w` (`ldw` bytes each), the split's rows `row0..`, made pair-safe into `dst`: each
/// listed step's excess subtracted (`s = b − e`, exact in i8: `s` is the bound-respecting weight).
pub fn safe_rows(w: &[i8], ldw: usize, split: &RowSplit, row0: usize, dst: &mut Vec<i8>) {
    dst.clear();
    dst.extend_from_slice(w);
    for (r, row) in dst.chunks_exact_mut(ldw).enumerate() {
        for x in split.row(row0 + r) {
            for (s, &e) in row[x.q as usize * KR..][..KR].iter_mut().zip(&x.word) {
                *s = (i32::from(*s) - i32::from(e)) as i8;
            }
        }
    }
}

/// The pair-safe second weight of the pair `(b0, b1)`, or `None` when the pair is safe as it is.
/// A broken pair has one sign (mixed signs are safe), so `b0`'s sign tells which bound it breaks.
fn safe_second(b0: i8, b1: i8) -> Option<i8> {
    let b0w = i32::from(b0);
    (!pair_safe(b0, b1)).then(|| if b0w > 0 { (128 - b0w) as i8 } else { (-128 - b0w) as i8 })
}

/// Whether `vpmaddubsw` sums the pair `(s0, s1)` exactly for every two u8 activations (the
/// table's first two rows).
pub fn pair_safe(s0: i8, s1: i8) -> bool {
    let (s0, s1) = (i32::from(s0), i32::from(s1));
    s0.max(0) + s1.max(0) <= 128 && s0.min(0) + s1.min(0) >= -128
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    /// The definition the AVX2 kernel's shuffles implement: one panel's packed bytes reordered by `orders` and made pair-safe in `dst` (the excess
    /// subtracted); `dst` holds whole groups.
    fn safe_panel(src: &[i8], orders: &[u8], entries: &[Excess], dst: &mut [i8]) {
        for ((d, s), &o) in dst.chunks_exact_mut(NR * KR).zip(src.chunks_exact(NR * KR)).zip(orders) {
            let o = &ORDERS[usize::from(o)];
            for (d, s) in d.chunks_exact_mut(KR).zip(s.chunks_exact(KR)) {
                for (d, &i) in d.iter_mut().zip(o) {
                    *d = s[i];
                }
            }
        }
        for x in entries {
            let at = x.at as usize;
            dst[at] = (i32::from(dst[at]) - i32::from(x.e)) as i8;
        }
        debug_assert!(dst.chunks_exact(2).all(|p| pair_safe(p[0], p[1])), "a pair left unsafe");
    }

    /// Every pair of int8 weights: the split pair is safe for `vpmaddubsw` and the excess puts the
    /// weight back, and a pair the bounds accept is left alone; the saturating sum of the split
    /// pair plus the excess equals the exact sum for the extreme activations (where the i16 sum is
    /// largest in magnitude).
    #[test]
    fn every_pair_of_weights_splits_into_a_safe_pair_and_its_excess() {
        for b0 in i8::MIN..=i8::MAX {
            for b1 in i8::MIN..=i8::MAX {
                let s1 = safe_second(b0, b1);
                assert_eq!(s1.is_none(), pair_safe(b0, b1), "({b0}, {b1})");
                let s1 = s1.unwrap_or(b1);
                assert!(pair_safe(b0, s1), "({b0}, {b1}) → ({b0}, {s1})");
                let e = i32::from(b1) - i32::from(s1);
                assert!((-128..=127).contains(&e), "({b0}, {b1}): excess {e}");
                for (a0, a1) in [(255, 255), (255, 0), (0, 255), (255, 1), (1, 255)] {
                    let sat = (a0 * i32::from(b0) + a1 * i32::from(s1)).clamp(-32768, 32767);
                    assert_eq!(sat + a1 * e, a0 * i32::from(b0) + a1 * i32::from(b1), "({b0}, {b1}) a ({a0}, {a1})");
                }
            }
        }
    }

    /// The split of packed weights: every pair of the made-safe panels is safe, the entries restore
    /// the bytes, and operands with too many broken pairs get none.
    #[test]
    fn packed_weights_split_panel_by_panel() {
        let (k, n) = (70, 37);
        // Mostly small weights with a broken pair every few columns, and ±128-style extremes.
        let b: Vec<i8> = (0..k * n).map(|i| if i % 13 == 0 { if i % 2 == 0 { 127 } else { -128 } } else { ((i * 7) % 41) as i8 - 20 }).collect();
        let packed = PackedB::from_i8(&b, k, n, Layout::KN, &[0]).unwrap();
        let split = PairSplit::of(&packed).expect("a few broken pairs");
        assert!(!split.is_empty());
        let stride = packed.panel_stride();
        for p in 0..packed.panels() {
            let src = &packed.data()[p * stride..][..packed.k4() * NR * KR];
            let mut safe = vec![0i8; src.len()];
            safe_panel(src, split.orders(p), split.panel(p), &mut safe);
            assert!(safe.chunks_exact(2).all(|w| pair_safe(w[0], w[1])), "panel {p}");
            let mut back = safe.clone();
            for x in split.panel(p) {
                let at = x.at as usize;
                back[at] = (i32::from(back[at]) + i32::from(x.e)) as i8;
                // The entry names the weight it changed.
                assert_eq!(back[at], src[(x.k as usize / KR * NR + x.col()) * KR + x.k as usize % KR], "panel {p}");
            }
            // Undo the reordering: every group is the packed one.
            for (q, (g, s)) in back.chunks_exact(NR * KR).zip(src.chunks_exact(NR * KR)).enumerate() {
                let o = &ORDERS[usize::from(split.orders(p)[q])];
                for (g, s) in g.chunks_exact(KR).zip(s.chunks_exact(KR)) {
                    assert!((0..KR).all(|i| g[i] == s[o[i]]), "panel {p} group {q}");
                }
            }
            assert!(split.orders(p).iter().any(|&o| o != 0), "some group is paired otherwise");
        }
        let uniform: Vec<i8> = (0..k * n).map(|i| ((i * 89 + 7) % 255) as i8).collect();
        assert_eq!(PairSplit::of(&PackedB::from_i8(&uniform, k, n, Layout::KN, &[0]).unwrap()), None);
    }
}
