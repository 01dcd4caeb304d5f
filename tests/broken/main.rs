//! The broken corpus: deliberately unsound rewrite rules, each a concrete instance the checker
//! must refute with a counterexample (snapshot-tested), next to its sound twin, which the same
//! checker must prove. If the checker ever accepts a broken rule, it can no longer say no.

mod a8w8;
mod activations;
mod codes;
// The 5×5 pool geometry the facade's tests share.
mod gemm;
#[path = "../common/geometry.rs"]
mod geometry;
mod kernels;
mod nbits;
mod pairs;
mod quantize;
mod rust;
mod weights;

use qdqc_exact::Verdict;

/// One deliberately unsound rule and its sound twin, as checks of concrete instances.
pub struct Broken {
    pub name: &'static str,
    /// What the rule claims and why it is wrong.
    pub claim: &'static str,
    pub broken: fn() -> Verdict,
    /// The corrected rule; `None` where no sound variant exists.
    pub twin: Option<fn() -> Verdict>,
}

fn corpus() -> Vec<Broken> {
    [
        quantize::rules(),
        pairs::rules(),
        codes::rules(),
        activations::rules(),
        gemm::rules(),
        kernels::rules(),
        weights::rules(),
        nbits::rules(),
        rust::rules(),
        a8w8::rules(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Shows a counterexample's outputs, compared as f32 bit patterns, as the floats they are.
pub fn as_f32(mut v: Verdict) -> Verdict {
    if let Verdict::Refuted { counterexample: c, .. } = &mut v {
        let f = |b: i64| f32::from_bits(b as u32);
        c.exact = Some(format!("outputs as f32: unfused {:?} vs fused {:?}", f(c.unfused), f(c.fused)));
    }
    v
}

fn summary(v: &Verdict) -> String {
    match v {
        Verdict::Exact { proof } => format!("exact ({:?}, {} points: {})", proof.method, proof.domain, proof.detail),
        Verdict::Refuted { counterexample, proof } => {
            format!("refuted ({:?}, {} points)\ncounterexample: {counterexample}", proof.method, proof.domain)
        }
        Verdict::Unknown { reason } => format!("unknown: {reason}"),
    }
}

#[test]
fn every_broken_rule_is_refuted_and_every_twin_proven() {
    let corpus = corpus();
    assert!(corpus.len() >= 12, "the corpus keeps at least 12 broken rules");
    for rule in corpus {
        let broken = (rule.broken)();
        assert!(matches!(broken, Verdict::Refuted { .. }), "{}: the checker accepted a broken rule: {broken:?}", rule.name);
        let mut text = format!("claim: {}\nbroken: {}\n", rule.claim, summary(&broken));
        if let Some(twin) = rule.twin {
            let sound = twin();
            assert!(sound.is_exact(), "{}: the sound twin was not proven: {sound:?}", rule.name);
            text.push_str(&format!("twin: {}\n", summary(&sound)));
        }
        insta::assert_snapshot!(rule.name, text);
    }
}

/// The catalog, its table in `rewrites/README.md` and this corpus agree: every rule the catalog
/// can register (every family enabled) has a README row in its family's file, and every broken
/// twin a row names is a rule of this corpus.
#[test]
fn every_catalog_rule_has_its_readme_row_and_its_broken_twins() {
    use qdqc_rewrites::rules::{Allow, FAMILIES, RuleOptions};
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rewrites/README.md")).unwrap();
    let table = &readme[readme.find("## The catalog").expect("README has its catalog table")..];
    let rows: Vec<Row> = table.lines().take_while(|l| l.is_empty() || l.starts_with('|') || l.starts_with("## The catalog")).filter_map(Row::parse).collect();
    assert!(rows.len() >= FAMILIES.len(), "README catalog rows: {}", rows.len());
    let options = RuleOptions {
        contract: qdqc_exact::Contract::Exact,
        target: qdqc_ort::OrtTarget::generic().into(),
        fold_weights: true,
        allow: Allow { matmulnbits: Some(qdqc_ort::nbits::AccuracyLevel::Acc1), ..Allow::default() },
        memo: Default::default(),
    };
    let twins: Vec<&str> = corpus().iter().map(|b| b.name).collect();
    for family in &FAMILIES {
        let own: Vec<&Row> = rows.iter().filter(|r| r.files.first() == Some(&family.file.to_string())).collect();
        assert!(!own.is_empty(), "{}: no row in rewrites/README.md's catalog", family.file);
        for name in family.rule_names(&options) {
            assert!(own.iter().any(|r| r.names.iter().any(|p| matches(p, &name))), "rule {name} ({}) has no README row naming it", family.file);
        }
    }
    for row in &rows {
        assert!(!row.twins.is_empty(), "README row {:?} names no broken twin", row.names);
        for twin in &row.twins {
            assert!(twins.contains(&twin.as_str()), "README row {:?}: broken twin {twin} is not in tests/broken", row.names);
        }
    }
}

/// A row of the README's catalog table: the rule-name patterns and files of its first column,
/// the broken twins of its last.
struct Row {
    names: Vec<String>,
    files: Vec<String>,
    twins: Vec<String>,
}

impl Row {
    fn parse(line: &str) -> Option<Row> {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let first = cells.first()?.trim();
        if !first.starts_with('`') {
            return None;
        }
        let (names, files) = first.split_once('(').unwrap_or((first, ""));
        Some(Row { names: ticked(names), files: ticked(files).into_iter().filter(|f| f.ends_with(".rs")).collect(), twins: ticked(cells.last()?) })
    }
}

/// The `backticked` words of a cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Whether a rule name fits a README pattern: `[x]` is optional text, `<x>` one or more lowercase
/// letters or digits, `N` one or more digits.
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    match p.first() {
        None => n.is_empty(),
        Some(b'[') => {
            let end = pattern.find(']').expect("closed [");
            matches(&format!("{}{}", &pattern[1..end], &pattern[end + 1..]), name) || matches(&pattern[end + 1..], name)
        }
        Some(b'<') | Some(b'N') => {
            let rest = if p[0] == b'<' { &pattern[pattern.find('>').expect("closed <") + 1..] } else { &pattern[1..] };
            let ok = |c: u8| if p[0] == b'N' { c.is_ascii_digit() } else { c.is_ascii_lowercase() || c.is_ascii_digit() };
            (1..=n.len()).take_while(|&i| ok(n[i - 1])).any(|i| matches(rest, &name[i..]))
        }
        Some(&c) => n.first() == Some(&c) && matches(&pattern[1..], &name[1..]),
    }
}

#[test]
fn readme_patterns_match_as_documented() {
    assert!(matches("qlinear-conv[-bias]", "qlinear-conv") && matches("qlinear-conv[-bias]", "qlinear-conv-bias"));
    assert!(matches("on-codes-<op>-<k>", "on-codes-maxpool-0") && !matches("on-codes-<op>-<k>", "on-codes--0"));
    assert!(matches("qlinear-concat-N", "qlinear-concat-3") && !matches("qlinear-concat-N", "qlinear-concat-x"));
    assert!(!matches("qgemm[-bias]", "qgemm-bia"));
}
