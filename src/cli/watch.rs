//! What a person at a terminal sees while `qdqc compile` works: a progress bar on stderr (stages,
//! nodes proven, decisions so far) and a one-screen summary at the end. Only when stderr is a
//! terminal and `--quiet` is not given: piped or redirected, the CLI prints what it always did.

use crate::{CompileReport, Progress};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

/// Whether to show progress and the summary: stderr is a terminal and `--quiet` is not given.
pub fn wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// The progress bar: one line on stderr, redrawn at most 10 times a second.
pub struct Bar {
    bar: ProgressBar,
    stage: Mutex<String>,
}

impl Bar {
    pub fn new() -> Bar {
        // Built whole before its first draw; later updates are drawn at most 10 times a second.
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10)).with_style(spinner()).with_message("loading");
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar { bar, stage: Mutex::new("loading".into()) }
    }

    /// Removes the bar before anything else is printed.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn start(&self, stage: &str, total: u64) {
        let style = if total > 0 {
            ProgressStyle::with_template("qdqc: {msg} [{bar:30}] {pos}/{len} nodes, {elapsed}").expect("template parses").progress_chars("=> ")
        } else {
            spinner()
        };
        *self.stage.lock().expect("no panics while drawing") = stage.to_string();
        // The message first: a draw between these calls shows the new stage in the old style.
        self.bar.set_message(stage.to_string());
        self.bar.set_style(style);
        self.bar.set_length(total);
        self.bar.set_position(0);
    }

    fn advance(&self, done: u64, proofs: u64) {
        let stage = self.stage.lock().expect("no panics while drawing").clone();
        self.bar.set_message(format!("{stage} ({proofs} proof(s))"));
        self.bar.inc(done);
    }
}

fn spinner() -> ProgressStyle {
    ProgressStyle::with_template("qdqc: {spinner} {msg}, {elapsed}").expect("template parses")
}

/// Rows of the summary table at most; the rest are counted on one line.
const ROWS: usize = 14;

/// The one-screen summary of a compile: fused, refused and kept groups per fused op, the proofs
/// by method, the node counts and the wall time.
pub fn summary(r: &CompileReport, seconds: f64) -> String {
    #[derive(Default)]
    struct Row {
        fused: usize,
        refused: usize,
        kept: usize,
    }
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    let mut methods: BTreeMap<String, usize> = BTreeMap::new();
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    for d in &r.decisions {
        let row = rows.entry(d.fused_op.as_str()).or_default();
        match (d.fired, d.kept_unfused) {
            (true, false) => row.fused += 1,
            (true, true) => row.kept += 1,
            (false, _) => row.refused += 1,
        }
        for v in d.verdict.values() {
            *verdicts.entry(v.to_string()).or_default() += 1;
        }
        for c in d.proof.values() {
            let m = format!("{:?}", c.method);
            *methods.entry(m.split('(').next().unwrap_or("").to_string()).or_default() += 1;
        }
    }
    let mut order: Vec<(&str, Row)> = rows.into_iter().collect();
    order.sort_by(|a, b| (b.1.fused + b.1.refused + b.1.kept).cmp(&(a.1.fused + a.1.refused + a.1.kept)).then(a.0.cmp(b.0)));
    let w = order.iter().map(|(op, _)| op.len()).max().unwrap_or(0).max("fused op".len());
    let mut out = String::new();
    writeln!(out, "\n{:<w$}  {:>6}  {:>7}  {:>12}", "fused op", "fused", "refused", "kept unfused").unwrap();
    for (op, row) in order.iter().take(ROWS) {
        writeln!(out, "{op:<w$}  {:>6}  {:>7}  {:>12}", row.fused, row.refused, row.kept).unwrap();
    }
    if order.len() > ROWS {
        let rest = &order[ROWS..];
        let (f, rf, k) = rest.iter().fold((0, 0, 0), |(f, rf, k), (_, r)| (f + r.fused, rf + r.refused, k + r.kept));
        writeln!(out, "{:<w$}  {f:>6}  {rf:>7}  {k:>12}", format!("({} more)", rest.len())).unwrap();
    }
    let list = |m: &BTreeMap<String, usize>| m.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ");
    writeln!(out, "verdicts (per profile): {}", if verdicts.is_empty() { "none".into() } else { list(&verdicts) }).unwrap();
    if !methods.is_empty() {
        writeln!(out, "proofs by method: {}", list(&methods)).unwrap();
    }
    writeln!(out, "{} → {} nodes, contract {:?}, {seconds:.2} s", r.nodes_before, r.nodes_after, r.contract).unwrap();
    out
}
