//! P1: exhaustive evaluation of a finite code domain. With the whole domain checked this is a
//! proof, not a test; when it fails, the counterexample is the failing point closest to the zero
//! points (Alive2's minimisation: prefer zero, then small magnitudes).

use super::{Certificate, Counterexample, Method, Verdict};
use std::time::Instant;

/// One input's codes: the inclusive range and the code that means 0.
#[derive(Clone, Debug)]
pub struct Domain {
    /// The input's name, shown in counterexamples.
    pub name: String,
    /// Lowest code.
    pub lo: i64,
    /// Highest code.
    pub hi: i64,
    /// The zero point: enumeration starts from it so the first mismatch is the minimised one.
    pub zero: i64,
}

impl Domain {
    /// The codes `[lo, hi]` of the input `name`, with zero point `zero`.
    pub fn new(name: &str, (lo, hi): (i64, i64), zero: i64) -> Domain {
        Domain { name: name.to_string(), lo, hi, zero }
    }

    fn len(&self) -> u64 {
        (self.hi - self.lo + 1).max(0).unsigned_abs()
    }
}

/// Largest domain P1 enumerates; beyond it the answer is "unknown".
pub const MAX_POINTS: u64 = 1 << 26;

/// Compares `reference` and `target` on every point of the product of `domains`.
/// `exact` may describe the reference's exact pre-rounding value at a point.
pub fn exhaustive(
    domains: &[Domain],
    detail: &str,
    reference: impl Fn(&[i64]) -> i64,
    target: impl Fn(&[i64]) -> i64,
    exact: impl Fn(&[i64]) -> Option<String>,
) -> Verdict {
    let start = Instant::now();
    let total = domains.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.len())).unwrap_or(u64::MAX);
    if total > MAX_POINTS {
        return Verdict::Unknown { reason: format!("domain of {total} points is too large to enumerate") };
    }
    let mut point: Vec<i64> = domains.iter().map(|d| d.lo).collect();
    let mut best: Option<(Key, Vec<i64>, i64, i64)> = None;
    let mut differing = 0u64;
    for _ in 0..total {
        let (r, t) = (reference(&point), target(&point));
        if r != t {
            differing += 1;
            let key = key(&point, domains);
            if best.as_ref().is_none_or(|(k, ..)| key < *k) {
                best = Some((key, point.clone(), r, t));
            }
        }
        advance(&mut point, domains);
    }
    let proof = Certificate { method: Method::P1Exhaustive, domain: total, micros: super::micros(start), detail: detail.to_string() };
    match best {
        None => Verdict::Exact { proof },
        Some((_, point, unfused, fused)) => Verdict::Refuted {
            counterexample: Counterexample {
                inputs: domains.iter().zip(&point).map(|(d, &v)| (d.name.clone(), v)).collect(),
                unfused,
                fused,
                exact: exact(&point),
                differing,
            },
            proof,
        },
    }
}

/// Minimisation order: fewer inputs away from their zero point, then smaller distances, then
/// smaller codes.
type Key = (usize, i64, i64, Vec<i64>);

fn key(point: &[i64], domains: &[Domain]) -> Key {
    let dist: Vec<i64> = point.iter().zip(domains).map(|(&v, d)| (v - d.zero).abs()).collect();
    (dist.iter().filter(|&&x| x != 0).count(), *dist.iter().max().unwrap_or(&0), dist.iter().sum(), point.to_vec())
}

fn advance(point: &mut [i64], domains: &[Domain]) {
    for (v, d) in point.iter_mut().zip(domains).rev() {
        if *v < d.hi {
            *v += 1;
            return;
        }
        *v = d.lo;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_functions_are_proven_over_the_whole_domain() {
        let d = [Domain::new("a", (0, 255), 0), Domain::new("b", (0, 255), 0)];
        let v = exhaustive(&d, "a+b", |x| x[0] + x[1], |x| x[1] + x[0], |_| None);
        match v {
            Verdict::Exact { proof } => assert_eq!(proof.domain, 65536),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn counterexamples_are_the_point_closest_to_the_zero_points() {
        let d = [Domain::new("a", (0, 255), 128), Domain::new("b", (0, 255), 128)];
        // Differ whenever a is odd and b ≥ 200.
        let v = exhaustive(&d, "", |x| x[0], |x| if x[0] % 2 == 1 && x[1] >= 200 { x[0] + 1 } else { x[0] }, |_| None);
        let c = v.counterexample().expect("refuted");
        assert_eq!(c.inputs, vec![("a".to_string(), 127), ("b".to_string(), 200)]);
        assert_eq!((c.unfused, c.fused), (127, 128));
        assert_eq!(c.differing, 128 * 56);
    }

    #[test]
    fn oversized_domains_are_unknown() {
        let d = [Domain::new("a", (i32::MIN as i64, i32::MAX as i64), 0)];
        assert!(matches!(exhaustive(&d, "", |x| x[0], |x| x[0], |_| None), Verdict::Unknown { .. }));
    }
}
